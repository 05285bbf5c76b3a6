"""Read sequence lengths from the files people have, into a ``LengthHistogram``.

Formats: CSV/TSV (one length per row, or a ``length,count`` histogram), JSON list, JSONL (ints or records with a
length field or ``input_ids``), ``.npy`` (never with pickle), Parquet, Megatron-LM's mock SFT config JSON, and a
Megatron-Bridge packed data set (Parquet or legacy ``.npy``) to audit. Lengths are tokens per sample as tokenized
(``len(input_ids)``). Every bad value raises one ``InputError`` naming the file, the line or row and the problem;
with ``on_bad="skip"`` bad rows are left out instead, and counted in ``LengthHistogram.excluded``.

Every byte goes through ``advisor.data.guard`` first: only regular files of bounded size are opened, text must
be UTF-8, JSON nesting is bounded, ``.npy`` headers are checked against the bytes that follow, lengths are at
most ``max_length`` (2**24) and the histogram's totals stay below 2**63. ``parse_lengths`` (the dashboard's
upload path) refuses mock configs that would read a server file; ``load_lengths`` (the CLI's) allows them.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import math
import os
import re
import stat
from array import array
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from advisor.data.guard import (
    DECODED_PER_BYTE,
    DEFAULT_MAX_BYTES,
    MAX_COLUMNS,
    MAX_COUNT,
    MAX_LENGTH,
    check_size,
    check_totals,
    display_name,
    excerpt,
    first_nonblank_line,
    is_system_path,
    iter_lines,
    loads_json,
    names_excerpt,
    npy_array,
    npy_header,
    nth_nonempty_line,
    open_parquet,
    read_file,
    read_parquet_columns,
    scan_folder,
    stat_path,
    text_bytes,
)
from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.data.megatron_mock import MOCK_SIZE, is_mock_config, mock_histogram
from advisor.errors import InputError

__all__ = ["DEFAULT_MAX_BYTES", "FORMATS", "MAX_LENGTH", "ON_BAD", "load_lengths", "parse_lengths"]

FORMATS = ("csv", "tsv", "json", "jsonl", "npy", "parquet")
ON_BAD = ("error", "skip")  # a bad row stops the read with one message, or is left out and counted
LENGTH_NAMES = ("length", "lengths", "seq_len", "seqlen", "seq_length", "sequence_length", "num_tokens",
                "n_tokens", "token_count", "tokens", "len", "input_length", "input_len")
COUNT_NAMES = ("count", "counts", "frequency", "freq", "num_samples", "n", "num")
IDS_NAMES = ("input_ids", "token_ids", "ids")
SHARD_SUFFIXES = (".parquet", ".pq")


def load_lengths(path, *, column: str | None = None, fmt: str | None = None, histogram: bool | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, on_bad: str = "error", mock_samples: int = MOCK_SIZE,
                 max_length: int = MAX_LENGTH, allow_file_mode: bool = True) -> LengthHistogram:
    """Read a file (or a folder of packed Parquet shards, or inline mock-config JSON) into a histogram.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "l.csv"); _ = open(p, "w").write("seq_len\\n5\\n7\\n5\\n")
    >>> h = load_lengths(p); h.lengths.tolist(), h.counts.tolist()
    ([5, 7], [2, 1])
    """
    opts = dict(column=column, histogram=histogram, on_bad=on_bad, mock_samples=mock_samples, max_bytes=max_bytes,
                max_length=max_length, allow_file_mode=allow_file_mode)
    text = str(path)
    if text.lstrip().startswith("{"):  # inline JSON, as --sft-mock-dataset-config-json accepts
        return parse_lengths(text.encode("utf-8", "surrogateescape"), "inline JSON", fmt="json", **opts)
    if not text.strip():
        raise InputError("lengths", None, "no file name given")
    source = display_name(path)
    st = stat_path(path, source)
    if stat.S_ISDIR(st.st_mode) and not is_system_path(path):
        return _read_packed_folder(Path(path), source, max_bytes, max_length)
    data = read_file(path, source, max_bytes)
    if fmt is None and data and not data.isspace():  # the format from the real name; messages show the escaped one
        fmt = _format_of(os.path.basename(text), data, source)
    return parse_lengths(data, source, fmt=fmt, base_dir=Path(path).parent, **opts)


def parse_lengths(data: bytes, name: str, *, column: str | None = None, fmt: str | None = None,
                  histogram: bool | None = None, on_bad: str = "error", base_dir: Path | None = None,
                  mock_samples: int = MOCK_SIZE, max_bytes: int = DEFAULT_MAX_BYTES, max_length: int = MAX_LENGTH,
                  allow_file_mode: bool = False) -> LengthHistogram:
    """Parse the bytes of one file; ``name`` gives the format by its suffix (or ``fmt`` does) and names errors.

    ``allow_file_mode`` is off by default: this is the path for uploads, and a mock config in ``mode: file``
    would make the server read a path of the uploader's choosing. ``load_lengths`` turns it on.

    >>> parse_lengths(b"[7, 8, 7]", "upload.json").counts.tolist()
    [2, 1]
    """
    if on_bad not in ON_BAD:
        raise ValueError("on_bad must be 'error' or 'skip'")
    real, name = str(name), display_name(name)
    if not isinstance(data, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"parse_lengths takes the file's bytes, not {type(data).__name__}")
    data = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    check_size(len(data), name, max_bytes)
    if not data or data.isspace():
        raise InputError(name, None, "is empty")
    fmt = (fmt or _format_of(real, data, name)).lower()
    ctx = _Ctx(name=name, column=column, histogram=histogram, on_bad=on_bad, max_length=max_length,
               base_dir=base_dir, mock_samples=mock_samples, max_bytes=max_bytes, allow_file_mode=allow_file_mode)
    readers = {"csv": _read_delimited, "txt": _read_delimited, "tsv": _read_delimited, "json": _read_json,
               "jsonl": _read_jsonl, "npy": _read_npy, "parquet": _read_parquet}
    if fmt not in readers:
        raise InputError(name, None, f"unknown format {excerpt(fmt)}: give one of {', '.join(FORMATS)}")
    if fmt == "tsv":
        return _read_delimited(data, ctx, "\t")
    return readers[fmt](data, ctx)


def _head(data: bytes) -> bytes:
    """The first byte that is not white space (no copy of the data, unlike ``data.lstrip()``)."""
    m = re.search(rb"[^\s]", data)
    return data[m.start():m.start() + 1] if m else b""


def _suffix(name: str) -> str:
    """The format suffix of a file name, lower case: ``Path.suffix`` but a name that is only ``.csv`` has one too.

    >>> _suffix("a.CSV"), _suffix(".csv"), _suffix("dir/.tsv"), _suffix("noext"), _suffix("a\\nb.csv")
    ('csv', 'csv', 'tsv', '', 'csv')
    """
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[1].lower() if "." in base else ""


def _format_of(name: str, data: bytes, shown: str | None = None) -> str:
    """The format of a file named ``name`` (its real name: one with a newline still ends in .csv), from its suffix
    or, without a known one, its first bytes; ``shown`` names it in the message."""
    shown = shown or display_name(name)
    suffix = _suffix(name)
    aliases = {"pq": "parquet", "ndjson": "jsonl", "txt": "csv"}
    if suffix in FORMATS or suffix in aliases:
        return aliases.get(suffix, suffix)
    if data.startswith(b"\x93NUMPY"):
        return "npy"
    if data.startswith(b"PAR1"):
        return "parquet"
    head = _head(data)
    if head == b"[":
        return "json"
    if head == b"{":
        return "json" if _is_single_json(data) else "jsonl"
    if head.isdigit():
        return "csv"
    raise InputError(shown, None, f"unknown format (suffix {excerpt(suffix or 'none')}, content not recognised): "
                     f"give one of {', '.join(FORMATS)}")


def _is_single_json(data: bytes) -> bool:
    try:
        loads_json(text_bytes(data, "data"), "data")
        return True
    except InputError:
        return False


@dataclass(kw_only=True)
class _Ctx:
    """What one read needs to know: the file's name for messages, the user's choices and limits, and what was
    left out."""

    name: str
    column: str | None = None
    histogram: bool | None = None
    on_bad: str = "error"
    max_length: int = MAX_LENGTH
    base_dir: Path | None = None
    mock_samples: int = MOCK_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    allow_file_mode: bool = False
    excluded: list[Exclusion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def result(self, lengths, counts=None, **kw) -> LengthHistogram:
        if counts is None:  # one length per sample: keep the file's order too (int32: lengths are below 2**24)
            kw.setdefault("order", np.asarray(lengths, dtype=np.int64).astype(np.int32))
            lengths, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
        if np.asarray(lengths).size == 0 or not np.any(np.asarray(counts) > 0):
            raise InputError(self.name, None, "has no usable lengths" + (
                f" ({sum(e.count for e in self.excluded):,} rows left out)" if self.excluded else ""))
        check_totals(lengths, counts, self.name)
        return LengthHistogram.from_pairs(lengths, counts, source=self.name, excluded=tuple(self.excluded),
                                          notes=tuple(self.notes), **kw)


# ---------------------------------------------------------------------------------------------- validation
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
    return data[chunk.offset: chunk.offset + len(chunk)]


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


def _bad_rows(values, allow_zero: bool, limit: int) -> tuple[np.ndarray, list[tuple[np.ndarray, str]]]:
    """Numbers (float64) and the masks of bad rows with their reasons, in the order they are reported:
    missing, not a number, not whole, not positive (for counts: negative; a zero count is fine), too large."""
    nums, missing, notnum = _numbers(values)
    with np.errstate(invalid="ignore"):
        fractional = np.isfinite(nums) & (np.floor(nums) != nums)
        low = (nums < 0) if allow_zero else (nums < 1)
        high = nums > limit
    beyond = (f"is over {limit:,} samples on one row" if allow_zero else
              f"is beyond any sequence length (the maximum is {limit:,} tokens; raise max_length if it is real)")
    return nums, [(missing, "is empty"), (notnum, "is not a number"), (fractional, "is not a whole number of tokens"),
                  (low & ~fractional, "is negative" if allow_zero else "is not a positive length"),
                  (high & ~fractional, beyond)]


def _reject(values, where_of, ctx: _Ctx, what: str, allow_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Raise on the first bad row (``on_bad="error"``) or count the bad rows as excluded; return (numbers, bad)."""
    nums, problems = _bad_rows(values, allow_zero, MAX_COUNT if allow_zero else ctx.max_length)
    bad = np.zeros(nums.shape, bool)
    for mask, reason in problems:
        mask = mask & ~bad
        if not mask.any():
            continue
        first, n = int(np.argmax(mask)), int(mask.sum())
        if ctx.on_bad == "error":
            more = f" ({n:,} such rows in all)" if n > 1 else ""
            cell = _cell(values, first)
            said = f"{what} is missing (an empty cell, NA, NaN or null)" if cell is None else \
                f"{what} {excerpt(cell)} {reason}"
            if isinstance(cell, str) and _BASE_PREFIX.match(cell):
                said = f"{what} {excerpt(cell)} is not a decimal integer (lengths and counts are written in base 10)"
            raise InputError(ctx.name, where_of(first), f"{said}{more}")
        ctx.excluded.append(Exclusion(reason=f"{what} {reason.split(' (')[0]}", count=n, first_at=where_of(first)))
        bad |= mask
    if _stored_as_floats(values) and not bad.all():
        ctx.notes.append(f"{what}s were stored as floats; whole values read as integers")
    return nums, bad


