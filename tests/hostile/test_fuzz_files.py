"""Generated files of every format, valid and malformed, through ``parse_lengths`` and ``load_lengths``.

The property: a read ends either in a ``LengthHistogram`` whose totals equal a Python-int recomputation, or in
an ``InputError`` whose message names the file. No other exception, whatever the bytes. The default example
counts keep this file under a minute; the ``slow`` ones run twice as many (deselect them with ``-m "not slow"``).
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from advisor.data.guard import MAX_LENGTH
from advisor.data.ingest import load_lengths, parse_lengths
from advisor.data.lengths import LengthHistogram
from advisor.errors import InputError

pytestmark = pytest.mark.slow  # long fuzzing: every format, thousands of generated files

MOCK_SAMPLES = 2000  # draws stay quick; the cap itself is tested in test_hostile_inputs
QUICK = settings(max_examples=250, deadline=None, database=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))

# ---------------------------------------------------------------------------------------------- strategies
BIG_INTS = st.integers(min_value=-(2**70), max_value=2**70)
ODD_CELLS = [
    "",
    " ",
    "abc",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "2.5",
    "1e3",
    "+7",
    ".5",
    "5.",
    "NULL",
    "true",
    "9" * 4000,
    '"5"',
    '"',
    "5,",
    "é",
    "2024-01-01",
    "0x10",
    "1_000",
    "０",
    "-0",
    "16777217",
    str(2**53),
]
CELLS = st.one_of(st.integers(-3, 5000).map(str), BIG_INTS.map(str), st.sampled_from(ODD_CELLS), st.text(max_size=6))
HEADER_NAMES = ["length", "count", "seq_len", "num_tokens", "x", "Length", "input_ids", "", "n", "freq", "len"]


@st.composite
def delimited(draw, sep=None) -> bytes:
    """CSV or TSV text: optional header (duplicates allowed), ragged rows, odd cells, any line ending."""
    sep = sep or draw(st.sampled_from([",", "\t", ";"]))
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    width = draw(st.integers(1, 3))
    rows = draw(st.lists(st.lists(CELLS, min_size=width, max_size=width + draw(st.integers(0, 1))), max_size=25))
    lines = [sep.join(r) for r in rows]
    if draw(st.booleans()):
        lines.insert(0, sep.join(draw(st.lists(st.sampled_from(HEADER_NAMES), min_size=width, max_size=width))))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "")
    text = eol.join(lines) + draw(st.sampled_from(["", eol]))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + text.encode("utf-8", "surrogatepass")


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5000),
    BIG_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
JSON_KEYS = st.sampled_from(["length", "input_ids", "seq_len", "count", "mode", "lengths", "x", "path", "ids"])
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda c: st.lists(c, max_size=5) | st.dictionaries(JSON_KEYS, c, max_size=4), max_leaves=25
)


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=True)


@st.composite
def json_text(draw) -> bytes:
    """A JSON document: lengths, records, {"lengths": [...]}, anything, maybe nested deep or cut short."""
    top = draw(
        st.one_of(
            st.lists(st.integers(-2, 10**6), max_size=30),
            st.lists(JSON_SCALARS, max_size=10),
            st.lists(st.fixed_dictionaries({"length": JSON_SCALARS}), max_size=10),
            st.lists(st.fixed_dictionaries({"input_ids": st.lists(st.integers(0, 9), max_size=6)}), max_size=10),
            st.fixed_dictionaries({"lengths": st.lists(JSON_SCALARS, max_size=10)}),
            JSON_VALUES,
        )
    )
    text = _dumps(top)
    depth = draw(st.sampled_from([0, 0, 0, 10, 70, 2000]))
    text = "[" * depth + text + "]" * depth
    return _mutate(draw, text.encode("utf-8", "surrogatepass"))


@st.composite
def jsonl_text(draw) -> bytes:
    lines = draw(
        st.lists(
            st.one_of(
                JSON_VALUES.map(_dumps),
                st.integers(-2, 10**6).map(str),
                st.sampled_from(["{bad", "[" * 100, "9" * 5000, "", "  "]),
            ),
            max_size=15,
        )
    )
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return _mutate(draw, eol.join(lines).encode("utf-8", "surrogatepass"))


NPY_DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.bool_,
    np.complex64,
    ">i4",
    "<u2",
]


@st.composite
def npy_bytes(draw) -> bytes:
    """A saved array (plain, or a legacy packed object array), then maybe a lying header or a cut body."""
    buf = io.BytesIO()
    if draw(st.integers(0, 3)) == 0:
        rows = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "input_ids": st.lists(st.integers(0, 9), max_size=12),
                        "seq_start_id": st.lists(st.one_of(st.integers(-3, 14), BIG_INTS), max_size=4),
                    }
                ),
                max_size=4,
            )
        )
        arr = np.empty(len(rows), dtype=object)
        arr[:] = rows
        np.save(buf, arr, allow_pickle=True)
    else:
        dtype = draw(st.sampled_from(NPY_DTYPES))
        np.save(buf, draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6))))
    data = buf.getvalue()
    if draw(st.booleans()):
        claim = draw(st.sampled_from([b"(10000000000000,)", b"(-1,)", b"(2, 2)", b"()", b"(0,)", b"(3, -3)"]))
        data = data.replace(data[data.find(b"(", 10) : data.find(b")", 10) + 1], claim, 1)
    return _mutate(draw, data)


@st.composite
def parquet_bytes(draw) -> bytes:
    """A Parquet file: a length column of some type, maybe counts, ids or a packed data set's columns."""
    n = draw(st.integers(0, 6))
    columns = {}
    kind = draw(st.sampled_from(["length", "hist", "ids", "packed", "strings", "floats"]))
    if kind in ("length", "hist"):
        arrow_type, low, high = draw(
            st.sampled_from([(pa.int64(), -3, 2**62), (pa.uint64(), 0, 2**64 - 1), (pa.int32(), -3, 2**31 - 1)])
        )
        values = st.integers(low, high) | st.integers(max(low, 0), 5000)
        columns["length"] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), arrow_type)
    if kind == "hist":
        columns["count"] = pa.array(draw(st.lists(st.integers(-1, 2**41), min_size=n, max_size=n)), pa.int64())
    if kind == "strings":
        columns["seq_len"] = pa.array(draw(st.lists(CELLS, min_size=n, max_size=n)), pa.string())
    if kind == "floats":
        columns["num_tokens"] = pa.array(draw(st.lists(st.floats(), min_size=n, max_size=n)), pa.float64())
    if kind in ("ids", "packed"):
        columns["input_ids"] = pa.array(
            draw(st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=n, max_size=n)), pa.list_(pa.int32())
        )
    if kind == "packed":
        arrow_type, low, high = draw(st.sampled_from([(pa.int64(), -2, 2**63 - 1), (pa.uint64(), 0, 2**64 - 1)]))
        starts = st.lists(st.integers(max(low, 0), 9) | st.integers(low, high), max_size=3)
        columns["seq_start_id"] = pa.array(
            draw(st.lists(st.one_of(st.none(), starts), min_size=n, max_size=n)), pa.list_(arrow_type)
        )
    buf = io.BytesIO()
    pq.write_table(pa.table(columns) if columns else pa.table({"x": pa.array([], pa.int8())}), buf)
    return _mutate(draw, buf.getvalue())


