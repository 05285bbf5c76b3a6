"""data.format: sft data is truncated to the max length (GPTSFTDataset), chat data is not (GPTSFTChatDataset), so
Megatron-Bridge's create_hist skips chat samples longer than the max length. Checked against Megatron-Bridge 0.6.2's
own create_hist, create_packing_strategy and prepare_gpt_sft_packed_data (its wheel, tests/support/mb_reference.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from advisor.analysis import analyze
from advisor.data.ingest import load_lengths
from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import packing_config
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.plan import plan_from_dict
from tests.support.cli import advisor
from tests.support.mb_fakes import FakeTokenizer, fake_sft_builder

CHAT_SAMPLE = "sample_data/raw/chat_sample.jsonl"


def chat_plan(fmt: str, seq_length: int = 8192, **parallel):
    return plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, **parallel},
            "training": {"seq_length": seq_length, "global_batch_samples": 1024},
            "packing": {"mode": "offline", "pack_size": seq_length},
            "data": {"format": fmt},
        }
    )


def _mb_histogram(mb_algorithms, hist: LengthHistogram, max_len: int, truncate: bool) -> list[int]:
    """create_hist itself over items whose input_ids have each sample's length (a range: only len() is read);
    truncate=True stands in for GPTSFTDataset cutting at max_len, False for GPTSFTChatDataset, which does not."""
    items = [
        {"input_ids": range(min(n, max_len) if truncate else n)}
        for n, c in zip(hist.lengths.tolist(), hist.counts.tolist(), strict=True)
        for _ in range(c)
    ]
    return mb_algorithms.create_hist(items, max_len)[1]


def _mb_metadata(mb_algorithms, histogram: list[int], pack_size: int, seed: int = 1234) -> dict:
    state = np.random.get_state()  # offline.py: create_packing_strategy under np.random.seed(seed), state restored
    np.random.seed(seed)
    try:
        return mb_algorithms.create_packing_strategy(histogram, pack_size, "first_fit_shuffle")[1]
    finally:
        np.random.set_state(state)


@pytest.mark.slow  # big data through Megatron-Bridge's Python packer or the command line
def test_chat_like_sample_at_8k_equals_megatron_bridge(mb_algorithms, chat):
    results = {}
    for fmt, truncate in (("chat", False), ("sft", True)):
        cfg = packing_config(chat_plan(fmt))
        ours = pack(chat, cfg)
        histogram = _mb_histogram(mb_algorithms, chat, 8192, truncate)
        assert ours.runtime.counts.tolist() == histogram
        assert ours.metadata == _mb_metadata(mb_algorithms, histogram, 8192, seed=cfg.seed)
        results[fmt] = ours
    chat_, sft = results["chat"], results["sft"]
    over = int(chat.counts[chat.lengths - 1 > 8192].sum())
    assert chat_.num_skipped == over > 0 and chat_.num_truncated == 0
    assert sft.num_skipped == 0 and sft.num_truncated >= over
    assert chat_.metrics.num_sequences + over == sft.metrics.num_sequences == chat.num_samples
    # the figures: Megatron-Bridge packs the chat data at n 6.87; modelled as SFT it would be 6.31
    assert (chat_.metadata["packing_factor"], sft.metadata["packing_factor"]) == (6.87, 6.31)
    assert any("skipped by create_hist" in note for note in chat_.notes)


@pytest.mark.parametrize("mult", [1, 4])
def test_chat_pipeline_skips_overlong_unless_padding_cuts_them(mb_offline, tmp_path, mult):
    """prepare_gpt_sft_packed_data end to end with a dataset that does not truncate (as GPTSFTChatDataset): with
    pad_seq_to_mult 1 create_hist skips what is longer; with a multiple, _pre_pad_data_point cuts it first."""
    rng = np.random.default_rng(mult)
    lengths = np.concatenate([rng.integers(1, 400, 1200), rng.integers(1002, 1500, 40), [1001, 1000, 2]])
    out, meta = tmp_path / "training.npy", tmp_path / "metadata.jsonl"
    mb_offline.prepare_gpt_sft_packed_data(
        input_path=tmp_path,
        output_path=out,
        output_metadata_path=meta,
        packed_sequence_size=1000,
        tokenizer=FakeTokenizer(eos_id=0),
        max_seq_length=1000,
        seed=5,
        packing_algorithm="first_fit_shuffle",
        pad_seq_to_mult=mult,
        num_tokenizer_workers=1,
        dataset_builder=fake_sft_builder(lengths, truncate=False),
    )
    ours = pack(
        LengthHistogram.from_samples(lengths),
        PackingConfig(pack_size=1000, seed=5, pad_seq_to_mult=mult, overlong="skip"),
    )
    assert ours.metadata == json.loads(meta.read_text())[-1]
    written = load_lengths(out).packs
    theirs = sorted(
        sorted(written.items[a:b].tolist()) for a, b in zip(written.offsets[:-1], written.offsets[1:], strict=True)
    )
    assert sorted(sorted(p) for p in ours.packs()) == theirs
    over = int((lengths - 1 > 1000).sum())
    if mult == 1:
        assert (ours.num_skipped, ours.num_truncated) == (over, 0)
    else:
        assert ours.num_skipped == 0 and ours.num_truncated >= over


def test_the_plans_format_drives_estimate_exports_and_findings(chat):
    sft, chat_ = analyze(chat_plan("sft"), chat), analyze(chat_plan("chat"), chat)
    assert round(sft.packing_factor, 2) == sft.packing.metadata["packing_factor"]
    assert chat_.packing_factor > sft.packing_factor
    assert chat_.global_batch_packs < sft.global_batch_packs  # fewer packs hold the same 1024 samples
    assert f"global_batch_size={chat_.global_batch_packs}" in chat_.export("overrides").replace(" ", "")
    left = chat_.estimate.to_dict()["samples_left_out"]
    assert left["format"] == "chat" and left["num_skipped"] == chat_.packing.num_skipped > 0
    assert left["num_truncated"] == 0
    skipped = next(f for f in chat_.findings if f.id == "data.skipped")
    assert skipped.message.startswith(f"{chat_.packing.num_skipped:,} chat samples longer than 8192 are skipped")
    assert "data.skipped" not in {f.id for f in sft.findings} and "data.truncated" in {f.id for f in sft.findings}
    # with CP the padding multiple is > 1: Megatron-Bridge pre-pads, cutting chat samples too (nothing skipped)
    cp = analyze(chat_plan("chat", cp=2), chat)
    assert cp.packing.num_skipped == 0 and cp.packing.num_truncated > 0


@pytest.mark.slow  # big data through Megatron-Bridge's Python packer or the command line
def test_pack_command_format_and_its_counts():
    sample = "sample_data/chat_like_hist.csv"
    chat_, sft = (
        json.loads(advisor("pack", sample, "--pack-size", "8192", "--format", f, "--json", "--quiet").stdout)
        for f in ("chat", "sft")
    )
    assert chat_["format"] == "chat" and chat_["num_skipped"] > 0 and chat_["num_truncated"] == 0
    assert sft["format"] == "sft" and sft["num_skipped"] == 0 and sft["num_truncated"] > 0
    assert (chat_["packing_factor"], sft["packing_factor"]) == (6.87, 6.31)
    text = advisor("pack", sample, "--pack-size", "8192", "--format", "chat", "--quiet").stdout
    assert f"skipped {chat_['num_skipped']:,} samples" in text
    clash = advisor("pack", sample, "--pack-size", "8192", "--format", "chat", "--overlong", "truncate")
    assert clash.returncode == 2 and "contradicts --format chat" in clash.stderr


@pytest.mark.slow  # big data through Megatron-Bridge's Python packer or the command line
def test_tokenize_records_the_format_a_plan_reads(tok, tmp_path):
    lengths = tmp_path / "chat_lengths.csv"
    proc = advisor("tokenize", CHAT_SAMPLE, "--tokenizer", tok, "--format", "chat", "-o", lengths, "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["format"] == "chat" and out["plan_data"] == {"lengths": str(lengths), "format": "chat"}
    plan = plan_from_dict(
        {"model": "llama3.1-8b", "training": {"seq_length": 256, "global_batch_samples": 64}, "data": out["plan_data"]}
    )
    hist = load_lengths(plan.data.lengths)
    result = analyze(plan, hist).packing
    assert result.config.overlong == "skip" and result.num_skipped == int((hist.samples() - 1 > 256).sum()) > 0
