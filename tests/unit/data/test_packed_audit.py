"""Reading a packed data set Megatron-Bridge already wrote (advisor/data/packed_audit.py): packed Parquet shards and
the legacy pickled ``.npy``, written here with pyarrow and numpy as Megatron-Bridge writes them. The lengths read
back are the ones written; the pickle is never run; a damaged file is one ``InputError`` naming the pack."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.data.ingest import load_lengths, parse_lengths
from advisor.data.packed_audit import read_packed_npy, read_packed_parquet
from advisor.errors import InputError

# packs of 1 to 6 sequences, each 1 to 300 stored tokens (what a packing of short samples writes)
PACKS = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=6), min_size=1, max_size=12)


def rows_of(packs: list[list[int]]) -> list[dict]:
    """Megatron-Bridge's packed rows: the sequences' tokens back to back, and where each one starts."""
    rows = []
    for pack in packs:
        starts = np.concatenate([[0], np.cumsum(pack)[:-1]]).tolist()
        ids = [int(t) for n in pack for t in range(1, n + 1)]
        rows.append({"input_ids": ids, "loss_mask": [1] * len(ids), "seq_start_id": starts})
    return rows


def parquet_bytes(rows: list[dict], width: pa.DataType | None = None) -> bytes:
    width = width or pa.int32()  # Megatron-Bridge writes list<int32>
    table = pa.table(
        {k: pa.array([r[k] for r in rows], pa.list_(width)) for k in ("input_ids", "loss_mask", "seq_start_id")}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def npy_bytes(rows: list) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array(rows, dtype=object), allow_pickle=True)
    return buf.getvalue()


def assert_read_back(hist, packs: list[list[int]]) -> None:
    written = Counter(n for pack in packs for n in pack)
    assert dict(zip(hist.lengths.tolist(), hist.counts.tolist(), strict=True)) == written
    audit = hist.packs
    assert audit.num_packs == len(packs)
    assert audit.pack_tokens.tolist() == [sum(p) for p in packs]
    assert np.diff(audit.offsets).tolist() == [len(p) for p in packs]
    assert audit.items.tolist() == [n - 1 for p in packs for n in p]  # packing counts each sequence minus its last


# ---------------------------------------------------------------------------------------------- read back
@settings(max_examples=60, deadline=None)
@given(PACKS, st.sampled_from([pa.int32(), pa.int64(), pa.uint32()]))
def test_packed_parquet_gives_back_the_lengths_written(packs, width):
    assert_read_back(read_packed_parquet([parquet_bytes(rows_of(packs), width)], "packed.parquet"), packs)


@settings(max_examples=60, deadline=None)
@given(PACKS)
def test_legacy_npy_gives_back_the_lengths_written(packs):
    assert_read_back(read_packed_npy(npy_bytes(rows_of(packs)), "packed.npy"), packs)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=st.lists(PACKS, min_size=1, max_size=4))
def test_a_folder_of_shards_is_read_in_name_order_as_one_data_set(tmp_path_factory, shards):
    folder = tmp_path_factory.mktemp("packed")
    for i, packs in enumerate(shards):
        (folder / f"training_{i:02d}.idx.parquet").write_bytes(parquet_bytes(rows_of(packs)))
    assert_read_back(load_lengths(folder), [p for packs in shards for p in packs])


def test_files_on_disk_take_the_same_path_as_their_bytes(tmp_path):
    packs = [[5, 3, 8], [16], [1, 1, 1, 1]]
    (tmp_path / "p.parquet").write_bytes(parquet_bytes(rows_of(packs)))
    (tmp_path / "p.npy").write_bytes(npy_bytes(rows_of(packs)))
    for name in ("p.parquet", "p.npy"):
        hist = load_lengths(tmp_path / name)
        assert_read_back(hist, packs)
        assert any("audit of 3 existing packs" in n for n in hist.notes)


# ---------------------------------------------------------------------------------------------- never unpickled
def _plant(path: str) -> None:  # what the payload runs when unpickled
    Path(path).write_text("the pickle ran")


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return _plant, (str(self.marker),)


@pytest.mark.parametrize("where", ["row", "loss_mask", "seq_start_id"])
def test_a_pickled_payload_is_refused_without_running_it(tmp_path, where):
    marker = tmp_path / "marker"
    good = rows_of([[4, 4], [8]])
    if where == "row":
        rows = [*good, Payload(marker)]
    else:
        rows = [good[0], {**good[1], where: Payload(marker)}]
    path = tmp_path / "packed.npy"
    path.write_bytes(npy_bytes(rows))
    np.load(path, allow_pickle=True)  # numpy's own reader runs it: the payload is live
    assert marker.read_text() == "the pickle ran"
    marker.unlink()
    with pytest.raises(InputError) as err:
        load_lengths(path)
    assert not marker.exists()
    assert err.value.source == str(path) and str(err.value).startswith(f"{path}, byte ")
    assert f"refers to {__name__}._plant" in err.value.what and "\n" not in str(err.value)  # this module's


# ---------------------------------------------------------------------------------------------- damaged files
DAMAGE = {
    "starts past the pack": (lambda r: {**r, "seq_start_id": [0, len(r["input_ids"])]}, "is out of place"),
    "first start not 0": (lambda r: {**r, "seq_start_id": [1]}, "is out of place"),
    "starts going back": (lambda r: {**r, "seq_start_id": [0, 3, 2]}, "is out of place"),
    "empty starts": (lambda r: {**r, "seq_start_id": []}, "has an empty seq_start_id"),
    "negative start": (lambda r: {**r, "seq_start_id": [0, -5]}, "is out of place"),
}


@settings(max_examples=40, deadline=None)
@given(
    packs=st.lists(st.lists(st.integers(4, 50), min_size=1, max_size=4), min_size=1, max_size=8),
    damage=st.sampled_from(sorted(DAMAGE)),
    fmt=st.sampled_from(["parquet", "npy"]),
    data=st.data(),
)
def test_a_damaged_pack_is_one_error_naming_it(packs, damage, fmt, data):
    rows = rows_of(packs)
    bad = data.draw(st.integers(0, len(rows) - 1), label="damaged pack")
    change, fragment = DAMAGE[damage]
    rows[bad] = change(rows[bad])
    name = f"packed.{fmt}"
    with pytest.raises(InputError) as err:
        parse_lengths(parquet_bytes(rows, pa.int64()) if fmt == "parquet" else npy_bytes(rows), name)
    assert (err.value.source, err.value.where) == (name, f"pack {bad}"), str(err.value)
    assert fragment in err.value.what and "\n" not in str(err.value)


def test_a_sequence_over_the_maximum_length_names_its_pack():
    rows = rows_of([[10, 10], [5, 40, 5], [3]])
    with pytest.raises(InputError) as err:
        read_packed_parquet([parquet_bytes(rows)], "p.parquet", max_length=32)
    assert (
        err.value.where == "pack 1" and "a sequence of 40 tokens, over the maximum sequence length 32" in err.value.what
    )
    with pytest.raises(InputError) as err:
        read_packed_npy(npy_bytes(rows), "p.npy", max_length=32)
    assert err.value.where == "pack 1"


@pytest.mark.parametrize(
    "columns,where,fragment",
    [
        ({"input_ids": pa.array([[1, 2]]), "seq_start_id": pa.array([[0.0]])}, "column 'seq_start_id'", "not integers"),
        (
            {"input_ids": pa.array([[1, 2], [3]]), "seq_start_id": pa.array([[0], None])},
            "pack 1",
            "has no seq_start_id (null)",
        ),
        (
            {"input_ids": pa.array([[1, 2]]), "seq_start_id": pa.array([[0, None]])},
            "column 'seq_start_id'",
            "holds null entries",
        ),
        (
            {"input_ids": pa.array([[1, 2]]), "seq_start_id": pa.array([0])},
            "column 'seq_start_id'",
            "not a list per pack",
        ),
        (
            {"input_ids": pa.array([], pa.list_(pa.int64())), "seq_start_id": pa.array([], pa.list_(pa.int64()))},
            None,
            "packed data set has no rows",
        ),
    ],
)
def test_malformed_parquet_columns_are_one_error_naming_the_place(columns, where, fragment):
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    with pytest.raises(InputError) as err:
        read_packed_parquet([buf.getvalue()], "p.parquet")
    assert err.value.where == where and fragment in err.value.what, str(err.value)


def test_a_folder_with_a_shard_that_is_not_packed_names_the_shard(tmp_path):
    (tmp_path / "a.parquet").write_bytes(parquet_bytes(rows_of([[3, 4]])))
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), tmp_path / "b.parquet")
    with pytest.raises(InputError) as err:
        load_lengths(tmp_path)
    assert err.value.where == "shard 1" and "no seq_start_id" in err.value.what


@pytest.mark.parametrize(
    "rows,where,fragment",
    [
        ([{"input_ids": [1, 2]}], "pack 0", "is not a dict with input_ids and seq_start_id"),
        ([{"input_ids": [1, 2, 3], "seq_start_id": [0]}, [1, 2]], "pack 1", "is not a dict"),
        ([{"input_ids": [1, 2, 3], "seq_start_id": ["0"]}], "pack 0", "must be lists of integers"),
        ([], None, "packed data set has no rows"),
    ],
)
def test_malformed_legacy_rows_are_one_error_naming_the_place(rows, where, fragment):
    with pytest.raises(InputError) as err:
        read_packed_npy(npy_bytes(rows), "p.npy")
    assert err.value.where == where and fragment in err.value.what, str(err.value)


def test_a_truncated_legacy_file_is_one_error():
    data = npy_bytes(rows_of([[5, 5], [9]]))
    for cut in (1, 10, len(data) // 2 - 128):
        with pytest.raises(InputError) as err:
            read_packed_npy(data[:-cut], "p.npy")
        assert err.value.source == "p.npy" and "\n" not in str(err.value)
