"""The packed Parquet file, byte for byte as Megatron-Bridge 0.6.2's ``write_packed_parquet`` writes it.

Followed: megatron/bridge/data/packing/parquet.py ``write_packed_parquet``: ``pa.table`` of ``input_ids`` (Python
ints, so Arrow infers ``list<int64>``; the reader's docstring says int32, the writer does not), ``loss_mask``
(``list<int8>``), ``seq_start_id`` (``list<int64>``), written by ``pq.write_table(..., row_group_size=500)``. That
call is a ``ParquetWriter`` writing the table 500 rows at a time, so writing each row group as it is built (the
alternative, Bridge's one table of every pack, holds the data set in memory) gives the same bytes.
``GPTSFTPackedParquetDataset`` reads the three columns by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advisor.prepare.rows import Rows

ROW_GROUP = 500  # write_packed_parquet's row_group_size
SCHEMA = pa.schema(
    [("input_ids", pa.list_(pa.int64())), ("loss_mask", pa.list_(pa.int8())), ("seq_start_id", pa.list_(pa.int64()))]
)


def table_of(rows: Rows) -> pa.Table:
    """The rows as Bridge's table: three list columns.

    >>> import numpy as np
    >>> r = Rows(ids=np.array([7, 8, 5], np.int64), mask=np.array([1, 0, 1], np.int8),
    ...          offsets=np.array([0, 2, 3], np.int32), seq_start=np.array([0, 0], np.int64),
    ...          start_offsets=np.array([0, 1, 2], np.int32))
    >>> table_of(r).to_pylist()[0]
    {'input_ids': [7, 8], 'loss_mask': [1, 0], 'seq_start_id': [0]}
    """
    offsets, starts = _arrow(rows.offsets, np.int32), _arrow(rows.start_offsets, np.int32)
    return pa.Table.from_arrays(
        [
            pa.ListArray.from_arrays(offsets, _arrow(rows.ids, np.int64)),
            pa.ListArray.from_arrays(offsets, _arrow(rows.mask, np.int8)),
            pa.ListArray.from_arrays(starts, _arrow(rows.seq_start, np.int64)),
        ],
        schema=SCHEMA,
    )


def _arrow(values: np.ndarray, dtype: type) -> pa.Array:
    """``pa.array(values, type)`` over the array's own buffer. Why not ``pa.array``: handed a NumPy array the first
    time, pyarrow imports pandas to ask whether it is a pandas object, 0.2-0.45 s of a re-pack that writes for 0.3 s.

    >>> _arrow(np.array([3, 4], np.int8), np.int8).to_pylist()
    [3, 4]
    """
    if values.dtype != dtype and not np.can_cast(values.dtype, dtype, casting="safe"):  # as pa.array refuses
        raise TypeError(f"{values.dtype} values cannot be written as {np.dtype(dtype)} without loss")
    values = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.size, [None, pa.py_buffer(values)])


def write_rows(path: str, groups: Iterable[Rows]) -> int:
    """Write the row groups (each at most ROW_GROUP rows) into a new Parquet file at ``path``; returns the rows.
    ``path`` is in a staging folder the caller made: nothing else can be there. The next group is built in a
    thread while Arrow encodes this one (both release the GIL)."""
    rows = 0
    it = iter(groups)
    with pq.ParquetWriter(path, SCHEMA) as writer, ThreadPoolExecutor(1) as builder:
        pending = builder.submit(next, it, None)
        while (group := pending.result()) is not None:
            pending = builder.submit(next, it, None)
            table = table_of(group)
            writer.write_table(table, row_group_size=ROW_GROUP)
            rows += table.num_rows
    return rows
