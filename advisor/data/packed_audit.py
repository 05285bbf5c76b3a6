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

from advisor.data.guard import MAX_LENGTH, excerpt, names_excerpt, npy_header, open_parquet, read_parquet_columns
from advisor.data.lengths import LengthHistogram
from advisor.errors import InputError

_INT64 = 2**63


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


def audit_from_rows(
    pack_tokens: np.ndarray,
    starts: np.ndarray,
    starts_offsets: np.ndarray,
    source: str,
    *,
    max_length: int = MAX_LENGTH,
    loss_mask: np.ndarray | None = None,
    notes: tuple[str, ...] = (),
    pack_size: int | None = None,
) -> LengthHistogram:
    """Segment every pack at its ``seq_start_id`` and return the samples' stored lengths with the audit attached.

    ``loss_mask``: the packs' masks back to back (as many values as tokens, 0 or 1): each sample's loss tokens are
    then counted as Megatron-Bridge's packed collate takes them (``_build_loss_mask``, answer_only_loss: the mask over
    the sample's positions but its last, whose label would be the next sample's first token).

    Every start is checked before any subtraction: within 0 .. len(input_ids) - 1 of its pack, 0 first, strictly
    increasing. A hostile file can otherwise hold starts past 2**63 (which wrap in int64) or non-monotonic ones
    whose differences wrap round to plausible positive lengths.

    >>> h = audit_from_rows(np.array([7, 3]), np.array([0, 4, 0]), np.array([0, 2, 3]), "demo")
    >>> h.lengths.tolist(), h.counts.tolist(), h.packs.items.tolist()
    ([3, 4], [2, 1], [3, 2, 2])
    """
    pack_tokens = np.asarray(pack_tokens, dtype=np.int64)
    starts = _int64_starts(np.asarray(starts), np.asarray(starts_offsets, dtype=np.int64), source)
    starts_offsets = np.asarray(starts_offsets, dtype=np.int64)
    counts = np.diff(starts_offsets)
    if (counts == 0).any():
        row = int(np.argmax(counts == 0))
        raise InputError(source, f"pack {row}", "has an empty seq_start_id")
    _check_starts(pack_tokens, starts, starts_offsets, source)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[starts_offsets[1:] - 1] = pack_tokens
    seg = ends - starts  # every start lies inside its pack and increases: no difference can wrap
    if seg.size and seg.max() > max_length:
        bad = int(np.argmax(seg > max_length))
        pack = int(np.searchsorted(starts_offsets, bad, side="right") - 1)
        raise InputError(
            source,
            f"pack {pack}",
            f"holds a sequence of {int(seg[bad]):,} tokens, over the maximum sequence length {max_length:,}",
        )
    if pack_size is not None:
        # what packing fills a pack with is each sequence less its last token (its label would be the next
        # sequence's first): len(input_ids) is that plus one a sequence, so the check is on the sum, not the length
        fill = np.add.reduceat(seg - 1, starts_offsets[:-1]) if seg.size else seg
        if fill.size and fill.max() > pack_size:
            row = int(np.argmax(fill > pack_size))
            raise InputError(
                source,
                f"pack {row}",
                f"is filled to {int(fill[row]):,} tokens, over the pack size "
                f"{pack_size:,} its file names say (each sequence counted as packing counts it, less "
                "its last token): Megatron-Bridge would train on packs longer than packed_sequence_size",
            )
    audit = PackedDatasetAudit(offsets=starts_offsets, items=seg - 1, pack_tokens=pack_tokens, source=source)
    loss = None
    if loss_mask is not None:
        first = np.concatenate([[0], np.cumsum(pack_tokens)])[:-1]
        pack_of = np.repeat(np.arange(pack_tokens.size), counts)
        at = first[pack_of] + starts  # each sample's first token in the masks back to back
        summed = np.concatenate([[0], np.cumsum(loss_mask, dtype=np.int64)])
        loss = summed[at + seg - 1] - summed[at]
        notes = (
            *notes,
            f"loss tokens from the packs' loss_mask: {int(loss.sum()):,} of {int((seg - 1).sum()):,} "
            "label positions (the collate also drops positions whose input is the EOS token, which the "
            "mask alone does not show)",
        )
    return LengthHistogram.from_samples(
        seg,
        loss=loss,
        source=source,
        packs=audit,
        notes=(
            f"audit of {audit.num_packs:,} existing packs; lengths include any "
            "pad_seq_to_mult padding, which the packs do not mark",
            *notes,
        ),
    )