def _validate(values, where_of, ctx: _Ctx, what: str = "length") -> np.ndarray:
    """Good lengths as int64; bad ones raise ``InputError`` or, when skipping, are counted in ``ctx.excluded``."""
    nums, bad = _reject(values, where_of, ctx, what)
    return nums[~bad].astype(np.int64)


def _histogram(lengths, counts, where, ctx: _Ctx) -> LengthHistogram:
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


def _pick(names: list[str], wanted: tuple[str, ...]) -> str | None:
    lowered = {n.strip().lower(): n for n in names if isinstance(n, str)}
    for w in wanted:
        if w in lowered:
            return lowered[w]
    return None


def _choose_columns(names: list[str], ctx: _Ctx, where: str) -> tuple[str, str | None]:
    """The length column and, for a histogram, the count column."""
    shown = names_excerpt(names)
    if ctx.column is not None:
        if ctx.column not in names:
            if ctx.column.isdigit() and 1 <= int(ctx.column) <= len(names):
                return names[int(ctx.column) - 1], None
            raise InputError(ctx.name, where, f"no column {excerpt(ctx.column)}; columns are {shown}")
        length_col = ctx.column
    else:
        length_col = _pick(names, LENGTH_NAMES)
    count_col = _pick([n for n in names if n != length_col], COUNT_NAMES)
    if ctx.histogram is False:
        count_col = None
    elif ctx.histogram and count_col is None:
        raise InputError(ctx.name, where, f"a histogram needs a count column ({', '.join(COUNT_NAMES)}); "
                         f"columns are {shown}")
    if length_col is None:
        if len(names) == 1:
            length_col = names[0]
        elif len(names) == 2 and count_col is not None and names.count(count_col) == 1:
            length_col = next(n for n in names if n != count_col)
        else:
            raise InputError(ctx.name, where, f"cannot tell which of the columns {shown} holds lengths: name one "
                             f"{LENGTH_NAMES[:4]}… or pass --column")
    return length_col, count_col


