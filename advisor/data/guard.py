"""The one reading layer every length reader goes through: limits on files, bytes, text, JSON, .npy headers
and totals, each refusing with one ``InputError`` that says what and where.

Why a layer: every reader used to open, decode and parse on its own, so each had its own way to hang (a FIFO),
to leak (``/proc/self/environ`` through a mock config), to blow up (a ``.npy`` header claiming 10**13 items, a
2000-level JSON list) or to wrap silently (counts summing past 2**63 in numpy int64). Here each trap is checked
once, before the work it would spoil. Messages quote at most a short, escaped excerpt of the user's own input
(``excerpt``) and never the contents of any other file.
"""

from __future__ import annotations

import codecs
import errno
import io
import json
import math
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advisor.data.parquet_footer import FooterError, column_chunks
from advisor.errors import EXCERPT, InputError, excerpt  # noqa: F401 - readers import excerpt from here
from advisor.limits import MAX_JSON_DEPTH, json_too_deep

MAX_LENGTH = 2**24  # tokens in one sample: 16M, far above any context length trained today
MAX_COUNT = 2**40  # samples on one histogram row
MAX_TOTAL_TOKENS = 2**63  # sum of length x count must stay below: then every int64 sum downstream is exact
MAX_DEPTH = MAX_JSON_DEPTH  # JSON nesting: a lengths file needs 3 ([{"input_ids": [...]}])
MAX_COLUMNS = 10_000  # fields on a CSV's first line: pyarrow builds a column per field
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: a 100M-row CSV of lengths; larger inputs should be histograms
DECODED_PER_BYTE = 4  # Parquet may take this many bytes in memory per byte of file before it is refused
MAX_FOOTER = 8 << 20  # a Parquet footer (its metadata) of a lengths file is a few kB
SYSTEM_DIRS = ("/proc", "/sys")  # pseudo files: sizes lie (0 bytes), reads leak process state or block
_CHUNK = 1 << 22


# ---------------------------------------------------------------------------------------------- messages
def display_name(name) -> str:
    """A file name fit for a message: as given when short and printable, else an escaped excerpt.

    >>> display_name("lengths.csv"), display_name("a\\nb.csv")
    ('lengths.csv', "'a\\\\nb.csv'")
    """
    text = str(name)
    return text if len(text) <= 300 and text.isprintable() else excerpt(text, 120)


def names_excerpt(names, limit: int = 8) -> str:
    """Column or key names for a message: the first few, each escaped and short.

    >>> names_excerpt(["a", "b"]), names_excerpt([str(i) for i in range(20)])[-12:]
    ('a, b', ' (20 in all)')
    """
    names = list(names)
    shown = [n if isinstance(n, str) and len(n) <= EXCERPT and n.isprintable() else excerpt(n) for n in names[:limit]]
    return ", ".join(shown) + (f", … ({len(names):,} in all)" if len(names) > limit else "")


def _mib(n: int) -> str:
    """A size in words: bytes below 1 MiB, else MiB (whole when whole).

    >>> _mib(100), _mib(2**30), _mib(3 * 2**19)
    ('100 bytes', '1,024 MiB', '1.5 MiB')
    """
    if n < 2**20:
        return f"{n:,} bytes"
    return f"{n / 2**20:,.0f} MiB" if n % 2**20 == 0 else f"{n / 2**20:,.1f} MiB"


# ---------------------------------------------------------------------------------------------- files
_KINDS = (
    (stat.S_ISDIR, "a folder", "sub-folders"),
    (stat.S_ISFIFO, "a FIFO (named pipe)", "FIFOs"),
    (stat.S_ISCHR, "a character device", "devices"),
    (stat.S_ISBLK, "a block device", "devices"),
    (stat.S_ISSOCK, "a socket", "sockets"),
)


