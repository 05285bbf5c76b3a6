"""The token cache ``OUT/.tokens/{split}/``: every packed-to-be record's token ids and loss mask, so a new pack
size, algorithm or seed re-packs without tokenizing (``prepare --from-cache OUT``).

Alternative: re-tokenizing (what Megatron-Bridge does for every new pack size, minutes to hours), or keeping the
tokens in the packed Parquet only (packs cannot be taken apart again without the records' order). Here, in
``.npy`` files (read memory-mapped, never unpickled): ``ids`` (int32) and ``mask`` (int8) of the records back to
back in data-set order, ``offsets`` (int64, one more than records), ``records`` (each record's 0-based number in
the data set), ``truncated`` (bool: the dataset cut it) and ``meta.json``: the format, the mask kind, the
tokenizer's eod id, the settings, the longest sample the dataset kept (SFT truncation depends on it) and a
fingerprint (SHA-256 of the data files, the tokenizer's files and the settings).

The folder starts with a dot: Megatron-Bridge's reader, pointed at OUT, globs ``OUT/*.parquet`` only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from advisor.data.tokenize.engine import part_paths
from advisor.errors import InputError

CACHE_DIR = ".tokens"
ARRAYS = ("ids", "mask", "offsets", "records", "truncated")
DTYPES = {"ids": np.int32, "mask": np.int8, "offsets": np.int64, "records": np.int64, "truncated": np.bool_}
VERSION = 1
MAX_META_BYTES = 1 << 20
HASH_CHUNK = 8 << 20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True, kw_only=True)
class TokenCache:
    """One split's cache folder and its ``meta.json``. The arrays are opened memory-mapped on demand."""

    folder: str
    meta: dict

    def path(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.npy")

    def array(self, name: str) -> np.ndarray:
        return np.load(self.path(name), mmap_mode="r", allow_pickle=False)

    @property
    def stored(self) -> np.ndarray:
        """Each record's stored length (``len(input_ids)``)."""
        return np.diff(np.asarray(self.array("offsets")))


def split_folder(out: str, split: str) -> str:
    return os.path.join(out, CACHE_DIR, split)


def fingerprint(data_files: list[str], tokenizer: str, fmt: str, settings) -> str:
    """SHA-256 of the data files' bytes, the tokenizer's files and the format and settings, hex.

        >>> import tempfile
        >>> f = os.path.join(tempfile.mkdtemp(), "d.jsonl"); _ = open(f, "w").write("{}\\n")
        >>> len(fingerprint([f], f, "sft", None))
        64
    """
    h = hashlib.sha256()
    h.update(json.dumps({"format": fmt, "settings": _settings_dict(settings)}, sort_keys=True, default=str).encode())
    tok_files = [tokenizer] if os.path.isfile(tokenizer) else [
        os.path.join(tokenizer, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(tokenizer, n))]
    for path in [*data_files, *tok_files]:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def _settings_dict(settings) -> dict | None:
    return None if settings is None else dataclasses.asdict(settings)


def merge_parts(parts_dir: str, shards: int, dest: str, records: np.ndarray, meta: dict) -> TokenCache:
    """Join the shards' token parts (``engine.part_paths``) into one cache folder ``dest``, streaming (a part at a
    time: the data set is never in memory), and write ``meta.json``. ``records``: the kept records' numbers."""
    os.makedirs(dest, exist_ok=True)
    lengths = [np.load(part_paths(parts_dir, i)["lengths"], allow_pickle=False) for i in range(shards)]
    kept = [x[x >= 0] for x in lengths]
    total = int(sum(int(k.sum()) for k in kept))
    for name in ("ids", "mask"):
        with open(os.path.join(dest, f"{name}.npy"), "xb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(DTYPES[name])),
                                                     "fortran_order": False, "shape": (total,)})
            for i in range(shards):
                part = np.load(part_paths(parts_dir, i)[name], mmap_mode="r", allow_pickle=False)
                if part.size:
                    f.write(memoryview(np.ascontiguousarray(part)).cast("B"))
                del part  # unmapped before the next: the pages read leave this process
    stored = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    offsets = np.zeros(stored.size + 1, np.int64)
    np.cumsum(stored, out=offsets[1:])
    cut = [np.load(part_paths(parts_dir, i)["truncated"], allow_pickle=False)[x >= 0]
           for i, x in enumerate(lengths)]
    _save(dest, "offsets", offsets)
    _save(dest, "records", np.asarray(records, np.int64))
    _save(dest, "truncated", np.concatenate(cut) if cut else np.zeros(0, bool))
    if records.size != stored.size:
        raise RuntimeError("the token parts and the tokenized records disagree")  # a bug, not bad input
    for i in range(shards):
        for path in part_paths(parts_dir, i).values():
            os.unlink(path)
    with open(os.path.join(dest, "meta.json"), "x", encoding="utf-8") as f:
        json.dump({"version": VERSION, **meta, "records_packed_from": int(stored.size), "tokens": total}, f, indent=1)
    return TokenCache(folder=dest, meta=read_meta(dest))


def _save(folder: str, name: str, array: np.ndarray) -> None:
    with open(os.path.join(folder, f"{name}.npy"), "xb") as f:
        np.save(f, array.astype(DTYPES[name], copy=False), allow_pickle=False)


def read_meta(folder: str) -> dict:
    path = os.path.join(folder, "meta.json")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_META_BYTES + 1)
    except OSError as e:
        raise InputError(path, None, f"cannot be read ({e.strerror}): not a token cache prepare wrote") from None
    if len(raw) > MAX_META_BYTES:
        raise InputError(path, None, "larger than a token cache's meta.json can be")
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(path, None, f"not JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("version") != VERSION:
        raise InputError(path, "version", f"not a version-{VERSION} token cache")
    for key in ("format", "mask_kind", "split"):
        if not isinstance(meta.get(key), str):
            raise InputError(path, key, "missing")
    return meta


def open_cache(out: str, split: str) -> TokenCache | None:
    """The split's cache in a folder ``prepare`` wrote, checked (files present, sizes consistent), or None when
    that split has none."""
    folder = split_folder(out, split)
    if not os.path.isdir(folder):
        return None
    cache = TokenCache(folder=folder, meta=read_meta(folder))
    arrays = {}
    for name in ARRAYS:
        try:
            arrays[name] = cache.array(name)
        except (OSError, ValueError) as e:
            raise InputError(cache.path(name), None, f"cannot be read as a .npy array ({e})") from None
        if arrays[name].dtype != DTYPES[name] or arrays[name].ndim != 1:
            raise InputError(cache.path(name), None, f"holds {arrays[name].dtype} in {arrays[name].ndim} dimension(s), "
                             f"not {np.dtype(DTYPES[name])} in one")
    n = arrays["offsets"].size - 1
    offsets = np.asarray(arrays["offsets"])
    if (n < 0 or offsets[0] != 0 or (np.diff(offsets) < 0).any() or int(offsets[-1]) != arrays["ids"].size
            or arrays["mask"].size != arrays["ids"].size or arrays["records"].size != n
            or arrays["truncated"].size != n):
        raise InputError(folder, None, "the token cache's arrays do not fit together (ids, mask, offsets, records, "
                         "truncated); prepare the data again")
    return cache


__all__ = ["CACHE_DIR", "TokenCache", "fingerprint", "merge_parts", "open_cache", "split_folder"]
