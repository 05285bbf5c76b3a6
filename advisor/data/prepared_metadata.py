"""``{S}_metadata.jsonl`` read back as untrusted input: the file Megatron-Bridge's packed dataset opens when it pads
``cu_seqlens`` to a fixed shape (CUDA graphs). The alternatives: trust it (a garbage file then fails at start-up on
a GPU node, or pads wrongly) or recompute it (then the folder's own file, the one Megatron-Bridge reads, goes
unchecked).

Followed: megatron/bridge/data/datasets/sft.py (0.6.2) ``GPTSFTPackedDataset``: ``json.load`` of the whole file,
a list of dicts, and ``max(p["max_samples_per_bin"] for p in self.pack_metadata)`` is the number of sequences every
pack's ``cu_seqlens`` is padded to; a pack holding more than that is not padded, so the batch shapes differ and a
captured graph replays the wrong shape.

>>> m = read_metadata(b'[{"max_samples_per_bin": 3, "dataset_max_seqlen": 90, "packing_factor": 2.5, '
...                   b'"packing_efficiency": 96.1, "pack_size": 128, "min_packed_seqlen": 100}]', 128, "m.jsonl")
>>> m[0].max_samples_per_bin
3
>>> read_metadata(b'[{"pack_size": 256}]', 128, "m.jsonl")
Traceback (most recent call last):
...
advisor.errors.InputError: m.jsonl, entry 1: max_samples_per_bin is missing; dataset_max_seqlen is missing; ...
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from advisor.errors import InputError
from advisor.limits import MAX_PACK, json_too_deep

MAX_METADATA_BYTES = 1 << 16  # one dict per split, a few hundred bytes: anything larger is not this file
MAX_ENTRIES = 16  # Megatron-Bridge appends one per split it prepares (training, validation, test)


class PackMetadata(BaseModel):
    """One split's entry, as ``create_packing_strategy`` returns it (algorithms.py); other keys are kept (a later
    Megatron-Bridge may add some) but not read."""

    model_config = ConfigDict(frozen=True, strict=True, extra="allow")

    max_samples_per_bin: int = Field(ge=1, le=MAX_PACK)
    dataset_max_seqlen: int = Field(ge=1, le=MAX_PACK)
    packing_factor: float | int = Field(gt=0, le=MAX_PACK, allow_inf_nan=False)
    packing_efficiency: float | int = Field(ge=0, le=100, allow_inf_nan=False)
    pack_size: int = Field(ge=1, le=MAX_PACK)
    min_packed_seqlen: int = Field(ge=0, le=MAX_PACK)


def read_metadata(data: bytes, pack_size: int, source: str) -> tuple[PackMetadata, ...]:
    """The entries of a metadata file whose name says ``pack_size``, or an ``InputError`` naming the entry and
    field: not one JSON list of dicts, a field missing or of the wrong type or range, a pack size other than the
    name's, or a pack filled past the pack size."""
    if len(data) > MAX_METADATA_BYTES:
        raise InputError(source, None, f"is {len(data):,} bytes: a packing metadata file holds a few hundred")
    if json_too_deep(data, 4):
        raise InputError(source, None, "is nested deeper than a list of dicts: not packing metadata")
    try:
        entries = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InputError(
            source, None, f"is not JSON ({type(e).__name__}): Megatron-Bridge's json.load would fail on it"
        ) from None
    if not isinstance(entries, list) or not entries:
        raise InputError(source, None, "is not a JSON list of one dict per split, as Megatron-Bridge writes it")
    if len(entries) > MAX_ENTRIES:
        raise InputError(source, None, f"holds {len(entries):,} entries: one per split is {MAX_ENTRIES} at most")
    out = []
    for k, entry in enumerate(entries, 1):
        where = f"entry {k}"
        if not isinstance(entry, dict):
            raise InputError(source, where, f"is a JSON {type(entry).__name__}, not a dict")
        try:
            meta = PackMetadata.model_validate(entry)
        except ValidationError as e:
            raise InputError(
                source,
                where,
                "; ".join(_problem(err) for err in e.errors()[:3]) + ("; ..." if e.error_count() > 3 else ""),
            ) from None
        if meta.pack_size != pack_size:
            raise InputError(source, where, f"pack_size is {meta.pack_size:,}, but the file is named for {pack_size:,}")
        if meta.min_packed_seqlen > pack_size:
            raise InputError(
                source, where, f"min_packed_seqlen {meta.min_packed_seqlen:,} is over the pack size {pack_size:,}"
            )
        out.append(meta)
    return tuple(out)


def _problem(err) -> str:  # a pydantic ErrorDetails
    field = ".".join(str(p) for p in err["loc"]) or "the entry"
    if err["type"] == "missing":
        return f"{field} is missing"
    return f"{field}: {err['msg'].lower()} (got {str(err.get('input'))[:40]!r})"
