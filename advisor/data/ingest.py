"""Read sequence lengths from the files people have, into a ``LengthHistogram``.

Formats: CSV/TSV (one length per row, or a ``length,count`` histogram), JSON list, JSONL (ints or records with a
length field or ``input_ids``), ``.npy`` (never with pickle), Parquet, Megatron-LM's mock SFT config JSON, and a
Megatron-Bridge packed data set (Parquet or legacy ``.npy``) to audit. Lengths are tokens per sample as tokenized
(``len(input_ids)``). Every bad value raises one ``InputError`` naming the file, the line or row and the problem;
with ``on_bad="skip"`` bad rows are left out instead, and counted in ``LengthHistogram.excluded``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.data.megatron_mock import MOCK_SIZE, is_mock_config, mock_lengths
from advisor.errors import InputError

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: a 100M-row CSV of lengths; larger inputs should be histograms
FORMATS = ("csv", "tsv", "json", "jsonl", "npy", "parquet")
LENGTH_NAMES = ("length", "lengths", "seq_len", "seqlen", "seq_length", "sequence_length", "num_tokens",
                "n_tokens", "token_count", "tokens", "len", "input_length", "input_len")
COUNT_NAMES = ("count", "counts", "frequency", "freq", "num_samples", "n", "num")
IDS_NAMES = ("input_ids", "token_ids", "ids")


def load_lengths(path, *, column: str | None = None, fmt: str | None = None, histogram: bool | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, on_bad: str = "error",
                 mock_samples: int = MOCK_SIZE) -> LengthHistogram:
    """Read a file (or a folder of packed Parquet shards, or inline mock-config JSON) into a histogram.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "l.csv"); _ = open(p, "w").write("seq_len\\n5\\n7\\n5\\n")
    >>> h = load_lengths(p); h.lengths.tolist(), h.counts.tolist()
    ([5, 7], [2, 1])
    """
    text = str(path)
    if text.lstrip().startswith("{"):  # inline JSON, as --sft-mock-dataset-config-json accepts
        return parse_lengths(text.encode(), "inline JSON", column=column, fmt="json", histogram=histogram,
                             on_bad=on_bad, mock_samples=mock_samples)
    path = Path(path)
    if path.is_dir():
        from advisor.data.packed_audit import read_packed_parquet

        shards = sorted(list(path.glob("*.parquet")) + list(path.glob("*.pq")))
        if not shards:
            raise InputError(path, None, "is a folder with no .parquet shards of a packed data set")
        size = sum(s.stat().st_size for s in shards)
        if size > max_bytes:
            raise InputError(path, None, f"holds {size / 2**20:,.1f} MiB of shards, over the "
                             f"{max_bytes / 2**20:,.0f} MiB limit")
        return read_packed_parquet([s.read_bytes() for s in shards], str(path))
    if not path.is_file():
        raise InputError(path, None, "file not found")
    size = path.stat().st_size
    if size > max_bytes:
        raise InputError(path, None, f"is {size / 2**20:,.1f} MiB, over the {max_bytes / 2**20:,.0f} MiB limit "
                         "(save a length,count histogram instead, or raise the limit)")
    return parse_lengths(path.read_bytes(), str(path), column=column, fmt=fmt, histogram=histogram,
                         on_bad=on_bad, base_dir=path.parent, mock_samples=mock_samples, max_bytes=max_bytes)


def parse_lengths(data: bytes, name: str, *, column: str | None = None, fmt: str | None = None,
                  histogram: bool | None = None, on_bad: str = "error", base_dir: Path | None = None,
                  mock_samples: int = MOCK_SIZE, max_bytes: int = DEFAULT_MAX_BYTES) -> LengthHistogram:
    """Parse the bytes of one file; ``name`` gives the format by its suffix (or ``fmt`` does) and names errors."""
    if on_bad not in ("error", "skip"):
        raise ValueError("on_bad must be 'error' or 'skip'")
    if len(data) > max_bytes:
        raise InputError(name, None, f"is {len(data) / 2**20:,.1f} MiB, over the {max_bytes / 2**20:,.0f} MiB limit")
    if not data.strip():
        raise InputError(name, None, "is empty")
    fmt = (fmt or _format_of(name, data)).lower()
    ctx = _Ctx(name=name, column=column, histogram=histogram, on_bad=on_bad)
    if fmt in ("csv", "tsv", "txt"):
        return _read_delimited(data, ctx, "\t" if fmt == "tsv" else None)
    if fmt == "json":
        return _read_json(data, ctx, base_dir, mock_samples)
    if fmt == "jsonl":
        return _read_jsonl(data, ctx)
    if fmt == "npy":
        return _read_npy(data, ctx)
    if fmt == "parquet":
        return _read_parquet(data, ctx)
    raise InputError(name, None, f"unknown format {fmt!r}: give one of {', '.join(FORMATS)}")


def _format_of(name: str, data: bytes) -> str:
    suffix = Path(name).suffix.lower().lstrip(".")
    aliases = {"pq": "parquet", "ndjson": "jsonl", "txt": "csv"}
    if suffix in FORMATS or suffix in aliases:
        return aliases.get(suffix, suffix)
    if data.startswith(b"\x93NUMPY"):
        return "npy"
    if data.startswith(b"PAR1"):
        return "parquet"
    head = data.lstrip()[:1]
    if head == b"[":
        return "json"
    if head == b"{":
        return "json" if _is_single_json(data) else "jsonl"
    if head[:1].isdigit():
        return "csv"
    raise InputError(name, None, f"unknown format (suffix {suffix or 'none'!r}, content not recognised): give one "
                     f"of {', '.join(FORMATS)}")


def _is_single_json(data: bytes) -> bool:
    try:
        json.loads(data)
        return True
    except ValueError:
        return False


class _Ctx:
    """What one read needs to know: the file's name for messages, the user's choices, and what was left out."""

    def __init__(self, *, name, column, histogram, on_bad):
        self.name, self.column, self.histogram, self.on_bad = name, column, histogram, on_bad
        self.excluded: list[Exclusion] = []
        self.notes: list[str] = []

    def result(self, lengths, counts=None, **kw) -> LengthHistogram:
        if counts is None:
            values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
        else:
            return LengthHistogram.from_pairs(lengths, counts, source=self.name, excluded=tuple(self.excluded),
                                              notes=tuple(self.notes), **kw)
        if values.size == 0:
            raise InputError(self.name, None, "has no usable lengths" + (
                f" ({sum(e.count for e in self.excluded)} rows left out)" if self.excluded else ""))
        return LengthHistogram(lengths=values, counts=counts, source=self.name, excluded=tuple(self.excluded),
                               notes=tuple(self.notes), **kw)


# ---------------------------------------------------------------------------------------------- validation
def _bad_rows(values, what: str, allow_zero: bool) -> tuple[np.ndarray, list[tuple[np.ndarray, str]]]:
    """Numbers (float64) and the masks of bad rows with their reasons, in the order they are reported:
    missing, not a number, not whole, not positive (for counts: negative; a zero count is fine)."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if arr.dtype.kind in "iuf":
        nums = arr.astype(np.float64, copy=False)
        missing = np.isnan(nums) if arr.dtype.kind == "f" else np.zeros(arr.shape, bool)
        notnum = np.zeros(arr.shape, bool)
    else:
        series = pd.Series(arr, dtype=object)
        missing = (series.isna() | series.map(lambda v: isinstance(v, str) and not v.strip())).to_numpy()
        # booleans would pass as 1 and 0 (a JSON true is not a length); lists and dicts are not numbers either
        boolean = series.map(lambda v: isinstance(v, (bool, np.bool_, list, dict, tuple))).to_numpy()
        nums = pd.to_numeric(series.where(~missing & ~boolean, None), errors="coerce").to_numpy(dtype=np.float64)
        notnum = (np.isnan(nums) & ~missing) | boolean
    with np.errstate(invalid="ignore"):
        fractional = ~np.isnan(nums) & (np.floor(nums) != nums)
        low = (nums < 0) if allow_zero else (nums <= 0)
    return nums, [(missing, "is empty"), (notnum, "is not a number"), (fractional, "is not a whole number of tokens"),
                  (low & ~fractional, "is negative" if allow_zero else "is not a positive length")]


