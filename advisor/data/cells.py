"""Cell validation: a column of any type (numpy, pyarrow, a list of JSON values) to whole lengths or counts,
each bad cell refused with its row (``on_bad="error"``) or counted as left out (``"skip"``). Vectorised in
numpy and Arrow's C++ where the column allows; cell by cell only for mixed Python values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from advisor.data.context import Ctx
from advisor.data.guard import MAX_COUNT, check_totals, excerpt
from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.errors import InputError

__all__ = ["histogram", "validate"]

_NUMERIC = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?", re.IGNORECASE | re.ASCII)
_NUMERIC_RE2 = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$|^[+-]?[iI][nN][fF](?:[iI][nN][iI][tT][yY])?$"  # same
_OK, _EMPTY, _NOT_NUMBER = 0, 1, 2
_BASE_PREFIX = re.compile(r"\s*[+-]?0[xXoObB]")  # 0x10: pyarrow's CSV reader would read it as 16
_CELL = np.dtype([("num", np.float64), ("code", np.int8)])


def _number_of(v) -> tuple[float, int]:
    """(value as float, code) for one cell of any type: a bool, a list or a date is not a number; an int past
    int64 becomes +-inf (then 'beyond any sequence length'), never an OverflowError from ``float()``."""
    t = type(v)
    if t is str:
        s = v.strip()
        if not s:
            return math.nan, _EMPTY
        return (float(s), _OK) if _NUMERIC.fullmatch(s) else (math.nan, _NOT_NUMBER)
    if v is None:
        return math.nan, _EMPTY
    if isinstance(v, (bool, np.bool_)):
        return math.nan, _NOT_NUMBER
    if isinstance(v, (int, np.integer)):
        v = int(v)
        return (float(v), _OK) if -(2**63) <= v < 2**63 else (math.inf if v > 0 else -math.inf, _OK)
    if isinstance(v, (float, np.floating, Decimal)):
        try:
            f = float(v)
        except (ValueError, OverflowError):  # a signalling Decimal NaN
            return math.nan, _NOT_NUMBER
        return (f, _EMPTY) if math.isnan(f) else (f, _OK)
    return math.nan, _NOT_NUMBER


def _numbers(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float64 numbers, empty mask, not-a-number mask) for a column: a numpy array or a pyarrow column.

    Numeric arrays, pyarrow string columns and all-number lists take vectorised paths; anything mixed goes
    cell by cell through ``_number_of`` (it knows a bool from a 1), streamed into one structured array.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return _arrow_numbers(values)
    arr = values
    none = np.zeros(arr.shape, bool)
    if arr.dtype.kind in "iuf":
        nums = arr.astype(np.float64, copy=False)
        return nums, (np.isnan(nums) if arr.dtype.kind == "f" else none), none
    if arr.dtype != object:
        arr = arr.astype(object)
    if set(map(type, arr)) <= {int, float}:
        try:
            nums = arr.astype(np.float64)  # OverflowError for an int past float range: then cell by cell
            return nums, np.isnan(nums), none
        except OverflowError:
            pass
    cells = np.fromiter(map(_number_of, arr), dtype=_CELL, count=arr.size)
    return cells["num"], cells["code"] == _EMPTY, cells["code"] == _NOT_NUMBER


def _to_numpy(col) -> np.ndarray:
    """A pyarrow (chunked) array as numpy, chunk by chunk: ``ChunkedArray.to_numpy`` imports pandas (150 ms of
    every `advisor` start)."""
    chunks = [_chunk_to_numpy(c) for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col])]
    if not chunks:
        return np.zeros(0, np.float64)
    return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]


_FLOATS = {"double": np.float64, "float": np.float32, "halffloat": np.float16}


def _chunk_to_numpy(chunk) -> np.ndarray:
    """A numeric or boolean Arrow array read from its data buffer (nulls: NaN, or False for booleans)."""
    t = chunk.type
    if pa.types.is_boolean(t):
        return _chunk_to_numpy(pc.cast(chunk.fill_null(False), pa.uint8())).astype(bool)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return chunk.to_numpy(zero_copy_only=False)
    if len(chunk) == 0:
        return np.zeros(0, np.float64)
    if chunk.null_count:  # unsafe: integers past 2**53 round, as numpy would; the range checks come after
        chunk = pc.cast(chunk, pa.float64(), safe=False).fill_null(float("nan"))
        t = chunk.type
    dtype = _FLOATS.get(str(t)) or np.dtype(str(t))
    data = np.frombuffer(chunk.buffers()[1], dtype=dtype)
    return data[chunk.offset : chunk.offset + len(chunk)]


def _arrow_numbers(col) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_numbers`` for a pyarrow column, in Arrow's C++: a 10M-row string column with one bad cell costs no
    Python object per cell (pyarrow makes a column text when a single cell is not a number)."""
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        nums = _to_numpy(pc.cast(col, pa.float64()) if pa.types.is_decimal(t) else col).astype(np.float64, copy=False)
        return nums, np.isnan(nums), np.zeros(nums.shape, bool)
    empty = col.is_null()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        trimmed = pc.utf8_trim_whitespace(col)
        empty = pc.or_kleene(empty, pc.equal(trimmed, "")).fill_null(True)
        numeric = pc.match_substring_regex(trimmed, _NUMERIC_RE2).fill_null(False)
        nums = pc.cast(pc.if_else(numeric, trimmed, pa.scalar(None, t)), pa.float64())
        empty = _to_numpy(empty)
        nums = _to_numpy(nums).astype(np.float64, copy=False)
        return nums, empty, ~_to_numpy(numeric) & ~empty
    empty = _to_numpy(empty)  # bools, dates, binary, structs: no cell is a length
    return np.full(empty.shape, np.nan), empty, ~empty


