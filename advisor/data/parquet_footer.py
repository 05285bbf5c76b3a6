"""How many values each column chunk of a Parquet file holds, read from its footer in pure Python.

Why not pyarrow's own metadata objects: with a corrupt footer, ``RowGroupMetaData.column(i)`` (pyarrow 26)
throws a C++ exception where none may pass, and the process aborts (``terminate called after throwing an
instance of 'parquet::ParquetException'``), which no ``except`` can catch. Reading the table raises a clean
``OSError`` for the same file; only the metadata accessor aborts. So the figures the decompression-bomb check
needs are read here instead: a bounded reader of Thrift's compact protocol that can only return or raise
``FooterError``.

Followed: parquet-format's parquet.thrift (FileMetaData, RowGroup, ColumnChunk, ColumnMetaData) and Thrift's
compact protocol specification.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_NESTING = 32  # a Parquet footer nests 5 deep (FileMetaData > RowGroup > ColumnChunk > ColumnMetaData > list)


class FooterError(ValueError):
    """The footer is not well-formed Thrift, or not a Parquet footer."""


@dataclass(frozen=True)
class ColumnChunk:
    column: str  # the top-level column this chunk belongs to (first part of path_in_schema)
    num_values: int  # values stored, list elements included
    uncompressed: int  # bytes once decompressed (still encoded)
    leaf: str = ""  # the whole path_in_schema, dotted ("messages.list.element.content"): pyarrow's name for it
    compressed: int = 0  # bytes in the file
    dictionary: bool = False  # has a dictionary page: its values may stand for far more bytes than the chunk holds
    unencoded: int | None = None  # string/binary bytes once decoded, when the writer recorded it (SizeStatistics)


@dataclass(frozen=True)
class RowGroup:
    num_rows: int
    chunks: tuple[ColumnChunk, ...]

    @property
    def compressed(self) -> int:
        return sum(c.compressed for c in self.chunks)

    def decoded_estimate(self) -> int:
        """Bytes its values take once decoded, from the footer: each chunk's uncompressed size, 8 bytes a value
        (a list of a billion small ints is a few bytes of run-length encoding), or the strings' decoded bytes where
        the writer recorded them (a dictionary of one long string repeated a million times)."""
        return 8 * self.num_rows + sum(max(8 * c.num_values, c.uncompressed, c.unencoded or 0) for c in self.chunks)


class _Compact:
    """A reader of Thrift compact protocol values, each length checked against the bytes left."""

    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise FooterError("the footer ends in the middle of a value")
        self.pos += 1
        return self.buf[self.pos - 1]

    def varint(self) -> int:
        out = 0
        for shift in range(0, 70, 7):
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
        raise FooterError("a varint runs past 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or n > len(self.buf) - self.pos:
            raise FooterError(f"a value claims {n:,} bytes, more than the footer has left")
        self.pos += n
        return self.buf[self.pos - n : self.pos]

    def count(self, n: int) -> int:
        """An element count, bounded: every element takes at least one byte."""
        if n > len(self.buf) - self.pos:
            raise FooterError(f"a list claims {n:,} elements, more than the footer has bytes left")
        return n

    def value(self, kind: int, depth: int):
        if depth > MAX_NESTING:
            raise FooterError("the footer nests too deeply")
        if kind in (1, 2):  # a bool as a list element: one byte (as a struct field it is in the header)
            return self.byte() == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            return struct.unpack("<d", self.take(8))[0]
        if kind == 8:
            return self.take(self.varint())
        if kind in (9, 10):
            return self.list(depth)
        if kind == 11:
            return self.map(depth)
        if kind == 12:
            return self.struct(depth)
        raise FooterError(f"unknown Thrift type {kind}")

    def list(self, depth: int) -> list:
        head = self.byte()
        size, kind = head >> 4, head & 0x0F
        if size == 15:
            size = self.varint()
        return [self.value(kind, depth + 1) for _ in range(self.count(size))]

    def map(self, depth: int) -> dict:
        size = self.count(self.varint())
        if size == 0:
            return {}
        kinds = self.byte()
        out = {}
        for _ in range(size):
            key = self.value(kinds >> 4, depth + 1)
            out[key if isinstance(key, (int, bytes, float, bool)) else repr(key)] = self.value(kinds & 0x0F, depth + 1)
        return out

    def struct(self, depth: int) -> dict[int, object]:
        fields: dict = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            fields[last] = (kind == 1) if kind in (1, 2) else self.value(kind, depth + 1)


def read_footer(data: bytes) -> dict[int, object]:
    """The FileMetaData struct (Thrift field id -> value) of a whole Parquet file.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"length": [5, 6, 7]}), buf)
    >>> read_footer(buf.getvalue())[3]  # num_rows
    3
    """
    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise FooterError("no PAR1 magic at both ends (encrypted footers are not read)")
    size = int.from_bytes(data[-8:-4], "little")
    if size > len(data) - 12:
        raise FooterError(f"the footer claims {size:,} bytes, more than the file has")
    return _Compact(data[-8 - size : -8]).struct(0)


def count_row_groups(data: bytes) -> int:
    """How many row groups a Parquet file's footer lists, read without parsing them (the list's header only): a
    footer of 50,000 row groups takes seconds to read in Python, its count microseconds.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"n": list(range(10))}), buf, row_group_size=3)
    >>> count_row_groups(buf.getvalue())
    4
    """
    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise FooterError("no PAR1 magic at both ends (encrypted footers are not read)")
    size = int.from_bytes(data[-8:-4], "little")
    if size > len(data) - 12:
        raise FooterError(f"the footer claims {size:,} bytes, more than the file has")
    r = _Compact(data[-8 - size : -8])
    last = 0
    while True:
        head = r.byte()
        if head == 0:
            return 0
        kind, delta = head & 0x0F, head >> 4
        last = last + delta if delta else r.zigzag()
        if last == 4 and kind == 9:
            head = r.byte()
            return r.varint() if head >> 4 == 15 else head >> 4
        if kind not in (1, 2):
            r.value(kind, 1)


def column_chunks(data: bytes) -> tuple[int, list[ColumnChunk]]:
    """(rows, every column chunk's column, value count and uncompressed size), from the footer alone.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"ids": [[1, 2], [3]], "n": [1, 2]}), buf)
    >>> rows, chunks = column_chunks(buf.getvalue())
    >>> rows, [(c.column, c.num_values) for c in chunks]
    (2, [('ids', 3), ('n', 2)])
    """
    rows, groups = row_groups(read_footer(data))
    return rows, [c for g in groups for c in g.chunks]


def row_groups(meta: dict[int, object]) -> tuple[int, list[RowGroup]]:
    """(rows, each row group's rows and column chunks) of a footer ``read_footer`` returned.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"t": ["ab"] * 5}), buf, row_group_size=2)
    >>> rows, groups = row_groups(read_footer(buf.getvalue()))
    >>> rows, [g.num_rows for g in groups], groups[0].chunks[0].leaf, groups[0].chunks[0].dictionary
    (5, [2, 2, 1], 't', True)
    """
    rows = _int(meta.get(3, 0), "num_rows")
    groups = []
    for group in _list(meta.get(4, []), "row_groups"):
        group = _struct(group, "row group")
        chunks = []
        for chunk in _list(group.get(1, []), "columns"):
            info = _struct(_struct(chunk, "column chunk").get(3, {}), "column metadata")
            path = [
                p.decode("utf-8", "replace") if isinstance(p, bytes) else ""
                for p in _list(info.get(3, []), "path_in_schema")
            ]
            sizes = info.get(16)  # SizeStatistics (parquet-format 2.10): unencoded_byte_array_data_bytes
            unencoded = sizes.get(1) if isinstance(sizes, dict) else None
            chunks.append(
                ColumnChunk(
                    path[0] if path else "",
                    _int(info.get(5, 0), "num_values"),
                    _int(info.get(6, 0), "total_uncompressed_size"),
                    leaf=".".join(path),
                    compressed=_int(info.get(7, 0), "total_compressed_size"),
                    dictionary=info.get(11) is not None,
                    unencoded=_int(unencoded, "unencoded bytes") if unencoded is not None else None,
                )
            )
        groups.append(RowGroup(_int(group.get(3, 0), "num_rows"), tuple(chunks)))
    return rows, groups


def read_footer_of(path: str, max_footer: int) -> dict[int, object]:
    """``read_footer`` of a file on disk, reading only its tail (a footer of over ``max_footer`` bytes is refused).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> p = os.path.join(tempfile.mkdtemp(), "x.parquet"); pq.write_table(pa.table({"n": [1, 2]}), p)
    >>> read_footer_of(p, 1 << 20)[3]
    2
    """
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size < 12:
            raise FooterError("too short to be a Parquet file")
        f.seek(0)
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if head != b"PAR1" or tail[4:] != b"PAR1":
            raise FooterError("no PAR1 magic at both ends (encrypted footers are not read)")
        if length > max_footer:
            raise FooterError(f"the footer is {length:,} bytes, over the {max_footer:,} read here")
        if length > size - 12:
            raise FooterError(f"the footer claims {length:,} bytes, more than the file has")
        f.seek(size - 8 - length)
        return _Compact(f.read(length)).struct(0)


def _int(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FooterError(f"{what} is not a count: {value!r}"[:120])
    return value


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise FooterError(f"{what} is not a list")
    return value


def _struct(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise FooterError(f"a {what} is not a struct")
    return value