MOCK_PATHS = ["nope.csv", "lens.csv", ".", "pipe.csv", "loop.csv", "/proc/self/environ", "", 5, None, ["a"], True]


@st.composite
def mock_config(draw) -> bytes:
    cfg = {"mode": draw(st.sampled_from(["file", "distribution", "verification", "x", None, 1]))}
    if draw(st.booleans()):
        cfg["type"] = draw(st.sampled_from(["lognormal", "uniform", None]))
    if cfg["mode"] == "file" or draw(st.booleans()):
        cfg["path"] = draw(st.sampled_from(MOCK_PATHS))
    numbers = st.one_of(
        st.integers(-5, 10_000),
        st.floats(allow_nan=True, allow_infinity=True),
        BIG_INTS,
        st.booleans(),
        st.none(),
        st.text(max_size=3),
        st.sampled_from([1e200, 2**24, 2**24 + 1]),
    )
    for key in ("min_seq_len", "max_seq_len", "mean_seq_len", "lognormal_sigma"):
        if draw(st.integers(0, 3)):
            cfg[key] = draw(numbers)
    return _mutate(draw, _dumps(cfg).encode("utf-8", "surrogatepass"), light=True)


def _mutate(draw, data: bytes, light: bool = False) -> bytes:
    """Leave alone, cut short, or overwrite a few bytes with anything."""
    how = draw(st.sampled_from(["keep", "keep", "keep"] + ([] if light else ["cut", "flip"]) + ["flip"]))
    if how == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        data = bytearray(data)
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return data