def _refuse_duplicates(names: list[str], chosen: tuple[str | None, ...], ctx: _Ctx, where: str) -> None:
    """Two columns both named ``length`` (or ``Length`` and ``length``): which one is meant cannot be told."""
    for col in chosen:
        if col is None:
            continue
        same = [n for n in names if n == col or (isinstance(n, str) and n.strip().lower() == col.strip().lower())]
        if len(same) > 1:
            raise InputError(ctx.name, where, f"{len(same)} columns are named {excerpt(col)}: rename all but one, "
                             "or pass --column with a column number")
    dupes = {n for n in names if names.count(n) > 1} if len(names) < 1000 else set()
    if dupes:
        ctx.notes.append(f"columns named more than once (not used): {names_excerpt(sorted(map(str, dupes)))}")


# ---------------------------------------------------------------------------------------------- delimited
_CSV_ERRORS = (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError)


class _CsvLines:
    """File lines of pyarrow's rows, found on demand.

    pyarrow numbers records among non-empty lines (header included); the few rows a message names are mapped
    to file lines by a chunked scan (``nth_nonempty_line``), so a file with one bad last row never builds an
    array of every line's number. ``skipped`` holds pyarrow's numbers of ragged records left out (ascending).
    """

    def __init__(self, data: bytes, header: bool):
        self.data, self.header = data, header
        self.skipped = array("q")

    def of_record(self, number: int) -> str:
        line = nth_nonempty_line(self.data, number)
        return f"line {line}" if line is not None else f"row {number}"

    def of_row(self, i: int) -> str:
        """The file line of table row ``i`` (0-based), past the header and the ragged records left out."""
        base = i + 1 + self.header
        k = bisect.bisect_right(self.skipped, base)
        while True:  # each skipped record at or before the row pushes it one further
            k2 = bisect.bisect_right(self.skipped, base + k)
            if k2 == k:
                return self.of_record(base + k)
            k = k2


