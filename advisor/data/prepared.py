"""The files of a packed data set as ``advisor prepare`` writes them (and Megatron-Bridge 0.6.2's
``prepare_gpt_sft_packed_data``): their names, and finding them in a folder a plan names. The alternative, a
folder Megatron-Bridge prepared itself, has the same names inside its fingerprinted ``packed/...`` folder.

>>> split_file("training", 2048), split_file("training", 2048, shard=3), metadata_file(2048)
('training_2048.idx.parquet', 'training_2048_00003.idx.parquet', '2048_metadata.jsonl')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from advisor.errors import InputError

SPLITS = ("training", "validation")  # Megatron-Bridge's split names in its file names


def split_file(split: str, pack_size: int, shard: int | None = None) -> str:
    """One split's file (Megatron-Bridge's own name), or shard ``shard`` of it when the packs are written in
    several files (Megatron-Bridge reads a glob of them: data/packing/paths.py)."""
    return f"{split}_{pack_size}.idx.parquet" if shard is None else f"{split}_{pack_size}_{shard:05d}.idx.parquet"


def metadata_file(pack_size: int) -> str:
    return f"{pack_size}_metadata.jsonl"


_WRITTEN = re.compile(r"(?:(?:training|validation)_\d+(?:_\d{5})?\.idx\.parquet|\d+_metadata\.jsonl|\.tokens)")


def written_by_prepare(name: str) -> bool:
    """Whether ``name``, an entry of a folder, is one ``advisor prepare`` writes (the files Megatron-Bridge reads
    and the token cache): ``prepare --force`` replaces a folder only when all its entries are.

    >>> [written_by_prepare(n) for n in ("training_2048.idx.parquet", "2048_metadata.jsonl", ".tokens", "data.jsonl")]
    [True, True, True, False]
    """
    return _WRITTEN.fullmatch(name) is not None


@dataclass(frozen=True, kw_only=True)
class PreparedFolder:
    """What ``PackedSequenceSpecs`` points at: a file or a glob per split, and the metadata.

    A split's path names its file or its shards' glob, never the folder: Megatron-Bridge reads every
    ``*.idx.parquet`` of a folder it is given, the validation file included (data/packing/paths.py).
    """

    folder: str
    pack_size: int
    train: str
    validation: str | None
    metadata: str


def _split_path(folder: Path, split: str, pack_size: int) -> str | None:
    if (folder / split_file(split, pack_size)).is_file():
        return str(folder / split_file(split, pack_size))
    if (folder / split_file(split, pack_size, shard=0)).is_file():
        return str(folder / f"{split}_{pack_size}_*.idx.parquet")
    return None


def check_entries(folder: Path) -> None:
    """Refuse a folder in which an entry named as prepare names its files (a split's ``.idx.parquet``, the
    metadata) is not a regular file: a FIFO would hang Megatron-Bridge's reader, a folder or a device fail it, and
    reading the folder back would leave the entry out and go on without a word.

    >>> import os, tempfile
    >>> d = Path(tempfile.mkdtemp()); os.mkfifo(d / "validation_512.idx.parquet")
    >>> try:
    ...     check_entries(d)
    ... except Exception as e:
    ...     print(e)
    validation_512.idx.parquet: is a FIFO (named pipe), not a regular file: Megatron-Bridge could not read it
    """
    import os
    import stat

    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name == ".tokens" or not written_by_prepare(entry.name):
            continue
        try:
            mode = os.stat(entry.path).st_mode
        except OSError:
            mode = None
        if mode is None or not stat.S_ISREG(mode):
            from advisor.data.guard import file_kind

            what = "a link to nothing (or a loop)" if mode is None else file_kind(mode)
            raise InputError(entry.name, None, f"is {what}, not a regular file: Megatron-Bridge could not read it")


def check_metadata_file(path: Path, pack_size: int) -> tuple:
    """The entries of a prepared folder's metadata file (``prepared_metadata.read_metadata``), read as untrusted
    input: a regular file of at most a few kB, named in messages by its own name."""
    from advisor.data.guard import read_file
    from advisor.data.prepared_metadata import MAX_METADATA_BYTES, read_metadata

    return read_metadata(read_file(path, path.name, MAX_METADATA_BYTES), pack_size, path.name)


def find_prepared(path: str | None, pack_size: int) -> PreparedFolder | None:
    """The prepared files of ``pack_size`` in folder ``path``, or None when it holds none (a lengths file, another
    pack size, or no such folder); an ``InputError`` when its metadata file is not one Megatron-Bridge can use."""
    if not path or not Path(path).is_dir():
        return None
    folder = Path(path).resolve()
    check_entries(folder)
    train = _split_path(folder, "training", pack_size)
    if train is None or not (folder / metadata_file(pack_size)).is_file():
        return None
    check_metadata_file(folder / metadata_file(pack_size), pack_size)  # Megatron-Bridge opens it as written
    return PreparedFolder(
        folder=str(folder),
        pack_size=pack_size,
        train=train,
        validation=_split_path(folder, "validation", pack_size),
        metadata=str(folder / metadata_file(pack_size)),
    )