FILES = {
    "csv": (delimited(), ".csv"),
    "tsv": (delimited("\t"), ".tsv"),
    "json": (json_text(), ".json"),
    "jsonl": (jsonl_text(), ".jsonl"),
    "npy": (npy_bytes(), ".npy"),
    "parquet": (parquet_bytes(), ".parquet"),
    "mock": (mock_config(), ".json"),
    "bytes": (st.binary(max_size=400), ".csv"),
}


# ---------------------------------------------------------------------------------------------- the property
@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    """A folder with the things mock configs may point at: a good CSV, a FIFO, a symlink loop."""
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "lens.csv").write_text("length\n5\n7\n")
    os.mkfifo(folder / "pipe.csv")
    os.symlink(folder / "loop.csv", folder / "loop.csv")
    return folder


def assert_consistent(hist: LengthHistogram) -> None:
    lengths, counts = hist.lengths.tolist(), hist.counts.tolist()
    assert all(1 <= n <= MAX_LENGTH for n in lengths) and lengths == sorted(set(lengths))
    assert all(c >= 1 for c in counts)
    assert hist.num_samples == sum(counts)
    tokens = sum(n * c for n, c in zip(lengths, counts, strict=True))
    assert hist.total_tokens == tokens < 2**63


def read_both_ways(data: bytes, name: str, folder) -> list[str]:
    """Read through parse_lengths and load_lengths; return how each ended ("ok" or "refused")."""
    ends = []
    path = folder / name
    path.write_bytes(data)
    for label, read in (
        ("parse", lambda: parse_lengths(data, name, mock_samples=MOCK_SAMPLES)),
        ("load", lambda: load_lengths(path, mock_samples=MOCK_SAMPLES)),
    ):
        try:
            hist = read()
        except InputError as e:
            named = name if label == "parse" else str(path)
            assert named in str(e), f"{label}: message does not name the file: {e}"
            ends.append("refused")
        else:
            assert_consistent(hist)
            ends.append("ok")
    return ends


@pytest.mark.parametrize("fmt", list(FILES))
@QUICK
@given(data=st.data())
def test_every_format_reads_or_refuses_cleanly(fmt, data, fuzz_dir):
    strategy, suffix = FILES[fmt]
    name = f"f_{fmt}{data.draw(st.sampled_from([suffix, suffix, '', '.txt', '.dat']))}"
    read_both_ways(data.draw(strategy), name, fuzz_dir)


@pytest.mark.parametrize("fmt", list(FILES))
@LONG
@given(data=st.data())
def test_every_format_reads_or_refuses_cleanly_long(fmt, data, fuzz_dir):
    strategy, suffix = FILES[fmt]
    name = f"g_{fmt}{data.draw(st.sampled_from([suffix, suffix, '', '.txt', '.dat']))}"
    read_both_ways(data.draw(strategy), name, fuzz_dir)


@QUICK
@given(text=delimited(","))
def test_skip_mode_never_raises_anything_else(text):
    try:
        assert_consistent(parse_lengths(text, "skip.csv", on_bad="skip"))
    except InputError as e:
        assert "skip.csv" in str(e)


@QUICK
@given(
    lengths=st.lists(st.integers(1, MAX_LENGTH), min_size=1, max_size=50),
    counts=st.lists(st.integers(0, 2**40), min_size=50, max_size=50),
)
def test_valid_histograms_are_read_exactly(lengths, counts):
    rows = list(zip(lengths, counts, strict=False))
    text = "length,count\n" + "\n".join(f"{n},{c}" for n, c in rows)
    expected: dict[int, int] = {}
    for n, c in rows:
        expected[n] = expected.get(n, 0) + c
    expected = {n: c for n, c in expected.items() if c}
    tokens = sum(n * c for n, c in expected.items())
    try:
        hist = parse_lengths(text.encode(), "h.csv")
    except InputError as e:
        assert tokens >= 2**63 or not expected, str(e)
        return
    assert dict(zip(hist.lengths.tolist(), hist.counts.tolist(), strict=True)) == expected
    assert hist.total_tokens == tokens
