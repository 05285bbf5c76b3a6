"""CPU offloading of activations (training.cpu_offloading_num_layers): Megatron-Core's rules, the memory it frees, and
the copies Transformer Engine's schedule cannot hide."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.model.memory import GIB, estimate_memory
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.offload import offload_seconds
from advisor.model.perf.step import StepWork, step_time
from advisor.plan import PlanError, plan_from_dict

# Megatron-Bridge's Llama 3 70B FP8 run on 64 GB200s (scripts/performance/configs/llama/llama3_workload_base_configs.py
# LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2: FSDP, micro batch 2, 40 layers offloaded)
RECIPE = {
    "model": "llama3.1-70b",
    "hardware": {"gpu": "GB200"},
    "parallel": {"gpus": 64, "fsdp": True},
    "training": {
        "task": "pretrain",
        "precision": "fp8",
        "seq_length": 8192,
        "micro_batch_size": 2,
        "global_batch_samples": 256,
        "recompute": "none",
        "cpu_offloading_num_layers": 40,
    },
}
WORK = StepWork(tokens=2 * 8192, seqlen_squared_sum=2 * 8192.0**2, micro_batches=2)


def plan_with(layers: int, gpu: str = "GB200"):
    return plan_from_dict(
        {**RECIPE, "hardware": {"gpu": gpu}, "training": {**RECIPE["training"], "cpu_offloading_num_layers": layers}}
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"training": {"cpu_offloading_num_layers": 80}}, "must be below model.num_layers 80"),
        ({"parallel": {"pp": 2}}, "needs parallel.pp 1, not 2"),
        ({"training": {"recompute": "selective"}}, "needs training.recompute none, not selective"),
        ({"training": {"recompute": "full"}}, "needs training.recompute none, not full"),
        ({"training": {"cuda_graphs": True}}, "cannot run with training.cuda_graphs"),
    ],
)
def test_megatron_cores_rules_refuse_with_the_field_named(change, message):
    raw = {
        **RECIPE,
        "parallel": {**RECIPE["parallel"], **change.get("parallel", {})},
        "training": {**RECIPE["training"], **change.get("training", {})},
    }
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw)
    assert "training.cpu_offloading_num_layers" in str(e.value) and message in str(e.value)


def test_offloaded_layers_leave_the_gpu_for_host_memory():
    """Transformer Engine keeps (layers - offloaded) layers' activations on the GPU at the peak; what leaves is in
    host memory, none lost."""
    base = estimate_memory(plan_with(0), 16384, 2)
    for n in (1, 20, 40, 79):
        m = estimate_memory(plan_with(n), 16384, 2)
        per_layer = m.offloaded / n
        assert m.activations + m.offloaded == pytest.approx(base.activations)
        assert base.activations - m.activations == pytest.approx(n * per_layer)
        assert m.weights == base.weights and m.logits == base.logits
    assert base.offloaded == 0
    # the recipe's 40 layers halve the 80 layers' activations, which would not fit a GB200; the estimate puts the
    # recipe itself half a GiB over the GPU, inside its fixed 3 GiB allowance (CUDA context, buffers), where the
    # published run fits: the estimate is that close to the edge, and says so rather than calling it a fit
    capacity = plan_with(0).hardware.capacity_gib * GIB
    recipe = estimate_memory(plan_with(40), 16384, 2, capacity_bytes=capacity)
    assert base.total > 1.5 * capacity
    assert not recipe.fits and recipe.total - capacity < recipe.overhead


def test_the_host_link_sets_what_offloading_costs():
    """NVLink-C2C (GB200) hides the recipe's 40 layers behind the compute; PCIe (B200) cannot, which is why
    Megatron-Bridge's B200 recipe offloads 5."""
    gb200 = step_time(plan_with(40), WORK, EFFICIENCY)
    assert gb200.breakdown["offload"] == 0
    assert gb200.step_seconds == pytest.approx(step_time(plan_with(0), WORK, EFFICIENCY).step_seconds)
    b200 = [step_time(plan_with(n, "B200"), WORK, EFFICIENCY).breakdown["offload"] for n in (0, 5, 20, 40, 79)]
    assert b200[0] == 0 and all(a <= b for a, b in zip(b200, b200[1:], strict=False)) and b200[-1] > b200[2] > 0


layers = st.integers(2, 160)