def _loss_mask(table: pa.Table, pack_tokens: np.ndarray) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """The packs' loss masks back to back, or None with the reason when the table has none that can be used (a
    mask is optional: the lengths stand without it)."""
    if "loss_mask" not in table.column_names:
        return None, ()
    col = table.column("loss_mask")
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or col.null_count:
        return None, ("loss_mask left aside: not a list per pack",)
    per_pack = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if not np.array_equal(per_pack, pack_tokens):
        row = int(np.argmax(per_pack != pack_tokens))
        return None, (
            f"loss_mask left aside: pack {row} has {int(per_pack[row]):,} mask values for "
            f"{int(pack_tokens[row]):,} tokens",
        )
    flat = pc.list_flatten(col.combine_chunks())
    if flat.null_count or not (pa.types.is_integer(flat.type) or pa.types.is_boolean(flat.type)):
        return None, ("loss_mask left aside: not integers 0 and 1",)
    mask = flat.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if mask.size and (mask.min() < 0 or mask.max() > 1):
        return None, ("loss_mask left aside: values other than 0 and 1",)
    return mask, ()


def _pack_of(starts_offsets: np.ndarray, index: int) -> int:
    return int(np.searchsorted(starts_offsets, index, side="right") - 1)


def _int64_starts(starts: np.ndarray, starts_offsets: np.ndarray, source: str) -> np.ndarray:
    """Starts as int64, refusing unsigned values past 2**63 (a plain cast would wrap them negative)."""
    if starts.dtype.kind == "u" and starts.size and int(starts.max()) >= _INT64:
        bad = int(np.argmax(starts >= _INT64))
        raise InputError(
            source,
            f"pack {_pack_of(starts_offsets, bad)}",
            f"seq_start_id holds {int(starts[bad]):,}, beyond a 64-bit offset",
        )
    if starts.dtype.kind not in "iu":
        raise InputError(source, "column 'seq_start_id'", f"holds {starts.dtype}, not integers")
    return starts.astype(np.int64, copy=False)


def _check_starts(pack_tokens: np.ndarray, starts: np.ndarray, starts_offsets: np.ndarray, source: str) -> None:
    pack_of = np.repeat(np.arange(pack_tokens.size), np.diff(starts_offsets))
    bad = (starts < 0) | (starts >= pack_tokens[pack_of])
    bad[starts_offsets[:-1]] |= starts[starts_offsets[:-1]] != 0
    bad[1:] |= (starts[1:] <= starts[:-1]) & (pack_of[1:] == pack_of[:-1])
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            source,
            f"pack {int(pack_of[i])}",
            f"seq_start_id {int(starts[i]):,} is out of place: starts "
            "must begin at 0 and increase within len(input_ids)",
        )


def packed_table_audit(
    table: pa.Table, source: str, *, max_length: int = MAX_LENGTH, pack_size: int | None = None
) -> LengthHistogram:
    if table.num_rows == 0:
        raise InputError(source, None, "packed data set has no rows")
    for name in ("input_ids", "seq_start_id"):
        col = table.column(name)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            raise InputError(source, f"column {name!r}", f"is {excerpt(str(col.type))}, not a list per pack")
        if col.null_count:
            row = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise InputError(source, f"pack {row}", f"has no {name} (null)")
        if not pa.types.is_integer(col.type.value_type):
            raise InputError(source, f"column {name!r}", f"holds {excerpt(str(col.type.value_type))}, not integers")
    starts = table.column("seq_start_id").combine_chunks()
    if pc.list_flatten(starts).null_count:
        raise InputError(source, "column 'seq_start_id'", "holds null entries")
    per_pack = pc.list_value_length(starts).to_numpy(zero_copy_only=False)
    pack_tokens = pc.list_value_length(table.column("input_ids")).to_numpy(zero_copy_only=False)
    mask, notes = _loss_mask(table, pack_tokens)
    return audit_from_rows(
        pack_tokens,
        pc.list_flatten(starts).to_numpy(zero_copy_only=False),
        np.concatenate([[0], np.cumsum(per_pack)]),
        source,
        max_length=max_length,
        loss_mask=mask,
        notes=notes,
        pack_size=pack_size,
    )


def packed_columns(names: list[str]) -> list[str]:
    """The columns an audit reads: the ids' lengths and the starts, and the loss mask where the file has one."""
    return ["input_ids", "seq_start_id"] + (["loss_mask"] if "loss_mask" in names else [])


def read_packed_parquet(
    shards: list[bytes],
    source: str,
    *,
    budget: int | None = None,
    max_length: int = MAX_LENGTH,
    pack_size: int | None = None,
) -> LengthHistogram:
    """Audit a packed data set from its Parquet shards (their bytes), reading only the two columns needed.
    ``pack_size``: what the files' names say each pack holds at most (a longer pack is refused)."""
    tables = []
    for i, data in enumerate(shards):
        pf = open_parquet(data, source, f"shard {i}")
        missing = {"input_ids", "seq_start_id"} - set(pf.schema_arrow.names)
        if missing:
            raise InputError(source, f"shard {i}", f"is not a packed Parquet shard: no {', '.join(sorted(missing))}")
        tables.append(
            read_parquet_columns(pf, data, packed_columns(pf.schema_arrow.names), source, budget, f"shard {i}")
        )
    try:  # shards may differ in integer width (Megatron-Bridge writes list<int32>)
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise InputError(source, None, f"shards do not share one schema: {str(e)[:120]}") from None
    return packed_table_audit(table, source, max_length=max_length, pack_size=pack_size)


