"""Reading lengths from every supported format, and one clear message for every bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advisor.data.ingest import load_lengths, parse_lengths
from advisor.data.megatron_mock import default_mock_config
from advisor.errors import InputError
from tests.support import SAMPLE


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def as_samples(hist):
    return hist.samples().tolist()


# ---------------------------------------------------------------------------------------------- good inputs
def test_real_histogram_csv():
    hist = load_lengths(SAMPLE / "squad_v1.1_len384_hist.csv")
    frame = pd.read_csv(SAMPLE / "squad_v1.1_len384_hist.csv")
    assert hist.num_samples == frame["count"].sum() == 88641
    assert hist.max_length == 384 and hist.lengths[0] == 36


def test_csv_without_header(tmp_path):
    assert as_samples(load_lengths(write(tmp_path, "l.csv", "5\n3\n\n5\n"))) == [3, 5, 5]


def test_csv_picks_length_column_by_name(tmp_path):
    path = write(tmp_path, "l.csv", "id,num_tokens,label\n1,10,a\n2,20,b\n")
    assert as_samples(load_lengths(path)) == [10, 20]
    assert as_samples(load_lengths(path, column="id")) == [1, 2]


def test_tsv(tmp_path):
    assert as_samples(load_lengths(write(tmp_path, "l.tsv", "seq_len\tx\n7\t1\n8\t2\n"))) == [7, 8]


def test_histogram_csv_sums_repeated_lengths(tmp_path):
    hist = load_lengths(write(tmp_path, "h.csv", "length,count\n10,2\n20,1\n10,3\n30,0\n"))
    assert hist.lengths.tolist() == [10, 20] and hist.counts.tolist() == [5, 1]
    assert any("count 0" in n for n in hist.notes)


def test_json_list_records_and_input_ids(tmp_path):
    assert as_samples(load_lengths(write(tmp_path, "a.json", "[3, 1, 2]"))) == [1, 2, 3]
    assert as_samples(load_lengths(write(tmp_path, "b.json", json.dumps([{"length": 4}, {"length": 6}])))) == [4, 6]
    assert as_samples(load_lengths(write(tmp_path, "c.json", json.dumps([{"input_ids": [1, 2, 3]}])))) == [3]


def test_jsonl_ints_and_records(tmp_path):
    assert as_samples(load_lengths(write(tmp_path, "a.jsonl", "3\n4\n"))) == [3, 4]
    text = '{"input_ids": [1, 2]}\n\n{"seq_len": 9}\n'
    assert as_samples(load_lengths(write(tmp_path, "b.jsonl", text))) == [2, 9]


def test_npy_without_pickle(tmp_path):
    path = tmp_path / "l.npy"
    np.save(path, np.array([5, 6, 6], dtype=np.int32))
    assert as_samples(load_lengths(path)) == [5, 6, 6]


def test_parquet_length_column_and_input_ids(tmp_path):
    pq.write_table(pa.table({"num_tokens": [4, 5]}), tmp_path / "a.parquet")
    assert as_samples(load_lengths(tmp_path / "a.parquet")) == [4, 5]
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4]]}), tmp_path / "b.parquet")
    assert as_samples(load_lengths(tmp_path / "b.parquet")) == [1, 3]


def test_mock_config_file_mode_drops_header_line(tmp_path):
    write(tmp_path, "lens.csv", "100\n200\n300\n")  # Megatron-LM's pandas read takes "100" as the header
    cfg = write(tmp_path, "mock.json", json.dumps({"mode": "file", "path": "lens.csv"}))
    hist = load_lengths(cfg)
    assert as_samples(hist) == [200, 300]
    assert any("drops line 1" in n for n in hist.notes)


def test_mock_config_distribution_mode_is_megatron_lms_draw(tmp_path):
    cfg = {
        "mode": "distribution",
        "type": "lognormal",
        "min_seq_len": 100,
        "max_seq_len": 4096,
        "mean_seq_len": 1024,
        "lognormal_sigma": 0.8,
    }
    hist = load_lengths(json.dumps(cfg), mock_samples=20000)
    # MockSFTLowLevelDataset: np.random.seed(0), then np.random.lognormal on the global RNG
    state = np.random.get_state()
    np.random.seed(0)
    expected = np.random.lognormal(np.log(1024) - 0.8**2 / 2, 0.8, 20000)
    np.random.set_state(state)
    assert as_samples(hist) == sorted(np.clip(expected, 100, 4096).astype(int).tolist())


def test_mock_default_config_piles_samples_at_the_minimum():
    hist = load_lengths(json.dumps(default_mock_config(8192)))
    assert hist.num_samples == 1_000_000
    at_min = hist.counts[hist.lengths == 4096].sum() / hist.num_samples
    assert 0.5 < at_min < 0.65  # the trap REFERENCE.md describes: ~57 % clipped to min_seq_len
    assert hist.total_tokens / hist.num_samples < 3 * 8192 / 4


def test_inline_json_list():
    assert as_samples(parse_lengths(b"[7, 8]", "upload")) == [7, 8]


# ---------------------------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "name,text,where,what",
    [
        ("empty.csv", "", None, "is empty"),
        ("blank.csv", "\n \n", None, "is empty"),
        ("words.csv", "length\n12\nabc\n14\n", "line 3", "'abc' is not a number"),
        ("neg.csv", "5\n-3\n", "line 2", "-3 is not a positive length"),
        ("zero.csv", "length\n5\n\n0\n", "line 4", "0 is not a positive length"),
        ("float.csv", "5\n12.5\n", "line 2", "is not a whole number of tokens"),
        ("hist.csv", "length,count\n10,5\n20,-1\n", "line 3", "count -1 is negative"),
        ("hist_len.csv", "length,count\n0,5\n", "line 2", "length 0 is not a positive length"),
        ("a.json", "[1, \"x\", 3]", "item 2", "'x' is not a number"),
        ("b.json", "[1, true]", "item 2", "is not a number"),
        ("c.json", "[1, 2.5]", "item 2", "is not a whole number"),
        ("d.json", "{\"a\": 1}", None, "not a Megatron-LM mock SFT config"),
        ("e.json", "[{\"text\": \"hi\"}]", "item 1", "record has no length field"),
        ("f.jsonl", "3\n{bad\n", "line 2", "is not valid JSON"),
        ("g.jsonl", "3\n-4\n", "line 2", "-4 is not a positive length"),
        ("h.json", "{\"mode\": \"distribution\", \"type\": \"uniform\"}", "\"type\"", "unsupported distribution"),
        ("i.json", "{\"mode\": \"distribution\", \"type\": \"lognormal\"}", "\"mode\": \"distribution\"", "missing"),
        ("j.json", "{\"mode\": \"nope\"}", "\"mode\"", "unknown mode"),
        ("k.xyz", "hello", None, "unknown format"),
    ],
)
def test_bad_input_gets_one_clear_message(tmp_path, name, text, where, what):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as err:
        load_lengths(path)
    assert err.value.source == str(path)
    assert err.value.where == where
    assert what in err.value.what
    assert str(path) in str(err.value)


def test_message_counts_all_bad_rows(tmp_path):
    with pytest.raises(InputError, match=r"line 2: length 'a' is not a number \(3 such rows in all\)"):
        load_lengths(write(tmp_path, "l.csv", "1\na\nb\n2\nc\n"))


def test_file_over_the_size_limit(tmp_path):
    path = write(tmp_path, "big.csv", "100\n" * 1000)
    with pytest.raises(InputError, match="is 4,000 bytes, over the 100 bytes limit"):
        load_lengths(path, max_bytes=100)


def test_npy_float_and_object_arrays(tmp_path):
    np.save(tmp_path / "f.npy", np.array([1.0, 2.5]))
    with pytest.raises(InputError, match="index 1: length 2.5 is not a whole number"):
        load_lengths(tmp_path / "f.npy")
    np.save(tmp_path / "w.npy", np.array([1.0, 2.0]))
    hist = load_lengths(tmp_path / "w.npy")
    assert as_samples(hist) == [1, 2] and any("floats" in n for n in hist.notes)


def test_pickled_npy_with_a_foreign_object_is_refused_not_run(tmp_path):
    np.save(
        tmp_path / "o.npy",
        np.array([{"input_ids": [1, 2], "seq_start_id": [0]}, Exception("x")], dtype=object),
        allow_pickle=True,
    )
    with pytest.raises(InputError, match="refers to builtins.Exception"):
        load_lengths(tmp_path / "o.npy")


def test_missing_column_lists_the_columns(tmp_path):
    with pytest.raises(InputError, match="no column 'len2'; columns are a, b"):
        load_lengths(write(tmp_path, "l.csv", "a,b\n1,2\n"), column="len2")


def test_skip_mode_counts_what_it_leaves_out(tmp_path):
    hist = load_lengths(write(tmp_path, "l.csv", "length\n5\nx\n-1\n7\n2.5\n"), on_bad="skip")
    assert as_samples(hist) == [5, 7]
    reasons = {e.reason: (e.count, e.first_at) for e in hist.excluded}
    assert reasons == {
        "length is not a number": (1, "line 3"),
        "length is not a positive length": (1, "line 4"),
        "length is not a whole number of tokens": (1, "line 6"),
    }
    assert hist.num_excluded == 3


def test_skip_mode_histogram_keeps_rows_aligned(tmp_path):
    hist = load_lengths(write(tmp_path, "h.csv", "length,count\n10,2\nx,5\n20,-1\n30,4\n"), on_bad="skip")
    assert hist.lengths.tolist() == [10, 30] and hist.counts.tolist() == [2, 4]
    assert hist.num_excluded == 2


# ---------------------------------------------------------------------------------------------- found in review
@pytest.mark.parametrize(
    "name,text,where,what",
    [
        ("nulls.json", "[5, null, 7]", "item 2", "length is missing (an empty cell, NA, NaN or null)"),
        ("nulls.jsonl", '{"length": 5}\n{"length": null}\n', "line 2", "is missing"),
        ("lists.json", '[{"length": [1, 2]}, {"length": 3}]', "item 1", "is not a number"),
        ("late_bool.json", "[" + "5, " * 1200 + "true]", "item 1201", "True is not a number"),
        ("spaces.csv", "seq_len\n5\n   \n7\nabc\n", "line 3", "is empty"),
        ("ragged.csv", "seq_len\n5\n\n7\n8,9\n9\n", "line 5", "different number of fields"),
        ("inf.csv", "5\ninf\n", "line 2", "is beyond any sequence length"),
    ],
)
def test_review_findings_each_get_their_line(tmp_path, name, text, where, what):
    with pytest.raises(InputError) as err:
        load_lengths(write(tmp_path, name, text))
    assert err.value.where == where and what in err.value.what


def test_bom_on_headerless_csv_keeps_the_first_sample(tmp_path):
    assert as_samples(load_lengths(write(tmp_path, "bom.csv", b"\xef\xbb\xbf5\n7\n9\n"))) == [5, 7, 9]


def test_a_header_that_is_not_a_length_name_is_noted(tmp_path):
    hist = load_lengths(write(tmp_path, "h.csv", "5x\n7\n9\n"))
    assert as_samples(hist) == [7, 9] and any("'5x' was taken as a header" in n for n in hist.notes)


def test_missing_column_in_records_is_an_error(tmp_path):
    with pytest.raises(InputError, match="record has no length field"):
        load_lengths(write(tmp_path, "r.jsonl", '{"bar": 5, "input_ids": [1, 2]}\n'), column="foo")


def test_duplicate_histogram_lengths_are_noted(tmp_path):
    hist = load_lengths(write(tmp_path, "h.csv", "length,count\n5,2\n5,3\n7,1\n"))
    assert hist.counts.tolist() == [5, 1] and any("more than one row" in n for n in hist.notes)


def test_packed_parquet_with_bad_rows_is_one_message(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]], "seq_start_id": [[0, 1], None]}), tmp_path / "p.parquet")
    with pytest.raises(InputError, match="pack 1: has no seq_start_id"):
        load_lengths(tmp_path / "p.parquet")
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]], "seq_start_id": [0]}), tmp_path / "q.parquet")
    with pytest.raises(InputError, match="not a list per pack"):
        load_lengths(tmp_path / "q.parquet")


def test_packed_shards_of_different_int_widths(tmp_path):
    folder = tmp_path / "packed"
    folder.mkdir()
    i32 = pa.list_(pa.int32())
    pq.write_table(
        pa.table({"input_ids": pa.array([[1, 2, 3]], i32), "seq_start_id": pa.array([[0]], i32)}),
        folder / "a.idx.parquet",
    )
    pq.write_table(pa.table({"input_ids": [[1, 2, 3, 4]], "seq_start_id": [[0, 2]]}), folder / "b.idx.parquet")
    assert load_lengths(folder).packs.items.tolist() == [2, 1, 1]