def _sniff(first: str) -> str:
    return "\t" if "\t" in first else ("," if "," in first else ("," if ";" not in first else ";"))


def _read_delimited(data: bytes, ctx: _Ctx, delimiter: str | None = None) -> LengthHistogram:
    data = text_bytes(data, ctx.name)
    first = first_nonblank_line(data).decode("utf-8-sig", "replace")
    delimiter = delimiter or _sniff(first)
    if first.count(delimiter) >= MAX_COLUMNS:  # pyarrow builds a column per field: refuse before it does
        raise InputError(ctx.name, "line 1", f"has {first.count(delimiter) + 1:,} fields; a lengths file has one "
                         "or two columns")
    fields = [f.strip().strip('"') for f in first.split(delimiter)]
    has_header = any(not re.fullmatch(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", f) for f in fields if f)
    lines = _CsvLines(data, has_header)
    table = _arrow_csv(data, ctx, delimiter, has_header, lines)
    if lines.skipped:
        first_at, n = lines.of_record(lines.skipped[0]), len(lines.skipped)
        if ctx.on_bad == "error":
            more = f" ({n:,} such rows in all)" if n > 1 else ""
            raise InputError(ctx.name, first_at, f"has a different number of fields from line 1{more}")
        ctx.excluded.append(Exclusion(reason="row with a different number of fields", count=n, first_at=first_at))
    names = table.column_names
    if has_header and len(names) == 1 and _pick(names, LENGTH_NAMES + COUNT_NAMES) is None:
        ctx.notes.append(f"line 1 {excerpt(names[0])} was taken as a header")
    if not has_header and len(names) == 2 and ctx.column is None and ctx.histogram is not False:
        if not ctx.histogram:
            raise InputError(ctx.name, "line 1", "two columns and no header: add a header (length,count for a "
                             "histogram) or pass --column")
        names = ["length", "count"]
        table = table.rename_columns(names)
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has a header but no rows")
    where = "header" if has_header else "line 1"
    length_col, count_col = _choose_columns(names, ctx, where)
    _refuse_duplicates(names, (length_col, count_col), ctx, where)

    def column(col):
        return table.column(names.index(col))

    if count_col is None:
        return ctx.result(_validate(column(length_col), lines.of_row, ctx))
    return _histogram(column(length_col), column(count_col), lines.of_row, ctx)


def _arrow_csv(data: bytes, ctx: _Ctx, delimiter: str, has_header: bool, lines: _CsvLines) -> pa.Table:
    """pyarrow's CSV reader, one thread (so a ragged row knows its number), ragged rows noted and skipped."""

    def on_ragged(row) -> str:  # a row with the wrong number of fields: note its number, then report or skip it
        lines.skipped.append(row.number)
        return "skip"

    # pyarrow reads a cell 0x10 of an integer column as 16; lengths are decimal, so a file holding "0x" anywhere
    # is read as text and every cell goes through the decimal check (the rare case: a find, not a parse, decides)
    as_text = _hex_cells(data, first_nonblank_line(data).decode("utf-8-sig", "replace").split(delimiter))
    try:
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(autogenerate_column_names=not has_header, block_size=1 << 24,
                                           use_threads=False),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_ragged),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, column_types=as_text),
        )
    except _CSV_ERRORS as e:
        msg = str(e).split("\n")[0]
        row = re.search(r"[Rr]ow #?(\d+)", msg)
        sep = "tab" if delimiter == "\t" else repr(delimiter)
        raise InputError(ctx.name, f"row {row.group(1)}" if row else None,
                         f"cannot be read as {sep}-separated text: {msg[:160]}") from None