def file_kind(mode: int, plural: bool = False) -> str:
    """What a non-regular file is, in words.

    >>> file_kind(stat.S_IFIFO | 0o644), file_kind(stat.S_IFDIR, plural=True)
    ('a FIFO (named pipe)', 'sub-folders')
    """
    return next(
        (many if plural else one for test, one, many in _KINDS if test(mode)),
        "special files" if plural else "not a regular file",
    )


def stat_path(path, source) -> os.stat_result:
    """``os.stat`` (following symlinks) with every failure as an ``InputError``: missing, dangling, looping."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise InputError(source, None, "is a symbolic link to a file that does not exist") from None
        raise InputError(source, None, "file not found") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(source, None, "is a symbolic link loop (it points back at itself)") from None
        raise InputError(source, None, f"cannot be read: {e.strerror or type(e).__name__}") from None
    except ValueError:  # an embedded NUL or an unencodable character in the path itself
        raise InputError(source, None, "is not a valid file name") from None


def is_system_path(path) -> bool:
    """True for paths that resolve into /proc or /sys, whatever symlinks lead there.

    >>> is_system_path("/proc/self/mem"), is_system_path("/tmp/x.csv")
    (True, False)
    """
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return any(real == d or real.startswith(d + os.sep) for d in SYSTEM_DIRS)


def check_file(path, source, max_bytes: int) -> os.stat_result:
    """Refuse anything but a regular, readable-sized file, before opening it (a FIFO would block the open)."""
    st = stat_path(path, source)
    if is_system_path(path):
        raise InputError(source, None, "is a system file (under /proc or /sys), not a data file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(source, None, f"is {file_kind(st.st_mode)}, not a regular file")
    check_size(st.st_size, source, max_bytes)
    return st


def check_size(size: int, source, max_bytes: int) -> None:
    if size > max_bytes:
        raise InputError(
            source,
            None,
            f"is {_mib(size)}, over the {_mib(max_bytes)} limit (save a length,count "
            "histogram instead, or raise the limit)",
        )


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def read_file(path, source, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, checked before and after opening.

    The file is opened non-blocking (a path swapped for a FIFO after the check cannot hang the open), its type
    and size are checked again on the open descriptor, and at most size + 1 bytes are read: a file that grows
    or lies about its size (pseudo files report 0) is refused rather than read without bound.
    """
    check_file(path, source, max_bytes)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        raise InputError(source, None, f"cannot be opened: {e.strerror or type(e).__name__}") from None
    with io.FileIO(fd, "rb", closefd=True) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(source, None, f"is {file_kind(st.st_mode)}, not a regular file")
        check_size(st.st_size, source, max_bytes)
        try:
            data = _read_at_most(fh, st.st_size + 1)
        except OSError as e:
            raise InputError(source, None, f"cannot be read: {e.strerror or type(e).__name__}") from None
    if len(data) != st.st_size:
        raise InputError(source, None, "changed size while being read (or is not an ordinary file)")
    return data


def _read_at_most(fh: io.FileIO, limit: int) -> bytes:
    parts, left = [], limit
    while left > 0:
        part = fh.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


@dataclass(frozen=True)
class FolderScan:
    """Regular files found in a folder, and the entries skipped (reason -> count), never silently."""

    files: list[Path]
    skipped: dict[str, int]

    def note(self) -> str | None:
        if not self.skipped:
            return None
        parts = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.skipped.items()))
        return f"{sum(self.skipped.values())} entries skipped ({parts})"


