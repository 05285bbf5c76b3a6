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
import stat
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from advisor.data.tokenize.engine import part_paths
from advisor.data.tokenize.sequences import MaskKind
from advisor.errors import InputError, excerpt
from advisor.limits import MAX_TOKENS, json_too_deep
from advisor.vocabulary import DataFormat

CACHE_DIR = ".tokens"
ARRAYS = ("ids", "mask", "offsets", "records", "truncated")
DTYPES = {"ids": np.int32, "mask": np.int8, "offsets": np.int64, "records": np.int64, "truncated": np.bool_}
VERSION = 1
MAX_META_BYTES = 1 << 20
MAX_CACHE_RECORDS = 1 << 26  # 67M records: 64x the largest data set measured here; offsets then take 512 MiB
_CHUNK = 1 << 20  # elements checked at a time
HASH_CHUNK = 8 << 20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True, kw_only=True)
class TokenCache:
    """One split's cache folder and its ``meta.json``. The arrays are opened memory-mapped on demand."""

    folder: str
    meta: dict
    origin: str | None = None  # the folder messages name: the cache re-packed from, when this is its copy

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
    tok_files = (
        [tokenizer]
        if os.path.isfile(tokenizer)
        else [os.path.join(tokenizer, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(tokenizer, n))]
    )
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
            np.lib.format.write_array_header_1_0(
                f,
                {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(DTYPES[name])),
                    "fortran_order": False,
                    "shape": (total,),
                },
            )
            for i in range(shards):
                part = np.load(part_paths(parts_dir, i)[name], mmap_mode="r", allow_pickle=False)
                if part.size:
                    f.write(np.ascontiguousarray(part).data.cast("B"))
                del part  # unmapped before the next: the pages read leave this process
    stored = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    offsets = np.zeros(stored.size + 1, np.int64)
    np.cumsum(stored, out=offsets[1:])
    cut = [np.load(part_paths(parts_dir, i)["truncated"], allow_pickle=False)[x >= 0] for i, x in enumerate(lengths)]
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