# ---------------------------------------------------------------------------------------------- legacy .npy
_ALLOWED_GLOBALS = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}
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


def read_packed_npy(data: bytes, source: str, *, max_length: int = MAX_LENGTH) -> LengthHistogram:
    """Read Megatron-Bridge's legacy packed ``.npy`` (an object array of dicts) without unpickling it."""
    header = npy_header(data, source)
    if not header.dtype.hasobject:
        raise InputError(source, None, f"holds a {header.dtype} array, not a packed data set's object array")
    body = memoryview(data)[header.offset :]
    array = _run_pickle(body, source)
    return _audit_rows(array, len(body), source, max_length)


def _run_pickle(body, source: str) -> _Opaque:
    """The pickle's result, rebuilt by a stack machine that knows only lists, dicts, ints, strings and numpy's
    array reconstruction (the one pickle it accepts); every malformed stream becomes an ``InputError``."""
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
            elif name in (
                "BININT",
                "BININT1",
                "BININT2",
                "LONG1",
                "LONG4",
                "INT",
                "LONG",
                "SHORT_BINUNICODE",
                "BINUNICODE",
                "BINUNICODE8",
                "UNICODE",
                "SHORT_BINBYTES",
                "BINBYTES",
                "BINFLOAT",
                "FLOAT",
            ):
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
                members = tuple(stack[-k:])
                del stack[-k:]
                stack.append(members)
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
                pairs = stack[-2:] if name == "SETITEM" else _mark_pop(stack, marks)
                if name == "SETITEM":
                    del stack[-2:]
                stack[-1].update(zip(pairs[::2], pairs[1::2], strict=True))
            elif name in ("STACK_GLOBAL", "GLOBAL"):
                module, attr = (stack.pop(-2), stack.pop()) if name == "STACK_GLOBAL" else str(arg).split(" ", 1)
                if (module, attr) not in _ALLOWED_GLOBALS:
                    raise InputError(
                        source,
                        f"byte {pos}",
                        f"refers to {names_excerpt([f'{module}.{attr}'])}: not a "
                        "packed data set (only numpy arrays of lists and dicts are read, never arbitrary "
                        "objects)",
                    )
                stack.append(_Opaque(f"{module}.{attr}"))
            elif name == "REDUCE":
                stack.pop()
                func = stack.pop()
                stack.append(_Opaque(f"{func.name}()"))
            elif name == "BUILD":
                state = stack.pop()
                stack[-1].state = state
            else:
                raise InputError(
                    source,
                    f"byte {pos}",
                    f"uses the pickle opcode {name}, which this reader does not "
                    "accept; convert the data set to packed Parquet",
                )
    except InputError:
        raise
    except Exception as e:  # a malformed stream: genops' own errors, a stack underflow, a bad memo key, a cycle
        raise InputError(source, None, f"is not a readable packed .npy: {type(e).__name__}: {str(e)[:120]}") from None
    array = stack[-1] if stack else None
    if (
        not isinstance(array, _Opaque)
        or not isinstance(array.state, tuple)
        or not array.state
        or not isinstance(array.state[-1], list)
    ):
        raise InputError(source, None, "does not hold a numpy object array")
    return array


def _audit_rows(array: _Opaque, body_size: int, source: str, max_length: int) -> LengthHistogram:
    """Flatten the rows' ``seq_start_id`` lists, bounded: the pickle memo lets a small file name one long list
    in every row (a "billion laughs"), so more entries than the file has bytes is refused before copying."""
    rows = array.state[-1]
    if not rows:
        raise InputError(source, None, "packed data set has no rows")
    pack_tokens: list[int] = []
    starts: list[int] = []
    offsets = [0]
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "input_ids" not in row or "seq_start_id" not in row:
            raise InputError(source, f"pack {i}", "is not a dict with input_ids and seq_start_id")
        ids, seq = row["input_ids"], row["seq_start_id"]
        if not isinstance(ids, (_Counted, list)) or not isinstance(seq, list) or not all(type(s) is int for s in seq):
            raise InputError(source, f"pack {i}", "input_ids and seq_start_id must be lists of integers")
        wide = next((s for s in seq if not -_INT64 <= s < _INT64), None)
        if wide is not None:  # np.array would raise OverflowError, or make an object array
            raise InputError(source, f"pack {i}", f"seq_start_id holds {excerpt(wide)}, beyond a 64-bit offset")
        if len(starts) + len(seq) > body_size:
            raise InputError(
                source,
                f"pack {i}",
                "repeats the same lists over and over (more entries than the file "
                "has bytes): not a packed data set as Megatron-Bridge writes it",
            )
        pack_tokens.append(ids.n if isinstance(ids, _Counted) else len(ids))
        starts.extend(seq)
        offsets.append(len(starts))
    return audit_from_rows(
        np.array(pack_tokens, dtype=np.int64),
        np.array(starts, dtype=np.int64),
        np.array(offsets, dtype=np.int64),
        source,
        max_length=max_length,
    )