def _cell(values, i: int):
    """One cell as a Python value, for a message."""
    return values[i].as_py() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values[i]


def _stored_as_floats(values) -> bool:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return pa.types.is_floating(values.type)
    return isinstance(values, np.ndarray) and values.dtype.kind == "f"


def _bad_rows(values, allow_zero: bool, limit: int, tokens: bool) -> tuple[np.ndarray, list[tuple[np.ndarray, str]]]:
    """Numbers (float64) and the masks of bad rows with their reasons, in the order they are reported:
    missing, not a number, not whole, not positive (with ``allow_zero``: negative), too large (``limit``: tokens
    of one sample when ``tokens``, else samples on one row)."""
    nums, missing, notnum = _numbers(values)
    with np.errstate(invalid="ignore"):
        fractional = np.isfinite(nums) & (np.floor(nums) != nums)
        low = (nums < 0) if allow_zero else (nums < 1)
        high = nums > limit
    beyond = (
        f"is beyond any sequence length (the maximum is {limit:,} tokens; raise max_length if it is real)"
        if tokens
        else f"is over {limit:,} samples on one row"
    )
    return nums, [
        (missing, "is empty"),
        (notnum, "is not a number"),
        (fractional, "is not a whole number of tokens" if tokens else "is not a whole number of samples"),
        (low & ~fractional, "is negative" if allow_zero else "is not a positive length"),
        (high & ~fractional, beyond),
    ]


