"""Raw SFT and chat records from a data set on disk, cut into shards that workers read on their own.

Alternatives: one reader streaming everything through the driver (simple, but one core and one machine read a
terabyte) or a data-loading framework per format. Here: shards by byte range (plain JSONL), by row group (Parquet)
or by file (compressed JSONL, Arrow files of a ``datasets.save_to_disk`` folder), each read where it is tokenized,
the local engine's processes and Ray's tasks alike, so both produce the same records in the same order.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.data.guard import check_file, display_name, is_system_path, scan_folder, stat_path
from advisor.errors import InputError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")
SUFFIXES = JSONL_SUFFIXES + (".parquet", ".arrow")
SHARD_BYTES = 8 << 20  # plain JSONL is cut every 8 MiB at a line boundary: progress and parallelism on one file
MIN_SHARD_BYTES = 256 << 10  # ... or smaller, down to this, so every worker gets about four shards


def shard_size(total_bytes: int, workers: int) -> int:
    """Bytes per plain-JSONL shard: about four shards a worker, within [MIN_SHARD_BYTES, SHARD_BYTES].

    >>> shard_size(9 << 20, 2) >> 10, shard_size(10 << 30, 64) >> 20
    (1152, 8)
    """
    return int(min(SHARD_BYTES, max(MIN_SHARD_BYTES, total_bytes // (4 * max(1, workers)))))
NO_LIMIT = 1 << 62


@dataclass(frozen=True, kw_only=True)
class Shard:
    """A piece of one file a worker reads alone.

    ``kind``: jsonl (plain, ``start``..``stop`` bytes), jsonl.gz / jsonl.zst (the whole file), parquet (row groups
    ``start``..``stop``), arrow (an IPC stream file). ``first_line``: the file line ``start`` is on (plain JSONL);
    ``records``: how many records it holds, when known without reading it (None for compressed and Arrow files).
    """

    path: str
    kind: str
    start: int = 0
    stop: int = NO_LIMIT
    first_line: int = 1
    records: int | None = None

    @property
    def name(self) -> str:
        return display_name(self.path)


@dataclass(frozen=True, kw_only=True)
class BadRow:
    """A record that could not be read: where (file and line or row) and why."""

    where: str
    reason: str


def _kind(path: str) -> str:
    low = path.lower()
    if low.endswith((".gz",)):
        return "jsonl.gz"
    if low.endswith(".zst"):
        return "jsonl.zst"
    if low.endswith(".parquet"):
        return "parquet"
    if low.endswith(".arrow"):
        return "arrow"
    return "jsonl"


def data_files(data: str) -> list[str]:
    """The files a DATA argument names: a file, a folder of shards (or a ``datasets.save_to_disk`` folder), or a
    glob. Stray entries of a folder (sub-folders, FIFOs, broken links) are skipped; none found is an error.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "b.jsonl").write_text("{}"); _ = (d / "a.jsonl").write_text("{}")
    >>> [pathlib.Path(p).name for p in data_files(str(d))]
    ['a.jsonl', 'b.jsonl']
    """
    if any(ch in data for ch in "*?["):
        found = sorted(p for p in glob.glob(data, recursive=True) if os.path.isfile(p) and not is_system_path(p)
                       and p.lower().endswith(SUFFIXES))
        if not found:
            raise InputError(display_name(data), None, f"matches no data files ({', '.join(SUFFIXES)})")
        return found
    st = stat_path(data, display_name(data))
    if os.path.isdir(data):
        if is_system_path(data):
            raise InputError(display_name(data), None, "is a system folder (under /proc or /sys)")
        arrow_dataset = (Path(data) / "state.json").is_file()
        scan = scan_folder(Path(data), (".arrow",) if arrow_dataset else SUFFIXES)
        if not scan.files:
            raise InputError(display_name(data), None, f"holds no data files ({', '.join(SUFFIXES)})")
        return [str(p) for p in scan.files]
    del st
    check_file(data, display_name(data), NO_LIMIT)
    return [data]


def plan_shards(files: list[str], shard_bytes: int | None = None) -> list[Shard]:
    """Shards of the files, in order; plain JSONL is scanned once for line boundaries (and counts)."""
    shard_bytes = shard_bytes or SHARD_BYTES
    out: list[Shard] = []
    for path in files:
        kind = _kind(path)
        check_file(path, display_name(path), NO_LIMIT)
        if kind == "jsonl":
            out += _jsonl_shards(path, shard_bytes)
        elif kind == "parquet":
            out += _parquet_shards(path)
        else:
            out.append(Shard(path=path, kind=kind))
    return out


def _jsonl_shards(path: str, shard_bytes: int) -> list[Shard]:
    """Byte ranges of about ``shard_bytes`` ending at line ends, with each one's first line and record count."""
    size = os.path.getsize(path)
    shards, start, line = [], 0, 1
    with open(path, "rb") as f:
        while start < size:
            stop = size
            if start + shard_bytes < size:
                f.seek(start + shard_bytes)
                f.readline()  # on to the end of the line the cut falls in
                stop = min(f.tell(), size)
            f.seek(start)
            body = f.read(stop - start)
            shards.append(Shard(path=path, kind="jsonl", start=start, stop=stop, first_line=line,
                                records=_count_records(body)))
            line += body.count(b"\n")
            start = stop
    if not shards:  # an empty file: one empty shard, so it is named in the "no records" message
        shards.append(Shard(path=path, kind="jsonl", start=0, stop=0, records=0))
    return shards


