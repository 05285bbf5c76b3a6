"""Raw SFT and chat records from a data set on disk, cut into shards that workers read on their own.

Alternatives: one reader streaming everything through the driver (simple, but one core and one machine read a
terabyte) or a data-loading framework per format. Here: shards by byte range (plain JSONL), by row group (Parquet)
or by file (compressed JSONL, Arrow files of a ``datasets.save_to_disk`` folder), each read where it is tokenized,
the local engine's processes and Ray's tasks alike, so both produce the same records in the same order.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from advisor.data.guard import check_file, display_name, is_system_path, scan_folder, stat_path
from advisor.data.tokenize.text import SURROGATE_ESCAPE, clean_record
from advisor.errors import InputError
from advisor.limits import (
    MAX_BATCH_BYTES,
    MAX_ELEMENTS,
    MAX_EXPANSION,
    MAX_JSON_DEPTH,
    MAX_RECORD_BYTES,
    MAX_STREAM_EXPANSION,
    MIN_BOMB_BYTES,
    json_elements_over,
    json_too_deep,
)

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
    ``start``..``stop``), arrow (an IPC stream file). ``first_line``: the file line ``start`` is on (plain JSONL),
    or the file row (Parquet);
    ``records``: how many records it holds, when known without reading it (None for compressed and Arrow files).
    """

    path: str
    kind: str
    start: int = 0
    stop: int = NO_LIMIT
    first_line: int = 1
    records: int | None = None
    dictionary: tuple[str, ...] = ()  # Parquet: leaf columns with dictionary pages, read as dictionaries
    stored: int = 0  # Parquet: bytes its row groups take in the file (what their decoded size is measured against)
    budget: int = 0  # Parquet: decoded bytes its rows may take (its share of the file's), 0: from the file's size

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
        found = sorted(
            p
            for p in glob_files(data)
            if os.path.isfile(p)
            and not is_system_path(p)
            and p.lower().endswith(SUFFIXES)
            and os.path.basename(p) not in METADATA_NAMES
        )
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
            raise InputError(
                display_name(data),
                None,
                f"holds no data files ({', '.join(SUFFIXES)}); a "
                "datasets.DatasetDict folder holds one folder per split: name the split's folder",
            )
        notes = [f"{os.path.basename(data.rstrip(os.sep))}: {scan.note()}"] if scan.note() else []
        subs = [e.name for e in os.scandir(data) if e.is_dir(follow_symlinks=False)]
        if subs:
            notes.append(
                f"{len(subs)} sub-folder(s) not read ({', '.join(sorted(subs)[:4])}): a DatasetDict keeps "
                "one folder per split; name a split's folder to read it"
            )
        return files, notes
    check_file(data, display_name(data), NO_LIMIT)
    return [data], []


def glob_files(pattern: str) -> list[str]:
    """Paths matching a glob; ``**`` walks sub-folders without following symlinks (``glob.glob(recursive=True)``
    follows them, so a link to a parent folder makes it walk for ever).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "s").mkdir(); _ = (d / "s" / "a.jsonl").write_text("{}")
    >>> os.symlink(d, d / "s" / "up")
    >>> [os.path.relpath(p, d) for p in glob_files(str(d / "**" / "*.jsonl"))]
    ['s/a.jsonl']
    """
    if "**" not in pattern:
        return glob.glob(pattern)  # one folder per wildcard: finite whatever links there are
    parts = pattern.split(os.sep)
    fixed = next(i for i, part in enumerate(parts) if any(ch in part for ch in "*?["))
    root = os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else ".")
    rx = re.compile(_glob_regex(os.sep.join(parts[fixed:])))
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for f in sorted(files):
            full = os.path.join(folder, f)
            if rx.fullmatch(os.path.relpath(full, root)):
                out.append(full if root != "." or pattern.startswith(".") else os.path.relpath(full, root))
    return out