def _reject(values, where_of, ctx: _Ctx, what: str, allow_zero: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Raise on the first bad row (``on_bad="error"``) or count the bad rows as excluded; return (numbers, bad)."""
    nums, problems = _bad_rows(values, what, allow_zero)
    bad = np.zeros(nums.shape, bool)
    for mask, reason in problems:
        mask = mask & ~bad
        if not mask.any():
            continue
        first, n = int(np.argmax(mask)), int(mask.sum())
        if ctx.on_bad == "error":
            more = f" ({n:,} such rows in all)" if n > 1 else ""
            raw = values[first]
            raw = raw.item() if hasattr(raw, "item") else raw
            raise InputError(ctx.name, where_of(first), f"{what} {raw!r} {reason}{more}")
        ctx.excluded.append(Exclusion(reason=f"{what} {reason}", count=n, first_at=where_of(first)))
        bad |= mask
    if isinstance(values, np.ndarray) and values.dtype.kind == "f" and not bad.all():
        ctx.notes.append(f"{what}s were stored as floats; whole values read as integers")
    huge = ~bad & (nums >= 2**53)
    if huge.any():
        first = int(np.argmax(huge))
        raise InputError(ctx.name, where_of(first), f"{what} {nums[first]:.3g} is beyond any sequence length")
    return nums, bad


def _validate(values, where_of, ctx: _Ctx, what: str = "length") -> np.ndarray:
    """Good lengths as int64; bad ones raise ``InputError`` or, when skipping, are counted in ``ctx.excluded``."""
    nums, bad = _reject(values, where_of, ctx, what)
    return nums[~bad].astype(np.int64)


def _histogram(lengths, counts, where, ctx: _Ctx) -> LengthHistogram:
    """A length,count table: a bad length or a negative count is an error (or, when skipping, its row is left out)."""
    lengths_f, bad_l = _reject(lengths, where, ctx, "length")
    counts_f, bad_c = _reject(counts, where, ctx, "count", allow_zero=True)
    keep = ~bad_l & ~bad_c
    counts_i = counts_f[keep].astype(np.int64)
    if counts_i.sum() == 0:
        raise InputError(ctx.name, None, "histogram counts add up to 0 samples")
    if (counts_i == 0).any():
        ctx.notes.append(f"{int((counts_i == 0).sum())} histogram rows have count 0 (no samples)")
    lengths_i = lengths_f[keep].astype(np.int64)
    _, seen = np.unique(lengths_i, return_counts=True)
    if (seen > 1).any():
        ctx.notes.append(f"{int((seen > 1).sum())} lengths appear on more than one row; their counts were added")
    return ctx.result(lengths_i, counts_i)


def _pick(names: list[str], wanted: tuple[str, ...]) -> str | None:
    lowered = {n.strip().lower(): n for n in names}
    for w in wanted:
        if w in lowered:
            return lowered[w]
    return None


def _choose_columns(names: list[str], ctx: _Ctx, where: str) -> tuple[str, str | None]:
    """The length column and, for a histogram, the count column."""
    if ctx.column is not None:
        if ctx.column not in names:
            if ctx.column.isdigit() and 1 <= int(ctx.column) <= len(names):
                return names[int(ctx.column) - 1], None
            raise InputError(ctx.name, where, f"no column {ctx.column!r}; columns are {', '.join(map(str, names))}")
        length_col = ctx.column
    else:
        length_col = _pick(names, LENGTH_NAMES)
    count_col = _pick([n for n in names if n != length_col], COUNT_NAMES)
    if ctx.histogram is False:
        count_col = None
    elif ctx.histogram and count_col is None:
        raise InputError(ctx.name, where, f"a histogram needs a count column ({', '.join(COUNT_NAMES)}); "
                         f"columns are {', '.join(map(str, names))}")
    if length_col is None:
        if len(names) == 1:
            length_col = names[0]
        elif len(names) == 2 and count_col is not None:
            length_col = next(n for n in names if n != count_col)
        else:
            raise InputError(ctx.name, where, f"cannot tell which of the columns {', '.join(map(str, names))} holds "
                             f"lengths: name one {LENGTH_NAMES[:4]}… or pass --column")
    return length_col, count_col


# ---------------------------------------------------------------------------------------------- delimited
def _line_numbers(data: bytes, skip_header: bool) -> np.ndarray:
    """1-based file line of every non-blank data row (pyarrow skips blank lines)."""
    lines = data.split(b"\n")
    # pyarrow skips only empty lines; a line of spaces is a row (whose value is empty)
    nonblank = np.fromiter((i + 1 for i, ln in enumerate(lines) if ln.rstrip(b"\r")), dtype=np.int64)
    return nonblank[1:] if skip_header else nonblank


def _read_delimited(data: bytes, ctx: _Ctx, delimiter: str | None) -> LengthHistogram:
    first = next(ln for ln in data.splitlines() if ln.strip()).decode("utf-8-sig", "replace")
    if delimiter is None:
        delimiter = "\t" if "\t" in first else ("," if "," in first else ("," if ";" not in first else ";"))
    fields = [f.strip().strip('"') for f in first.split(delimiter)]
    has_header = any(not re.fullmatch(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", f) for f in fields if f)
    ragged: list[int] = []

    def on_ragged(row) -> str:  # a row with the wrong number of fields: note its line, then report or skip it
        ragged.append(row.number)
        return "skip"

    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(autogenerate_column_names=not has_header, block_size=1 << 24,
                                           use_threads=False),  # so a bad row knows its line
            parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_ragged),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
        msg = str(e).split("\n")[0]
        row = re.search(r"[Rr]ow #?(\d+)", msg)
        raise InputError(ctx.name, f"row {row.group(1)}" if row else None, f"cannot be read as "
                         f"{'tab' if delimiter == chr(9) else repr(delimiter)}-separated text: {msg}") from None
    if ragged:  # pyarrow numbers rows among non-empty lines, header included: map them to file lines
        ragged = [int(_line_numbers(data, False)[n - 1]) for n in ragged]
        if ctx.on_bad == "error":
            more = f" ({len(ragged):,} such rows in all)" if len(ragged) > 1 else ""
            raise InputError(ctx.name, f"line {ragged[0]}", f"has a different number of fields from line 1{more}")
        ctx.excluded.append(Exclusion(reason="row with a different number of fields", count=len(ragged),
                                      first_at=f"line {ragged[0]}"))
        dropped = set(ragged)
        data = b"\n".join(ln for i, ln in enumerate(data.split(b"\n"), start=1) if i not in dropped)
    names = table.column_names
    if has_header and len(names) == 1 and _pick(names, LENGTH_NAMES + COUNT_NAMES) is None:
        ctx.notes.append(f"line 1 {names[0]!r} was taken as a header")
    if not has_header and len(names) == 2 and ctx.column is None and ctx.histogram is not False:
        if ctx.histogram:
            names = ["length", "count"]
            table = table.rename_columns(names)
        else:
            raise InputError(ctx.name, "line 1", "two columns and no header: add a header (length,count for a "
                             "histogram) or pass --column")
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has a header but no rows")
    length_col, count_col = _choose_columns(names, ctx, "header" if has_header else "line 1")
    lines = None

    def where(i):
        nonlocal lines
        if lines is None:
            lines = _line_numbers(data, has_header)
        return f"line {int(lines[i])}" if i < len(lines) else f"row {i + 1}"

    def column(col):
        values = table.column(col)
        if pa.types.is_integer(values.type) and values.null_count == 0:
            return values.to_numpy()
        return values.to_numpy(zero_copy_only=False)

    if count_col is None:
        return ctx.result(_validate(column(length_col), where, ctx))
    return _histogram(column(length_col), column(count_col), where, ctx)


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
        looked = ctx.column or ", ".join(LENGTH_NAMES[:5]) + "…"
        raise InputError(ctx.name, where, f"record has no length field (looked for {looked} or input_ids); "
                         f"its keys are {', '.join(list(rec)[:8])}")
    if isinstance(rec, list):
        return len(rec)  # a list of token ids
    return rec


def _read_json(data: bytes, ctx: _Ctx, base_dir, mock_samples) -> LengthHistogram:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        line = getattr(e, "lineno", None)
        if line is not None and data.count(b"\n") > 1 and data.lstrip()[:1] == b"{":
            return _read_jsonl(data, ctx)  # several objects, one a line: JSONL under a .json name
        raise InputError(ctx.name, f"line {line}" if line else None,
                         f"is not valid JSON: {getattr(e, 'msg', e)}") from None
    if is_mock_config(obj):
        got, notes = mock_lengths(obj, ctx.name, base_dir, mock_samples)
        if isinstance(got, Path):
            return _read_mock_csv(got, ctx)
        ctx.notes.extend(notes)
        return ctx.result(got)
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
    values, where = [], []
    skipped = 0
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            if ctx.on_bad == "skip":
                skipped += 1
                continue
            raise InputError(ctx.name, f"line {n}", f"is not valid JSON: {getattr(e, 'msg', e)}") from None
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


def _read_mock_csv(path: Path, ctx: _Ctx) -> LengthHistogram:
    """``mode: file``: Megatron-LM reads the CSV with pandas defaults, so line 1 is a header and is dropped."""
    data = path.read_bytes()
    if not data.strip():
        raise InputError(path, None, "is empty")
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, skip_blank_lines=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(path, None, f"cannot be read as CSV: {e}") from None
    ctx.name = f"{path} (from {ctx.name})"
    ctx.notes.append(f"Megatron-LM drops line 1 of {path.name} as a header: {data.splitlines()[0][:40]!r}")
    if frame.shape[1] > 1:
        ctx.notes.append(f"{frame.shape[1]} columns: Megatron-LM flattens them row by row into one list of lengths")
    values = frame.to_numpy().ravel()
    lines = _line_numbers(data, True)
    ncol = frame.shape[1]
    return ctx.result(_validate(values, lambda i: f"line {int(lines[i // ncol])}", ctx))


# ---------------------------------------------------------------------------------------------- binary
def _read_npy(data: bytes, ctx: _Ctx) -> LengthHistogram:
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:
        if "allow_pickle" in str(e) or "Object arrays" in str(e):
            from advisor.data.packed_audit import read_packed_npy

            return read_packed_npy(data, ctx.name)
        raise InputError(ctx.name, None, f"is not a readable .npy file: {e}") from None
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        raise InputError(ctx.name, None, f"holds a {arr.dtype} array of shape {arr.shape}; expected integer lengths")
    if arr.ndim == 2 and arr.shape[1] == 2 and ctx.histogram:
        return _histogram(arr[:, 0], arr[:, 1], lambda i: f"row {i + 1}", ctx)
    if arr.ndim != 1:
        raise InputError(ctx.name, None, f"holds an array of shape {arr.shape}; expected a 1-D array of lengths "
                         "(or shape (N, 2) with --histogram)")
    return ctx.result(_validate(arr, lambda i: f"index {i}", ctx))


def _read_parquet(data: bytes, ctx: _Ctx) -> LengthHistogram:
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as e:
        raise InputError(ctx.name, None, f"is not a readable Parquet file: {e}") from None
    names = table.column_names
    if {"input_ids", "seq_start_id"} <= set(names) and ctx.column is None:
        from advisor.data.packed_audit import packed_table_audit

        return packed_table_audit(table, ctx.name)
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has no rows")
    ids = _pick(names, IDS_NAMES)
    if ctx.column is None and _pick(names, LENGTH_NAMES) is None and ids is not None:
        col = table.column(ids)
        if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
            raise InputError(ctx.name, f"column {ids!r}", f"is {col.type}, not a list of token ids")
        return ctx.result(_validate(pc.list_value_length(col).to_numpy(zero_copy_only=False),
                                    lambda i: f"row {i + 1}", ctx))
    length_col, count_col = _choose_columns(names, ctx, "schema")
    col = table.column(length_col)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        col = pc.list_value_length(col)
    values = col.to_numpy(zero_copy_only=False)
    if count_col is None:
        return ctx.result(_validate(values, lambda i: f"row {i + 1}", ctx))
    return _histogram(values, table.column(count_col).to_numpy(zero_copy_only=False), lambda i: f"row {i + 1}", ctx)