def _hex_cells(data: bytes, first: list[str]) -> dict | None:
    """Column types making every column text when a cell may be written in base 16 (``0x``), else None: names as
    on line 1 (raw and trimmed, quotes off) and as pyarrow names columns of a file without a header.

    >>> _hex_cells(b"length\\n0x10\\n", ["length"])["length"], _hex_cells(b"length\\n16\\n", ["length"])
    (DataType(string), None)
    """
    if b"0x" not in data and b"0X" not in data:
        return None
    names = set(first) | {f.strip().strip('"') for f in first} | {f"f{i}" for i in range(len(first))}
    return dict.fromkeys(names, pa.string())


# ---------------------------------------------------------------------------------------------- JSON
_MISSING = object()  # a record without a length field (a JSON null is a value, reported as empty)


def _record_length(rec, ctx: _Ctx, where: str):
    if isinstance(rec, dict):
        key = ctx.column or _pick(list(rec), LENGTH_NAMES)
        if key is not None and key in rec:
            value = rec[key]
            return len(value) if key in IDS_NAMES and isinstance(value, list) else value
        ids = None if ctx.column else _pick(list(rec), IDS_NAMES)
        if ids is not None and isinstance(rec[ids], list):
            return len(rec[ids])
        if ctx.on_bad == "skip":
            return _MISSING
        looked = excerpt(ctx.column) if ctx.column else ", ".join(LENGTH_NAMES[:5]) + "…"
        raise InputError(ctx.name, where, f"record has no length field (looked for {looked} or input_ids); "
                         f"its keys are {names_excerpt(rec)}")
    if isinstance(rec, list):
        return len(rec)  # a list of token ids
    return rec