@settings(max_examples=300, deadline=None)
@given(layers, st.data(), st.floats(0.001, 1.0), st.floats(0.001, 1.0), st.floats(0.0, 2.0))
def test_copies_wait_no_less_than_the_stream_needs_and_no_more_than_all_copies(total, data, fwd, bwd, copy):
    n = data.draw(st.integers(0, total - 1))
    f, b = offload_seconds(total, n, fwd, bwd, copy)
    assert 0 <= f <= n * copy + 1e-9 and 0 <= b <= n * copy + 1e-9
    if n:
        # the last layer waits for the n serial copies after the first layer's forward
        assert f >= 2 * fwd + n * copy - total * fwd - 1e-9
    # a link that keeps up with each layer hides every copy once two layers stay on the GPU
    if n <= total - 2 and copy <= min(fwd, bwd):
        assert (f, b) == (pytest.approx(0, abs=1e-9), pytest.approx(0, abs=1e-9))
    # a slower link never waits less
    slower = offload_seconds(total, n, fwd, bwd, copy * 1.5)
    assert slower[0] >= f - 1e-9 and slower[1] >= b - 1e-9


def test_memory_fixes_offer_the_fewest_offloaded_layers_that_fit():
    """A plan that does not fit is offered CPU offloading of the least count that fits (n fits, n - 1 does not),
    without recompute as Megatron-Core requires; with PP it is not offered."""
    from advisor.advice.memory_fixes import fitting_fixes

    plan = plan_with(0).changed({"training": {"recompute": "selective"}})
    memory = estimate_memory(plan, 16384, 2, capacity_bytes=plan.hardware.capacity_gib * GIB)
    assert not memory.fits
    fixes = fitting_fixes(plan, memory, lambda p: set(), most=10)
    offload = [f for f in fixes if "cpu_offloading_num_layers" in f.fix.get("training", {})]
    assert len(offload) == 1 and offload[0].fix["training"]["recompute"] == "none"
    n = offload[0].fix["training"]["cpu_offloading_num_layers"]

    def total(k):
        return estimate_memory(
            plan.changed({"training": {"recompute": "none", "cpu_offloading_num_layers": k}}),
            16384,
            1,
            capacity_bytes=memory.capacity,
        ).total

    assert total(n) <= memory.capacity < total(n - 1) and offload[0].total_bytes == total(n)
    piped = plan.changed({"parallel": {"pp": 2}})
    memory = estimate_memory(piped, 16384, 2, capacity_bytes=memory.capacity)
    assert not any(
        "cpu_offloading_num_layers" in f.fix.get("training", {})
        for f in fitting_fixes(piped, memory, lambda p: set(), most=10)
    )


def test_the_ep_overlap_and_offloading_are_refused_together():
    """The overlapped EP schedule runs the layers outside TransformerBlock's offload context: nothing would move."""
    raw = {
        "model": "qwen3-30b-a3b",
        "parallel": {"gpus": 8, "ep": 8, "moe_a2a_overlap": True},
        "training": {"task": "pretrain", "recompute": "none", "cpu_offloading_num_layers": 8},
    }
    with pytest.raises(PlanError, match="cannot run with parallel.moe_a2a_overlap"):
        plan_from_dict(raw)
    plan_from_dict({**raw, "parallel": {"gpus": 8, "ep": 8}})


def test_a_plan_that_offloads_too_few_is_offered_more_and_the_rest_replace_it():
    """Megatron-Bridge's recipe count estimated just over the GPU: the fixes offer the next count that fits, and
    recompute or PP only in place of the offloading (Megatron-Core runs neither beside it)."""
    from advisor.advice.memory_fixes import fitting_fixes

    plan = plan_with(40)
    memory = estimate_memory(plan, 16384, 2, capacity_bytes=plan.hardware.capacity_gib * GIB)
    fixes = fitting_fixes(plan, memory, lambda p: set(), most=10)
    offload = [f for f in fixes if f.fix.get("training", {}).get("cpu_offloading_num_layers", 0) > 0]
    assert [f.fix["training"]["cpu_offloading_num_layers"] for f in offload] == [41]
    assert "the copies hide behind the compute" in offload[0].what
    for f in fixes:
        if (
            "recompute" in f.fix.get("training", {})
            and f.fix["training"]["recompute"] != "none"
            or f.fix.get("parallel", {}).get("pp", 1) > 1
        ):
            assert f.fix["training"]["cpu_offloading_num_layers"] == 0 and "instead of CPU offloading" in f.what
            plan.changed(f.fix)  # a plan Megatron-Core accepts
    # over PCIe the same offer says what the copies cost
    b200 = plan_with(0, "B200").changed({"training": {"micro_batch_size": 4}})
    memory = estimate_memory(b200, 32768, 1, capacity_bytes=b200.hardware.capacity_gib * GIB)
    what = [f.what for f in fitting_fixes(b200, memory, lambda p: set(), most=10) if "offload" in f.what]
    assert what and "to the step over B200's host link" in what[0]


