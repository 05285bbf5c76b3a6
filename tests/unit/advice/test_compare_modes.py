"""The recommendation among every way of packing (advisor/advice/compare.py): offline, in-batch, global-batch with
dp_balanced and with dynamic CP, on the bundled samples (long context at 128K on 16 and 64 H100s with CP 8 and 16,
chat-like data at 8K), by step time per sample, then memory fit, then tokens lost, each refusal listed with its
reason, and the reason for the choice in one sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.advice.compare import KINDS, TIE, compare_packing
from advisor.data.lengths import LengthHistogram
from advisor.plan import plan_from_dict
from tests.support import SAMPLE
from tests.support.cli import in_process

WAYS = [
    "offline (Megatron-Bridge)",
    "in-batch (Megatron-Bridge 0.7)",
    "global-batch dp_balanced (Megatron-Bridge 0.7)",
    "global-batch dynamic CP (Megatron-Bridge 0.7)",
]


def plan(gpus=16, cp=8, seq=131072, **over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": gpus, "cp": cp},
        "training": {"seq_length": seq, "global_batch_samples": 64, "recompute": "full"},
    }
    for section, fields in over.items():
        raw[section] = {**raw.get(section, {}), **fields}
    return plan_from_dict(raw)


def assert_the_choice_follows_the_rule(c, data_tokens):
    """Among Megatron-Bridge's ways nothing refuses: those that fit (all, when none does), then the step per sample
    within TIE of the fastest, then the tokens lost, then the fewest new requirements; one sentence why."""
    runs = [r for r in c.runs if r.estimate is not None and r.framework == "Megatron-Bridge" and not r.refused_steps]
    fitting = [r for r in runs if r.estimate.memory.fits]
    pool = fitting or runs
    chosen = c.run(c.recommended)
    assert chosen in pool
    fastest = min(r.sample_seconds for r in pool)
    assert chosen.sample_seconds <= fastest * (1 + TIE)
    tied = [r for r in pool if r.sample_seconds <= fastest * (1 + TIE)]
    lost = {r.label: round(1000 * r.estimate.tokens_lost / data_tokens) for r in tied}
    assert lost[chosen.label] == min(lost.values())
    assert KINDS.index(chosen.kind) == min(KINDS.index(r.kind) for r in tied if lost[r.label] == lost[chosen.label])
    assert c.why.endswith(".") and ". " not in c.why and c.why[0].islower()
    for r in c.runs:  # a refused way is listed, with its reason, and not estimated
        assert (r.refusal is None) == (r.estimate is not None)


@pytest.mark.parametrize(("gpus", "cp"), [(16, 8), (64, 16)])
def test_at_128k_dynamic_cp_gives_the_short_sequences_smaller_groups(long_context, gpus, cp):
    c = compare_packing(plan(gpus, cp), long_context, megatron_lm=None)
    assert [r.label for r in c.runs] == WAYS and all(r.refusal is None for r in c.runs)
    assert_the_choice_follows_the_rule(c, long_context.total_tokens)
    rows = {r["way"]: r for r in c.rows()}
    static, dynamic = rows[WAYS[2]], rows[WAYS[3]]
    dp = gpus // cp
    assert c.run(WAYS[2]).estimate.online.padding_divisor == 2 * cp
    assert c.run(WAYS[3]).estimate.online.padding_divisor == 2 * dp * cp  # any group of the pool: 2 x DP x CP
    assert static["small_group_share"] == 0 and dynamic["small_group_share"] > 0.5  # most are short at 128K
    assert dynamic["sample_seconds"] < static["sample_seconds"] and dynamic["straggler"] < static["straggler"]
    # the cap, seq_length / CP, bounds a rank's activations; dynamic CP adds a communicator per runtime group size
    reserve = c.run(WAYS[3]).estimate.memory.breakdown["communicators"] / 2**30
    assert reserve > 0 and dynamic["memory_gib"] == pytest.approx(static["memory_gib"] + reserve)
    if c.recommended == WAYS[3]:
        assert c.why.startswith("dynamic CP shortens the step") and "smaller CP groups" in c.why


def test_when_most_sequences_need_the_whole_cp_group_dynamic_cp_has_nothing_to_rebalance():
    long = LengthHistogram.from_samples(list(np.random.default_rng(0).integers(70_000, 131_072, 1000)))
    c = compare_packing(plan(), long, megatron_lm=None)
    assert_the_choice_follows_the_rule(c, long.total_tokens)
    assert c.run(WAYS[3]).estimate.online.small_group_share == 0  # each longer than half of CP 8 x 16,384
    if c.recommended != WAYS[3]:
        assert "need the whole CP group (longer than 65,536 tokens), so dynamic CP has nothing to rebalance" in c.why


def test_chat_data_at_8k(chat):
    hist = chat.scale_model(20_000)
    c = compare_packing(plan(16, 2, 8192, training={"peft": "lora", "recompute": "selective"}), hist, megatron_lm=None)
    assert [r.label for r in c.runs] == WAYS
    assert_the_choice_follows_the_rule(c, hist.total_tokens)
    rows = {r["way"]: r for r in c.rows()}
    assert rows[WAYS[1]]["straggler"] > rows[WAYS[0]]["straggler"]  # micro batches of 2 random samples
    assert all(r["tokens_lost"] > 0 for r in rows.values())  # samples past 8K are truncated, whichever way


def test_a_way_megatron_bridge_refuses_is_listed_with_its_refusal(long_context):
    c = compare_packing(plan(parallel={"pp": 2}), long_context, megatron_lm=None)
    for way in WAYS[2:]:
        assert "does not support pipeline parallelism" in c.run(way).refusal and c.run(way).estimate is None
    assert c.recommended in WAYS[:2]
    pool = compare_packing(plan(24, 8, training={"global_batch_samples": 48}), long_context, megatron_lm=None)
    assert "power of two" in pool.run(WAYS[3]).refusal  # DP 3 x CP 8 = 24
    vlm = plan_from_dict(
        {
            "model": "qwen2.5-vl-7b",
            "parallel": {"gpus": 8},
            "training": {"task": "vlm-sft", "seq_length": 4096, "global_batch_samples": 64, "micro_batch_size": 2},
        }
    )
    small = LengthHistogram.from_samples([300, 900, 2000] * 40)
    v = compare_packing(vlm, small, megatron_lm=None)
    assert "VLM SFT cannot use offline packing" in v.run(WAYS[0]).refusal
    assert (
        "training.task must be llm-sft or pretrain" in v.run("global-batch dp_balanced (Megatron-Bridge 0.7)").refusal
    )
    assert v.recommended == "in-batch (Megatron-Bridge)"
    pre = compare_packing(plan(training={"task": "pretrain"}), long_context, megatron_lm=None)
    assert "concatenate documents into full rows" in pre.run(WAYS[0]).refusal
    assert pre.recommended in WAYS[2:]


def test_use_puts_the_run_and_the_releases_it_needs_in_the_plan(long_context):
    p = plan(64, 16)
    c = compare_packing(p, long_context, megatron_lm=None)
    for way in WAYS:
        used = p.changed(c.use(way))
        assert used.packing == c.run(way).plan.packing and used.versions == c.run(way).plan.versions
    gb = p.changed(c.use(WAYS[3]))
    assert gb.versions.megatron_bridge == "0.7.1" and gb.packing.max_seqlen_per_dp_cp_rank == 131072 // 16


def test_estimate_compare_prints_the_ways_side_by_side(tmp_path, capsys):
    raw = plan(64, 16).to_dict()
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**raw, "data": {"lengths": str(SAMPLE / "long_context_hist.csv")}}))
    text = in_process(capsys, "estimate", path, "--compare", "--quiet")
    assert text.returncode == 0, text.stderr
    for way in WAYS:
        assert way in text.stdout
    assert "recommended: " in text.stdout
    out = json.loads(in_process(capsys, "estimate", path, "--compare", "--json", "--quiet").stdout)
    assert [w["way"] for w in out["comparison"]["ways"]] == WAYS and out["comparison"]["why"].endswith(".")


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    cp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 3, 4]),
    tp=st.sampled_from([1, 2]),
    seq=st.sampled_from([4096, 8192]),
)
def test_the_choice_follows_the_rule_on_any_layout(chat, cp, dp, tp, seq):
    hist = chat.scale_model(4_000)
    p = plan(
        dp * cp * tp,
        cp,
        seq,
        parallel={"tp": tp, "sp": tp > 1},
        training={"global_batch_samples": 8 * dp, "peft": "lora", "recompute": "selective"},
    )
    c = compare_packing(p, hist, megatron_lm=None)
    assert [r.label for r in c.runs] == WAYS
    assert_the_choice_follows_the_rule(c, hist.total_tokens)
