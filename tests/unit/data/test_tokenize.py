"""The tokenize command end to end: formats, shards, the local and Ray engines, bad input, and --sample.

The lengths rules themselves are compared with Megatron-Bridge's own dataset classes in
tests/oracle/test_tokenize_exact.py; here the engines must give those same lengths for every record, in data-set
order, whatever the file layout."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advisor.data.ingest import load_lengths
from advisor.data.lengths import LengthHistogram
from advisor.data.tokenize.chat import ChatSettings, chat_lengths
from advisor.data.tokenize.engine import TokenizeJob, lengths_csv, tokenize
from advisor.data.tokenize.records import plan_shards
from advisor.data.tokenize.sft import SftSettings, sft_lengths
from advisor.data.tokenize.tokenizer import load_tokenizer
from advisor.errors import InputError
from advisor.limits import MAX_PACK
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.packing.sampling import max_bootstraps, sample_estimate
from tests.support.cli import advisor, in_process
from tests.support.tokenizer_fixture import build_tokenizer

WORDS = (
    "packing sequence model token data train long short answer question the a of to in is on why how "
    "überlänge naïve 数据 🙂"
).split()


def _text(rng, lo, hi):
    return " ".join(rng.choice(WORDS, rng.integers(lo, hi)).tolist())


def _sft_records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"input": _text(rng, 3, 400), "output": _text(rng, 1, 60)} for _ in range(n)]


def _chat_records(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "answer briefly"}] if i % 3 == 0 else []
        for _ in range(rng.integers(1, 4)):
            msgs += [
                {"role": "user", "content": _text(rng, 2, 40)},
                {"role": "assistant", "content": _text(rng, 2, 60)},
            ]
        out.append({"messages": msgs})
    return out


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_local_engine_gives_the_exact_lengths_in_order_across_shards_and_workers(tok, tmp_path, monkeypatch):
    records = _sft_records(1500)
    data = _jsonl(tmp_path / "sft.jsonl", records)
    monkeypatch.setattr("advisor.data.tokenize.records.SHARD_BYTES", 20_000)  # many shards from one file
    monkeypatch.setattr("advisor.data.tokenize.records.MIN_SHARD_BYTES", 10_000)
    assert len(plan_shards([str(data)])) > 10
    settings = SftSettings(max_seq_length=300)
    expected, problems = sft_lengths(records, load_tokenizer(tok), settings)
    assert not problems
    for workers in (1, 2):
        got = tokenize(TokenizeJob(data=str(data), tokenizer=tok, settings=settings), workers=workers)
        assert got.total_records == 1500 and got.sample_index.tolist() == list(range(1500))
        assert got.lengths.tolist() == expected.tolist()
    assert got.lengths.max() <= 300  # GPTSFTDataset cut the named field


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_every_layout_of_the_same_records_gives_the_same_lengths(tok, tmp_path):
    records = _chat_records(300)
    expected, _ = chat_lengths(records, load_tokenizer(tok), ChatSettings())
    _jsonl(tmp_path / "plain.jsonl", records)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    import zstandard

    (tmp_path / "c.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in records).encode())
    )
    table = pa.Table.from_pylist(records)
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=64)
    shards = tmp_path / "shards"
    shards.mkdir()
    _jsonl(shards / "part-000.jsonl", records[:120])
    _jsonl(shards / "part-001.jsonl", records[120:])
    saved = tmp_path / "saved"  # datasets.save_to_disk: Arrow IPC stream files beside state.json
    saved.mkdir()
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    with pa.ipc.new_stream(str(saved / "data-00000-of-00001.arrow"), table.schema) as w:
        w.write_table(table, max_chunksize=50)
    for data in ("plain.jsonl", "c.jsonl.gz", "c.jsonl.zst", "c.parquet", "shards", "saved", "shards/part-*.jsonl"):
        got = tokenize(
            TokenizeJob(data=str(tmp_path / data), tokenizer=tok, fmt="chat", settings=ChatSettings()), workers=2
        )
        assert got.lengths.tolist() == expected.tolist(), data


@pytest.mark.slow  # starts Ray
def test_ray_engine_equals_the_local_one_byte_for_byte(tok, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    records = _sft_records(800, seed=3)
    records[17] = {"input": "no label here"}  # one record the template cannot fill, left out by both
    data = _jsonl(tmp_path / "sft.jsonl", records)
    monkeypatch.setattr("advisor.data.tokenize.records.SHARD_BYTES", 30_000)
    monkeypatch.setattr("advisor.data.tokenize.records.MIN_SHARD_BYTES", 10_000)
    job = TokenizeJob(data=str(data), tokenizer=tok, settings=SftSettings(), on_bad="skip")
    local = tokenize(job, workers=2)
    remote = tokenize(job, engine="ray", workers=2)
    assert lengths_csv(remote) == lengths_csv(local)
    assert lengths_csv(remote, histogram=True) == lengths_csv(local, histogram=True)
    assert "Ray's groupby(length) histogram equals the per-sample lengths" in remote.notes
    assert remote.excluded == local.excluded and local.excluded[0].count == 1
    assert 17 not in local.sample_index.tolist() and local.sample_index.size == 799
    hopeless = _jsonl(tmp_path / "none.jsonl", [{"input": "no label"}] * 5)
    with pytest.raises(InputError, match="no record could be tokenized"):  # not Ray's empty groupby
        tokenize(
            TokenizeJob(data=str(hopeless), tokenizer=tok, settings=SftSettings(), on_bad="skip"),
            engine="ray",
            workers=1,
        )


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_the_command_writes_a_lengths_file_every_other_command_reads(tok, tmp_path):
    records = _sft_records(400, seed=5)
    data = _jsonl(tmp_path / "sft.jsonl", records)
    out = tmp_path / "lengths.csv"
    proc = advisor("tokenize", data, "--tokenizer", tok, "--max-seq-length", 512, "-o", out, "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["tokenized"] == 400 and summary["records_per_second_per_worker"] > 0
    hist = load_lengths(out)
    expected, _ = sft_lengths(records, load_tokenizer(tok), SftSettings(max_seq_length=512))
    assert hist.order.tolist() == expected.tolist()  # per sample, in data-set order
    packed = advisor("pack", out, "--pack-size", 2048, "--json", "--quiet")
    assert packed.returncode == 0 and json.loads(packed.stdout)["num_sequences"] == 400


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text('{"input": "a", "output": "b"}\n{"input": "a", \n'), "line 2: is not valid JSON"),
        (
            lambda p: p.write_bytes(b'{"input": "a", "output": "b"}\n{"input": "\xff\xfe", "output": "b"}\n'),
            "line 2: is not UTF-8 text",
        ),
        (
            lambda p: p.write_text('{"input": "a"}\n{"input": "b"}\n{"input": "c", "output": "d"}\n'),
            "2 record(s) cannot be tokenized",
        ),
        (lambda p: p.write_text(""), "holds no records"),
    ],
)
def test_bad_data_gets_one_message_with_its_place(tok, tmp_path, capsys, make, message):
    data = tmp_path / "bad.jsonl"
    make(data)
    proc = in_process(capsys, "tokenize", data, "--tokenizer", tok, "--quiet")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "bad.jsonl" in proc.stderr


@pytest.mark.parametrize("command", ["tokenize", "prepare"])
def test_an_error_run_names_the_first_bad_record_whatever_its_kind(tok, tmp_path, capsys, command):
    """A missing field on line 2 comes before an unreadable line 4: the message names line 2 (it named line 4:
    unreadable records were checked first)."""
    data = tmp_path / "odd.jsonl"
    data.write_text(
        '{"input": "a", "output": "b"}\n{"input": "x", "output": null}\n{"input": "c", "output": "d"}\n[1, 2]\n'
    )
    extra = ["--pack-size", "64", "-o", tmp_path / "out"] if command == "prepare" else []
    proc = in_process(capsys, command, data, "--tokenizer", tok, *extra, "--quiet")
    assert proc.returncode == 2 and proc.stderr.startswith("error: odd.jsonl, line 2:"), proc.stderr


def test_skip_counts_what_it_leaves_out_with_the_first_place(tok, tmp_path, capsys):
    data = tmp_path / "mixed.jsonl"
    data.write_text(
        '{"input": "a", "output": "b"}\nnot json\n{"input": "c"}\n{"input": "e", "output": "f"}\n{"input": "g"}\n'
    )
    proc = in_process(capsys, "tokenize", data, "--tokenizer", tok, "--on-bad", "skip", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tokenized"] == 2 and out["records"] == 5
    excluded = {e["first_at"].split(", ")[1]: e["count"] for e in out["excluded"]}
    assert excluded == {"line 2": 1, "line 3": 2}  # not JSON once; the label missing twice, first on line 3
    assert any("output" in e["reason"] for e in out["excluded"])


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_tokenizers_are_local_folders_only(tok, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", _sft_records(3))
    hub = advisor("tokenize", data, "--tokenizer", "meta-llama/Llama-3.1-8B", "--quiet")
    assert hub.returncode == 2 and "local" in hub.stderr and "Traceback" not in hub.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer_config.json").write_text("{}")
    missing = advisor("tokenize", data, "--tokenizer", broken, "--quiet")
    assert missing.returncode == 2 and "tokenizer.json" in missing.stderr


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_a_chat_template_that_raises_names_the_record(tok, tmp_path):
    data = _jsonl(
        tmp_path / "c.jsonl",
        [
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
            {"messages": [{"role": "narrator", "content": "once"}]},
        ],
    )
    proc = advisor("tokenize", data, "--tokenizer", tok, "--format", "chat", "--quiet")
    assert proc.returncode == 2 and "line 2" in proc.stderr and "Unknown role narrator" in proc.stderr


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_sample_draws_uniformly_and_reports_intervals(tok, tmp_path):
    records = _sft_records(3000, seed=9)
    data = _jsonl(tmp_path / "sft.jsonl", records)
    job = TokenizeJob(data=str(data), tokenizer=tok, settings=SftSettings(max_seq_length=512))
    a = tokenize(job, sample=500, seed=1)
    b = tokenize(job, sample=500, seed=1)
    assert a.sampled and a.sample_index.size == 500 and np.unique(a.sample_index).size == 500
    assert a.sample_index.tolist() == b.sample_index.tolist() and a.sample_index.max() < 3000
    full = tokenize(job)
    assert a.lengths.tolist() == full.lengths[a.sample_index].tolist()  # the same lengths as the full run
    proc = advisor(
        "tokenize",
        data,
        "--tokenizer",
        tok,
        "--max-seq-length",
        512,
        "--sample",
        1000,
        "--bootstraps",
        30,
        "--json",
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    est = json.loads(proc.stdout)["sample_estimate"]
    assert est["sample_size"] == 1000 and est["total"] == 3000
    assert est["packs"]["low"] < est["packs"]["high"] and est["efficiency"]["high"] - est["efficiency"]["low"] > 0
    whole = sample_estimate(full.lengths, full.lengths.size, PackingConfig(pack_size=512))
    assert whole.efficiency.low == whole.efficiency.estimate == whole.efficiency.high  # the whole set: exact
    # uniform: the draws spread over the file (each tenth of it holds about a tenth of them)
    deciles = np.bincount(a.sample_index * 10 // 3000, minlength=10)
    assert deciles.min() > 25 and deciles.max() < 75


def test_bootstraps_times_pack_size_is_bounded_a_typed_value_refused_and_the_default_lowered_with_a_note(
    tok, tmp_path, capsys
):
    """Round 4: --bootstraps 10000 at a 4M pack size ran eleven minutes. The bound is the replicates' packing work
    (``max_bootstraps``); a value typed past it is refused, the default is lowered and says so."""
    data = _jsonl(tmp_path / "sft.jsonl", _sft_records(300, seed=2))
    common = ("tokenize", data, "--tokenizer", tok, "--sample", 50, "--pack-size", MAX_PACK, "--quiet")
    refused = in_process(capsys, *common, "--bootstraps", 10_000)
    most = max_bootstraps(50, 300, MAX_PACK)
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: --bootstraps: 10,000 replicates at pack size {MAX_PACK:,} over 300 records: at most {most:,} here "
        "(each packs 300 records over arrays of pack-size length; more would take over half a minute)"
    ]
    lowered = in_process(capsys, *common, "--json")
    assert lowered.returncode == 0, lowered.stderr
    out = json.loads(lowered.stdout)
    assert out["sample_estimate"]["bootstraps"] == most < 200
    assert f"{most} bootstrap replicates, not 200" in out["notes"][-1] and out["notes"][-1] in lowered.stderr
    assert max_bootstraps(50, 300, 4096) > 200  # an ordinary pack size keeps the default


@pytest.mark.slow
def test_sample_intervals_cover_the_true_efficiency_in_95_percent_of_200_trials():
    """Each trial draws a data set of 30,000 chat-like lengths, packs all of it as Megatron-Bridge would (its
    efficiency, the truth), and estimates it from a 10 % sample with 50 bootstrap replicates."""
    cfg = PackingConfig(pack_size=4096)
    covered = 0
    for trial in range(200):
        rng = np.random.default_rng(trial)
        full = np.clip(rng.lognormal(np.log(600), 0.9, 30_000).astype(int), 16, 8192)
        result = pack(LengthHistogram.from_samples(full, source="trial"), cfg)
        truth = 100 * float(result.per_pack[0].sum()) / result.num_packs / cfg.pack_size
        est = sample_estimate(
            full[rng.choice(full.size, 3000, replace=False)], full.size, cfg, bootstraps=50, seed=trial
        )
        covered += est.efficiency.covers(truth)
    assert covered >= 190, covered


@pytest.mark.slow  # tokenizes whole files, a second or more
def test_damaged_compressed_and_columnar_files_keep_what_can_be_read(tok, tmp_path):
    import zstandard

    records = _sft_records(400, seed=13)
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    whole = zstandard.ZstdCompressor().compress(text)
    (tmp_path / "cut.jsonl.zst").write_bytes(whole[: len(whole) // 2])  # truncated mid-frame
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(text)[:-300])
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "ok.parquet", row_group_size=100, compression="snappy")
    raw = bytearray((tmp_path / "ok.parquet").read_bytes())
    raw[200:260] = b"\xff" * 60  # a data page of the first row group destroyed
    (tmp_path / "bad.parquet").write_bytes(bytes(raw))
    for name in ("cut.jsonl.zst", "cut.jsonl.gz", "bad.parquet"):
        proc = advisor("tokenize", tmp_path / name, "--tokenizer", tok, "--on-bad", "skip", "--json", "--quiet")
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, (name, proc.stderr)
        if proc.returncode == 0:
            out = json.loads(proc.stdout)
            assert any("from here on" in e["reason"] for e in out["excluded"]), (name, out["excluded"])
            assert out["tokenized"] < 400
        else:
            assert "from here on" in proc.stderr or "no record could be tokenized" in proc.stderr


def test_a_datasets_folder_ignores_its_metadata(tok, tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", _sft_records(10))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {"input": "string"}}))
    (folder / "sub").mkdir()
    got = tokenize(TokenizeJob(data=str(folder), tokenizer=tok, settings=SftSettings()), workers=1)
    assert got.total_records == 10 and any("sub-folder(s) not read (sub)" in n for n in got.notes)


def test_bad_settings_are_refused_before_any_work(tok, tmp_path, capsys):
    data = _jsonl(tmp_path / "d.jsonl", _sft_records(3))
    proc = in_process(capsys, "tokenize", data, "--tokenizer", tok, "--prompt-template", "{output} {input}", "--quiet")
    assert proc.returncode == 2 and "must come last" in proc.stderr
    with pytest.raises(InputError, match="engine"):
        tokenize(TokenizeJob(data=str(data), tokenizer=tok, settings=SftSettings()), engine="spark")


def test_settings_of_the_other_format_are_refused_with_one_message(tok, tmp_path):
    """A job's settings of the other format (SftSettings for chat) failed as an AttributeError deep in the
    tokenizer path; the engine now names the mismatch before any work."""
    data = _jsonl(tmp_path / "d.jsonl", _sft_records(3))
    with pytest.raises(InputError, match="the chat format takes ChatSettings, not SftSettings"):
        tokenize(TokenizeJob(data=str(data), tokenizer=tok, fmt="chat", settings=SftSettings()), workers=1)
    with pytest.raises(InputError, match="the sft format takes SftSettings, not ChatSettings"):
        tokenize(TokenizeJob(data=str(data), tokenizer=tok, fmt="sft", settings=ChatSettings()), workers=1)


def test_model_specific_tokenizer_classes_load_through_transformers(tmp_path):
    """transformers 5 rebuilds e.g. Qwen2Tokenizer's pipeline from its vocabulary, as Megatron-Bridge's AutoTokenizer
    sees it: the engine then encodes with transformers' own encoder (tests/oracle/test_tokenize_exact.py compares that
    encoder with Megatron-Bridge)."""
    folder = str(build_tokenizer(tmp_path / "qwen", config_extra={"tokenizer_class": "Qwen2Tokenizer"}))
    records = _sft_records(60, seed=11)
    data = _jsonl(tmp_path / "d.jsonl", records)
    exact, _ = sft_lengths(records, load_tokenizer(folder, use_transformers=True), SftSettings())
    got = tokenize(TokenizeJob(data=str(data), tokenizer=folder, settings=SftSettings()), workers=1)
    assert got.lengths.tolist() == exact.tolist()