def _read_json(data: bytes, ctx: _Ctx) -> LengthHistogram:
    data = text_bytes(data, ctx.name)
    try:
        obj = loads_json(data, ctx.name)
    except InputError as e:
        several = (e.where or "").startswith("line ") and e.what.startswith("is not valid JSON")
        if several and data.count(b"\n") > 1 and _head(data) == b"{":
            return _read_jsonl(data, ctx)  # several objects, one a line: JSONL under a .json name
        raise
    if is_mock_config(obj):
        return _read_mock(obj, ctx)
    if isinstance(obj, dict):
        for key in ("lengths", *LENGTH_NAMES):
            if isinstance(obj.get(key), list):
                obj = obj[key]
                break
        else:
            raise InputError(ctx.name, None, "is a JSON object but not a Megatron-LM mock SFT config (no \"mode\") "
                             "nor a {\"lengths\": [...]} list")
    if not isinstance(obj, list):
        raise InputError(ctx.name, None, f"holds a JSON {type(obj).__name__}, not a list of lengths")
    if not obj:
        raise InputError(ctx.name, None, "holds an empty list")
    values = [_record_length(r, ctx, f"item {i + 1}") for i, r in enumerate(obj)]
    items = [i for i, v in enumerate(values) if v is not _MISSING]
    if len(items) < len(values):
        first = next(i for i, v in enumerate(values) if v is _MISSING)
        ctx.excluded.append(Exclusion(reason="record without a length field", count=len(values) - len(items),
                                      first_at=f"item {first + 1}"))
    return ctx.result(_validate(_object_array([values[i] for i in items]), lambda k: f"item {items[k] + 1}", ctx))


