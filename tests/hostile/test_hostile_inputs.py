"""The nastiest inputs, one class each: every one ends in an ``InputError`` that says what and where, quickly,
without a traceback, a hang or a memory blow-up, and without quoting anything but a short excerpt of the input.
Valid but unusual files next to them must still be read."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advisor.data.guard import MAX_LENGTH
from advisor.data.ingest import load_lengths, parse_lengths
from advisor.data.megatron_mock import MAX_MOCK_SAMPLES
from advisor.data.parquet_footer import column_chunks
from advisor.errors import InputError
from tests.support import ROOT

LOGNORMAL = {
    "mode": "distribution",
    "type": "lognormal",
    "min_seq_len": 100,
    "max_seq_len": 4096,
    "mean_seq_len": 1024,
    "lognormal_sigma": 0.8,
}


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def refused(path_or_data, *fragments, name="upload", **kw) -> InputError:
    """The InputError for a path (load_lengths) or bytes (parse_lengths), checked for each message fragment."""
    with pytest.raises(InputError) as err:
        if isinstance(path_or_data, bytes):
            parse_lengths(path_or_data, name, **kw)
        else:
            load_lengths(path_or_data, **kw)
    for fragment in fragments:
        assert fragment in str(err.value), f"{fragment!r} not in {str(err.value)!r}"
    assert len(str(err.value)) < 400 + len(str(path_or_data if not isinstance(path_or_data, bytes) else name))
    return err.value


def legacy_npy(tmp_path, name, rows):
    """A legacy packed .npy as Megatron-Bridge wrote them: np.save of an object array of dicts (a pickle)."""
    arr = np.empty(len(rows), dtype=object)
    arr[:] = rows
    path = tmp_path / name
    np.save(path, arr, allow_pickle=True)
    return path


# ---------------------------------------------------------------------------------------------- text and CSV
def test_binary_bytes_under_a_csv_name(tmp_path):
    err = refused(write(tmp_path, "model.csv", bytes(range(256)) * 64), "is not UTF-8 text", "offset 128")
    assert err.where == "line 3"


def test_nul_bytes_in_utf8_text(tmp_path):
    refused(write(tmp_path, "l.csv", b"length\n5\n\x00\x00\n"), "line 3", "NUL byte at offset 9")


def test_carriage_return_only_lines_with_a_ragged_row(tmp_path):
    path = write(tmp_path, "cr.csv", b"length\r5\r\r7,8\r9\r")
    refused(path, "line 4", "different number of fields")
    hist = load_lengths(path, on_bad="skip")
    assert hist.samples().tolist() == [5, 9] and hist.excluded[0].first_at == "line 4"


def test_carriage_return_only_lines_are_valid_input(tmp_path):
    assert load_lengths(write(tmp_path, "mac.csv", b"length\r5\r7\r")).samples().tolist() == [5, 7]


def test_bad_row_far_down_gets_its_true_line(tmp_path):
    body = "length\r\n" + "5\r\n\r\n" * 50_000 + "x\r\n"
    refused(write(tmp_path, "long.csv", body), "line 100002", "'x' is not a number")


def test_duplicate_header_names(tmp_path):
    refused(write(tmp_path, "dup.csv", "length,length\n5,6\n"), "header", "2 columns are named 'length'")
    refused(write(tmp_path, "case.csv", "Length,length\n5,6\n"), "columns are named")
    hist = load_lengths(write(tmp_path, "unused.csv", "length,x,x\n5,1,2\n"))  # the duplicates are not used
    assert hist.samples().tolist() == [5] and any("more than once" in n for n in hist.notes)


@pytest.mark.parametrize(
    "content,fragment", [(b"", "is empty"), (b"\r\n \n", "is empty"), (b"length\n", "has a header but no rows")]
)
def test_empty_and_header_only(tmp_path, content, fragment):
    refused(write(tmp_path, "e.csv", content), fragment)


def test_thousands_of_columns(tmp_path):
    refused(write(tmp_path, "wide.csv", ",".join(["1"] * 20_000) + "\n"), "20,000 fields")


def test_a_long_bad_value_is_quoted_short(tmp_path):
    err = refused(write(tmp_path, "long.csv", "length\n5\n" + "z" * 100_000 + "\n"), "is not a number")
    assert "z" * 41 not in str(err) and len(err.what) < 200


def test_utf16_with_bom_is_read(tmp_path):  # Excel's "Unicode text": not refused
    path = write(tmp_path, "excel.txt", "length\n5\n7\n".encode("utf-16"))
    assert load_lengths(path).samples().tolist() == [5, 7]


# ---------------------------------------------------------------------------------------------- JSON
def test_deeply_nested_json(tmp_path):
    refused(write(tmp_path, "deep.json", "[" * 2000 + "]" * 2000), "nested more than 64 levels")
    refused(b"[" * 100_000, "nested more than 64 levels", name="deep.json")


def test_deeply_nested_jsonl_line(tmp_path):
    err = refused(write(tmp_path, "deep.jsonl", "5\n" + "[" * 2000 + "]" * 2000 + "\n"), "nested more than 64")
    assert err.where == "line 2"


def test_brackets_inside_strings_are_not_nesting(tmp_path):
    records = [{"length": 5, "text": "[[[[{{{{" * 50 + '\\"]'}] * 3
    assert load_lengths(write(tmp_path, "r.json", json.dumps(records))).num_samples == 3


@pytest.mark.parametrize(
    "name,text,where",
    [
        ("big.json", "[5, " + "9" * 4000 + "]", "item 2"),
        ("big.jsonl", "5\n" + "9" * 4000 + "\n", "line 2"),
        ("big.csv", "length\n5\n" + "9" * 4000 + "\n", "line 3"),
    ],
)
def test_a_4000_digit_integer(tmp_path, name, text, where):
    err = refused(write(tmp_path, name, text), "is beyond any sequence length")
    assert err.where == where and "9" * 41 not in str(err)


def test_an_integer_past_pythons_digit_limit(tmp_path):
    refused(write(tmp_path, "big.json", "[5, " + "9" * 5000 + "]"), "line 1", "thousands of digits")


def test_length_two_to_the_53(tmp_path):
    err = refused(write(tmp_path, "l.json", f"[5, {2**53}]"), "9007199254740992 is beyond any sequence length")
    assert err.where == "item 2"
    refused(write(tmp_path, "l.csv", f"5\n{2**53}\n"), "line 2", "beyond any sequence length")


def test_max_length_is_a_keyword(tmp_path):
    path = write(tmp_path, "l.csv", f"5\n{MAX_LENGTH + 1}\n")
    refused(path, "the maximum is 16,777,216 tokens")
    assert load_lengths(path, max_length=2 * MAX_LENGTH).max_length == MAX_LENGTH + 1


@pytest.mark.parametrize("text", ["[5, NaN]", "[5, Infinity]", "[5, -Infinity]", "[5, 1e999]"])
def test_json_nan_and_infinity_as_lengths(tmp_path, text):
    refused(write(tmp_path, "n.json", text), "item 2")


# ---------------------------------------------------------------------------------------------- .npy
def test_npy_header_claiming_ten_trillion_items(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.arange(3, dtype=np.int64))
    data = buf.getvalue().replace(b"(3,)", b"(10000000000000,)")
    refused(write(tmp_path, "huge.npy", data), "claims shape (10000000000000,)", "(80,000,000,000,000 bytes) but")


def test_npy_with_a_truncated_body_or_header(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.arange(1, 100, dtype=np.int32))
    refused(write(tmp_path, "short.npy", buf.getvalue()[:-5]), "bytes follow the header")
    refused(write(tmp_path, "head.npy", buf.getvalue()[:20]), "is not a readable .npy file")


@pytest.mark.parametrize(
    "array", [np.array([True, False]), np.array([1 + 2j]), np.zeros(0, np.int64), np.zeros(3, dtype=[("a", "i8")])]
)
def test_npy_that_is_not_lengths(tmp_path, array):
    np.save(tmp_path / "x.npy", array)
    refused(tmp_path / "x.npy", "expected integer lengths")


def test_npy_object_array_is_never_unpickled(tmp_path):
    path = legacy_npy(tmp_path, "o.npy", [{"input_ids": [1], "seq_start_id": [0]}, OSError("boom")])
    refused(path, "refers to builtins.OSError")


def test_legacy_packed_npy_start_offset_two_to_the_70(tmp_path):
    rows = [{"input_ids": list(range(10)), "loss_mask": [1] * 10, "seq_start_id": [0, 2**70]}]
    refused(legacy_npy(tmp_path, "s70.npy", rows), "pack 0", "beyond a 64-bit offset")


@pytest.mark.parametrize("starts", [[0, 6, 3], [0, -(2**63)], [0, 2**63 - 1], [3], [0, 10]])
def test_legacy_packed_npy_with_wrapping_or_outside_offsets(tmp_path, starts):
    rows = [{"input_ids": list(range(10)), "loss_mask": [1] * 10, "seq_start_id": starts}]
    refused(legacy_npy(tmp_path, "wrap.npy", rows), "pack 0", "seq_start_id")


def test_legacy_packed_npy_memo_bomb(tmp_path):
    ids, starts = list(range(50_000)), list(range(50_000))  # one list, referenced by every row through the memo
    path = legacy_npy(tmp_path, "bomb.npy", [{"input_ids": ids, "seq_start_id": starts} for _ in range(5000)])
    assert path.stat().st_size < 2_000_000  # 250M starts in under 2 MB
    refused(path, "repeats the same lists")


def test_legacy_packed_npy_garbage_pickle(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    data = buf.getvalue()
    refused(write(tmp_path, "cut.npy", data[:-7]), "is not a readable packed .npy")
    refused(write(tmp_path, "evil.npy", data[:128] + pickle.dumps(os.system)), "refers to")


# ---------------------------------------------------------------------------------------------- totals
def test_counts_summing_past_two_to_the_63(tmp_path):
    rows = "\n".join(f"{2**24 - i},{2**40}" for i in range(1024))
    refused(write(tmp_path, "h.csv", "length,count\n" + rows), "tokens (length x count summed), beyond")


def test_one_count_over_two_to_the_40(tmp_path):
    refused(write(tmp_path, "h.csv", f"length,count\n5,{2**41}\n"), "line 2", "samples on one row")


def test_counts_of_a_valid_big_histogram_stay_exact(tmp_path):
    hist = load_lengths(write(tmp_path, "h.csv", f"length,count\n7,{2**40}\n7,{2**40}\n3,1\n"))
    assert hist.counts.tolist() == [1, 2**41] and hist.total_tokens == 3 + 7 * 2**41


# ---------------------------------------------------------------------------------------------- files
def test_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "lengths.csv"
    os.mkfifo(fifo)
    refused(fifo, "is a FIFO (named pipe), not a regular file")


def test_symlink_loop_and_dangling_symlink(tmp_path):
    loop = tmp_path / "loop.csv"
    os.symlink(loop, loop)
    refused(loop, "symbolic link loop")
    dangling = tmp_path / "dangling.csv"
    os.symlink(tmp_path / "gone.csv", dangling)
    refused(dangling, "symbolic link to a file that does not exist")


def test_symlink_to_a_good_file_is_followed(tmp_path):
    os.symlink(write(tmp_path, "real.csv", "5\n6\n"), tmp_path / "link.csv")
    assert load_lengths(tmp_path / "link.csv").num_samples == 2


@pytest.mark.parametrize(
    "path,fragment",
    [("/proc/self/mem", "system file"), ("/proc/self/environ", "system file"), ("/dev/zero", "character device")],
)
def test_system_files(path, fragment):
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    refused(path, fragment)


def test_sparse_8_gib_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "sparse.csv"
    with open(path, "wb") as fh:
        fh.truncate(8 << 30)
    refused(path, "is 8,192 MiB, over the 1,024 MiB limit")


def test_packed_folder_skips_and_counts_what_is_not_a_shard(tmp_path):
    folder = tmp_path / "packed"
    folder.mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]], "seq_start_id": [[0]]}), folder / "a.parquet")
    (folder / "sub.parquet").mkdir()
    os.symlink(folder / "gone", folder / "dangling.parquet")
    os.symlink(folder / "loop.parquet", folder / "loop.parquet")
    os.mkfifo(folder / "pipe.parquet")
    hist = load_lengths(folder)
    assert hist.num_samples == 1
    assert any("4 entries skipped" in n and "sub-folders: 1" in n and "FIFOs: 1" in n for n in hist.notes)
    os.remove(folder / "a.parquet")
    refused(folder, "no .parquet shards", "4 entries skipped")


def test_parquet_decompression_bomb(tmp_path):
    pq.write_table(pa.table({"length": np.ones(2_000_000, np.int64)}), tmp_path / "ones.parquet")
    assert (tmp_path / "ones.parquet").stat().st_size < 50_000
    refused(tmp_path / "ones.parquet", "once decompressed", max_bytes=1_000_000)


def test_parquet_unsigned_start_past_int64(tmp_path):
    starts = pa.array([[0, 2**64 - 1]], pa.list_(pa.uint64()))
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]], "seq_start_id": starts}), tmp_path / "u.parquet")
    refused(tmp_path / "u.parquet", "pack 0", "beyond a 64-bit offset")


# a 630-byte Parquet file (found by bench/fuzz_inputs.py) whose footer's size statistics disagree: pyarrow 26's
# RowGroupMetaData.column(0) aborts the whole process on it (C++ terminate), while reading it raises OSError
ABORTING_PARQUET = base64.b64decode(
    "UEFSMRUEFUgVSEwVEhUAEgAAAAAAAAEAAAACAAAAAwAAAAQAAAAFAAAABgAAAAcAAAAIAAAAFQAVLhUuLBUSFRAVBhUGHBgECAAA"
    "ABgEAAAAABYAKAQIAAAAGAQAAAAAEREAAAADAAAABf4BAgAAABIDBAUQMlR2CAAAABUEGUw1ABgGc2NoZW1hFQIANQIYCWlucHV0"
    "X2lkcxUCFQZMPAAAADUEGARsaXN0FQIAFQIlDhgHZWxlbWVudAAWAhkcGRwmABwVAhk1AAYQGTgJaW5wdXRfaWRzBGxpc3QHZWxl"
    "bWVudBUAFhIW8AEW8AEmbCYIHBgECAAAABgEAAAAABYAKAQIAAAAGAQAAAAAEREAGSwVBBUAFQIAFQAVEBUCADwpJgIQGUYAAAAS"
    "AAAAFvABFgImCBbwAQAZHBgMQVJST1c6c2NoZW1hGPgBLy8vLy83QUFBQUFRQUFBQUFBQUtBQXdBQmdBRkFBZ0FDZ0FBQUFBQkJB"
    "QU1BQUFBQ0FBSUFBQUFCQUFJQUFBQUJBQUFBQUVBQUFBRUFBQUF6UC8vL3dBQUFRd1VBQUFBSkFBQUFBUUFBQUFCQUFBQUxBQUFB"
    "QWtBQUFCcGJuQjFkRjlwWkhNQUFBQUVBQVFBQkFBQUFCQUFGQUFJQUFZQUJ3QU1BQUFBRUFBUUFBQUFBQUFCQWhBQUFBQWdBQUFB"
    "QkFBQUFBQUFBQUFFQUFBQWFYUmxiUUFBQUFBSUFBd0FDQUFIQUFnQUFBQUFBQUFCSUFBQUFBPT0AGCBwYXJxdWV0LWNwcC1hcnJv"
    "dyB2ZXJzaW9uIDI2LjAuMRkcHAAAAPIBAABQQVIx"
)


def test_parquet_footer_that_aborts_pyarrow_metadata(tmp_path):
    path = write(tmp_path, "abort.parquet", ABORTING_PARQUET)
    code = (
        "import sys; from advisor.data.ingest import load_lengths; from advisor.errors import InputError\n"
        "try:\n    load_lengths(sys.argv[1])\nexcept InputError as e:\n    print(e)"
    )
    # in a child: a regression would abort the test run itself, not fail one test
    run = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-500:]
    assert "is not a readable Parquet file" in run.stdout


def test_parquet_footer_reader_agrees_with_pyarrow():
    buf = io.BytesIO()
    pq.write_table(pa.table({"length": list(range(1, 5001)), "ids": [[1, 2]] * 5000}), buf, row_group_size=700)
    rows, chunks = column_chunks(buf.getvalue())
    meta = pq.ParquetFile(pa.BufferReader(buf.getvalue())).metadata
    theirs = [
        (meta.row_group(g).column(c).num_values, meta.row_group(g).column(c).total_uncompressed_size)
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    ]
    assert rows == 5000 and [(c.num_values, c.uncompressed) for c in chunks] == theirs


def test_parquet_footer_that_lies(tmp_path):
    buf = io.BytesIO()
    pq.write_table(pa.table({"length": [5, 6, 7]}), buf)
    data = buf.getvalue()
    refused(write(tmp_path, "lie.parquet", data[:-8] + (2**31).to_bytes(4, "little") + b"PAR1"), "footer")
    refused(
        write(tmp_path, "nest.parquet", b"PAR1" + b"\x1c" * 100 + (100).to_bytes(4, "little") + b"PAR1"),
        "is not a readable Parquet file",
    )


def test_parquet_text_column_that_is_not_utf8(tmp_path):  # found by bench/fuzz_inputs.py
    text = pa.array([b"12", b"\x90x"], pa.binary()).view(pa.string())  # pyarrow does not check on read
    pq.write_table(pa.table({"seq_len": text}), tmp_path / "s.parquet")
    refused(tmp_path / "s.parquet", "holds invalid data", "Invalid UTF8")


def test_parquet_corrupted(tmp_path):
    buf = io.BytesIO()
    pq.write_table(pa.table({"length": [5, 6, 7]}), buf)
    data = bytearray(buf.getvalue())
    refused(write(tmp_path, "cut.parquet", bytes(data[: len(data) // 2])), "is not a readable Parquet file")


# ---------------------------------------------------------------------------------------------- mock configs
def mock_file(tmp_path, cfg, name="mock.json"):
    return write(tmp_path, name, cfg if isinstance(cfg, str) else json.dumps(cfg))


@pytest.mark.parametrize(
    "value,kind", [(5, "not a number (5)"), (["lens.csv"], "not a list"), (None, "not null"), (True, "not true/false")]
)
def test_mock_path_that_is_not_a_string(tmp_path, value, kind):
    refused(mock_file(tmp_path, {"mode": "file", "path": value}), '"path"', kind)


@pytest.mark.parametrize("target", ["/proc/self/mem", "/proc/self/environ", "/dev/zero"])
def test_mock_path_to_a_system_file(tmp_path, target):
    if not os.path.exists(target):
        pytest.skip(f"no {target} here")
    err = refused(mock_file(tmp_path, {"mode": "file", "path": target}), "not a")
    assert "(from " in str(err)


def test_mock_path_to_a_fifo_and_a_folder(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    refused(mock_file(tmp_path, {"mode": "file", "path": str(tmp_path / "pipe.csv")}), "FIFO")
    refused(mock_file(tmp_path, {"mode": "file", "path": str(tmp_path)}), "is a folder, not a regular file")


def test_mock_path_to_a_sparse_8_gib_file(tmp_path):
    with open(tmp_path / "big.csv", "wb") as fh:
        fh.truncate(8 << 30)
    refused(mock_file(tmp_path, {"mode": "file", "path": "big.csv"}), "over the 1,024 MiB limit")


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("lognormal_sigma", 1e200, "outside 0..10"),
        ("lognormal_sigma", -0.5, "outside 0..10"),
        ("min_seq_len", True, "must be a number, not true/false"),
        ("max_seq_len", False, "must be a number, not true/false"),
        ("mean_seq_len", "1024", "must be a number, not a string"),
        ("mean_seq_len", None, "must be a number, not null"),
        ("lognormal_sigma", [1.1], "must be a number, not a list"),
        ("max_seq_len", 2**40, "is not a sequence length"),
        ("mean_seq_len", 0, "is not a sequence length"),
        ("max_seq_len", 10**30, "is beyond any sequence length"),
        ("min_seq_len", 0.5, "is below 1 token"),
    ],
)
def test_mock_parameters_field_by_field(tmp_path, key, value, fragment):
    err = refused(mock_file(tmp_path, {**LOGNORMAL, key: value}), fragment)
    assert err.where == f'"{key}"'


def test_mock_sigma_minus_zero_is_zero(tmp_path):  # found by bench/fuzz_inputs.py: numpy refuses sigma -0.0
    hist = load_lengths(mock_file(tmp_path, {**LOGNORMAL, "lognormal_sigma": -0.0}), mock_samples=100)
    assert hist.lengths.size == 1 and hist.num_samples == 100


def test_mock_min_above_max(tmp_path):
    path = mock_file(tmp_path, {**LOGNORMAL, "min_seq_len": 5000})
    refused(path, '"max_seq_len"', "4,096 is below min_seq_len 5,000")


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_mock_max_infinity_and_nan(tmp_path, literal):
    text = json.dumps(LOGNORMAL).replace('"max_seq_len": 4096', f'"max_seq_len": {literal}')
    refused(mock_file(tmp_path, text), '"max_seq_len"', "must be a finite number")


def test_mock_huge_sample_count(tmp_path):
    path = mock_file(tmp_path, LOGNORMAL)
    refused(path, "mock samples", f"1..{MAX_MOCK_SAMPLES:,}", mock_samples=10**12)
    refused(path, "mock samples", mock_samples=True)


@pytest.mark.parametrize("mode", [["file"], None, 3, "FILE"])
def test_mock_unknown_mode(tmp_path, mode):
    refused(mock_file(tmp_path, {"mode": mode}), '"mode"', "unknown mode")


def test_mock_file_mode_in_an_upload_reveals_nothing(tmp_path):
    secret = write(tmp_path, "secret.csv", "length\n424242\n")
    messages = set()
    for path in (str(secret), str(tmp_path / "missing.csv"), "/proc/self/environ", str(tmp_path)):
        data = json.dumps({"mode": "file", "path": path}).encode()
        err = refused(data, '"mode": "file"', "upload the CSV of lengths itself", name="config.json")
        assert "424242" not in str(err) and path not in str(err) and str(tmp_path) not in str(err)
        messages.add(str(err))
    assert len(messages) == 1  # the same words whether the path exists, is a folder or is missing
    assert load_lengths(mock_file(tmp_path, {"mode": "file", "path": "secret.csv"})).samples().tolist() == [424242]


def test_mock_file_mode_upload_can_be_allowed_explicitly(tmp_path):
    write(tmp_path, "lens.csv", "length\n5\n6\n")
    data = json.dumps({"mode": "file", "path": "lens.csv"}).encode()
    hist = parse_lengths(data, "cfg.json", base_dir=tmp_path, allow_file_mode=True)
    assert hist.samples().tolist() == [5, 6]


def test_distribution_draw_is_bounded_and_exact(tmp_path):
    cfg = {**LOGNORMAL, "min_seq_len": 1, "max_seq_len": MAX_LENGTH, "mean_seq_len": 2**20, "lognormal_sigma": 3}
    hist = load_lengths(mock_file(tmp_path, cfg), mock_samples=3_000_000)
    assert hist.num_samples == 3_000_000 and hist.max_length <= MAX_LENGTH


# ---------------------------------------------------------------------------------------------- names
def test_an_upload_name_with_control_characters_is_escaped():
    err = refused(b"5\nabc\n", "is not a number", name="evil\nname\x1b[31m.csv")
    assert "\n" not in str(err) and "\x1b" not in str(err)


def test_inline_json_with_surrogates_is_an_input_error():
    refused('{"mode": "\udcff"}', "is not UTF-8 text")


@pytest.mark.slow  # big data
def test_a_valid_but_enormous_histogram_is_refused_before_it_is_expanded(tmp_path):
    import subprocess
    import sys

    huge = tmp_path / "huge.csv"
    huge.write_text("length,count\n100,1000000000000\n300,5\n")
    for argv in (
        ["pack", str(huge), "--pack-size", "512"],
        ["estimate", str(ROOT / "sample_data" / "plans" / "llama8b_squad.yaml"), "--lengths", str(huge)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "advisor", *argv, "--quiet"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2 and "too many to pack one by one" in proc.stderr, proc.stderr


def test_an_integer_past_2_53_beside_a_missing_cell_is_refused_cleanly():
    """Found by the fuzz tests: Arrow's safe cast to float refused 2**53 + 1 with its own exception."""
    from advisor.data.ingest import parse_lengths

    with pytest.raises(InputError, match="line 2: length is missing"):
        parse_lengths(b"9007199254740993\nnan", "x.csv")
    with pytest.raises(InputError, match="beyond any sequence length"):
        parse_lengths(b"9007199254740993\n\n5\n", "x.csv")
    with pytest.raises(InputError, match="no usable lengths"):
        parse_lengths(b"9007199254740993\nnan", "x.csv", on_bad="skip")