def _glob_regex(pattern: str) -> str:
    """A glob as a regular expression over ``/``-separated paths: ``**/`` any folders, ``*`` and ``?`` within one.

    >>> import re
    >>> deep, flat = _glob_regex("**/part-*.jsonl"), _glob_regex("*.x")
    >>> bool(re.fullmatch(deep, "a/b/part-1.jsonl")), bool(re.fullmatch(flat, "a/b.x"))
    (True, False)
    """
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            body = body.replace("\\", "\\\\")  # a range such as [0-9] stays a range
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


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
        elif kind == "arrow":
            _check_arrow(path)
            out.append(Shard(path=path, kind=kind))
        else:
            out.append(Shard(path=path, kind=kind))
    return out


def _check_arrow(path: str) -> None:
    """Refuse an Arrow file whose batches decode to a bomb (``check_decoded``), summed before any row is built:
    its dictionaries are counted through their indices, memory-mapped. A file pyarrow cannot read is left to the
    reader, which says where reading stopped."""
    import pyarrow as pa

    total, enough = 0, max(MIN_BOMB_BYTES, MAX_EXPANSION * os.path.getsize(path))
    try:
        try:
            batches = iter(pa.ipc.open_stream(pa.memory_map(path)))
        except (pa.ArrowInvalid, OSError):
            reader = pa.ipc.open_file(pa.memory_map(path))
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        for rb in batches:
            total += decoded_bytes(rb)
            if total > enough:
                break
    except Exception:  # noqa: BLE001 - a damaged file: the reader reports it, at its row
        return
    check_decoded(total, os.path.getsize(path), display_name(os.path.basename(path)))


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
            shards.append(
                Shard(path=path, kind="jsonl", start=start, stop=stop, first_line=line, records=_count_records(body))
            )
            line += body.count(b"\n")
            start = stop
    if not shards:  # an empty file: one empty shard, so it is named in the "no records" message
        shards.append(Shard(path=path, kind="jsonl", start=0, stop=0, records=0))
    return shards


def _count_records(body: bytes) -> int:
    """Non-blank lines: what the reader turns into records (or bad rows)."""
    return sum(1 for ln in body.split(b"\n") if ln.strip())


MAX_ROW_GROUPS = 100_000  # row groups in one Parquet file (a footer of 100k row groups is already ~50 MB)
MAX_FOOTER = 64 << 20  # a Parquet footer read in Python before pyarrow sees the file
MAX_PARQUET_SHARDS = 64  # shards per Parquet file: each worker opens (parses the footer of) its shard's file


