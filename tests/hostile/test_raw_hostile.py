"""Hostile raw data for ``python -m advisor tokenize`` and the dashboard's raw upload: decompression and Parquet
bombs, truncated streams, lone surrogates and bytes that are not UTF-8, deep JSON, symlinked folders, odd names.

Each case is a real file built here; each must end in lengths with the bad records counted at their place, or in
one ``InputError`` saying what and where, never in a traceback, a hang or gigabytes of memory."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import zlib
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.data.ingest import load_lengths, parse_lengths
from advisor.data.tokenize.chat import ChatSettings
from advisor.data.tokenize.engine import TokenizeJob, tokenize
from advisor.data.tokenize.records import (
    BlankLines,
    LongLine,
    bounded_lines,
    data_files_and_notes,
    iter_records,
    parse_record,
    plan_shards,
)
from advisor.data.tokenize.sft import SftSettings
from advisor.data.tokenize.text import clean_record
from advisor.errors import InputError
from advisor.ui import raw_data
from advisor.ui import state as ui

GOOD = b'{"input": "hello there", "output": "world"}\n'
CHAT_GOOD = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
TINY = raw_data.tokenizer_choices("")["tiny-bpe"]


def run(path, fmt="sft", on_bad="skip", sample=None):
    settings = ChatSettings() if fmt == "chat" else SftSettings()
    return tokenize(
        TokenizeJob(data=str(path), tokenizer=TINY, fmt=fmt, settings=settings, on_bad=on_bad), workers=1, sample=sample
    )


def reasons(result) -> dict[str, tuple[int, str]]:
    return {e.reason: (e.count, e.first_at) for e in result.excluded}


def _one_line_gzip(mib: int, chunk: bytes, level: int = 1) -> bytes:
    """GOOD, then one line of ``mib`` MiB of ``chunk`` (never built whole: compressed piece by piece), then GOOD."""
    co = zlib.compressobj(level, wbits=31)
    parts = [co.compress(GOOD + b'{"input": "')]
    parts += [co.compress(chunk) for _ in range(mib * (1 << 20) // len(chunk))]
    parts += [co.compress(b'", "output": "x"}\n' + GOOD), co.flush()]
    return b"".join(parts)


# ------------------------------------------------------------------------------------- compressed streams
@pytest.mark.slow  # big hostile inputs read to their budget
def test_an_over_long_gzip_line_is_one_bad_record_at_its_line_and_a_bomb_stops_at_the_budget(tmp_path):
    path = tmp_path / "long.jsonl.gz"
    path.write_bytes(_one_line_gzip(40, os.urandom(1 << 19).hex().encode()))  # 40 MB of text, 2:1 compressed
    got = run(path)
    assert got.lengths.size == 2
    assert reasons(got) == {
        "records left out: is 40.0 MB, over the 4 MB a record may have here": (1, "long.jsonl.gz, line 2")
    }
    sampled = run(path, sample=2)  # --sample counts the records first: the same bounded read
    assert sampled.total_records == 3
    with pytest.raises(InputError, match=r"long.jsonl.gz, line 2: is 40.0 MB, over the 4 MB"):
        run(path, on_bad="error")
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(_one_line_gzip(400, b"a" * (1 << 20), 9))  # 400 MB of one letter in 400 kB
    got = run(bomb)
    ((reason, where),) = reasons(got).items()
    assert got.lengths.size == 1 and where == (1, "bomb.jsonl.gz, line 2")
    assert re.fullmatch(
        r"records left out: decompresses to over \d+ MB \(over 250 times the file's size, or the "
        r"limit: a decompression bomb\?\); the rest is not read",
        reason,
    )


def test_a_small_zstd_bomb_is_refused_whole_before_a_record_is_parsed_and_a_cut_stream_ends_with_one_message(
    tmp_path, monkeypatch
):
    import zstandard

    import advisor.data.tokenize.records as records

    c = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = b"b" * (1 << 20)
    data = (
        c.compress(GOOD + b'{"input": "')
        + b"".join(c.compress(chunk) for _ in range(400))
        + c.compress(b'"}\n' + GOOD)
        + c.flush()
    )
    (tmp_path / "bomb.jsonl.zst").write_bytes(data)
    # 4M short records in a few kB (the round-4 case): each a cheap record, together 25 s to parse to the limit
    (tmp_path / "many.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(GOOD * 4_000_000))
    parsed = []
    monkeypatch.setattr(records, "parse_record", lambda line: parsed.append(line))  # never reached
    for name in ("bomb.jsonl.zst", "many.jsonl.zst"):
        with pytest.raises(
            InputError,
            match=rf"^{name}: no record could be tokenized \(1 records left out: "
            r"decompresses to over 64 MB \(over 250 times .* bomb\?\); not read, first at "
            rf"{name}, line 1\)",
        ):
            run(tmp_path / name)
        with pytest.raises(InputError, match=rf"^{name}, line 1: decompresses to over 64 MB"):
            run(tmp_path / name, on_bad="error")  # the file named once, not as its own folder
        assert parsed == []
    monkeypatch.undo()
    below = tmp_path / "below.jsonl.zst"  # 4 MB of the same records: far past 250x, under the floor, all read
    below.write_bytes(zstandard.ZstdCompressor(level=19).compress(GOOD * (4_000_000 // len(GOOD))))
    assert run(below).lengths.size == 4_000_000 // len(GOOD)
    whole = zstandard.ZstdCompressor().compress(GOOD * 20_000)
    for cut in (5, len(whole) // 3, len(whole) - 3):
        (tmp_path / "cut.jsonl.zst").write_bytes(whole[:cut])
        rows = [r for recs, _, bad in iter_records(plan_shards([str(tmp_path / "cut.jsonl.zst")])[0]) for r in bad]
        assert len(rows) == 1 and "ends inside a frame (the file is truncated" in rows[0].reason, cut


def test_lines_are_read_in_bounded_pieces_whatever_the_cuts():
    @given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 50), st.integers(1, 64))
    @settings(max_examples=300, deadline=None)
    def check(pieces, max_line, read_size):
        # no spaces, tabs or CRs: a line of only those is blank, and counted as such however long it is
        data = b"".join(pieces).translate(bytes.maketrans(b" \t\r", b"..."))
        stream = [data[i : i + read_size] for i in range(0, len(data), read_size)]
        reads = iter(stream)
        got = []
        for item in bounded_lines(lambda n: next(reads, b""), max_line):
            got += [b"\n"] * item.count if isinstance(item, BlankLines) else [item]
        assert got == list(_split_nl(data, max_line))

    import advisor.data.tokenize.records as records

    old = records.READ_BYTES
    try:
        records.READ_BYTES = 7  # many reads per line: lines cross read boundaries in every way
        check()
    finally:
        records.READ_BYTES = old


@pytest.mark.slow  # big hostile inputs read to their budget
def test_a_gzip_of_millions_of_blank_lines_is_its_two_records(tmp_path):
    path = tmp_path / "blank.jsonl.gz"
    path.write_bytes(gzip.compress(GOOD + b"\n" * (32 << 20) + b" \r\n" * 1000 + GOOD))
    got = run(path)
    assert got.lengths.size == 2 and not got.excluded


def _split_nl(data: bytes, max_line: int):
    parts = data.split(b"\n")
    for k, part in enumerate(parts):
        line = part + b"\n" if k < len(parts) - 1 else part
        if not line:
            continue
        yield line if len(line) <= max_line else LongLine(len(line))


# ------------------------------------------------------------------------------------- one text decoder
def test_lone_surrogates_and_invalid_bytes_are_bad_records_at_their_place(tmp_path):
    path = tmp_path / "sur.jsonl"
    path.write_bytes(
        GOOD
        + b'{"input": "a\\ud800b", "output": "x"}\n'
        + b'{"input": "\\ud83d\\ude00", "output": "y"}\n'
        + b'{"input": "\xff", "output": "z"}\n'
        + GOOD
    )
    got = run(path)
    assert got.lengths.size == 3 and got.sample_index.tolist() == [0, 2, 4]  # a valid pair is one character
    assert reasons(got) == {
        "records left out: holds a lone surrogate (\\ud800) in input: not UTF-8 text": (1, "sur.jsonl, line 2"),
        "records left out: is not UTF-8 text (byte 11 of the line)": (1, "sur.jsonl, line 4"),
    }
    with pytest.raises(InputError, match=r"sur.jsonl, line 2: holds a lone surrogate"):
        run(path, on_bad="error")
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(
        CHAT_GOOD + b'{"messages": [{"role": "user", "content": "\\udc00"}, {"role": "assistant", "content": "x"}]}\n'
    )
    got = run(chat, fmt="chat")
    assert got.lengths.size == 1
    assert reasons(got) == {
        "records left out: holds a lone surrogate (\\udc00) in messages[0].content: not UTF-8 text": (
            1,
            "chat.jsonl, line 2",
        )
    }


def test_parquet_and_arrow_binary_values_pass_the_same_decoder(tmp_path):
    table = pa.table(
        {"input": pa.array([b"good", b"\xff\xfe", "caf\u00e9".encode()], pa.binary()), "output": ["a", "b", "c"]}
    )
    pq.write_table(table, tmp_path / "b.parquet")
    with pa.ipc.new_stream(str(tmp_path / "b.arrow"), table.schema) as w:
        w.write_table(table)
    for name in ("b.parquet", "b.arrow"):
        got = run(tmp_path / name)
        assert got.sample_index.tolist() == [0, 2], name
        assert reasons(got) == {
            "records left out: is not UTF-8 text in input (byte 0 of the value: 0xff)": (1, f"{name}, row 2")
        }


def test_the_decoder_agrees_with_utf8_on_any_string():
    @given(st.text(alphabet=st.characters(), max_size=20))
    @settings(max_examples=300, deadline=None)
    def check(text):
        record, problem = clean_record({"input": text, "more": [text, {"k": text}]})
        try:
            text.encode("utf-8")
            assert problem is None and record["input"] == text
        except UnicodeEncodeError:
            assert record is None and "lone surrogate" in problem

    check()


def test_deep_or_huge_json_is_refused_before_json_loads():
    deep_tools = b'{"messages": [], "tools": [' + b'{"a": [' * 200 + b']}' * 200 + b']}'
    assert parse_record(deep_tools) == (None, "is nested more than 64 levels deep")
    many = b'{"tools": [' + b"[]," * 1_000_001 + b"[]]}"
    assert parse_record(many) == (None, "holds over 1,000,000 JSON values: far more than any chat or prompt")
    text_commas = json.dumps({"input": "," * 2_000_000, "output": "x"}).encode()
    assert parse_record(text_commas)[1] is None  # commas inside a string are text


# ------------------------------------------------------------------------------------- Parquet
@pytest.mark.slow  # big hostile inputs read to their budget
def test_parquet_list_and_dictionary_bombs_are_refused_on_the_command_line_path(tmp_path, monkeypatch):
    ids = pa.ListArray.from_arrays(pa.array([0, 50_000_000], pa.int32()), pa.nulls(50_000_000, pa.int8()).fill_null(0))
    pq.write_table(pa.table({"input": ["x"], "output": ["y"], "ids": ids}), tmp_path / "list.parquet")
    assert (tmp_path / "list.parquet").stat().st_size < 200_000
    with pytest.raises(InputError, match=r"list.parquet, row group 1: would decode to about \d+ MB from .* stored"):
        run(tmp_path / "list.parquet")
    dictionary = pa.DictionaryArray.from_arrays(pa.array(np.zeros(5000, np.int32)), pa.array(["x" * 200_000]))
    pq.write_table(pa.table({"input": dictionary, "output": ["y"] * 5000}), tmp_path / "dict.parquet")
    with pytest.raises(InputError, match=r"dict.parquet, row group 1: would decode to about 954 MB"):
        run(tmp_path / "dict.parquet")
    # a writer that records no decoded string sizes: the bomb is caught while reading, as dictionaries
    from advisor.data import parquet_footer

    monkeypatch.setattr(
        parquet_footer.RowGroup,
        "decoded_estimate",
        lambda g: sum(max(8 * c.num_values, c.uncompressed) for c in g.chunks),
    )
    monkeypatch.setattr("advisor.data.tokenize.records.MIN_BOMB_BYTES", 8 << 20)  # less text to tokenize first
    got = run(tmp_path / "dict.parquet")
    (reason, (count, where)), (unread, (rest, next_row)) = reasons(got).items()
    assert "decodes to over 10 MB (over 1,100 times the bytes it stores" in reason and count == 1
    stop = got.lengths.size + 1
    assert where == f"dict.parquet, row {stop}" and got.lengths.size < 100
    # every row after the stop is counted as left out: none vanishes, and a --sample may pick any of them
    assert unread == f"records left out: was not read (reading stopped at row {stop})"
    assert (rest, next_row) == (5000 - stop, f"dict.parquet, row {stop + 1}")
    sampled = run(tmp_path / "dict.parquet", sample=50)
    assert sampled.lengths.size + sum(e.count for e in sampled.excluded) == 50


@pytest.mark.slow  # big hostile inputs read to their budget
def test_many_row_groups_make_few_shards_and_the_dashboard_refuses_past_its_bound(tmp_path):
    n = 3000
    table = pa.table({"input": [f"q{i}" for i in range(n)], "output": ["a"] * n})
    pq.write_table(table, tmp_path / "rg.parquet", row_group_size=1)
    shards = plan_shards([str(tmp_path / "rg.parquet")])
    assert len(shards) <= 64 and sum(s.records for s in shards) == n
    assert [s.first_line for s in shards[:3]] == [1, 1 + shards[0].records, 1 + shards[0].records + shards[1].records]
    state: dict = {}
    ui.init_state(state)
    data = (tmp_path / "rg.parquet").read_bytes()
    assert not raw_data.use_raw_upload(state, data, "rg.parquet", "tiny-bpe", "sft", 512, env="")
    assert "has 3,000 row groups, over the dashboard's 2,000" in state["upload_error"]
    got = run(tmp_path / "rg.parquet")
    assert got.lengths.size == n and got.sample_index.tolist() == list(range(n))


# ------------------------------------------------------------------------------------- folders and names
def test_folders_with_symlinks_read_their_own_files_only(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(GOOD * 3)
    os.symlink(folder / "a.jsonl", folder / "b.jsonl")  # inside: read
    (tmp_path / "secret.jsonl").write_bytes(GOOD)
    os.symlink(tmp_path / "secret.jsonl", folder / "out.jsonl")
    os.symlink(folder / "loop.jsonl", folder / "loop.jsonl")
    os.symlink(folder, folder / "up")
    os.symlink(".", folder / "here.jsonl")
    files, notes = data_files_and_notes(str(folder))
    assert [os.path.basename(f) for f in files] == ["a.jsonl", "b.jsonl"]
    assert "symlinks leading out of the folder: 1" in notes[0] and "symlink loops: 1" in notes[0]
    got = run(folder)
    assert got.lengths.size == 6 and any("symlinks leading out" in n for n in got.notes)
    deep, _ = data_files_and_notes(str(folder / "**" / "*.jsonl"))  # ** never follows up/ back into the folder
    assert [os.path.basename(f) for f in deep] == ["a.jsonl", "b.jsonl", "out.jsonl"]  # named by the pattern


def test_odd_file_names_are_read_by_their_real_suffix_and_shown_escaped(tmp_path):
    for name in ("a\nb.csv", "c\x1b[31md.csv", ".csv"):
        (tmp_path / name).write_text("length\n5\n7\n")
        hist = load_lengths(str(tmp_path / name))
        assert hist.lengths.tolist() == [5, 7]
        assert "\n" not in hist.source and "\x1b" not in hist.source
    (tmp_path / "e\nf.jsonl").write_bytes(GOOD)
    got = run(tmp_path / "e\nf.jsonl")
    assert got.lengths.size == 1


def test_a_hex_cell_is_not_a_decimal_length():
    with pytest.raises(InputError, match=r"a.csv, line 3: length '0x10' is not a decimal integer"):
        parse_lengths(b"length\n5\n0x10\n7\n", "a.csv")
    hist = parse_lengths(b"length,count\n5,2\n0X1f,3\n", "h.csv", on_bad="skip")
    assert hist.lengths.tolist() == [5] and hist.excluded[0].first_at == "line 3"
    assert parse_lengths(b"length\n16\n", "ok.csv").lengths.tolist() == [16]
    assert np.array_equal(parse_lengths(b"length\n10\n", "x.csv").counts, [1])


def test_gzip_garbage_and_a_cut_gzip_end_with_one_bad_row(tmp_path):
    (tmp_path / "junk.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(64))
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(GOOD * 5000)[:-40])
    for name in ("junk.jsonl.gz", "cut.jsonl.gz"):
        rows = [b for _, _, bad in iter_records(plan_shards([str(tmp_path / name)])[0]) for b in bad]
        assert len(rows) == 1 and "cannot be decompressed from here on" in rows[0].reason, name


# ------------------------------------------------------------------------------------- the fuzz bench
@pytest.mark.slow  # long fuzzing
def test_the_raw_fuzz_generators_make_inputs_every_reader_answers(tmp_path):
    """bench/fuzz_raw.py's generators at a small scale, read in this process (the bench reads thousands in
    children under 2 GiB and 60 s): every read ends accepted or refused with the input named."""
    from bench import fuzz_raw

    inputs = fuzz_raw.generate(tmp_path, 30, seed=5, small=True)
    assert Counter(s for s, _, _ in inputs) == dict.fromkeys(fuzz_raw.SURFACES, 30)
    sft_tok, chat_tok, _ = fuzz_raw.tokenizers()
    outcomes: Counter = Counter()
    bad = []
    for k, (surface, fmt, path) in enumerate(inputs):
        for how, read, named in fuzz_raw.reads(path, fmt, sft_tok, chat_tok, random.Random(k)):
            if how in ("skip", "upload"):
                outcome, detail = fuzz_raw.classify(read, named)
                outcomes[outcome] += 1
                if outcome in fuzz_raw.BAD:
                    bad.append((surface, path, how, detail))
    assert not bad, bad[:5]
    assert outcomes["accepted"] > 50 and outcomes["refused"] > 20, outcomes


def test_a_data_set_message_shows_a_hostile_file_name_escaped(tmp_path):
    """A whole-data-set message (no record could be tokenized) names the file as it is shown, never with a raw
    newline or terminal escape in it."""
    path = tmp_path / "a\nb\x1b[31m.jsonl"
    path.write_bytes(b'{"input": 1, "output": 2}\n')
    with pytest.raises(InputError) as e:
        tokenize(TokenizeJob(data=str(path), tokenizer=TINY, fmt="sft", settings=SftSettings(), on_bad="skip"))
    text = str(e.value)
    assert "\n" not in text and "\x1b" not in text and "no record could be tokenized" in text, text
