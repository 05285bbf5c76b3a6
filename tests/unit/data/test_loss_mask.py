"""Answer-only loss from the data's loss mask (issue 24): where the data carries masks (a packed folder, raw data
tokenized with its masks) each sample's loss tokens reach the loss weighting and the trial, counted as
Megatron-Bridge's packed collate counts them; the prediction and the trial's measurement still agree."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.analysis import analyze
from advisor.data.ingest import load_lengths
from advisor.data.lengths import LengthHistogram
from advisor.data.tokenize.chat import ChatSettings
from advisor.data.tokenize.engine import TokenizeJob, tokenize
from advisor.data.tokenize.sft import SftSettings
from advisor.trial.config import TrialConfig
from advisor.trial.loss import TARGET
from advisor.trial.run import check_loss_weighting, setup
from advisor.ui.samples import default_plan, load_sample
from tests.support import ROOT, SAMPLE
from tests.support.cli import in_process

TOKENIZER = str(SAMPLE / "tokenizers" / "tiny-bpe")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 40), st.floats(0, 1)), min_size=1, max_size=60))
def test_the_mean_loss_per_length_keeps_the_total(samples):
    lengths = [n for n, _ in samples]
    loss = [int(f * (n - 1)) for n, f in samples]
    h = LengthHistogram.from_samples(lengths, loss=loss)
    assert float(h.loss_tokens @ h.counts) == pytest.approx(sum(loss))
    assert np.all(h.loss_tokens <= np.maximum(h.lengths - 1, 0))
    labels = sum(n - 1 for n in lengths)
    assert h.loss_fraction == (pytest.approx(sum(loss) / labels) if labels else 0.0)
    scaled = h.scale_model(max(1, len(lengths) // 2))
    assert scaled.loss_tokens is not None and scaled.loss_tokens.size == scaled.lengths.size
    assert h.fingerprint != LengthHistogram.from_samples(lengths).fingerprint  # a different weighting, another key


def _packed_parquet(packs: list[list[tuple[int, int, int]]]) -> bytes:
    """Packs of (stored length, prompt tokens, rolled?) samples: the mask 0 over the prompt, 1 over the answer."""
    rows = {"input_ids": [], "loss_mask": [], "seq_start_id": []}
    for pack in packs:
        ids, mask, starts = [], [], []
        for n, prompt, _ in pack:
            starts.append(len(ids))
            ids += list(range(n))
            mask += [0] * prompt + [1] * (n - prompt)
        rows["input_ids"].append(ids)
        rows["loss_mask"].append(mask)
        rows["seq_start_id"].append(starts)
    buf = io.BytesIO()
    pq.write_table(pa.table(rows), buf)
    return buf.getvalue()


def test_a_packed_files_mask_gives_each_samples_loss_tokens(tmp_path):
    """Each sample's loss tokens: its mask over every position but its last (Bridge's ``_build_loss_mask``)."""
    path = tmp_path / "packed.parquet"
    path.write_bytes(_packed_parquet([[(10, 4, 0), (6, 6, 0)], [(10, 2, 0)]]))
    h = load_lengths(str(path))
    assert h.lengths.tolist() == [6, 10] and h.counts.tolist() == [1, 2]
    # 10 tokens, prompt 4: mask positions 4..8 of 0..8 -> 5; prompt 2: 7; 6 tokens all prompt: 0
    assert h.loss_tokens.tolist() == [0.0, 6.0]
    assert any("loss tokens from the packs' loss_mask: 12 of 23" in n for n in h.notes)


def test_a_mask_that_does_not_match_its_pack_is_left_aside_and_said(tmp_path):
    table = pa.table({"input_ids": [[1, 2, 3, 4]], "loss_mask": [[1, 1]], "seq_start_id": [[0, 2]]})
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    h = load_lengths(str(path))
    assert h.loss_tokens is None and h.lengths.tolist() == [2]
    assert any("loss_mask left aside: pack 0 has 2 mask values for 4 tokens" in n for n in h.notes)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]], "loss_mask": [[0, 2, 1]], "seq_start_id": [[0]]}), path)
    assert any("values other than 0 and 1" in n for n in load_lengths(str(path)).notes)


@pytest.mark.parametrize("fmt", ["sft", "chat"])
def test_raw_data_tokenized_with_masks_gives_the_folders_loss_tokens(tmp_path, fmt):
    """The tokenizer's masks (the dashboard's raw upload) count what ``prepare``'s packed folder trains on."""
    from advisor.prepare.run import PrepareOptions, prepare

    data = str(ROOT / "sample_data" / "raw" / f"{fmt}_sample.jsonl")
    settings_ = ChatSettings() if fmt == "chat" else SftSettings()
    job = TokenizeJob(data=data, tokenizer=TOKENIZER, fmt=fmt, settings=settings_, on_bad="skip")
    result = tokenize(__import__("dataclasses").replace(job, loss_tokens=True), workers=1)
    raw = result.histogram()
    assert raw.loss_tokens is not None and 0 < raw.loss_fraction < 1
    plain = tokenize(job, workers=1)
    assert np.array_equal(plain.lengths, result.lengths)  # the mask path gives the same lengths
    out = tmp_path / "prepared"
    size = 8192  # every sample fits: nothing skipped or cut, so both count the same samples
    prepare(str(out), PrepareOptions(pack_size=size, workers=1), train=job)
    folder = load_lengths(str(out))
    assert folder.num_samples == raw.num_samples
    assert float(folder.loss_tokens @ folder.counts) == pytest.approx(float(raw.loss_tokens @ raw.counts))


