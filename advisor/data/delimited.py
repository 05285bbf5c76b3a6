"""Delimited text (CSV, TSV, semicolons) to a histogram: the delimiter sniffed from line 1, a header told from
data, then pyarrow's CSV reader on one thread, with each table row mapped back to its file line for messages.
The alternative, Python's ``csv`` module, makes a Python object of every cell; pyarrow parses in C++.
"""

from __future__ import annotations

import bisect
import io
import re
from array import array

import pyarrow as pa
import pyarrow.csv as pacsv

from advisor.data import cells
from advisor.data.columns import COUNT_NAMES, LENGTH_NAMES, LOSS_NAMES, choose_columns, pick, refuse_duplicates
from advisor.data.context import Ctx
from advisor.data.guard import MAX_COLUMNS, excerpt, first_nonblank_line, nth_nonempty_line, text_bytes
from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.errors import InputError

__all__ = ["CsvLines", "read_delimited"]

_CSV_ERRORS = (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError)


class CsvLines:
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
    """The delimiter of line 1: a tab, else a comma, else a semicolon; a lone column counts as comma-separated.

    >>> _sniff("length\\tcount"), _sniff("length,count"), _sniff("length;count"), _sniff("384")
    ('\\t', ',', ';', ',')
    """
    return "\t" if "\t" in first else ("," if "," in first else ("," if ";" not in first else ";"))


def read_delimited(data: bytes, ctx: Ctx, delimiter: str | None = None) -> LengthHistogram:
    """One length a row, or a ``length,count`` histogram; ``delimiter`` None: sniffed from line 1.

    >>> read_delimited(b"seq_len,count\\n5,2\\n7,1\\n", Ctx(name="h.csv")).counts.tolist()
    [2, 1]
    """
    data = text_bytes(data, ctx.name)
    first = first_nonblank_line(data).decode("utf-8-sig", "replace")
    delimiter = delimiter or _sniff(first)
    if first.count(delimiter) >= MAX_COLUMNS:  # pyarrow builds a column per field: refuse before it does
        raise InputError(
            ctx.name, "line 1", f"has {first.count(delimiter) + 1:,} fields; a lengths file has one or two columns"
        )
    fields = [f.strip().strip('"') for f in first.split(delimiter)]
    has_header = any(not re.fullmatch(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", f) for f in fields if f)
    lines = CsvLines(data, has_header)
    table = _arrow_csv(data, ctx, delimiter, has_header, lines)
    if lines.skipped:
        first_at, n = lines.of_record(lines.skipped[0]), len(lines.skipped)
        if ctx.on_bad == "error":
            more = f" ({n:,} such rows in all)" if n > 1 else ""
            raise InputError(ctx.name, first_at, f"has a different number of fields from line 1{more}")
        ctx.excluded.append(Exclusion(reason="row with a different number of fields", count=n, first_at=first_at))
    names = table.column_names
    if has_header and len(names) == 1 and pick(names, LENGTH_NAMES + COUNT_NAMES) is None:
        ctx.notes.append(f"line 1 {excerpt(names[0])} was taken as a header")
    if not has_header and len(names) == 2 and ctx.column is None and ctx.histogram is not False:
        if not ctx.histogram:
            raise InputError(
                ctx.name,
                "line 1",
                "two columns and no header: add a header (length,count for a histogram) or pass --column",
            )
        names = ["length", "count"]
        table = table.rename_columns(names)
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has a header but no rows")
    where = "header" if has_header else "line 1"
    length_col, count_col = choose_columns(names, ctx, where)
    refuse_duplicates(names, (length_col, count_col), ctx, where)

    def column(col):
        return table.column(names.index(col))

    loss_col = pick([n for n in names if n not in (length_col, count_col)], LOSS_NAMES)
    if loss_col is not None and count_col is not None:
        ctx.notes.append(
            f"column {excerpt(loss_col)} left aside: loss tokens are read from one row per sample, "
            "not from a length,count table"
        )
    if count_col is None and loss_col is not None:
        refuse_duplicates(names, (length_col, loss_col), ctx, where)
        lengths, loss = cells.validate_with_loss(column(length_col), column(loss_col), lines.of_row, ctx)
        return ctx.result(lengths, loss=loss)
    if count_col is None:
        return ctx.result(cells.validate(column(length_col), lines.of_row, ctx))
    return cells.histogram(column(length_col), column(count_col), lines.of_row, ctx)


def _arrow_csv(data: bytes, ctx: Ctx, delimiter: str, has_header: bool, lines: CsvLines) -> pa.Table:
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
            read_options=pacsv.ReadOptions(
                autogenerate_column_names=not has_header, block_size=1 << 24, use_threads=False
            ),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_ragged),
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True, column_types=as_text),
        )
    except _CSV_ERRORS as e:
        msg = str(e).split("\n")[0]
        row = re.search(r"[Rr]ow #?(\d+)", msg)
        sep = "tab" if delimiter == "\t" else repr(delimiter)
        raise InputError(
            ctx.name, f"row {row.group(1)}" if row else None, f"cannot be read as {sep}-separated text: {msg[:160]}"
        ) from None


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
