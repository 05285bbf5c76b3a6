"""Raw SFT and chat records from a data set on disk, cut into shards that workers read on their own.

Alternatives: one reader streaming everything through the driver (simple, but one core and one machine read a
terabyte) or a data-loading framework per format. Here: shards by byte range (plain JSONL), by row group (Parquet)
or by file (compressed JSONL, Arrow files of a ``datasets.save_to_disk`` folder), each read where it is tokenized,
the local engine's processes and Ray's tasks alike, so both produce the same records in the same order.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.data.guard import check_file, display_name, is_system_path, scan_folder, stat_path
from advisor.errors import InputError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst")
SUFFIXES = JSONL_SUFFIXES + (".parquet", ".arrow")
# metadata a Hugging Face datasets folder keeps beside its data: never records
METADATA_NAMES = ("dataset_info.json", "state.json", "dataset_dict.json")
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
        """The file's own name: messages name the shard, never the server's folders."""
        return display_name(os.path.basename(self.path))


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


def data_files_and_notes(data: str) -> tuple[list[str], list[str]]:
    """The files a DATA argument names: a file, a folder of shards (or a ``datasets.save_to_disk`` folder), or a
    glob, and notes on what a folder holds but is not read (stray entries, sub-folders); none found is an error.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "b.jsonl").write_text("{}"); _ = (d / "a.jsonl").write_text("{}")
    >>> [pathlib.Path(p).name for p in data_files_and_notes(str(d))[0]]
    ['a.jsonl', 'b.jsonl']
    """
    if any(ch in data for ch in "*?["):
        found = sorted(p for p in glob.glob(data, recursive=True) if os.path.isfile(p) and not is_system_path(p)
                       and p.lower().endswith(SUFFIXES) and os.path.basename(p) not in METADATA_NAMES)
        if not found:
            raise InputError(display_name(data), None, f"matches no data files ({', '.join(SUFFIXES)})")
        return found, []
    stat_path(data, display_name(data))  # missing, dangling or looping: one message
    if os.path.isdir(data):
        if is_system_path(data):
            raise InputError(display_name(data), None, "is a system folder (under /proc or /sys)")
        arrow_dataset = (Path(data) / "state.json").is_file()
        scan = scan_folder(Path(data), (".arrow",) if arrow_dataset else SUFFIXES)
        files = [str(p) for p in scan.files if p.name not in METADATA_NAMES]
        if not files:
            raise InputError(display_name(data), None, f"holds no data files ({', '.join(SUFFIXES)}); a "
                             "datasets.DatasetDict folder holds one folder per split: name the split's folder")
        notes = [f"{os.path.basename(data.rstrip(os.sep))}: {scan.note()}"] if scan.note() else []
        subs = [e.name for e in os.scandir(data) if e.is_dir()]
        if subs:
            notes.append(f"{len(subs)} sub-folder(s) not read ({', '.join(sorted(subs)[:4])}): a DatasetDict keeps "
                         "one folder per split; name a split's folder to read it")
        return files, notes
    check_file(data, display_name(data), NO_LIMIT)
    return [data], []


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


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one record or batch may cost once decoded; None: no limit (the command line). The dashboard sets
    both: a 1 kB Parquet file can decode to gigabytes (dictionary-encoded strings), a 64 MB JSON line to 1.4 GB of
    Python objects."""

    max_record_bytes: int | None = None
    max_batch_bytes: int | None = None


def iter_records(shard: Shard, batch: int = 1024, limits: Limits = Limits(),
                 ) -> Iterator[tuple[list[dict | None], list[str], list[BadRow]]]:
    """Batches of (records, where each came from, bad rows). A bad row keeps its place as None, so record k of a
    shard is row k of its output whatever was wrong with the ones before."""
    reader = {"jsonl": _jsonl_lines, "jsonl.gz": _jsonl_lines, "jsonl.zst": _jsonl_lines,
              "parquet": _parquet_rows, "arrow": _arrow_rows}[shard.kind]
    records: list[dict | None] = []
    wheres: list[str] = []
    bad: list[BadRow] = []
    for record, where, problem in reader(shard, limits):
        records.append(record)
        wheres.append(where)
        if problem is not None:
            bad.append(BadRow(where=where, reason=problem))
        if len(records) >= batch:
            yield records, wheres, bad
            records, wheres, bad = [], [], []
    if records:
        yield records, wheres, bad


def _zst_lines(path: str):
    """Lines of a zstd file, frame after frame. Why not ``stream_reader``: it ends quietly at a truncated frame,
    so the records after the cut would vanish; here a stream that stops inside a frame raises ``EOFError``."""
    import zstandard

    buf = b""
    dobj = zstandard.ZstdDecompressor().decompressobj()
    in_frame = False
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            while chunk:
                buf += dobj.decompress(chunk)
                in_frame = True
                chunk = b""
                if dobj.eof:  # a frame ended: the next one (if any) starts in its unused data
                    chunk, in_frame = dobj.unused_data, False
                    dobj = zstandard.ZstdDecompressor().decompressobj()
            *lines, buf = buf.split(b"\n")
            for line in lines:
                yield line + b"\n"
    if buf:
        yield buf
    if in_frame:
        raise EOFError("the zstd stream ends inside a frame (the file is truncated)")


