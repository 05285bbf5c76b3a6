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

This module is the dispatch (format detection, the JSON, ``.npy``, Parquet and mock readers); each value is
checked in ``cells``, CSV/TSV read in ``delimited``, the length and count columns chosen in ``columns``.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import stat
from array import array
from pathlib import Path
from typing import TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from advisor.data import cells
from advisor.data.columns import IDS_NAMES, LENGTH_NAMES, choose_columns, pick, refuse_duplicates
from advisor.data.context import Ctx
from advisor.data.delimited import CsvLines, read_delimited
from advisor.data.guard import (
    DECODED_PER_BYTE,
    DEFAULT_MAX_BYTES,
    MAX_COLUMNS,
    MAX_LENGTH,
    check_size,
    display_name,
    excerpt,
    first_nonblank_line,
    is_system_path,
    iter_lines,
    loads_json,
    names_excerpt,
    npy_array,
    npy_header,
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
SHARD_SUFFIXES = (".parquet", ".pq")


class _ReadOptions(TypedDict):
    """What ``load_lengths`` hands on to ``parse_lengths`` unchanged."""

    column: str | None
    histogram: bool | None
    on_bad: str
    mock_samples: int
    max_bytes: int
    max_length: int
    allow_file_mode: bool


def load_lengths(
    path,
    *,
    column: str | None = None,
    fmt: str | None = None,
    histogram: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    on_bad: str = "error",
    mock_samples: int = MOCK_SIZE,
    max_length: int = MAX_LENGTH,
    allow_file_mode: bool = True,
) -> LengthHistogram:
    """Read a file (or a folder of packed Parquet shards, or inline mock-config JSON) into a histogram.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "l.csv"); _ = open(p, "w").write("seq_len\\n5\\n7\\n5\\n")
    >>> h = load_lengths(p); h.lengths.tolist(), h.counts.tolist()
    ([5, 7], [2, 1])
    """
    opts = _ReadOptions(
        column=column,
        histogram=histogram,
        on_bad=on_bad,
        mock_samples=mock_samples,
        max_bytes=max_bytes,
        max_length=max_length,
        allow_file_mode=allow_file_mode,
    )
    text = str(path)
    # inline JSON, as --sft-mock-dataset-config-json accepts; a file that exists under such a name is a file
    if text.lstrip().startswith("{") and not os.path.lexists(text):
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


def parse_lengths(
    data: bytes,
    name: str,
    *,
    column: str | None = None,
    fmt: str | None = None,
    histogram: bool | None = None,
    on_bad: str = "error",
    base_dir: Path | None = None,
    mock_samples: int = MOCK_SIZE,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_length: int = MAX_LENGTH,
    allow_file_mode: bool = False,
) -> LengthHistogram:
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
    ctx = Ctx(
        name=name,
        column=column,
        histogram=histogram,
        on_bad=on_bad,
        max_length=max_length,
        base_dir=base_dir,
        mock_samples=mock_samples,
        max_bytes=max_bytes,
        allow_file_mode=allow_file_mode,
    )
    readers = {
        "csv": read_delimited,
        "txt": read_delimited,
        "tsv": read_delimited,
        "json": _read_json,
        "jsonl": _read_jsonl,
        "npy": _read_npy,
        "parquet": _read_parquet,
    }
    if fmt not in readers:
        raise InputError(name, None, f"unknown format {excerpt(fmt)}: give one of {', '.join(FORMATS)}")
    if fmt == "tsv":
        return read_delimited(data, ctx, "\t")
    return readers[fmt](data, ctx)


def _head(data: bytes) -> bytes:
    """The first byte that is not white space (no copy of the data, unlike ``data.lstrip()``)."""
    m = re.search(rb"[^\s]", data)
    return data[m.start() : m.start() + 1] if m else b""


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
    raise InputError(
        shown,
        None,
        f"unknown format (suffix {excerpt(suffix or 'none')}, content not recognised): "
        f"give one of {', '.join(FORMATS)}",
    )


def _is_single_json(data: bytes) -> bool:
    try:
        loads_json(text_bytes(data, "data"), "data")
        return True
    except InputError:
        return False


# ---------------------------------------------------------------------------------------------- JSON
_MISSING = object()  # a record without a length field (a JSON null is a value, reported as empty)


def _record_length(rec, ctx: Ctx, where: str):
    if isinstance(rec, dict):
        key = ctx.column or pick(list(rec), LENGTH_NAMES)
        if key is not None and key in rec:
            value = rec[key]
            return len(value) if key in IDS_NAMES and isinstance(value, list) else value
        ids = None if ctx.column else pick(list(rec), IDS_NAMES)
        if ids is not None and isinstance(rec[ids], list):
            return len(rec[ids])
        if ctx.on_bad == "skip":
            return _MISSING
        looked = excerpt(ctx.column) if ctx.column else ", ".join(LENGTH_NAMES[:5]) + "…"
        raise InputError(
            ctx.name,
            where,
            f"record has no length field (looked for {looked} or input_ids); its keys are {names_excerpt(rec)}",
        )
    if isinstance(rec, list):
        return len(rec)  # a list of token ids
    return rec


def _read_json(data: bytes, ctx: Ctx) -> LengthHistogram:
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
            raise InputError(
                ctx.name,
                None,
                "is a JSON object but not a Megatron-LM mock SFT config (no \"mode\") nor a {\"lengths\": [...]} list",
            )
    if not isinstance(obj, list):
        raise InputError(ctx.name, None, f"holds a JSON {type(obj).__name__}, not a list of lengths")
    if not obj:
        raise InputError(ctx.name, None, "holds an empty list")
    values = [_record_length(r, ctx, f"item {i + 1}") for i, r in enumerate(obj)]
    items = [i for i, v in enumerate(values) if v is not _MISSING]
    if len(items) < len(values):
        first = next(i for i, v in enumerate(values) if v is _MISSING)
        ctx.excluded.append(
            Exclusion(
                reason="record without a length field", count=len(values) - len(items), first_at=f"item {first + 1}"
            )
        )
    return ctx.result(cells.validate(_object_array([values[i] for i in items]), lambda k: f"item {items[k] + 1}", ctx))


def _object_array(values: list) -> np.ndarray:
    """One slot per value whatever it is (a list, a bool, None), so every value is checked on its own."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _read_jsonl(data: bytes, ctx: Ctx) -> LengthHistogram:
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
    return ctx.result(cells.validate(_object_array(values), lambda i: f"line {where[i]}", ctx))


def _read_mock(config: dict, ctx: Ctx) -> LengthHistogram:
    got = mock_histogram(
        config,
        ctx.name,
        base_dir=ctx.base_dir,
        size=ctx.mock_samples,
        allow_file_mode=ctx.allow_file_mode,
        max_length=ctx.max_length,
    )
    if isinstance(got, Path):
        return _read_mock_csv(got, ctx)
    ctx.notes.extend(got.notes)
    return ctx.result(got.values, got.counts)


def _read_mock_csv(path: Path, ctx: Ctx) -> LengthHistogram:
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
        raise InputError(
            source, None, f"cannot be read as CSV: {str(e).splitlines()[0][:160] if str(e) else e}"
        ) from None
    ctx.name = source
    ctx.notes.append(f"Megatron-LM drops line 1 of {display_name(path.name)} as a header: {excerpt(first)}")
    if frame.shape[1] > 1:
        ctx.notes.append(f"{frame.shape[1]} columns: Megatron-LM flattens them row by row into one list of lengths")
    values = pa.array(frame.to_numpy().ravel(), pa.string())  # every cell a str (dtype=str): Arrow's fast path
    lines = CsvLines(data, True)
    ncol = max(1, frame.shape[1])
    return ctx.result(cells.validate(values, lambda i: lines.of_row(i // ncol), ctx))


# ---------------------------------------------------------------------------------------------- binary
def _read_npy(data: bytes, ctx: Ctx) -> LengthHistogram:
    header = npy_header(data, ctx.name)
    if header.dtype.hasobject:  # a pickled object array: Megatron-Bridge's legacy packed file, read pickle-free
        from advisor.data.packed_audit import read_packed_npy

        return read_packed_npy(data, ctx.name, max_length=ctx.max_length)
    dtype = header.dtype
    if dtype.kind not in "iuf" or dtype.names or dtype.subdtype or header.count == 0:
        raise InputError(
            ctx.name,
            None,
            f"holds a {excerpt(str(dtype))} array of shape {excerpt(header.shape)}; expected integer lengths",
        )
    arr = npy_array(data, header)
    if arr.ndim == 2 and arr.shape[1] == 2 and ctx.histogram:
        return cells.histogram(arr[:, 0], arr[:, 1], lambda i: f"row {i + 1}", ctx)
    if arr.ndim != 1:
        raise InputError(
            ctx.name,
            None,
            f"holds an array of shape {excerpt(arr.shape)}; expected a 1-D array of "
            "lengths (or shape (N, 2) with --histogram)",
        )
    return ctx.result(cells.validate(arr, lambda i: f"index {i}", ctx))


def _list_lengths(col, ctx: Ctx, where: str) -> pa.ChunkedArray:
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise InputError(ctx.name, where, f"is {excerpt(str(col.type))}, not a list of token ids")
    return pc.list_value_length(col)


def _read_parquet(data: bytes, ctx: Ctx) -> LengthHistogram:
    pf = open_parquet(data, ctx.name)
    names = pf.schema_arrow.names
    budget = ctx.max_bytes * DECODED_PER_BYTE
    if {"input_ids", "seq_start_id"} <= set(names) and ctx.column is None:
        from advisor.data.packed_audit import packed_columns, packed_table_audit

        refuse_duplicates(names, ("input_ids", "seq_start_id"), ctx, "schema")
        table = read_parquet_columns(pf, data, packed_columns(names), ctx.name, budget)
        return packed_table_audit(table, ctx.name, max_length=ctx.max_length)
    if pf.metadata.num_rows == 0:
        raise InputError(ctx.name, None, "has no rows")
    ids = pick(names, IDS_NAMES)
    if ctx.column is None and pick(names, LENGTH_NAMES) is None and ids is not None:
        refuse_duplicates(names, (ids,), ctx, "schema")
        col = read_parquet_columns(pf, data, [ids], ctx.name, budget).column(0)
        lengths = _list_lengths(col, ctx, f"column {excerpt(ids)}")
        return ctx.result(cells.validate(lengths, lambda i: f"row {i + 1}", ctx))
    length_col, count_col = choose_columns(names, ctx, "schema")
    refuse_duplicates(names, (length_col, count_col), ctx, "schema")
    table = read_parquet_columns(pf, data, [c for c in (length_col, count_col) if c is not None], ctx.name, budget)
    if table.num_rows == 0:
        raise InputError(ctx.name, None, "has no rows")
    col = table.column(0)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        col = pc.list_value_length(col)
    if count_col is None:
        return ctx.result(cells.validate(col, lambda i: f"row {i + 1}", ctx))
    return cells.histogram(col, table.column(1), lambda i: f"row {i + 1}", ctx)


def _read_packed_folder(folder: Path, source: str, max_bytes: int, max_length: int) -> LengthHistogram:
    """A folder of packed Parquet shards. Entries that are not regular files (sub-folders, dangling symlinks,
    symlink loops, FIFOs) are skipped and counted in a note; every shard is read through ``read_file``."""
    from advisor.data.packed_audit import read_packed_parquet
    from advisor.data.prepared import check_entries

    try:
        scan = scan_folder(folder, SHARD_SUFFIXES)
    except OSError as e:
        raise InputError(source, None, f"cannot be listed: {e.strerror or type(e).__name__}") from None
    # named as prepare (or Megatron-Bridge) names a split or its metadata: each must be readable, never skipped
    check_entries(folder)
    skipped = f" ({scan.note()})" if scan.skipped else ""
    if not scan.files:
        raise InputError(source, None, f"is a folder with no .parquet shards of a packed data set{skipped}")
    files, validation = _training_split(scan.files)
    sizes = [stat_path(f, f"{source}, shard {f.name}").st_size for f in files]
    if sum(sizes) > max_bytes:
        raise InputError(source, None, f"holds {sum(sizes):,} bytes of shards, over the {max_bytes:,}-byte limit")
    shards = [read_file(f, f"{source}, shard {display_name(f.name)}", max_bytes) for f in files]
    pack_size = _named_pack_size(folder, files, source)
    hist = read_packed_parquet(
        shards, source, budget=max_bytes * DECODED_PER_BYTE, max_length=max_length, pack_size=pack_size
    )
    if pack_size is not None:
        _check_against_metadata(folder, pack_size, hist, source)
        for f in validation:  # not counted, but Megatron-Bridge validates on them: held to the same pack size
            read_packed_parquet(
                [read_file(f, f"{source}, shard {display_name(f.name)}", max_bytes)],
                f"{source}, {display_name(f.name)}",
                budget=max_bytes * DECODED_PER_BYTE,
                max_length=max_length,
                pack_size=pack_size,
            )
    scan_note = scan.note()
    notes = [scan_note] if scan_note is not None else []
    if validation:
        notes.append(
            f"the validation split ({', '.join(display_name(f.name) for f in validation[:3])}"
            f"{' ...' if len(validation) > 3 else ''}) is left out: the lengths are the training split's, "
            "as Megatron-Bridge trains on them"
        )
    return dataclasses.replace(hist, notes=(*hist.notes, *notes)) if notes else hist


_NAMED = re.compile(r"training_(\d+)(?:_\d{5})?\.idx\.parquet")
_METADATA = re.compile(r"(\d+)_metadata\.jsonl")


def _named_pack_size(folder: Path, files: list[Path], source: str) -> int | None:
    """The pack size of a prepared folder: the one its ``{S}_metadata.jsonl`` names, which every training file's
    name (``training_{S}.idx.parquet``, ``training_{S}_{k:05d}...``) must name too; None for a folder without
    metadata (shards named ``training_00...`` say nothing of a pack size).

    >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "2048_metadata.jsonl").write_text("[]")
    >>> _named_pack_size(d, [d / "training_2048_00000.idx.parquet", d / "training_2048_00001.idx.parquet"], "d")
    2048
    """
    metas = {int(m.group(1)) for name in os.listdir(folder) if (m := _METADATA.fullmatch(name)) is not None}
    if not metas:
        return None
    if len(metas) > 1:
        raise InputError(
            source, None, f"holds metadata files of pack sizes {_sizes(metas)}: one prepared folder is one pack size"
        )
    sizes = {int(m.group(1)) for f in files if (m := _NAMED.fullmatch(f.name)) is not None} | metas
    if len(sizes) > 1:
        raise InputError(
            source,
            None,
            f"holds training files of pack sizes {_sizes(sizes)}: one prepared folder is "
            "one pack size (Megatron-Bridge reads the one its packed_sequence_size names)",
        )
    return metas.pop()


def _sizes(sizes: set[int]) -> str:
    return ", ".join(f"{s:,}" for s in sorted(sizes))


def _check_against_metadata(folder: Path, pack_size: int, hist: LengthHistogram, source: str) -> None:
    """The folder's ``{S}_metadata.jsonl``, when it has one, read as Megatron-Bridge reads it and held against the
    packs: its max_samples_per_bin is what every pack's cu_seqlens is padded to, so a pack holding more than that
    gives batches of another shape (sft.py, pad_cu_seqlens)."""
    from advisor.data.packed_audit import PackedDatasetAudit
    from advisor.data.prepared import check_metadata_file, metadata_file

    path = folder / metadata_file(pack_size)
    if not path.is_file() or not isinstance(hist.packs, PackedDatasetAudit):
        return
    entries = check_metadata_file(path, pack_size)
    most = int(np.diff(hist.packs.offsets).max())
    said = max(e.max_samples_per_bin for e in entries)
    if said < most:
        raise InputError(
            source,
            path.name,
            f"says max_samples_per_bin {said:,}, but a training pack holds {most:,} "
            "sequences: Megatron-Bridge pads cu_seqlens to the file's figure, so that pack's batch "
            "would have another shape",
        )


def _training_split(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """A prepared folder's training shards and its validation shards (Megatron-Bridge's names, ``training_{S}...``
    and ``validation_{S}...``): reading both counted the validation samples as training (58 samples for 29, and
    train_iters 5 for 3). A folder of other names is read whole."""
    training = [f for f in files if f.name.startswith("training_")]
    validation = [f for f in files if f.name.startswith("validation_")]
    return (training, validation) if training else (files, [])