def scan_folder(folder: Path, suffixes: tuple[str, ...]) -> FolderScan:
    """Entries of ``folder`` ending in one of ``suffixes`` that are regular files; a symlink is followed only when
    it resolves to a file inside ``folder``.

    Sub-folders, dangling symlinks, symlink loops, symlinks leading out of the folder, FIFOs, devices and
    unreadable entries are skipped and counted: a shard folder can hold stray things, and one must neither hang
    the read (a FIFO), end it in a traceback (a loop) nor read what the folder does not hold (a link to
    ``/etc/...`` or to a server's other files).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "a.csv").write_text("5")
    >>> os.symlink("/etc/hostname", d / "out.csv"); os.symlink(d / "b.csv", d / "b.csv")
    >>> scan = scan_folder(d, (".csv",)); [p.name for p in scan.files], scan.note()
    (['a.csv'], '2 entries skipped (symlink loops: 1, symlinks leading out of the folder: 1)')
    """
    files: list[Path] = []
    skipped: dict[str, int] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        home = os.path.realpath(folder)
    except OSError as e:
        raise InputError(display_name(folder), None, f"cannot be listed: {e.strerror or type(e).__name__}") from None
    for entry in entries:
        if not entry.name.lower().endswith(suffixes):
            continue
        reason = _entry_problem(entry, home)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            files.append(Path(entry.path))
    return FolderScan(files, skipped)


def _entry_problem(entry: os.DirEntry, home: str) -> str | None:
    """Why a folder entry is not read (plural, for the count), or None for a regular file of the folder."""
    try:
        st = os.stat(entry.path)
        if entry.is_symlink():
            real = os.path.realpath(entry.path)
            if real != home and not real.startswith(home + os.sep):
                return "links into /proc or /sys" if is_system_path(real) else "symlinks leading out of the folder"
        if is_system_path(entry.path):
            return "links into /proc or /sys"
        if not stat.S_ISREG(st.st_mode):
            return file_kind(st.st_mode, plural=True)
    except FileNotFoundError:
        return "dangling symlinks"
    except OSError as e:
        return "symlink loops" if e.errno == errno.ELOOP else "unreadable entries"
    except ValueError:  # a name the system cannot take back (an embedded NUL cannot come from scandir, but...)
        return "unreadable entries"
    return None


# ---------------------------------------------------------------------------------------------- text
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def text_bytes(data: bytes, source) -> bytes:
    """``data`` as UTF-8 bytes (a UTF-8 BOM kept; UTF-16 with a BOM, as Excel saves "Unicode text", re-encoded),
    or an ``InputError`` naming the byte offset of the first byte that is not text.

    >>> text_bytes(b"5\\n7\\n", "l.csv")
    b'5\\n7\\n'
    >>> try:
    ...     text_bytes(b"5\\n\\xff\\n", "l.csv")
    ... except InputError as e:
    ...     print(e.where, "|", e.what[:42])
    line 2 | is not UTF-8 text: byte 0xff at offset 2 c
    """
    if data.startswith(_UTF16_BOMS) and not data.startswith(codecs.BOM_UTF32_LE):
        try:
            data = data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(
                source, None, f"is not UTF-16 text: bytes at offset {e.start:,} cannot be decoded"
            ) from None
    elif not data.isascii():
        _check_utf8(data, source)
    nul = data.find(b"\x00")
    if nul >= 0:  # valid UTF-8, but no lengths file holds a NUL: this is binary data under a text name
        raise InputError(
            source, f"line {line_of_offset(data, nul)}", f"holds a NUL byte at offset {nul:,}: binary data, not text"
        )
    return data


