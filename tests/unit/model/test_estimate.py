"""The estimate: plan and data in, memory, FLOPs and time out; packing reused across calls."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from advisor.model.estimate import estimate, packing_config
from advisor.model.throughput import straggler_factor
from advisor.packing.cache import packing_for
from advisor.plan import plan_from_dict
from tests.support import ROOT, SAMPLE
from tests.support.histograms import scaled


def _plan(**over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8, "tp": 2, "cp": 2, "sp": True},
        "training": {"seq_length": 384, "global_batch_samples": 64},
        "packing": {"pack_size": 384},
    }
    for section, fields in over.items():
        raw[section] = {**raw.get(section, {}), **fields} if isinstance(fields, dict) else fields
    return plan_from_dict(raw)


def test_cli_estimate_json_is_the_estimate_of_the_plan_file(capsys):
    """The command's JSON against the estimate computed here from the same plan file and lengths."""
    from advisor.data.ingest import load_lengths
    from advisor.plan import load_plan
    from tests.support.cli import in_process

    path = SAMPLE / "plans" / "llama8b_squad.yaml"
    proc = in_process(capsys, "estimate", str(path), "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    plan = load_plan(path)
    est = estimate(plan, load_lengths(SAMPLE / "squad_v1.1_len384_hist.csv"))
    mem = out["memory"]
    assert mem["total_bytes"] == pytest.approx(est.memory.total) == pytest.approx(sum(mem["breakdown"].values()))
    assert mem["capacity_bytes"] == est.memory.capacity and mem["fits"] == (mem["total_bytes"] <= est.memory.capacity)
    assert mem["megatron_bridge"]["total_bytes"] == pytest.approx(est.memory.megatron_bridge.total_bytes)
    att = out["flops"]["attention"]
    packs = est.packing
    lengths = packs.items.astype(np.int64)
    fills = np.add.reduceat(lengths, packs.offsets[:-1])
    assert att["thd"] / att["block_mask"] == pytest.approx((lengths**2).sum() / (fills**2).sum(), rel=1e-9)
    assert out["flops"]["model_per_step"] == pytest.approx(est.flops.model_per_step)
    assert out["time"]["step_seconds"] == pytest.approx(est.time.step_seconds)
    assert out["time"]["tokens_per_second_per_gpu"] == pytest.approx(est.time.tokens_per_second_per_gpu)
    assert out["packing"] == packs.metadata and out["plan"]["dp"] == 2 == plan.parallel.gpus // (2 * 2)


@pytest.mark.slow  # the command line in a subprocess
def test_cli_estimate_refuses_a_bad_plan(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("model: llama3.1-8b\nparallel: {gpus: 6, tp: 4}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "estimate", str(bad)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2 and "gpus 6 is not divisible by tp*pp*cp = 4" in proc.stderr


def test_packing_is_reused_not_redone(squad):
    plan = _plan()
    first = estimate(plan, squad)
    again = estimate(_plan(hardware={"gpu": "B200"}), squad)
    assert again.packing is first.packing  # same histogram and packing settings: the same result object
    assert again.time.step_seconds < first.time.step_seconds  # a faster GPU, the same work


def test_modes_and_padding_multiple(squad):
    assert _plan().packing_mode == "offline"
    assert _plan(model="qwen2.5-vl-7b", training={"task": "vlm-sft", "micro_batch_size": 4}).packing_mode == "in-batch"
    assert _plan(training={"task": "pretrain"}).packing_mode == "none"
    assert _plan().collate_padding_multiple == 4  # lcm(2*CP, CP*TP) = lcm(4, 4)
    assert _plan(parallel={"gpus": 24, "tp": 4, "cp": 3}).collate_padding_multiple == 12  # lcm(6, 12)
    result = estimate(_plan(), squad)
    assert result.packing.config.pad_seq_to_mult == 4
    assert all(s % 4 == 0 for s in result.packing.pack(0))


def test_in_batch_memory_follows_the_largest_micro_batch(squad):
    est = estimate(
        _plan(
            model="qwen2.5-vl-7b",
            packing={"mode": "in-batch"},
            training={"task": "vlm-sft", "micro_batch_size": 4, "global_batch_samples": 64},
        ),
        squad,
    )
    assert est.memory.tokens_per_micro_batch == est.micro_batches.computed_tokens.max()
    assert est.memory.tokens_per_micro_batch > 384  # four samples in one row


def test_no_packing_wastes_flops_on_padding(squad):
    # packs of 2048 against micro batches of 4 samples padded to the longest: about the same tokens per GEMM, a third
    # of them padding without packing
    long = {"seq_length": 2048}
    packed = estimate(_plan(training=long, packing={"pack_size": 2048}), squad)
    padded = estimate(_plan(packing={"mode": "none"}, training={**long, "micro_batch_size": 4}), squad)
    assert padded.flops.padding_waste > packed.flops.padding_waste
    assert padded.time.tokens_per_second_per_gpu < packed.time.tokens_per_second_per_gpu


def test_straggler_factor():
    assert straggler_factor(np.ones(100), global_batch=10, dp=5) == 1.0
    rng = np.random.default_rng(0)
    skewed = rng.pareto(1.5, 10000) + 1
    assert straggler_factor(skewed, global_batch=64, dp=8) > straggler_factor(np.sort(skewed)[:5000], 64, 8) > 1


def test_packing_for_is_keyed_on_the_histogram(squad, wikipedia):
    a = packing_for(squad, packing_config(_plan()))
    b = packing_for(scaled(wikipedia, 1000), packing_config(_plan()))
    assert a is not b and a.metrics.num_sequences == squad.num_samples


def test_search_never_recommends_cutting_more_data(squad):
    from advisor.advice.search import search

    result = search(_plan(parallel={"gpus": 8, "cp": 1}), squad)
    base = result.baseline.estimate.packing.runtime.tokens_truncated
    for cand in result.best:
        assert cand.estimate.packing.runtime.tokens_truncated <= base
        assert cand.viable and cand.tokens_per_second_per_gpu > 0
