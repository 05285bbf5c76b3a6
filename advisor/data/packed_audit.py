"""Read a packed data set that Megatron-Bridge already wrote, to audit its packs.

Two formats: packed Parquet (``input_ids``, ``loss_mask``, ``seq_start_id`` list columns; Megatron-Bridge >= 0.4)
and the legacy ``.npy`` object array of dicts. The legacy file is a pickle stream; it is never unpickled here:
``pickletools.genops`` reads its opcodes and a small stack machine rebuilds only lists, dicts, ints and strings,
refusing every global but numpy's array reconstruction. Followed: megatron/bridge/data/packing/algorithms.py
(``get_seqlen_list``: a sequence's tokens are the gap to the next start, minus its trailing token).
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from advisor.data.lengths import LengthHistogram
from advisor.errors import InputError


@dataclass(frozen=True, kw_only=True)
class PackedDatasetAudit:
    """The packs of an existing packed data set, as runtime lengths per sequence (CSR layout).

    ``items[offsets[i]:offsets[i+1]]`` are pack i's sequences (stored length - 1, what packing counts);
    ``pack_tokens[i]`` is ``len(input_ids)`` of pack i.
    """

    offsets: np.ndarray
    items: np.ndarray
    pack_tokens: np.ndarray
    source: str

    @property
    def num_packs(self) -> int:
        return int(self.offsets.size - 1)


def audit_from_rows(pack_tokens: np.ndarray, starts: np.ndarray, starts_offsets: np.ndarray,
                    source: str) -> LengthHistogram:
    """Segment every pack at its ``seq_start_id`` and return the samples' stored lengths with the audit attached.

    >>> h = audit_from_rows(np.array([7, 3]), np.array([0, 4, 0]), np.array([0, 2, 3]), "demo")
    >>> h.lengths.tolist(), h.counts.tolist(), h.packs.items.tolist()
    ([3, 4], [2, 1], [3, 2, 2])
    """
    pack_tokens = np.asarray(pack_tokens, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    starts_offsets = np.asarray(starts_offsets, dtype=np.int64)
    counts = np.diff(starts_offsets)
    if (counts == 0).any():
        row = int(np.argmax(counts == 0))
        raise InputError(source, f"pack {row}", "has an empty seq_start_id")
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    last = starts_offsets[1:] - 1
    ends[last] = pack_tokens
    seg = ends - starts
    if (seg < 1).any() or (starts[starts_offsets[:-1]] != 0).any():
        firsts = starts_offsets[:-1]
        bad = int(np.argmax(seg < 1)) if (seg < 1).any() else int(firsts[np.argmax(starts[firsts] != 0)])
        pack = int(np.searchsorted(starts_offsets, bad, side="right") - 1)
        raise InputError(source, f"pack {pack}", "seq_start_id must start at 0 and increase within len(input_ids)")
    audit = PackedDatasetAudit(offsets=starts_offsets, items=seg - 1, pack_tokens=pack_tokens, source=source)
    hist = LengthHistogram.from_samples(seg, source=source, packs=audit,
                                        notes=(f"audit of {audit.num_packs:,} existing packs; lengths include "
                                               "any pad_seq_to_mult padding, which the packs do not mark",))
    return hist


def packed_table_audit(table: pa.Table, source: str) -> LengthHistogram:
    if table.num_rows == 0:
        raise InputError(source, None, "packed data set has no rows")
    for name in ("input_ids", "seq_start_id"):
        col = table.column(name)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            raise InputError(source, f"column {name!r}", f"is {col.type}, not a list per pack")
        if col.null_count:
            row = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise InputError(source, f"pack {row}", f"has no {name} (null)")
        if not pa.types.is_integer(col.type.value_type):
            raise InputError(source, f"column {name!r}", f"holds {col.type.value_type}, not integers")
    starts = table.column("seq_start_id").combine_chunks()
    if pc.list_flatten(starts).null_count:
        raise InputError(source, "column 'seq_start_id'", "holds null entries")
    per_pack = pc.list_value_length(starts).to_numpy(zero_copy_only=False)
    return audit_from_rows(pc.list_value_length(table.column("input_ids")).to_numpy(zero_copy_only=False),
                           pc.list_flatten(starts).to_numpy(zero_copy_only=False),
                           np.concatenate([[0], np.cumsum(per_pack)]), source)


def read_packed_parquet(shards: list[bytes], source: str) -> LengthHistogram:
    tables = []
    for i, data in enumerate(shards):
        try:
            tables.append(pq.read_table(io.BytesIO(data), columns=["input_ids", "seq_start_id"]))
        except (pa.ArrowException, OSError, KeyError) as e:
            raise InputError(source, f"shard {i}", f"is not a packed Parquet shard: {e}") from None
    try:  # shards may differ in integer width (Megatron-Bridge writes list<int32>)
        table = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as e:
        raise InputError(source, None, f"shards do not share one schema: {e}") from None
    return packed_table_audit(table, source)


# ---------------------------------------------------------------------------------------------- legacy .npy
_ALLOWED_GLOBALS = {("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
                    ("numpy", "ndarray"), ("numpy", "dtype")}
_COUNTED_KEYS = ("input_ids", "loss_mask")  # only their lengths are needed: keep a count, not the tokens


class _Counted:
    __slots__ = ("n",)

    def __init__(self):
        self.n = 0


class _Opaque:
    """A numpy global or the result of calling one: never called, only carried to BUILD."""

    def __init__(self, name):
        self.name = name
        self.state = None


def _mark_pop(stack: list, marks: list) -> list:
    at = marks.pop()
    items = stack[at:]
    del stack[at:]
    return items


def read_packed_npy(data: bytes, source: str) -> LengthHistogram:
    """Read Megatron-Bridge's legacy packed ``.npy`` (an object array of dicts) without unpickling it."""
    try:
        version = (data[6], data[7])
        header_len = int.from_bytes(data[8:10], "little") if version[0] == 1 else int.from_bytes(data[8:12], "little")
        body = data[(10 if version[0] == 1 else 12) + header_len:]
    except IndexError:
        raise InputError(source, None, "is not a .npy file") from None
    stack: list = []
    marks: list[int] = []
    memo: dict = {}
    try:
        for op, arg, pos in pickletools.genops(io.BytesIO(body)):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                break
            if name == "MARK":
                marks.append(len(stack))
            elif name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG",
                          "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINBYTES", "BINBYTES",
                          "BINFLOAT", "FLOAT"):
                stack.append(arg)
            elif name in ("NEWTRUE", "NEWFALSE", "NONE"):
                stack.append({"NEWTRUE": True, "NEWFALSE": False, "NONE": None}[name])
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo[arg])
            elif name == "EMPTY_LIST":
                counted = stack and isinstance(stack[-1], str) and stack[-1] in _COUNTED_KEYS
                stack.append(_Counted() if counted else [])
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                items = tuple(stack[-k:])
                del stack[-k:]
                stack.append(items)
            elif name == "TUPLE":
                stack.append(tuple(_mark_pop(stack, marks)))
            elif name in ("APPEND", "APPENDS"):
                items = [stack.pop()] if name == "APPEND" else _mark_pop(stack, marks)
                target = stack[-1]
                if isinstance(target, _Counted):
                    target.n += len(items)
                else:
                    target.extend(items)
            elif name in ("SETITEM", "SETITEMS"):
                items = stack[-2:] if name == "SETITEM" else _mark_pop(stack, marks)
                if name == "SETITEM":
                    del stack[-2:]
                stack[-1].update(zip(items[::2], items[1::2], strict=True))
            elif name in ("STACK_GLOBAL", "GLOBAL"):
                module, attr = (stack.pop(-2), stack.pop()) if name == "STACK_GLOBAL" else arg.split(" ", 1)
                if (module, attr) not in _ALLOWED_GLOBALS:
                    raise InputError(source, f"byte {pos}", f"refers to {module}.{attr}: not a packed data set "
                                     "(only numpy arrays of lists and dicts are read, never arbitrary objects)")
                stack.append(_Opaque(f"{module}.{attr}"))
            elif name == "REDUCE":
                stack.pop()
                func = stack.pop()
                stack.append(_Opaque(f"{func.name}()"))
            elif name == "BUILD":
                state = stack.pop()
                stack[-1].state = state
            else:
                raise InputError(source, f"byte {pos}", f"uses the pickle opcode {name}, which this reader does not "
                                 "accept; convert the data set to packed Parquet")
    except InputError:
        raise
    except Exception as e:  # a malformed stream: genops' own errors, a stack underflow, a bad memo key
        raise InputError(source, None, f"is not a readable packed .npy: {type(e).__name__}: {e}") from None
    array = stack[-1] if stack else None
    if not isinstance(array, _Opaque) or not isinstance(array.state, tuple) or not isinstance(array.state[-1], list):
        raise InputError(source, None, "does not hold a numpy object array")
    rows = array.state[-1]
    pack_tokens, starts, offsets = [], [], [0]
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "input_ids" not in row or "seq_start_id" not in row:
            raise InputError(source, f"pack {i}", "is not a dict with input_ids and seq_start_id")
        ids, seq = row["input_ids"], row["seq_start_id"]
        if not isinstance(ids, (_Counted, list)) or not isinstance(seq, list) or not all(
                type(s) is int for s in seq):
            raise InputError(source, f"pack {i}", "input_ids and seq_start_id must be lists of integers")
        pack_tokens.append(ids.n if isinstance(ids, _Counted) else len(ids))
        starts.extend(seq)
        offsets.append(len(starts))
    if not rows:
        raise InputError(source, None, "packed data set has no rows")
    return audit_from_rows(np.array(pack_tokens), np.array(starts), np.array(offsets), source)