def test_the_loss_weighting_weighs_the_masked_tokens():
    """Answer-only loss on the chat-like sample: the figures follow the loss tokens, not the lengths, and say so."""
    hist = load_sample("chat-like (180k)")
    share = 0.3
    masked = LengthHistogram(
        lengths=hist.lengths, counts=hist.counts, source=hist.source, loss_tokens=np.floor(share * (hist.lengths - 1))
    )
    plan = default_plan("chat-like (180k)").changed({"training": {"calculate_per_token_loss": False}})
    full, answer = analyze(plan, hist).loss, analyze(plan, masked).loss
    assert not full.masked and answer.masked and answer.as_dict()["loss_mask"]
    assert "loss mask (29." in answer.loss_tokens or "loss mask (30." in answer.loss_tokens
    assert answer.short_below == pytest.approx(full.short_below * share, rel=0.05)
    assert answer.bins.edges[-1] < full.bins.edges[-1]


@pytest.mark.slow  # a small model trained a few steps, per setting
@pytest.mark.parametrize("per_token_loss", [False, True])
def test_the_trial_measures_answer_only_loss_within_one_percent(per_token_loss):
    torch.set_num_threads(1)
    hist = load_sample("chat-like (180k)")
    masked = LengthHistogram(
        lengths=hist.lengths, counts=hist.counts, source=hist.source, loss_tokens=np.floor(0.4 * (hist.lengths - 1))
    )
    plan = default_plan("chat-like (180k)").changed(
        {"training": {"seq_length": 8192, "calculate_per_token_loss": per_token_loss}, "packing": {"pack_size": 8192}}
    )
    cfg = TrialConfig(device="cpu")
    check = check_loss_weighting(plan, setup(plan, masked, cfg), cfg)
    assert 0.35 < check.loss_share < 0.45
    for r in check.rows:
        assert abs(r.objective_predicted / r.objective_measured - 1) < TARGET and r.ok
    rows = {r.per_token_loss: r for r in check.rows}
    assert rows[True].objective_measured == pytest.approx(1.0, abs=1e-6)
    assert abs(rows[False].objective_measured - 1) > 0.01
    assert check.position_losses[0] is None  # no sample has loss on its first label


def test_tokenize_writes_loss_tokens_that_a_plan_reads(tmp_path, capsys):
    """``tokenize --loss-tokens`` writes a loss_tokens column; the lengths file then carries the mask's counts."""
    out = tmp_path / "lengths.csv"
    done = in_process(
        capsys,
        "tokenize",
        ROOT / "sample_data" / "raw" / "chat_sample.jsonl",
        "--tokenizer",
        TOKENIZER,
        "--format",
        "chat",
        "--loss-tokens",
        "-o",
        out,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("sample_index,length,loss_tokens\n")
    hist = load_lengths(str(out))
    job = TokenizeJob(
        data=str(ROOT / "sample_data" / "raw" / "chat_sample.jsonl"),
        tokenizer=TOKENIZER,
        fmt="chat",
        settings=ChatSettings(),
        loss_tokens=True,
    )
    direct = tokenize(job, workers=1).histogram()
    assert np.array_equal(hist.loss_tokens, direct.loss_tokens) and np.array_equal(hist.order, direct.order)
    assert __import__("json").loads(done.stdout)["loss_fraction"] == pytest.approx(direct.loss_fraction)


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ("0,5,5\n", "line 2: loss_tokens 5 is above the 4 label positions of a length-5 sample"),
        ("0,5,x\n", "line 2: loss_tokens 'x' is not a number"),
        ("0,5,-1\n", "line 2: loss_tokens -1"),
        ("0,5,99999999999999999999999\n", "line 2: loss_tokens 1e+23 is beyond any sequence length"),
    ],
)
def test_a_bad_loss_tokens_cell_is_one_message_with_exit_code_2(tmp_path, capsys, rows, said):
    path = tmp_path / "l.csv"
    path.write_text("sample_index,length,loss_tokens\n" + rows)
    done = in_process(capsys, "lengths", path)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_skipped_loss_rows_are_counted_and_a_table_says_it_left_the_column_aside():
    from advisor.data.context import Ctx
    from advisor.data.delimited import read_delimited

    ctx = Ctx(name="l.csv", on_bad="skip")
    h = read_delimited(b"length,loss_tokens\n5,2\n6,9\n7,\n", ctx)
    assert h.lengths.tolist() == [5] and h.loss_tokens.tolist() == [2.0]
    assert sorted(e.count for e in h.excluded) == [1, 1]
    table = read_delimited(b"length,count,loss_tokens\n5,2,3\n", Ctx(name="t.csv"))
    assert table.loss_tokens is None and any("loss_tokens" in n and "left aside" in n for n in table.notes)


def test_the_bundled_answer_only_plan_reads_its_mask_as_tokenize_writes_it(tmp_path):
    """sample_data/raw/chat_sample_loss_tokens.csv is what tokenize --loss-tokens writes today."""
    from advisor.data.tokenize.engine import lengths_csv
    from advisor.plan import load_plan

    job = TokenizeJob(
        data=str(ROOT / "sample_data" / "raw" / "chat_sample.jsonl"),
        tokenizer=TOKENIZER,
        fmt="chat",
        settings=ChatSettings(),
        loss_tokens=True,
    )
    bundled = ROOT / "sample_data" / "raw" / "chat_sample_loss_tokens.csv"
    assert bundled.read_text() == lengths_csv(tokenize(job, workers=1))
    plan = load_plan(str(ROOT / "sample_data" / "plans" / "chat_sample_answer_only.yaml"))
    loss = analyze(plan, load_lengths(str(bundled))).loss
    assert loss.masked and loss.depends_on_packing