def _raw_lines(shard: Shard):
    """The shard's lines as bytes (plain JSONL from ``start`` for ``stop - start`` bytes)."""
    if shard.kind == "jsonl.zst":
        yield from _zst_lines(shard.path)
        return
    if shard.kind == "jsonl.gz":
        with gzip.open(shard.path, "rb") as f:
            yield from f
        return
    with open(shard.path, "rb") as f:
        f.seek(shard.start)
        remaining = shard.stop - shard.start
        while remaining > 0:
            line = f.readline()
            if not line:
                return
            remaining -= len(line)
            yield line


def _decompress_errors() -> tuple:
    try:
        import zstandard

        return (OSError, EOFError, ValueError, zstandard.ZstdError)
    except ImportError:  # pragma: no cover - zstandard is pinned
        return (OSError, EOFError, ValueError)


def _jsonl_lines(shard: Shard, limits: Limits):
    name = shard.name
    line_no = shard.first_line - 1
    lines = _raw_lines(shard)
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except _decompress_errors() as e:  # a truncated or corrupt gzip/zstd stream: the rest cannot be read
            yield None, f"{name}, line {line_no + 1}", f"cannot be decompressed from here on: {str(e)[:120]}"
            return
        line_no += 1
        if line_no == 1:
            line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is not part of the first record
        if not line.strip():
            continue
        where = f"{name}, line {line_no}"
        if limits.max_record_bytes is not None and len(line) > limits.max_record_bytes:
            yield None, where, f"is {len(line) / 2**20:,.1f} MB, over the {limits.max_record_bytes / 2**20:,.0f} MB " \
                               "a record may have here"
            continue
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


def _parquet_rows(shard: Shard, limits: Limits):
    import pyarrow.parquet as pq

    def batches():
        pf = pq.ParquetFile(shard.path)
        groups = list(range(shard.start, min(shard.stop, pf.num_row_groups)))
        return sum(pf.metadata.row_group(g).num_rows for g in range(shard.start)), \
            pf.iter_batches(row_groups=groups, batch_size=BATCH_ROWS)

    yield from _columnar_rows(shard, limits, batches)


def _arrow_rows(shard: Shard, limits: Limits):
    import pyarrow as pa

    def batches():
        try:
            return 0, iter(pa.ipc.open_stream(pa.memory_map(shard.path)))
        except (pa.ArrowInvalid, OSError):
            reader = pa.ipc.open_file(pa.memory_map(shard.path))  # the file format, as some tools write it
            return 0, (reader.get_batch(i) for i in range(reader.num_record_batches))

    yield from _columnar_rows(shard, limits, batches)


def _columnar_rows(shard: Shard, limits: Limits, open_batches):
    """Rows of Arrow record batches as records. A damaged page or batch ends the shard with one bad row saying
    where reading stopped (pyarrow raises OSError, ArrowInvalid, ... for them), not a traceback."""
    row = 0
    try:
        row, batches = open_batches()
        for rb in batches:
            check_batch_bytes(rb, shard.name, row, limits.max_batch_bytes)
            for rec in rb.to_pylist():
                row += 1
                yield rec, f"{shard.name}, row {row}", None
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever pyarrow raises for a damaged file
        yield None, f"{shard.name}, row {row + 1}", f"cannot be read from here on: {str(e).splitlines()[0][:120]}"


BATCH_ROWS = 1024


def check_batch_bytes(rb, name: str, row: int, limit: int | None) -> None:
    """Refuse a record batch whose values, decoded, are over ``limit`` bytes (before ``to_pylist`` builds them):
    the decoded size, not the file's, since dictionary-encoded strings make a 1 kB file hold gigabytes of text."""
    if limit is None:
        return
    decoded = decoded_bytes(rb)
    if decoded > limit:
        raise InputError(name, f"rows {row + 1}-{row + rb.num_rows}", f"decode to {decoded / 2**20:,.0f} MB, over "
                         f"the {limit / 2**20:,.0f} MB allowed per {BATCH_ROWS} rows here")


def decoded_bytes(rb) -> int:
    """Bytes of every string and binary value in the batch once decoded (dictionaries expanded, lists and structs
    walked): what ``to_pylist`` would build."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def size(arr) -> int:
        t = arr.type
        if pa.types.is_dictionary(t):  # each index stands for its value's size, counted without building it
            if pa.types.is_string(t.value_type) or pa.types.is_binary(t.value_type):
                return int(pc.sum(pc.take(pc.binary_length(arr.dictionary), arr.indices)).as_py() or 0)
            return size(arr.dictionary.take(arr.indices))
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or \
                pa.types.is_large_binary(t):
            return int(pc.sum(pc.binary_length(arr)).as_py() or 0)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return size(arr.flatten()) + 8 * len(arr)
        if pa.types.is_struct(t):
            return sum(size(arr.field(i)) for i in range(t.num_fields))
        return arr.nbytes

    return sum(size(col) for col in rb.columns)
