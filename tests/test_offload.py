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
RECIPE = {"model": "llama3.1-70b", "hardware": {"gpu": "GB200"}, "parallel": {"gpus": 64, "fsdp": True},
          "training": {"task": "pretrain", "precision": "fp8", "seq_length": 8192, "micro_batch_size": 2,
                       "global_batch_size": 256, "recompute": "none", "cpu_offloading_num_layers": 40}}
WORK = StepWork(tokens=2 * 8192, seqlen_squared_sum=2 * 8192.0 ** 2, micro_batches=2)


def plan_with(layers: int, gpu: str = "GB200"):
    return plan_from_dict({**RECIPE, "hardware": {"gpu": gpu},
                           "training": {**RECIPE["training"], "cpu_offloading_num_layers": layers}})


@pytest.mark.parametrize(("change", "message"), [
    ({"training": {"cpu_offloading_num_layers": 80}}, "must be below model.num_layers 80"),
    ({"parallel": {"pp": 2}}, "needs parallel.pp 1, not 2"),
    ({"training": {"recompute": "selective"}}, "needs training.recompute none, not selective"),
    ({"training": {"recompute": "full"}}, "needs training.recompute none, not full"),
])
def test_megatron_cores_rules_refuse_with_the_field_named(change, message):
    raw = {**RECIPE, "parallel": {**RECIPE["parallel"], **change.get("parallel", {})},
           "training": {**RECIPE["training"], **change.get("training", {})}}
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
    # the recipe's 40 layers halve the 80 layers' activations, which would not fit a GB200; with them the run is
    # within the estimate's fixed allowance (3 GiB) of the GPU, as the recipe's published run says it fits
    capacity = plan_with(0).hardware.capacity_gib * GIB
    recipe = estimate_memory(plan_with(40), 16384, 2)
    assert base.total > 1.5 * capacity and recipe.total - recipe.overhead < capacity


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
        return estimate_memory(plan.changed({"training": {"recompute": "none", "cpu_offloading_num_layers": k}}),
                               16384, 1, capacity_bytes=memory.capacity).total

    assert total(n) <= memory.capacity < total(n - 1) and offload[0].total_bytes == total(n)
    piped = plan.changed({"parallel": {"pp": 2}})
    memory = estimate_memory(piped, 16384, 2, capacity_bytes=memory.capacity)
    assert not any("cpu_offloading_num_layers" in f.fix.get("training", {})
                   for f in fitting_fixes(piped, memory, lambda p: set(), most=10))