def _object_array(values: list) -> np.ndarray:
    """One slot per value whatever it is (a list, a bool, None), so every value is checked on its own."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _read_jsonl(data: bytes, ctx: _Ctx) -> LengthHistogram:
    data = text_bytes(data, ctx.name)
    values, where = [], array("q")
    skipped = 0
    for n, line in iter_lines(data):
        if not line.strip():
            continue
        try:
            rec = loads_json(line, ctx.name, f"line {n}")
        except InputError:
            if ctx.on_bad == "skip":
                skipped += 1
                continue
            raise
        v = _record_length(rec, ctx, f"line {n}")
        if v is _MISSING:
            skipped += 1
            continue
        values.append(v)
        where.append(n)
    if skipped:
        ctx.excluded.append(Exclusion(reason="line that is not JSON or has no length field", count=skipped))
    if not values:
        raise InputError(ctx.name, None, "has no JSON lines with a length")
    return ctx.result(_validate(_object_array(values), lambda i: f"line {where[i]}", ctx))


def _read_mock(config: dict, ctx: _Ctx) -> LengthHistogram:
    got = mock_histogram(config, ctx.name, base_dir=ctx.base_dir, size=ctx.mock_samples,
                         allow_file_mode=ctx.allow_file_mode, max_length=ctx.max_length)
    if isinstance(got, Path):
        return _read_mock_csv(got, ctx)
    ctx.notes.extend(got.notes)
    return ctx.result(got.values, got.counts)


def _read_mock_csv(path: Path, ctx: _Ctx) -> LengthHistogram:
    """``mode: file``: Megatron-LM reads the CSV with pandas defaults, so line 1 is a header and is dropped.

    Only reached from ``load_lengths`` (the CLI): the CSV goes through the same file checks as any input.
    """
    source = f"{display_name(path)} (from {ctx.name})"
    data = text_bytes(read_file(path, source, ctx.max_bytes), source)
    if not data or data.isspace():
        raise InputError(source, None, "is empty")
    first = first_nonblank_line(data).decode("utf-8-sig", "replace")
    if first.count(",") >= MAX_COLUMNS:
        raise InputError(source, "line 1", f"has {first.count(',') + 1:,} fields; a lengths file has one column")
    import pandas as pd  # only this path needs it: Megatron-LM reads the file with pandas

    errors = (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, TypeError, OverflowError, IndexError)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, skip_blank_lines=True)
    except errors as e:
        raise InputError(source, None, f"cannot be read as CSV: {str(e).splitlines()[0][:160] if str(e) else e}") \
            from None
    ctx.name = source
    ctx.notes.append(f"Megatron-LM drops line 1 of {display_name(path.name)} as a header: {excerpt(first)}")
    if frame.shape[1] > 1:
        ctx.notes.append(f"{frame.shape[1]} columns: Megatron-LM flattens them row by row into one list of lengths")
    values = pa.array(frame.to_numpy().ravel(), pa.string())  # every cell a str (dtype=str): Arrow's fast path
    lines = _CsvLines(data, True)
    ncol = max(1, frame.shape[1])
    return ctx.result(_validate(values, lambda i: lines.of_row(i // ncol), ctx))


# ---------------------------------------------------------------------------------------------- binary
def _read_npy(data: bytes, ctx: _Ctx) -> LengthHistogram:
    header = npy_header(data, ctx.name)
    if header.dtype.hasobject:  # a pickled object array: Megatron-Bridge's legacy packed file, read pickle-free
        from advisor.data.packed_audit import read_packed_npy

        return read_packed_npy(data, ctx.name, max_length=ctx.max_length)
    dtype = header.dtype
    if dtype.kind not in "iuf" or dtype.names or dtype.subdtype or header.count == 0:
        raise InputError(ctx.name, None, f"holds a {excerpt(str(dtype))} array of shape {excerpt(header.shape)}; "
                         "expected integer lengths")
    arr = npy_array(data, header)
    if arr.ndim == 2 and arr.shape[1] == 2 and ctx.histogram:
        return _histogram(arr[:, 0], arr[:, 1], lambda i: f"row {i + 1}", ctx)
    if arr.ndim != 1:
        raise InputError(ctx.name, None, f"holds an array of shape {excerpt(arr.shape)}; expected a 1-D array of "
                         "lengths (or shape (N, 2) with --histogram)")
    return ctx.result(_validate(arr, lambda i: f"index {i}", ctx))


def _list_lengths(col, ctx: _Ctx, where: str) -> pa.ChunkedArray:
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise InputError(ctx.name, where, f"is {excerpt(str(col.type))}, not a list of token ids")
    return pc.list_value_length(col)


def _read_parquet(data: bytes, ctx: _Ctx) -> LengthHistogram:
    pf = open_parquet(data, ctx.name)
    names = pf.schema_arrow.names
    budget = ctx.max_bytes * DECODED_PER_BYTE
    if {"input_ids", "seq_start_id"} <= set(names) and ctx.column is None:
        from advisor.data.packed_audit import packed_table_audit

        _refuse_duplicates(names, ("input_ids", "seq_start_id"), ctx, "schema")
        table = read_parquet_columns(pf, data, ["input_ids", "seq_start_id"], ctx.name, budget)
        return packed_table_audit(table, ctx.name, max_length=ctx.max_length)
    if pf.metadata.num_rows == 0:
        raise InputError(ctx.name, None, "has no rows")
    ids = _pick(names, IDS_NAMES)
    if ctx.column is None and _pick(names, LENGTH_NAMES) is None and ids is not None:
        _refuse_duplicates(names, (ids,), ctx, "schema")
        col = read_parquet_columns(pf, data, [ids], ctx.name, budget).column(0)
        return ctx.result(_validate(_list_lengths(col, ctx, f"column {excerpt(ids)}"), lambda i: f"row {i + 1}", ctx))
    length_col, count_col = _choose_columns(names, ctx, "schema")
    _refuse_duplicates(names, (length_col, count_col), ctx, "schema")
    table = read_parquet_columns(pf, data, [c for c in (length_col, count_col) if c is not None], ctx.name, budget)
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has no rows")
    col = table.column(0)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        col = pc.list_value_length(col)
    if count_col is None:
        return ctx.result(_validate(col, lambda i: f"row {i + 1}", ctx))
    return _histogram(col, table.column(1), lambda i: f"row {i + 1}", ctx)


def _read_packed_folder(folder: Path, source: str, max_bytes: int, max_length: int) -> LengthHistogram:
    """A folder of packed Parquet shards. Entries that are not regular files (sub-folders, dangling symlinks,
    symlink loops, FIFOs) are skipped and counted in a note; every shard is read through ``read_file``."""
    from advisor.data.packed_audit import read_packed_parquet

    try:
        scan = scan_folder(folder, SHARD_SUFFIXES)
    except OSError as e:
        raise InputError(source, None, f"cannot be listed: {e.strerror or type(e).__name__}") from None
    skipped = f" ({scan.note()})" if scan.skipped else ""
    if not scan.files:
        raise InputError(source, None, f"is a folder with no .parquet shards of a packed data set{skipped}")
    sizes = [stat_path(f, f"{source}, shard {f.name}").st_size for f in scan.files]
    if sum(sizes) > max_bytes:
        raise InputError(source, None, f"holds {sum(sizes):,} bytes of shards, over the {max_bytes:,}-byte limit")
    shards = [read_file(f, f"{source}, shard {display_name(f.name)}", max_bytes) for f in scan.files]
    hist = read_packed_parquet(shards, source, budget=max_bytes * DECODED_PER_BYTE, max_length=max_length)
    if scan.skipped:
        hist = dataclasses.replace(hist, notes=(*hist.notes, scan.note()))
    return hist