def _count_records(body: bytes) -> int:
    """Non-blank lines: what the reader turns into records (or bad rows)."""
    return sum(1 for ln in body.split(b"\n") if ln.strip())


def _parquet_shards(path: str) -> list[Shard]:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as e:  # noqa: BLE001 - pyarrow raises many kinds for a broken file
        raise InputError(display_name(path), None, f"is not a readable Parquet file: {str(e).splitlines()[0][:160]}") \
            from None
    return [Shard(path=path, kind="parquet", start=g, stop=g + 1, records=meta.row_group(g).num_rows)
            for g in range(meta.num_row_groups)] or [Shard(path=path, kind="parquet", records=0)]


def iter_records(shard: Shard, batch: int = 1024) -> Iterator[tuple[list[dict | None], list[str], list[BadRow]]]:
    """Batches of (records, where each came from, bad rows). A bad row keeps its place as None, so record k of a
    shard is row k of its output whatever was wrong with the ones before."""
    reader = {"jsonl": _jsonl_lines, "jsonl.gz": _jsonl_lines, "jsonl.zst": _jsonl_lines,
              "parquet": _parquet_rows, "arrow": _arrow_rows}[shard.kind]
    records: list[dict | None] = []
    wheres: list[str] = []
    bad: list[BadRow] = []
    for record, where, problem in reader(shard):
        records.append(record)
        wheres.append(where)
        if problem is not None:
            bad.append(BadRow(where=where, reason=problem))
        if len(records) >= batch:
            yield records, wheres, bad
            records, wheres, bad = [], [], []
    if records:
        yield records, wheres, bad


def _open_text(shard: Shard):
    if shard.kind == "jsonl.gz":
        return gzip.open(shard.path, "rb")
    if shard.kind == "jsonl.zst":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(shard.path, "rb"), closefd=True)
    f = open(shard.path, "rb")
    f.seek(shard.start)
    return f


def _jsonl_lines(shard: Shard):
    name = shard.name
    remaining = shard.stop - shard.start
    line_no = shard.first_line - 1
    with _open_text(shard) as raw:
        stream = io.BufferedReader(raw) if shard.kind != "jsonl" else raw
        while remaining > 0:
            try:
                line = stream.readline()
            except (OSError, EOFError, ValueError) as e:  # a truncated or corrupt gzip/zstd stream
                yield None, f"{name}, line {line_no + 1}", f"cannot be decompressed: {str(e)[:120]}"
                return
            if not line:
                return
            remaining -= len(line)
            line_no += 1
            if not line.strip():
                continue
            where = f"{name}, line {line_no}"
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                yield None, where, f"is not UTF-8 text (byte {e.start} of the line)"
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                yield None, where, f"is not valid JSON: {e.msg} (column {e.colno})"
                continue
            except (RecursionError, ValueError):
                yield None, where, "is nested too deeply or holds an integer too long to read"
                continue
            if not isinstance(record, dict):
                yield None, where, f"is a JSON {type(record).__name__}, not an object with fields"
                continue
            yield record, where, None


def _parquet_rows(shard: Shard):
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(shard.path)
    row = sum(pf.metadata.row_group(g).num_rows for g in range(shard.start))
    for rb in pf.iter_batches(row_groups=list(range(shard.start, min(shard.stop, pf.num_row_groups))),
                              batch_size=1024):
        for rec in rb.to_pylist():
            row += 1
            yield rec, f"{shard.name}, row {row}", None


def _arrow_rows(shard: Shard):
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(pa.memory_map(shard.path))
    except pa.ArrowInvalid:
        reader = pa.ipc.open_file(pa.memory_map(shard.path))  # the file format, as some tools write it
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        batches = iter(reader)
    row = 0
    for rb in batches:
        for rec in rb.to_pylist():
            row += 1
            yield rec, f"{shard.name}, row {row}", None
