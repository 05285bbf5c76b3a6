"""Dynamic CP priced as it runs: each micro batch's runtime CP group size (its ring inside an NVLink domain or
across nodes), the memory of the busiest rank and the communicators dynamic CP creates, and the data loader as a
term of the step."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from advisor.advice.rules import check
from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import cp_groups_of, estimate
from advisor.model.memory import DYNAMIC_CP_COMMUNICATOR_BYTES, dynamic_cp_group_sizes
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.hardware import gpu_of
from advisor.model.perf.step import StepWork, layer_phases
from advisor.plan import plan_from_dict

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data" / "long_context_hist.csv"


def _hist() -> LengthHistogram:
    with SAMPLE.open() as f:
        rows = list(csv.DictReader(f))
    return LengthHistogram.from_pairs([int(r["length"]) for r in rows], [int(r["count"]) for r in rows])


def long_plan(scheduler="dp_balanced", gpus=16, **training):
    packing = {"mode": "global-batch", "scheduler": scheduler}
    if scheduler == "default_dynamic_cp":
        packing["megatron_lm"] = "dev"
    return plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": gpus, "cp": 16},
            "training": {"seq_length": 131072, "global_batch_samples": 64, "recompute": "full", **training},
            "packing": packing,
            "versions": {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"},
        }
    )


@pytest.fixture(scope="module")
def hist():
    return _hist()


def test_a_group_across_nodes_is_priced_slower_per_token_than_one_inside_a_node():
    plan = long_plan("default_dynamic_cp")
    gpu, eff = gpu_of(plan), EFFICIENCY
    per_rank = 8192.0  # tokens per rank: many short sequences (little attention to hide the ring behind)

    def cp_seconds(g: int) -> float:
        work = StepWork(
            tokens=per_rank * 16,
            seqlen_squared_sum=16 * 512.0 * per_rank,
            micro_batches=1,
            cp_groups=((1.0, g, per_rank, 512.0 * per_rank),),
        )
        fwd, bwd = layer_phases(plan, gpu, eff, work, moe=False)
        return (fwd.cp_comm + bwd.cp_comm) / per_rank

    assert 16 > gpu.domain >= 4
    assert cp_seconds(16) > cp_seconds(4) >= 0  # the ring across nodes is exposed, inside one it hides
    assert cp_seconds(16) > 0 and cp_seconds(1) == 0.0


def test_static_cp_runs_every_micro_batch_on_the_layouts_group(hist):
    for gpus in (16, 64):
        e = estimate(long_plan(gpus=gpus), hist)
        assert {g for _, g, _, _ in cp_groups_of(e.online)} == {16}
        assert e.time.breakdown["cp_comm"] >= 0


def test_dynamic_cp_prices_each_runtime_group(hist):
    e = estimate(long_plan("default_dynamic_cp"), hist)
    sizes = {g for _, g, _, _ in cp_groups_of(e.online)}
    assert 1 in sizes and 16 in sizes
    # long sequences alone on the whole group hide their ring behind their attention; static CP splits the short
    # ones over 16 ranks too, where the ring is exposed (if anywhere)
    assert e.time.breakdown["cp_comm"] <= estimate(long_plan(), hist).time.breakdown["cp_comm"]


def test_dynamic_cp_memory_holds_the_busiest_rank_and_its_communicators(hist):
    static, dynamic = estimate(long_plan(), hist), estimate(long_plan("default_dynamic_cp"), hist)
    run = dynamic.online
    busiest = max(run.group_tokens / run.groups.cp)  # tokens / g, the most a rank holds in one micro batch
    assert dynamic.memory.tokens_per_micro_batch / 16 == pytest.approx(busiest, abs=1)
    assert busiest <= run.max_seqlen_per_dp_cp_rank
    reserve = len(dynamic_cp_group_sizes(16)) * DYNAMIC_CP_COMMUNICATOR_BYTES  # groups of 2, 4, 8 and 16
    assert dynamic.memory.breakdown["communicators"] == reserve and "communicators" not in static.memory.breakdown
    assert dynamic.memory.total >= static.memory.total + reserve


def test_the_data_loader_bounds_the_step_only_when_it_cannot_keep_up(hist):
    base = estimate(long_plan(), hist)
    per_rank = 64 / base.plan.dp  # samples a DP rank's loader prepares a step
    fast = estimate(long_plan(dataloader_seconds_per_sample=0.01), hist)  # 0.32 s a step against ~25 s of compute
    assert fast.time == base.time and "dataloader" not in fast.time.breakdown
    slow = estimate(long_plan(dataloader_seconds_per_sample=2.0, dataloader_workers=1), hist)
    assert slow.time.step_seconds == pytest.approx(per_rank * 2.0)
    assert slow.time.breakdown["dataloader"] == pytest.approx(per_rank * 2.0 - base.time.step_seconds)
    assert sum(slow.time.breakdown.values()) == pytest.approx(slow.time.step_seconds)
    assert slow.time.tokens_per_second_per_gpu < base.time.tokens_per_second_per_gpu
    found = {f.id: f for f in check(slow.plan, time=slow.time)}
    finding = found["data.loader_bound"]
    assert (
        finding.message.startswith("loader-bound: the GPUs wait") and finding.fix["training"]["dataloader_workers"] > 1
    )
    fixed = estimate(slow.plan.changed(finding.fix), hist)
    assert "dataloader" not in fixed.time.breakdown
    assert "data.loader_bound" not in {f.id for f in check(fast.plan, time=fast.time)}