class _Excluded(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reason: str = Field(max_length=2000)
    count: int = Field(ge=0, le=MAX_CACHE_RECORDS * 64)
    first_at: str | None = Field(None, max_length=2000)


class CacheMeta(BaseModel):
    """``meta.json`` as ``prepare`` writes it: every field typed and bounded before any is used (a cache folder is
    untrusted input: it may have been copied, edited or crafted). Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    version: Literal[1]
    split: Literal["training", "validation"]
    format: DataFormat
    mask_kind: MaskKind
    eod: int | None = Field(None, ge=0, lt=1 << 31)
    vocab_size: int | None = Field(None, ge=1, le=1 << 31)  # absent in caches written before it was recorded
    stored_max_seq_length: int | None = Field(None, ge=1, le=MAX_TOKENS + 1)
    settings: dict | None = None
    data: str | None = Field(None, max_length=4096)
    tokenizer: str | None = Field(None, max_length=4096)
    fingerprint: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    source: str | None = Field(None, max_length=4096)
    records_read: int = Field(0, ge=0, le=MAX_CACHE_RECORDS * 64)
    tokenized: int = Field(0, ge=0, le=MAX_CACHE_RECORDS)
    truncated: int = Field(0, ge=0, le=MAX_CACHE_RECORDS)
    seconds: float = Field(0.0, ge=0, allow_inf_nan=False)
    engine: str | None = Field(None, max_length=64)
    excluded: list[_Excluded] = Field(default_factory=list, max_length=1000)
    records_packed_from: int = Field(ge=0, le=MAX_CACHE_RECORDS)
    tokens: int = Field(ge=0, le=1 << 40)


def read_meta(folder: str) -> dict:
    """``meta.json`` checked against ``CacheMeta`` (one message naming the field), as a plain dict."""
    path = os.path.join(folder, "meta.json")
    _regular(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_META_BYTES + 1)
    except OSError as e:
        raise InputError(path, None, f"cannot be read ({e.strerror}): not a token cache prepare wrote") from None
    if len(raw) > MAX_META_BYTES:
        raise InputError(path, None, "larger than a token cache's meta.json can be")
    if json_too_deep(raw, 8):
        raise InputError(path, None, "nested deeper than a token cache's meta.json is")
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise InputError(path, None, f"not JSON ({str(e)[:100]})") from None
    if not isinstance(meta, dict) or meta.get("version") != VERSION:
        raise InputError(path, "version", f"not a version-{VERSION} token cache")
    try:
        return CacheMeta.model_validate(meta).model_dump()
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or None
        raise InputError(
            path,
            where,
            f"{err['msg']} ({excerpt(err.get('input'))}); not a token cache prepare "
            "wrote, or edited since: prepare the data again",
        ) from None


def _regular(path: str) -> None:
    """Refuse anything but a regular file before opening it: a FIFO blocks the reader for good, a device reads
    forever, a symlink may point anywhere."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise InputError(path, None, "missing: not a token cache prepare wrote") from None
    except OSError as e:
        raise InputError(path, None, f"cannot be checked ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, None, "not a regular file (a link, FIFO or device): not a token cache prepare wrote")


def _header(path: str, name: str) -> tuple[int, int]:
    """(elements, data bytes start) of a one-dimensional .npy file of the dtype the cache keeps for ``name``, read
    from its header alone, and checked against the file's size before anything is mapped."""
    _regular(path)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in reader:
                raise ValueError(f".npy format {version} is not one prepare writes")
            shape, fortran, dtype = reader[version](f, max_header_size=10_000)
            start = f.tell()
        size = os.path.getsize(path)
    except (OSError, ValueError, SyntaxError) as e:
        raise InputError(path, None, f"cannot be read as a .npy array ({str(e)[:120]})") from None
    if dtype != np.dtype(DTYPES[name]) or len(shape) != 1 or fortran:
        raise InputError(path, None, f"holds {dtype} in {len(shape)} dimension(s), not {np.dtype(DTYPES[name])} in one")
    n = int(shape[0])
    if size != start + n * dtype.itemsize:
        raise InputError(
            path,
            None,
            f"its header says {n:,} values ({start + n * dtype.itemsize:,} bytes) and the "
            f"file holds {size:,} bytes: cut short or padded, not a token cache prepare wrote",
        )
    return n, start


def open_cache(out: str, split: str) -> TokenCache | None:
    """The split's cache in a folder ``prepare`` wrote, checked (meta.json by its schema, files regular, each
    array's header against its file's size and against the others, offsets monotone), or None when that split
    has none. Everything is checked from headers and in bounded chunks before any array is mapped whole."""
    folder = split_folder(out, split)
    if not os.path.isdir(folder):
        return None
    cache = TokenCache(folder=folder, meta=read_meta(folder))
    sizes = {name: _header(cache.path(name), name)[0] for name in ARRAYS}
    n = sizes["offsets"] - 1
    if n > MAX_CACHE_RECORDS:
        raise InputError(
            cache.path("offsets"), None, f"claims {n:,} records; a token cache holds at most {MAX_CACHE_RECORDS:,}"
        )
    eod, vocab = cache.meta["eod"], cache.meta["vocab_size"]
    if eod is not None and vocab is not None and eod >= vocab:
        raise InputError(os.path.join(folder, "meta.json"), "eod", f"{eod:,} is not below vocab_size {vocab:,}")
    if (
        n < 0
        or sizes["mask"] != sizes["ids"]
        or sizes["records"] != n
        or sizes["truncated"] != n
        or cache.meta["records_packed_from"] != n
        or cache.meta["tokens"] != sizes["ids"]
    ):
        raise InputError(
            folder,
            None,
            "the token cache's arrays do not fit together or with its meta.json (ids, "
            "mask, offsets, records, truncated); prepare the data again",
        )
    offsets = cache.array("offsets")
    last = 0
    for a in range(0, offsets.size, _CHUNK):  # bounded temporaries: never a diff of the whole array at once
        part = np.asarray(offsets[a : a + _CHUNK])
        if (a == 0 and part[0] != 0) or part[0] < last or (np.diff(part) < 0).any():
            raise InputError(
                cache.path("offsets"),
                None,
                "not a running total from 0: not a token cache prepare wrote; prepare the data again",
            )
        last = int(part[-1])
    if last != sizes["ids"]:
        raise InputError(
            folder, None, f"the offsets end at {last:,} and ids holds {sizes['ids']:,} tokens; prepare the data again"
        )
    records = cache.array("records")
    for a in range(0, records.size, _CHUNK):
        part = np.asarray(records[a : a + _CHUNK])
        if part.size and (part.min() < 0 or part.max() >= max(cache.meta["records_read"], 1)):
            raise InputError(
                cache.path("records"),
                None,
                "record numbers outside the data set meta.json describes; prepare the data again",
            )
    return cache


__all__ = ["CACHE_DIR", "TokenCache", "fingerprint", "merge_parts", "open_cache", "split_folder"]