def test_block_recompute_rebuilds_the_first_layers_of_each_chunk():
    """Megatron-Core's block method recomputes the first N layers of each pipeline chunk: memory and recompute time
    fall between none and full, in proportion to N / layers per chunk."""
    from advisor.model.memory import recomputed_share

    def plan(recompute, n=None):
        return plan_from_dict(
            {
                "model": "llama3.1-70b",
                "parallel": {"gpus": 8, "pp": 4, "vpp": 5},
                "training": {"task": "pretrain", "recompute": recompute, "recompute_num_layers": n},
            }
        )

    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=8)
    none, full = plan("none"), plan("full")
    acts = {n: estimate_memory(plan("full", n), 4096, 8).activations for n in (1, 2, 3, 4)}
    times = {n: step_time(plan("full", n), work, EFFICIENCY).breakdown["recompute"] for n in (1, 2, 3, 4)}
    assert [recomputed_share(plan("full", n)) for n in (1, 2, 4, 9)] == [0.25, 0.5, 1.0, 1.0]  # 4 layers a chunk
    assert estimate_memory(none, 4096, 8).activations > acts[1] > acts[2] > acts[3] > acts[4]
    assert acts[4] == pytest.approx(estimate_memory(full, 4096, 8).activations)
    full_time = step_time(full, work, EFFICIENCY).breakdown["recompute"]
    assert times[1] == pytest.approx(full_time / 4) and times[4] == pytest.approx(full_time)
    with pytest.raises(PlanError, match="recompute_num_layers needs training.recompute full"):
        plan("selective", 2)


def test_a_block_recompute_plan_is_checked_and_offered_every_layer():
    """Found by review: the long-context finding's fix (selective) kept the block size and the check crashed; a
    block plan that does not fit was offered neither recompute of every layer nor offloading."""
    from advisor.advice.memory_fixes import fitting_fixes
    from advisor.advice.rules import check

    long = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "pp": 2},
            "training": {"task": "pretrain", "seq_length": 16384, "recompute": "full", "recompute_num_layers": 2},
        }
    )
    memory = estimate_memory(long, 16384, 2, capacity_bytes=long.hardware.capacity_gib * GIB)
    found = [f for f in check(long, None, memory) if f.id == "long_context.recompute"]
    assert found and (not found[0].fix or long.changed(found[0].fix).training.recompute_num_layers is None)
    block = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8},
            "training": {
                "task": "pretrain",
                "seq_length": 8192,
                "micro_batch_size": 2,
                "recompute": "full",
                "recompute_num_layers": 2,
            },
        }
    )
    memory = estimate_memory(block, 16384, 1, capacity_bytes=block.hardware.capacity_gib * GIB)
    assert not memory.fits
    fixes = {f.what: f.fix for f in fitting_fixes(block, memory, lambda p: set(), most=10)}
    assert fixes["full recompute of every layer"]["training"] == {"recompute": "full", "recompute_num_layers": None}
    assert any(w.startswith("offload ") for w in fixes)
    for fix in fixes.values():
        block.changed(fix)  # each a plan Megatron-Core accepts


def test_exports_write_the_recompute_the_plan_runs():
    """Block, uniform, or none at all: a recipe's own recompute_method and recompute_num_layers (Megatron-Bridge's
    Qwen3 recipes set full/uniform/1) are overwritten, since Megatron-Core refuses them beside selective recompute."""
    from advisor.advice.exports import derived_settings, megatron_lm_args

    def settings(recompute, n=None):
        plan = plan_from_dict(
            {
                "model": "llama3.1-8b",
                "parallel": {"gpus": 8, "pp": 2},
                "training": {"task": "pretrain", "recompute": recompute, "recompute_num_layers": n},
            }
        )
        m = derived_settings(plan).model
        return (m["recompute_granularity"], m["recompute_method"], m["recompute_num_layers"]), megatron_lm_args(plan)

    (block, args) = settings("full", 5)
    assert block == ("full", "block", 5) and "--recompute-method block" in args and "--recompute-num-layers 5" in args
    assert settings("full")[0] == ("full", "uniform", 1)
    assert settings("selective")[0] == ("selective", None, None)
    assert settings("none")[0] == (None, None, None)