def _check_utf8(data: bytes, source) -> None:
    """Decode in chunks and throw the text away: validation without a second copy of a 1 GiB file."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK):
        pending = len(decoder.getstate()[0])
        chunk = view[start : start + _CHUNK]
        try:
            decoder.decode(chunk, final=start + _CHUNK >= len(data))
        except UnicodeDecodeError as e:
            offset = start - pending + e.start
            byte = data[offset : offset + 1].hex() or "end"
            raise InputError(
                source,
                f"line {line_of_offset(data, offset)}",
                f"is not UTF-8 text: byte 0x{byte} at offset {offset:,} cannot be decoded (save the file as UTF-8)",
            ) from None


def line_of_offset(data: bytes, offset: int) -> int:
    """1-based line holding byte ``offset``; lines end at \\n, \\r\\n or \\r.

    >>> line_of_offset(b"a\\r\\nb\\rc\\nd", 7)
    4
    """
    return 1 + data.count(b"\n", 0, offset) + data.count(b"\r", 0, offset) - data.count(b"\r\n", 0, offset)


_LINE = re.compile(rb"[^\r\n]+")


def iter_lines(data: bytes):
    """(line number, line) for every non-empty line; lines end at \\n, \\r\\n or \\r (as ``bytes.splitlines``).

    A generator: a 1 GiB JSONL file is not split into a list of a hundred million lines first.

    >>> list(iter_lines(b"a\\r\\n\\nb\\rc"))
    [(1, b'a'), (3, b'b'), (4, b'c')]
    """
    line, pos = 1, 0
    for m in _LINE.finditer(data):
        gap = data[pos : m.start()]  # only line ends, so a \\r\\n cannot straddle it
        line += gap.count(b"\n") + gap.count(b"\r") - gap.count(b"\r\n")
        yield line, m.group()
        pos = m.end()


def first_nonblank_line(data: bytes) -> bytes:
    """The first line holding more than white space, found without splitting the whole file.

    >>> first_nonblank_line(b"\\n  \\r\\nlength,count\\r\\n5,1")
    b'length,count'
    """
    m = re.search(rb"[^\s]", data)
    if m is None:
        return b""
    start = max(data.rfind(b"\n", 0, m.start()), data.rfind(b"\r", 0, m.start())) + 1
    ends = [i for i in (data.find(b"\n", m.start()), data.find(b"\r", m.start())) if i >= 0]
    return data[start : min(ends) if ends else len(data)]


def nth_nonempty_line(data: bytes, n: int) -> int | None:
    """The 1-based file line of the n-th non-empty line (pyarrow's row numbers count only those), or None.

    Scans in chunks with numpy: finding the line of one bad row near the end of a 1 GiB file costs a few MiB,
    not an array of every line's number.

    >>> nth_nonempty_line(b"a\\r\\rb\\n\\nc", 3), nth_nonempty_line(b"a\\r\\n\\r\\nb", 2), nth_nonempty_line(b"a", 2)
    (5, 3, None)
    """
    lines_done, found, pending = 0, 0, False  # pending: the unfinished line so far holds content
    size = len(data)
    for start in range(0, size, _CHUNK):
        a = np.frombuffer(data, np.uint8, min(_CHUNK, size - start), start)
        nl, cr = a == 10, a == 13
        cr_then_nl = np.zeros_like(cr)
        cr_then_nl[:-1] = cr[:-1] & nl[1:]
        if start + a.size < size and a[-1] == 13 and data[start + a.size] == 10:
            cr_then_nl[-1] = True
        ends = np.flatnonzero(nl | (cr & ~cr_then_nl))  # a \r\n ends its line once, at the \n
        content = np.cumsum(~(nl | cr), dtype=np.int32)
        at_end = content[ends]
        nonempty = np.diff(at_end, prepend=0) > 0
        if ends.size:
            nonempty[0] |= pending
            total = found + np.cumsum(nonempty)
            if total[-1] >= n:
                return lines_done + int(np.searchsorted(total, n)) + 1
            found, lines_done = int(total[-1]), lines_done + int(ends.size)
            pending = bool(content[-1] > at_end[-1])
        else:
            pending = pending or bool(content[-1] > 0)
    if pending and found + 1 == n:
        return lines_done + 1
    return None


# ---------------------------------------------------------------------------------------------- JSON
_LONG_INT = re.compile(rb"\d{4000,}")


def loads_json(data: bytes, source, where: str | None = None, *, max_depth: int = MAX_DEPTH):
    """``json.loads`` for text already checked by ``text_bytes``, with its traps closed: nesting deeper than
    ``max_depth`` is refused before the parser recurses, and an integer too long for Python's int parser is an
    ``InputError`` with its line, not a ``ValueError`` about ``sys.set_int_max_str_digits``.

    >>> loads_json(b'{"mode": "file"}', "c.json")
    {'mode': 'file'}
    >>> loads_json(b"[" * 2000 + b"]" * 2000, "deep.json")
    Traceback (most recent call last):
    advisor.errors.InputError: deep.json: is nested more than 64 levels deep (a lengths file needs 3)
    """
    if json_too_deep(data, max_depth):
        raise InputError(source, where, f"is nested more than {max_depth} levels deep (a lengths file needs 3)")
    try:
        return json.loads(data.decode("utf-8-sig"))
    except json.JSONDecodeError as e:
        raise InputError(source, where or f"line {e.lineno}", f"is not valid JSON: {e.msg}") from None
    except RecursionError:  # not reached after the depth scan; kept so no input can end in a traceback
        raise InputError(source, where, "is nested too deeply to read") from None
    except ValueError:  # Python refuses to parse an integer literal of more than 4300 digits
        m = _LONG_INT.search(data)
        at = where or (f"line {line_of_offset(data, m.start())}" if m else None)
        raise InputError(source, at, "holds an integer of thousands of digits, beyond any length or count") from None


# ---------------------------------------------------------------------------------------------- .npy
@dataclass(frozen=True)
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    offset: int  # where the data starts

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def npy_header(data: bytes, source) -> NpyHeader:
    """Parse and check a ``.npy`` header (numpy's own parser: ``ast.literal_eval`` of at most 10,000 characters).

    The header's shape is a claim: for a plain array, shape x itemsize must equal the bytes that follow, checked
    here in Python ints before anything is allocated (a 100-byte file may claim 10**13 items).
    """
    from numpy.lib import format as npf

    fp = io.BytesIO(data)
    try:
        version = npf.read_magic(fp)
        read = {(1, 0): npf.read_array_header_1_0, (2, 0): npf.read_array_header_2_0}.get(version)
        if read is None:
            raise InputError(
                source, None, f"is .npy format version {version}, which is not read here (save with numpy.save)"
            )
        with warnings.catch_warnings():  # a Python-2-era or odd header warns while parsed: the verdict is enough
            warnings.simplefilter("ignore")
            shape, fortran_order, dtype = read(fp)
    except InputError:
        raise
    except Exception as e:  # numpy's header parser (ast, then tokenize for old headers) raises many types
        raise InputError(source, None, f"is not a readable .npy file: {_first_line(e)[:120]}") from None
    header = NpyHeader(dtype=dtype, shape=tuple(shape), fortran_order=fortran_order, offset=fp.tell())
    if any(n < 0 for n in header.shape):
        raise InputError(source, "header", f"has a negative dimension in shape {excerpt(header.shape)}")
    if not dtype.hasobject:
        body = len(data) - header.offset
        need = header.count * dtype.itemsize
        if need != body:
            raise InputError(
                source,
                "header",
                f"claims shape {excerpt(header.shape, 60)} of {dtype} ({need:,} "
                f"bytes) but {body:,} bytes follow the header",
            )
    return header


def npy_array(data: bytes, header: NpyHeader) -> np.ndarray:
    """The array a checked header describes, as a read-only view of ``data`` (no copy, never a pickle)."""
    flat = np.frombuffer(data, dtype=header.dtype, count=header.count, offset=header.offset)
    return flat.reshape(header.shape, order="F" if header.fortran_order else "C")


# ---------------------------------------------------------------------------------------------- totals
def check_totals(lengths: np.ndarray, counts: np.ndarray, source, *, max_total: int = MAX_TOTAL_TOKENS) -> None:
    """Refuse when samples x length sum to ``max_total`` (2**63) or more, before int64 sums could wrap.

    A float estimate answers nearly always; an exact Python-int sum is done only near the limit.

    >>> check_totals(np.array([2**24]), np.array([2**38]), "h.csv")  # 2**62 tokens: fine
    >>> check_totals(np.array([2**23, 2**24]), np.array([2**40, 2**40]), "h.csv")
    Traceback (most recent call last):
    advisor.errors.InputError: h.csv: holds 27,670,116,110,564,327,424 tokens (length x count summed), ...
    """
    lengths = np.asarray(lengths)
    counts = np.asarray(counts)
    approx = float(np.dot(lengths.astype(np.float64), counts.astype(np.float64)))
    if approx < max_total / 4:
        return
    exact = sum(int(n) * int(c) for n, c in zip(lengths.tolist(), counts.tolist(), strict=True))
    if exact >= max_total:
        raise InputError(
            source,
            None,
            f"holds {exact:,} tokens (length x count summed), beyond {max_total - 1:,}: the counts cannot be right",
        )


# ---------------------------------------------------------------------------------------------- Parquet
_PARQUET_ERRORS = (
    pa.ArrowException,
    OSError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    NotImplementedError,
    EOFError,
)


def open_parquet(data: bytes, source, where: str | None = None) -> pq.ParquetFile:
    """Open Parquet bytes, reading only the footer: nothing is decoded yet.

    The footer is first read by ``parquet_footer`` (pure Python, bounded), so a corrupt one is refused before
    pyarrow's metadata objects, which can abort the process on some corruptions, see it. The schema and the
    footer's figures are then touched here, so any other trouble is an ``InputError`` here too.
    """
    if len(data) >= 8 and int.from_bytes(data[-8:-4], "little") > MAX_FOOTER:
        raise InputError(source, where, f"has a Parquet footer of over {_mib(MAX_FOOTER)}: not a lengths file")
    try:
        column_chunks(data)
        pf = pq.ParquetFile(pa.BufferReader(data))
        _ = pf.schema_arrow.names, pf.metadata.num_rows, pf.metadata.num_row_groups
        return pf
    except FooterError as e:
        raise InputError(source, where, f"is not a readable Parquet file: {e}") from None
    except _PARQUET_ERRORS as e:
        raise InputError(source, where, f"is not a readable Parquet file: {_first_line(e)}") from None


def decoded_bytes(data: bytes, columns: list[str]) -> int:
    """An upper estimate of the memory ``columns`` take once decoded, from the footer alone.

    Why: Parquet compresses, and run-length encoding turns a few bytes into a billion ones; the footer says
    how many values each column chunk holds, so a decompression bomb is refused before it is inflated.

    >>> import io
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"length": [1] * 1000, "x": [0] * 1000}), buf)
    >>> decoded_bytes(buf.getvalue(), ["length"])
    16000
    """
    rows, chunks = column_chunks(data)
    wanted = set(columns)
    total = 8 * rows * max(1, len(columns))
    return total + sum(max(8 * c.num_values, c.uncompressed) for c in chunks if c.column in wanted)


def read_parquet_columns(
    pf: pq.ParquetFile, data: bytes, columns: list[str], source, budget: int | None, where: str | None = None
) -> pa.Table:
    """Read only ``columns``, refusing first if they would decode to more than ``budget`` bytes."""
    if budget is not None:
        try:
            need = decoded_bytes(data, columns)
        except FooterError as e:
            raise InputError(source, where, f"is not a readable Parquet file: {e}") from None
        if need > budget:
            raise InputError(
                source, where, f"would take about {_mib(need)} once decompressed, over the {_mib(budget)} limit"
            )
    try:
        table = pf.read(columns=columns)
    except _PARQUET_ERRORS as e:
        raise InputError(source, where, f"is not a readable Parquet file: {_first_line(e)}") from None
    try:  # pyarrow does not check text columns on read: a string that is not UTF-8 fails later, anywhere
        table.validate(full=True)
    except _PARQUET_ERRORS as e:
        raise InputError(source, where, f"holds invalid data: {_first_line(e)}") from None
    return table


def _first_line(e: BaseException) -> str:
    return str(e).split("\n")[0][:160]