def _reject(
    values, where_of: Callable[[int], str], ctx: Ctx, what: str, allow_zero: bool = False, tokens: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Raise on the first bad row (``on_bad="error"``) or count the bad rows as excluded; return (numbers, bad).
    ``tokens``: the values are tokens of one sample, bounded by ``ctx.max_length`` (default: unless ``allow_zero``,
    which makes them counts of samples, bounded by ``MAX_COUNT``)."""
    tokens = not allow_zero if tokens is None else tokens
    nums, problems = _bad_rows(values, allow_zero, ctx.max_length if tokens else MAX_COUNT, tokens)
    bad = np.zeros(nums.shape, bool)
    for mask, reason in problems:
        mask = mask & ~bad
        if not mask.any():
            continue
        first, n = int(np.argmax(mask)), int(mask.sum())
        if ctx.on_bad == "error":
            more = f" ({n:,} such rows in all)" if n > 1 else ""
            cell = _cell(values, first)
            said = (
                f"{what} is missing (an empty cell, NA, NaN or null)"
                if cell is None
                else f"{what} {excerpt(cell)} {reason}"
            )
            if isinstance(cell, str) and _BASE_PREFIX.match(cell):
                said = f"{what} {excerpt(cell)} is not a decimal integer (lengths and counts are written in base 10)"
            raise InputError(ctx.name, where_of(first), f"{said}{more}")
        ctx.excluded.append(Exclusion(reason=f"{what} {reason.split(' (')[0]}", count=n, first_at=where_of(first)))
        bad |= mask
    if _stored_as_floats(values) and not bad.all():
        ctx.notes.append(f"{what}s were stored as floats; whole values read as integers")
    return nums, bad


def validate(values, where_of: Callable[[int], str], ctx: Ctx, what: str = "length") -> np.ndarray:
    """Good lengths as int64; bad ones raise ``InputError`` or, when skipping, are counted in ``ctx.excluded``.
    ``where_of(i)`` names row ``i`` (0-based) for a message: ``"line 7"``, ``"item 3"``.

    >>> ctx = Ctx(name="upload.json", on_bad="skip")
    >>> validate(np.array([3, "5", True, "0x10", ""], dtype=object), lambda i: f"item {i + 1}", ctx).tolist()
    [3, 5]
    >>> [(e.reason, e.count, e.first_at) for e in ctx.excluded]
    [('length is empty', 1, 'item 5'), ('length is not a number', 2, 'item 3')]
    """
    nums, bad = _reject(values, where_of, ctx, what)
    return nums[~bad].astype(np.int64)


def validate_with_loss(lengths, loss, where_of: Callable[[int], str], ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
    """Good (length, loss tokens) rows: a row whose length or loss count is bad, or whose loss passes its label
    positions (length - 1), raises ``InputError`` or, when skipping, is counted in ``ctx.excluded``.

    >>> ctx = Ctx(name="l.csv", on_bad="skip")
    >>> [a.tolist() for a in validate_with_loss(np.array([5, 9, 4]), np.array([2, "x", 4]), str, ctx)]
    [[5], [2]]
    >>> [(e.reason, e.count) for e in ctx.excluded]
    [('loss_tokens is not a number', 1), ('loss_tokens above the label positions (length - 1)', 1)]
    """
    nums, bad_l = _reject(lengths, where_of, ctx, "length")
    loss, bad_x = _reject(loss, where_of, ctx, "loss_tokens", allow_zero=True, tokens=True)
    over = ~bad_l & ~bad_x & (loss > np.maximum(nums - 1, 0))
    if over.any():
        first, n = int(np.argmax(over)), int(over.sum())
        if ctx.on_bad == "error":
            raise InputError(
                ctx.name,
                where_of(first),
                f"loss_tokens {int(loss[first]):,} is above the "
                f"{int(nums[first]) - 1:,} label positions of a length-{int(nums[first]):,} sample"
                + (f" ({n:,} such rows in all)" if n > 1 else ""),
            )
        ctx.excluded.append(
            Exclusion(reason="loss_tokens above the label positions (length - 1)", count=n, first_at=where_of(first))
        )
    keep = ~bad_l & ~bad_x & ~over
    return nums[keep].astype(np.int64), loss[keep].astype(np.int64)


def histogram(lengths, counts, where: Callable[[int], str], ctx: Ctx) -> LengthHistogram:
    """A length,count table: a bad length or a negative count is an error (or, when skipping, its row is left out).

    Totals are checked on the rows as read, before repeated lengths are merged, so no int64 sum can wrap.
    """
    lengths_f, bad_l = _reject(lengths, where, ctx, "length")
    counts_f, bad_c = _reject(counts, where, ctx, "count", allow_zero=True)
    keep = ~bad_l & ~bad_c
    counts_i = counts_f[keep].astype(np.int64)  # each at most 2**40: exact in float64
    lengths_i = lengths_f[keep].astype(np.int64)
    check_totals(lengths_i, counts_i, ctx.name)
    if counts_i.sum() == 0:
        raise InputError(ctx.name, None, "histogram counts add up to 0 samples")
    if (counts_i == 0).any():
        ctx.notes.append(f"{int((counts_i == 0).sum())} histogram rows have count 0 (no samples)")
    _, seen = np.unique(lengths_i, return_counts=True)
    if (seen > 1).any():
        ctx.notes.append(f"{int((seen > 1).sum())} lengths appear on more than one row; their counts were added")
    return ctx.result(lengths_i, counts_i)