def _parquet_shards(path: str) -> list[Shard]:
    """Shards of consecutive row groups, at most ``MAX_PARQUET_SHARDS`` a file, each knowing its first row.

    Checked first, from the footer alone (read in Python, bounded): the row-group count, and every row group's
    decoded size against what it stores (``check_row_group``). Why few shards: each one opens the file, and
    opening parses the whole footer, so a shard per row group made 5,000 row groups cost 5,000 footer parses
    (and the rows before each shard were summed again for each: quadratic). The footer is read here once; a shard
    carries what its reader needs from it (its first row, its dictionary-encoded columns)."""
    from advisor.data.parquet_footer import FooterError, read_footer_of, row_groups

    name = display_name(os.path.basename(path))
    try:
        _, groups = row_groups(read_footer_of(path, MAX_FOOTER))
    except (FooterError, OSError) as e:
        raise InputError(name, None, f"is not a readable Parquet file: {str(e).splitlines()[0][:160]}") from None
    if len(groups) > MAX_ROW_GROUPS:
        raise InputError(
            name,
            None,
            f"has {len(groups):,} row groups, over the {MAX_ROW_GROUPS:,} read here: "
            "rewrite it with larger row groups (pyarrow: row_group_size=100_000)",
        )
    for g, group in enumerate(groups):
        check_row_group(group, name, g)
    total_rows = max(1, sum(g.num_rows for g in groups))
    check_decoded(sum(g.decoded_estimate() for g in groups), os.path.getsize(path), name)
    per = max(1, -(-len(groups) // MAX_PARQUET_SHARDS))
    shards, row = [], 1
    for g in range(0, len(groups), per):
        rows = sum(group.num_rows for group in groups[g : g + per])
        leaves = sorted({c.leaf for group in groups[g : g + per] for c in group.chunks if c.dictionary})
        stored = sum(group.compressed for group in groups[g : g + per])
        shards.append(
            Shard(
                path=path,
                kind="parquet",
                start=g,
                stop=min(g + per, len(groups)),
                first_line=row,
                records=rows,
                dictionary=tuple(leaves),
                stored=stored,
                budget=max(MAX_EXPANSION * stored, MIN_BOMB_BYTES * rows // total_rows, 1),
            )
        )
        row += rows
    return shards or [Shard(path=path, kind="parquet", records=0)]


def check_row_group(group, name: str, index: int, budget: int | None = None) -> None:
    """Refuse a row group whose values, decoded, would take over ``MAX_EXPANSION`` times the bytes it stores
    (and over ``MIN_BOMB_BYTES``), or over ``budget``: from its footer figures (``RowGroup.decoded_estimate``),
    before a byte of it is decompressed. A list of a billion ints or a dictionary of one long string repeated is a
    few kB of Parquet; no real data set compresses past gzip's 1:1032.

    >>> from advisor.data.parquet_footer import ColumnChunk, RowGroup
    >>> check_row_group(RowGroup(10, (ColumnChunk("t", 10, 100, compressed=50),)), "a.parquet", 0)
    >>> bomb = RowGroup(1, (ColumnChunk("ids", 10**9, 4000, compressed=900),))
    >>> try:
    ...     check_row_group(bomb, "b.parquet", 0)
    ... except InputError as e:
    ...     print(str(e)[:76])
    b.parquet, row group 1: would decode to about 7,629 MB from 900 bytes stored
    """
    need = group.decoded_estimate()
    stored = max(1, group.compressed)
    if (need > MIN_BOMB_BYTES and need > MAX_EXPANSION * stored) or (budget is not None and need > budget):
        raise InputError(
            name,
            f"row group {index + 1}",
            f"would decode to about {need / 2**20:,.0f} MB from "
            f"{_size(stored)} stored ({need // stored:,} times; a decompression bomb?): too much to "
            "read" + (f" here (at most {budget / 2**20:,.0f} MB)" if budget is not None else ""),
        )


def check_decoded(need: int, stored: int, name: str) -> None:
    """Refuse a whole file whose values decode to over ``MAX_EXPANSION`` times its size (and over
    ``MIN_BOMB_BYTES``): row groups (or batches) each under the limit can add up to a bomb.

    >>> check_decoded(10 << 20, 1000, "ok.parquet")
    >>> try:
    ...     check_decoded(300 << 20, 200_000, "d.arrow")
    ... except InputError as e:
    ...     print(e)
    d.arrow: decodes to about 300 MB from 195.3 kB (1,572 times its size; a decompression bomb?): too much to read
    """
    if need > MIN_BOMB_BYTES and need > MAX_EXPANSION * max(1, stored):
        raise InputError(
            name,
            None,
            f"decodes to about {need / 2**20:,.0f} MB from {stored / 1024:,.1f} kB "
            f"({need // max(1, stored):,} times its size; a decompression bomb?): too much to read",
        )


def _size(n: int) -> str:
    """A stored size in words.

    >>> _size(900), _size(3 << 20)
    ('900 bytes', '3.0 MB')
    """
    return f"{n:,} bytes" if n < 1 << 20 else f"{n / 2**20:,.1f} MB"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one record, one batch (records handed to the tokenizer at once) and one compressed file (or Parquet
    shard) may cost once decoded. The command line keeps the
    defaults (a 4 MB record is ~1M tokens; the tokenizer takes up to 170 bytes a byte of text); the dashboard
    sets tighter ones: a 1 kB Parquet file can decode to gigabytes (dictionary-encoded strings), a 64 MB JSON line
    to 1.4 GB of Python objects. ``max_file_bytes``: decompressed bytes of one gzip/zstd file; None: up to
    ``MAX_EXPANSION`` times its size (at least ``MIN_BOMB_BYTES``)."""

    max_record_bytes: int | None = MAX_RECORD_BYTES
    max_batch_bytes: int | None = MAX_BATCH_BYTES
    max_file_bytes: int | None = None

    def record_limit(self) -> int:
        return self.max_record_bytes if self.max_record_bytes is not None else NO_LIMIT

    def file_limit(self, stored: int, expansion: int = MAX_EXPANSION) -> int:
        """Decoded bytes a file of ``stored`` bytes may give (``expansion`` times, at least ``MIN_BOMB_BYTES``).

        >>> Limits().file_limit(1 << 20) >> 20, Limits(max_file_bytes=5).file_limit(1 << 20)
        (1100, 5)
        """
        if self.max_file_bytes is not None:
            return self.max_file_bytes
        return max(MIN_BOMB_BYTES, expansion * stored)


FLUSH_BYTES = MAX_BATCH_BYTES  # text read before a batch goes to the tokenizer, however few records it holds


def iter_records(
    shard: Shard,
    batch: int = 1024,
    limits: Limits = Limits(),
) -> Iterator[tuple[list[dict | None], list[str], list[BadRow]]]:
    """Batches of (records, where each came from, bad rows). A bad row keeps its place as None, so record k of a
    shard is row k of its output whatever was wrong with the ones before. A batch holds at most ``batch`` records
    and about ``FLUSH_BYTES`` (or ``limits.max_batch_bytes``) of their text."""
    reader = {
        "jsonl": _jsonl_lines,
        "jsonl.gz": _jsonl_lines,
        "jsonl.zst": _jsonl_lines,
        "parquet": _parquet_rows,
        "arrow": _arrow_rows,
    }[shard.kind]
    records: list[dict | None] = []
    wheres: list[str] = []
    bad: list[BadRow] = []
    held, flush = 0, min(FLUSH_BYTES, limits.max_batch_bytes or NO_LIMIT)
    for record, where, problem, size in reader(shard, limits):
        if records and held + size > flush:  # handed on before it grows past the limit, not after
            yield records, wheres, bad
            records, wheres, bad, held = [], [], [], 0
        records.append(record)
        wheres.append(where)
        held += size
        if problem is not None:
            bad.append(BadRow(where=where, reason=problem))
        if len(records) >= batch:
            yield records, wheres, bad
            records, wheres, bad, held = [], [], [], 0
    if records:
        yield records, wheres, bad


# ------------------------------------------------------------------------------------------- JSON lines
READ_BYTES = 1 << 20  # decompressed (or read) bytes taken at a time, whatever one compressed byte expands to


@dataclass(frozen=True)
class LongLine:
    """A line over the record limit, read through and dropped: only its size is kept."""

    size: int


@dataclass(frozen=True)
class BlankLines:
    """A run of lines holding only white space: counted, not yielded one by one (a 1 kB gzip file can hold 64M
    empty lines, and a Python step per line made it a minute's work)."""

    count: int


_BLANK_RUN = re.compile(rb"(?:[ \t\r]*\n)+")


def bounded_lines(read: Callable[[int], bytes], max_line: int) -> Iterator[bytes | LongLine | BlankLines]:
    """Lines (each with its ``\\n``, the last maybe without) from ``read(n)``, never holding more than ``max_line``
    plus one chunk: a longer line is read through, thrown away as it comes, and given as ``LongLine(size)``; runs
    of blank lines come as ``BlankLines(count)``.

    Why: ``readline`` and ``split`` hold a whole line, and one line of a gzip or zstd file can decompress to
    gigabytes. Each byte is searched for a newline once (no quadratic rescans of a long line).

    >>> import io
    >>> list(bounded_lines(io.BytesIO(b"ab\\n" + b"x" * 10 + b"\\n\\n \\r\\ncd").read, 5))
    [b'ab\\n', LongLine(size=11), BlankLines(count=2), b'cd']
    """
    buf = bytearray()
    scanned = 0  # buf[:scanned] holds no newline
    skipping = -1  # bytes of an over-long line thrown away so far, or -1
    while True:
        chunk = read(READ_BYTES)
        if not chunk:
            break
        if skipping >= 0:
            nl = chunk.find(b"\n")
            if nl < 0:
                skipping += len(chunk)
                continue
            yield LongLine(skipping + nl + 1)
            skipping, chunk = -1, chunk[nl + 1 :]
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", max(start, scanned))) >= 0:
            blank = _BLANK_RUN.match(buf, start)
            if blank is not None:
                yield BlankLines(buf.count(b"\n", start, blank.end()))
                start = blank.end()
                continue
            if nl + 1 - start > max_line:
                yield LongLine(nl + 1 - start)
            else:
                yield bytes(buf[start : nl + 1])
            start = nl + 1
        del buf[:start]
        scanned = len(buf)
        if len(buf) > max_line:  # no newline yet and already too long: drop what is held, skip to the next one
            skipping = len(buf)
            buf.clear()
            scanned = 0
    if skipping >= 0:
        yield LongLine(skipping)
    elif buf:
        yield bytes(buf)


def _zst_lines(path: str, max_line: int, budget: int = NO_LIMIT) -> Iterator[bytes | LongLine | BlankLines]:
    """Lines of a zstd file, frame after frame, read through ``stream_reader`` in bounded chunks. Why the frame
    walk first: ``stream_reader`` ends quietly at a truncated frame, so the records after the cut would vanish;
    the walk (block headers only) finds where a stream stops inside a frame, and that raises ``EOFError`` once the
    good part is read."""
    problem = zstd_problem(path)
    with decompressed(path, "jsonl.zst") as read:
        for line in bounded_lines(budgeted(read, budget), max_line):
            if problem is not None and isinstance(line, bytes) and not line.endswith(b"\n"):
                break  # the line the cut falls in: not a record of its own, the message below covers it
            yield line
    if problem is not None:
        raise EOFError(problem)


_ZSTD_MAGIC = 0xFD2FB528


def zstd_problem(path: str) -> str | None:
    """Why a zstd file cannot be read to its end (it stops inside a frame, or a byte starts no frame), or None.
    Only frame and block headers are read (RFC 8878, sections 3.1.1 and 3.1.1.2), memory-mapped, header to header.

    >>> import os, tempfile, zstandard
    >>> p = os.path.join(tempfile.mkdtemp(), "a.zst"); whole = zstandard.ZstdCompressor().compress(b"x" * 1000)
    >>> _ = open(p, "wb").write(whole + whole); zstd_problem(p) is None
    True
    >>> _ = open(p, "wb").write(whole[:-2]); zstd_problem(p)
    'the zstd stream ends inside a frame (the file is truncated at byte 17)'
    >>> _ = open(p, "wb").write(whole + b"junk!"); zstd_problem(p)
    'byte 19 starts no zstd frame (the data after it is not zstd)'
    """
    import mmap

    size = os.path.getsize(path)
    if size == 0:
        return None
    cut = f"the zstd stream ends inside a frame (the file is truncated at byte {size:,})"
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = 0
        while pos < size:
            if size - pos < 4:
                return cut
            magic = int.from_bytes(m[pos : pos + 4], "little")
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its length, then that many bytes
                if size - pos < 8:
                    return cut
                pos += 8 + int.from_bytes(m[pos + 4 : pos + 8], "little")
                if pos > size:
                    return cut
                continue
            if magic != _ZSTD_MAGIC:
                return f"byte {pos:,} starts no zstd frame (the data after it is not zstd)"
            end = _zstd_frame_end(m, pos + 4, size)
            if isinstance(end, str):
                return end
            if end is None:
                return cut
            pos = end
    return None


def _zstd_frame_end(m, pos: int, size: int) -> int | str | None:
    """The offset just past the frame whose header starts at ``pos`` (after the magic), None if it is cut, or
    why it is damaged."""
    if pos >= size:
        return None
    fhd = m[pos]
    fcs = (0, 2, 4, 8)[fhd >> 6] or (1 if fhd & 0x20 else 0)
    pos += 1 + (0 if fhd & 0x20 else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    while True:
        if pos + 3 > size:
            return None
        head = int.from_bytes(m[pos : pos + 3], "little")
        kind = (head >> 1) & 3
        if kind == 3:
            return f"byte {pos:,} holds a reserved zstd block type (the file is damaged)"
        pos += 3 + (1 if kind == 1 else head >> 3)
        if pos > size:
            return None
        if head & 1:  # the last block: then a 4-byte checksum if the header asked for one
            pos += 4 if fhd & 4 else 0
            return pos if pos <= size else None


class OverBudget(Exception):
    """A compressed file gave more decompressed bytes than its budget."""


def budgeted(read: Callable[[int], bytes], budget: int) -> Callable[[int], bytes]:
    """``read`` that raises ``OverBudget`` once more than ``budget`` bytes came out of it: counted as they come,
    so a bomb of one endless line stops there, not after decompressing all of it.

    >>> import io
    >>> r = budgeted(io.BytesIO(b"x" * 10).read, 6); r(4)
    b'xxxx'
    >>> try:
    ...     r(4)
    ... except OverBudget as e:
    ...     print("over", e)
    over 6
    """
    total = [0]

    def read_counted(n: int) -> bytes:
        part = read(n)
        total[0] += len(part)
        if total[0] > budget:
            raise OverBudget(budget)
        return part

    return read_counted


def _raw_lines(shard: Shard, max_line: int, budget: int = NO_LIMIT) -> Iterator[bytes | LongLine | BlankLines]:
    """The shard's lines (plain JSONL from ``start`` for ``stop - start`` bytes), each at most ``max_line``; a
    compressed file's decompressed bytes at most ``budget``."""
    if shard.kind == "jsonl.zst":
        yield from _zst_lines(shard.path, max_line, budget)
        return
    if shard.kind == "jsonl.gz":
        with decompressed(shard.path, shard.kind) as read:
            yield from bounded_lines(budgeted(read, budget), max_line)
        return
    with open(shard.path, "rb") as f:
        f.seek(shard.start)
        left = [shard.stop - shard.start]

        def read(n: int) -> bytes:
            part = f.read(min(n, left[0]))
            left[0] -= len(part)
            return part

        yield from bounded_lines(read, max_line)


@contextlib.contextmanager
def decompressed(path: str, kind: str) -> Iterator[Callable[[int], bytes]]:
    """``read(n)`` over the decompressed bytes of a gzip (``jsonl.gz``) or zstd (``jsonl.zst``, frame after frame)
    file: the one way both are opened, for counting and for reading lines."""
    with open(path, "rb") as f:
        if kind == "jsonl.zst":
            import zstandard

            yield zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read
        else:
            with gzip.GzipFile(fileobj=f, mode="rb") as g:
                yield g.read


def _decodes_over(shard: Shard, budget: int) -> bool:
    """Whether a gzip or zstd file gives more than ``budget`` decompressed bytes: counted in 1 MiB reads without
    looking at them (zstd and gzip give a few hundred MB a second), stopping at the budget. A damaged stream
    counts as not over: the reading that follows says where it breaks.

    >>> import gzip, os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "a.jsonl.gz"); _ = open(p, "wb").write(gzip.compress(b"{}\\n" * 99))
    >>> _decodes_over(Shard(path=p, kind="jsonl.gz", records=0), 200), _decodes_over(Shard(path=p,
    ...     kind="jsonl.gz", records=0), 300)
    (True, False)
    """
    try:
        with decompressed(shard.path, shard.kind) as read:
            return _read_over(read, budget)
    except _decompress_errors():
        return False


def _read_over(read: Callable[[int], bytes], budget: int) -> bool:
    total = 0
    while part := read(READ_BYTES):
        total += len(part)
        if total > budget:
            return True
    return False


def _decompress_errors() -> tuple:
    import zlib

    try:
        import zstandard

        return (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError)
    except ImportError:  # pragma: no cover - zstandard is pinned
        return (OSError, EOFError, ValueError, zlib.error)


def _jsonl_lines(shard: Shard, limits: Limits):
    """(record or None, where, problem or None, bytes) per non-blank line. A compressed file's decompressed
    bytes are counted against ``limits.file_limit``: past it, one bad row says so and the rest is not read."""
    name = shard.name
    line_no = shard.first_line - 1
    max_line = limits.record_limit()
    budget = limits.file_limit(os.path.getsize(shard.path), MAX_STREAM_EXPANSION) if shard.kind != "jsonl" else NO_LIMIT
    if shard.kind != "jsonl" and budget <= MIN_BOMB_BYTES and _decodes_over(shard, budget):
        # a small file at the floor: counted first, which takes a tenth of a second, rather than parsed and
        # tokenized record by record to the limit (a 7 kB zstd file of 4M short records took 25 s to refuse)
        yield (
            None,
            f"{name}, line 1",
            f"decompresses to over {budget / 2**20:,.0f} MB (over "
            f"{MAX_STREAM_EXPANSION:,} times the file's size, or the limit: a decompression bomb?); not read",
            0,
        )
        return
    lines = _raw_lines(shard, max_line, budget)
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except OverBudget:
            yield (
                None,
                f"{name}, line {line_no + 1}",
                f"decompresses to over {budget / 2**20:,.0f} MB (over "
                f"{MAX_STREAM_EXPANSION:,} times the file's size, or the limit: a decompression bomb?); the rest is "
                "not read",
                0,
            )
            return
        except _decompress_errors() as e:  # a truncated or corrupt gzip/zstd stream: the rest cannot be read
            yield None, f"{name}, line {line_no + 1}", f"cannot be decompressed from here on: {str(e)[:120]}", 0
            return
        if isinstance(line, BlankLines):
            line_no += line.count
            continue
        line_no += 1
        size = line.size if isinstance(line, LongLine) else len(line)
        where = f"{name}, line {line_no}"
        if isinstance(line, LongLine):
            yield (
                None,
                where,
                f"is {size / 2**20:,.1f} MB, over the {max_line / 2**20:,.0f} MB a record may have here",
                0,
            )
            continue
        if line_no == 1:
            line = line.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is not part of the first record
        if not line.strip():
            continue
        record, problem = parse_record(line)
        yield record, where, problem, size


def parse_record(line: bytes) -> tuple[dict | None, str | None]:
    """One JSON line as a record, or (None, why not): UTF-8, depth and size checked before ``json.loads`` builds
    anything, and every string through the one text decoder (``text.clean_record``) after.

    >>> parse_record(b'{"input": "a"}\\n'), parse_record(b'[1]')[1]
    (({'input': 'a'}, None), 'is a JSON list, not an object with fields')
    >>> parse_record(b'{"input": "\\\\udfff"}')[1]
    'holds a lone surrogate (\\\\udfff) in input: not UTF-8 text'
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"is not UTF-8 text (byte {e.start} of the line)"
    if json_too_deep(line, MAX_JSON_DEPTH):  # json.loads recurses once a level: refused before it starts
        return None, f"is nested more than {MAX_JSON_DEPTH} levels deep"
    if json_elements_over(line, MAX_ELEMENTS):
        return None, f"holds over {MAX_ELEMENTS:,} JSON values: far more than any chat or prompt"
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"is not valid JSON: {e.msg} (column {e.colno})"
    except (RecursionError, ValueError):
        return None, "is nested too deeply or holds an integer too long to read"
    if not isinstance(record, dict):
        return None, f"is a JSON {type(record).__name__}, not an object with fields"
    if SURROGATE_ESCAPE.search(line) is None:
        # json.loads makes no bytes, and the values were counted before parsing: nothing for the walk to do (it
        # was a twentieth of a chat record's tokenizing)
        return record, None
    return clean_record(record, check_strings=True)


# ------------------------------------------------------------------------------------------- columnar
def _parquet_rows(shard: Shard, limits: Limits):
    import pyarrow.parquet as pq

    def batches():
        pf = pq.ParquetFile(shard.path)
        # string columns read as dictionaries where the file stores them so: a batch then holds each long
        # string once, and its decoded size is counted (decoded_bytes) before to_pylist builds anything
        dictionary = sorted(
            {c.path for c in pf.schema if c.physical_type in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")}
            & set(shard.dictionary)
        )
        if dictionary:
            pf = pq.ParquetFile(shard.path, read_dictionary=dictionary)
        groups = list(range(shard.start, min(shard.stop, pf.num_row_groups)))
        return shard.first_line - 1, pf.iter_batches(row_groups=groups, batch_size=BATCH_ROWS)

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
    where reading stopped (pyarrow raises OSError, ArrowInvalid, ... for them), not a traceback. Each batch is
    cut into slices of at most the record limit (or single rows) by decoded size before any row is built; a row
    over the limit, or with a value that is not UTF-8 text, is a bad row of its own. All the shard's values,
    decoded, may take ``limits.file_limit`` of the bytes it stores: a footer that records no decoded sizes (older
    writers) hides a dictionary bomb until here, and past that budget one bad row ends the shard."""
    row, total = shard.first_line - 1, 0
    budget = shard.budget or limits.file_limit(os.path.getsize(shard.path))
    if limits.max_file_bytes is not None:
        budget = min(budget, limits.max_file_bytes)
    try:
        row, batches = open_batches()
        for rb in batches:
            for piece, size in fitting_slices(rb, limits.record_limit()):
                total += size
                if total > budget:
                    yield (
                        None,
                        f"{shard.name}, row {row + 1}",
                        f"decodes to over {budget / 2**20:,.0f} MB (over "
                        f"{MAX_EXPANSION:,} times the bytes it stores, or the limit: a decompression bomb?); the "
                        "rest is not read",
                        0,
                    )
                    yield from _unread(shard, row + 1)
                    return
                if piece.num_rows == 1 and size > limits.record_limit():
                    row += 1
                    yield (
                        None,
                        f"{shard.name}, row {row}",
                        f"decodes to {size / 2**20:,.1f} MB, over the "
                        f"{limits.record_limit() / 2**20:,.0f} MB a record may have here",
                        0,
                    )
                    continue
                for rec, problem in _slice_records(piece):
                    row += 1
                    yield rec, f"{shard.name}, row {row}", problem, size // max(1, piece.num_rows)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever pyarrow raises for a damaged file
        yield None, f"{shard.name}, row {row + 1}", f"cannot be read from here on: {str(e).splitlines()[0][:120]}", 0
        yield from _unread(shard, row + 1)


def _unread(shard: Shard, stopped: int):
    """A bad row for each row the footer promised after reading stopped at row ``stopped``: left out, and counted,
    so the shard still has as many records as planned (a ``--sample`` may have picked rows past the stop)."""
    first = shard.first_line - 1
    for row in range(stopped + 1, first + (shard.records or 0) + 1):
        yield None, f"{shard.name}, row {row}", f"was not read (reading stopped at row {stopped})", 0


def fitting_slices(rb, limit: int):
    """(slice, decoded bytes) covering ``rb`` in order, each at most ``limit`` bytes decoded or a single row: halves
    of halves, so a batch with one huge row costs a few ``decoded_bytes`` passes, not one per row.

    >>> import pyarrow as pa
    >>> rb = pa.record_batch({"t": ["a" * 10, "b", "c" * 30, "d"]})
    >>> [(s.num_rows, n) for s, n in fitting_slices(rb, 12)]
    [(2, 11), (1, 30), (1, 1)]
    """
    size = decoded_bytes(rb)
    if size <= limit or rb.num_rows <= 1:
        yield rb, size
        return
    half = rb.num_rows // 2
    yield from fitting_slices(rb.slice(0, half), limit)
    yield from fitting_slices(rb.slice(half), limit)


def _slice_records(piece):
    """(record or None, problem) per row: Arrow strings checked as UTF-8 (pyarrow does not check them on read),
    binary values decoded through the one text decoder."""
    try:
        piece.validate(full=True)
        rows = [(rec, None) for rec in piece.to_pylist()]
    except Exception:  # noqa: BLE001 - an invalid value somewhere: find the rows, one by one
        rows = []
        for i in range(piece.num_rows):
            one = piece.slice(i, 1)
            try:
                one.validate(full=True)
                rows.append((one.to_pylist()[0], None))
            except Exception as e:  # noqa: BLE001 - pyarrow's ArrowInvalid, or a decode error
                rows.append((None, f"holds a value that is not valid text: {str(e).splitlines()[0][:120]}"))
    binary = any(_has_binary(f.type) for f in piece.schema)
    for rec, problem in rows:
        if rec is None or not binary:
            yield rec, problem
        else:
            yield clean_record(rec, check_strings=False)


def _has_binary(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _has_binary(t.value_type)
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or getattr(pa.types, "is_binary_view", lambda _: False)(t)
    ):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_binary(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_binary(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _has_binary(t.key_type) or _has_binary(t.item_type)
    return False


BATCH_ROWS = 1024


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
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            return int(pc.sum(pc.binary_length(arr)).as_py() or 0)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return size(arr.flatten()) + 8 * len(arr)
        if pa.types.is_struct(t):
            return sum(size(arr.field(i)) for i in range(t.num_fields))
        return arr.nbytes

    return sum(size(col) for col in rb.columns)
