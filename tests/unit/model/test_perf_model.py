"""The step-time model: LoRA's saved GEMMs, the calibration it ships with, and rules that hold for every layout."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.model.estimate import estimate
from advisor.model.parameters import padded_vocab_size
from advisor.model.perf.calibration import EFFICIENCY, fit, fitted_names, load_measurements, residuals
from advisor.model.perf.step import StepWork, step_time
from advisor.plan import PlanError, plan_from_dict
from advisor.plan.io import dump_plan
from advisor.trial.model import TrialModelConfig
from advisor.trial.run import predicted_step
from tests.support import ROOT, SAMPLE


def _sft(**over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8},
        "training": {"seq_length": 4096, "global_batch_samples": 256, "recompute": "none"},
        "packing": {"pack_size": 4096},
        "data": {"lengths": str(SAMPLE / "chat_like_hist.csv")},
    }
    for section, fields in over.items():
        raw[section] = {**raw.get(section, {}), **fields}
    return plan_from_dict(raw)


def _estimate_json(plan, tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(dump_plan(plan))
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "estimate", str(path), "--json", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["time"]


def _gemm_flops_ratio(plan) -> float:
    """LoRA over full fine-tuning GEMM FLOPs per token, counted by hand: every base GEMM runs forward and dgrad
    (2 passes) under LoRA instead of forward, dgrad and wgrad (3); the adapters (rank r on QKV, proj, fc1, fc2) run
    all three; the output layer is frozen too."""
    m, r = plan.model, plan.training.lora_rank
    h, q, kv, f = m.hidden_size, m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups, m.ffn_hidden_size
    layer = 2 * (h * (q + 2 * kv) + q * h + h * 2 * f + f * h)
    adapters = 2 * r * ((h + q + 2 * kv) + (q + h) + (h + 2 * f) + (f + h))
    head = 2 * h * padded_vocab_size(m.vocab_size, plan.parallel.tp)
    full = 3 * (m.num_layers * layer + head)
    lora = 2 * (m.num_layers * layer + head) + 3 * m.num_layers * adapters
    return lora / full


@pytest.mark.slow  # two command-line runs
def test_lora_twin_is_faster_by_the_weight_gradients_it_skips(tmp_path):
    full_plan = _sft()
    lora_plan = full_plan.changed({"training": {"peft": "lora"}})
    full = _estimate_json(full_plan, tmp_path, "full")
    lora = _estimate_json(lora_plan, tmp_path, "lora")
    expected = _gemm_flops_ratio(full_plan)
    assert expected == pytest.approx(0.676, abs=0.002)  # a third of the GEMMs gone, 1.4 % back for the adapters
    # the GEMM time follows the FLOPs plus the adapters' memory traffic: a rank-32 adapter does 0.8 % of its layer's
    # FLOPs but reads its input and writes a full-width output (fc1's B writes tokens x 2 x ffn), three passes each
    gemm_ratio = lora["breakdown"]["gemm"] / full["breakdown"]["gemm"]
    assert expected < gemm_ratio < expected + 0.08
    # attention runs its full backward under LoRA too, and the gradient sync and optimizer shrink to the adapters'
    ratio = lora["step_seconds"] / full["step_seconds"]
    assert expected - 0.03 < ratio < 0.8
    assert lora["breakdown"]["dp_comm"] <= full["breakdown"]["dp_comm"]
    assert lora["breakdown"]["optimizer"] < 0.01 * full["breakdown"]["optimizer"]
    # MFU is Megatron's: the full model's FLOPs over the step, so LoRA's apparent MFU is higher by the work it skips
    assert 0 < full["mfu"] < lora["mfu"] < 1
    assert lora["mfu"] / full["mfu"] == pytest.approx(1 / ratio, rel=1e-6)


@pytest.mark.slow  # a refit over the 118 published rows takes ~30 s
def test_shipped_constants_are_the_fit():
    rows = load_measurements()
    refit = fit(rows)
    for name in fitted_names(rows):
        assert getattr(refit, name) == pytest.approx(getattr(EFFICIENCY, name), abs=0.01), name


def test_the_calibration_error_is_what_the_readme_says():
    rows = load_measurements()
    assert len(rows) == 118
    err = np.abs(np.expm1(residuals(rows, EFFICIENCY)))
    dense = np.array([e for r, e in zip(rows, err, strict=True) if not r.plan.model.num_moe_experts])
    assert np.median(err) <= 0.10 and np.median(dense) <= 0.08 and np.percentile(dense, 90) <= 0.15
    dgxc = err[:18]  # NVIDIA's H100 runs, BF16 then FP8
    assert np.median(dgxc) <= 0.08


def test_breakdown_adds_up_and_mfu_is_an_output(chat):
    est = estimate(_sft(), chat)
    t = est.time
    assert sum(t.breakdown.values()) == pytest.approx(t.step_seconds)
    gpus, peak = est.plan.parallel.gpus, est.plan.hardware.peak_tflops * 1e12
    assert t.mfu == pytest.approx(est.flops.model_per_step / (t.step_seconds * gpus * peak), rel=1e-6)
    assert 0.3 < t.mfu < 0.7


def test_an_explicit_mfu_keeps_the_fixed_utilisation_formula(chat):
    est = estimate(_sft(), chat, mfu=0.5)
    t = est.time
    peak = est.plan.hardware.peak_tflops * 1e12
    assert t.model == "fixed MFU 0.5"
    assert t.step_seconds == pytest.approx(est.flops.computed_per_step / (8 * peak * 0.5) * t.straggler_factor)


def test_a_data_parallel_group_with_one_rank_per_node_waits_on_one_nic():
    """TP 8 leaves each DP group one rank per node: its ring crosses the nodes on that rank's rail alone, so a
    short step cannot hide the gradient reduce-scatter (1B parameters a GPU in FP32 over one 50 GB/s NIC)."""
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "tp": 8, "sp": True},
            "training": {"seq_length": 4096, "global_batch_samples": 2, "recompute": "none"},
        }
    )
    t = step_time(plan, StepWork(tokens=1024, seqlen_squared_sum=1024.0**2, micro_batches=1), EFFICIENCY)
    assert t.breakdown["dp_comm"] > 0.2 * t.step_seconds
    one_node = step_time(
        plan.changed({"parallel": {"gpus": 8}, "training": {"global_batch_samples": 1}}),
        StepWork(tokens=1024, seqlen_squared_sum=1024.0**2, micro_batches=1),
        EFFICIENCY,
    )
    assert one_node.breakdown["dp_comm"] == 0.0  # no data parallelism at all


def test_full_nodes_scale_flat_at_fixed_work_per_gpu(chat):
    """A DP group holding all 8 GPUs of each node uses all 8 rails (NCCL builds one ring per rail): from 8 to 32
    GPUs at fixed work per GPU the step stays within 1 % (it rose 21 % when every cross-node ring paid one NIC)."""
    steps = [
        estimate(_sft(parallel={"gpus": g}, training={"global_batch_samples": 32 * g}), chat).time.step_seconds
        for g in (8, 16, 32)
    ]
    assert max(steps) / min(steps) < 1.01


# nccl-tests bus bandwidths that NVIDIA's NCCL maintainers published, against the model's (ring, large messages)
NCCL_BUS_BANDWIDTH = [
    # 8 x H100 on NVLink: ~370 GB/s with the ring (S. Jeaugey, NVIDIA/nccl-tests#212)
    ("H100-80GB", 8, 1, 370e9),
    # DGX A100 nodes, all 8 GPUs each, 8 x 200 Gb/s InfiniBand: 192 GB/s all-reduce (NVIDIA/nccl#812)
    ("A100-80GB", 16, 1, 192e9),
    # one 400 Gb/s ConnectX-7 NIC: 48-49 GB/s (NVIDIA/nccl-tests#267): a group with one rank per node
    ("H100-80GB", 16, 8, 48.5e9),
]


@pytest.mark.parametrize("gpu,ranks,stride,published", NCCL_BUS_BANDWIDTH)
def test_collective_bandwidth_matches_published_nccl_tests(gpu, ranks, stride, published):
    from advisor.model.perf.hardware import gpu_of

    g = gpu_of(plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": gpu}}))
    assert g.ring(ranks, stride).bandwidth == pytest.approx(published, rel=0.03)


def test_an_nvl72_rack_keeps_64_ranks_on_nvlink():
    from advisor.model.perf.hardware import gpu_of

    g = gpu_of(plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": "GB200"}}))
    assert g.ring(64, 1).bandwidth == g.nvlink.bandwidth and g.ring(64, 1).name == "nvlink"
    assert g.ring(72 * 2, 1).name.startswith("network")
    assert g.ring(64, 1).bandwidth == pytest.approx(900e9 * 0.82)


def test_the_bubble_is_pp_minus_one_over_vpp_micro_batches():
    plan = plan_from_dict(
        {
            "model": "llama3.1-70b",
            "parallel": {"gpus": 32, "tp": 4, "pp": 4, "sp": True},
            "training": {"global_batch_samples": 64, "seq_length": 4096},
        }
    )
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=16)
    plain = step_time(plan, work, EFFICIENCY)
    inter = step_time(plan.changed({"parallel": {"vpp": 5}}), work, EFFICIENCY)
    assert inter.breakdown["pp_bubble"] == pytest.approx(plain.breakdown["pp_bubble"] / 5, rel=1e-9)
    # the bubble is (pp - 1) micro batches of the mean stage: within the output layer's share of the slowest stage
    assert plain.breakdown["pp_bubble"] == pytest.approx(3 * plain.stage_seconds, rel=0.1)


_LAYOUTS = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["llama3.1-8b", "llama3.1-70b", "qwen3-8b"]),
        "tp": st.sampled_from([1, 2, 4, 8]),
        "pp": st.sampled_from([1, 2, 4]),
        "cp": st.sampled_from([1, 2]),
        "dp": st.sampled_from([1, 2, 4]),
        "sp": st.booleans(),
        "seq": st.sampled_from([2048, 4096, 16384]),
        "m": st.integers(1, 32),
        "fill": st.floats(0.2, 1.0),
    }
)


def _layout(d):
    sp = d["sp"] and d["tp"] > 1
    plan = plan_from_dict(
        {
            "model": d["model"],
            "parallel": {
                "gpus": d["tp"] * d["pp"] * d["cp"] * d["dp"],
                "tp": d["tp"],
                "pp": d["pp"],
                "cp": d["cp"],
                "sp": sp,
            },
            "training": {"seq_length": d["seq"], "recompute": "none"},
        }
    )
    # a pack of sequences a quarter of the pack long, filled to `fill`
    tokens = d["seq"] * d["fill"]
    work = StepWork(tokens=tokens, seqlen_squared_sum=tokens * d["seq"] / 4, micro_batches=d["m"])
    return plan, work


@settings(max_examples=60, deadline=None)
@given(_LAYOUTS)
def test_rules_every_layout_keeps(d):
    plan, work = _layout(d)
    base = step_time(plan, work, EFFICIENCY).step_seconds
    assert base > 0
    changed = lambda section, **f: step_time(plan.changed({section: f}), work, EFFICIENCY).step_seconds  # noqa: E731
    if work.tokens / plan.parallel.cp / plan.parallel.tp >= 512:
        # frozen weights: no weight gradients, no gradient sync; below that a micro batch's GEMMs are so small that
        # LoRA's 16 extra adapter kernels a layer cost more than the weight gradients it skips
        assert changed("training", peft="lora") < base
    # recompute adds work; where a step waits for the gradient sync, the longer backward hides as much of it as it
    # adds, so the step may stay the same (never shrink)
    full, selective = changed("training", recompute="full"), changed("training", recompute="selective")
    assert full >= selective * (1 - 1e-12) and selective >= base * (1 - 1e-12)  # equal up to rounding at most
    redo = {
        r: step_time(plan.changed({"training": {"recompute": r}}), work, EFFICIENCY).breakdown["recompute"]
        for r in ("full", "selective")
    }
    assert redo["full"] > redo["selective"] > 0
    assert changed("hardware", gpu="B200") < base  # more FLOP/s, more bandwidth everywhere
    assert changed("hardware", gpu="A100-80GB") > base
    if plan.parallel.sp:
        assert changed("parallel", tp_comm_overlap=True) <= base * (1 + 1e-12)
    twice = step_time(
        plan,
        StepWork(tokens=work.tokens, seqlen_squared_sum=work.seqlen_squared_sum, micro_batches=2 * work.micro_batches),
        EFFICIENCY,
    ).step_seconds
    assert base < twice <= 2 * base  # the bubble, the sync and the optimizer are paid once per step


def test_the_trial_prediction_uses_the_trial_model_on_its_gpu():
    plan = _sft()
    cfg = TrialModelConfig(num_layers=2, num_heads=4, num_kv_heads=1, head_dim=64, ffn_hidden_size=704)
    steps = [[[300, 200, 500], [1000]], [[700, 300], [900, 100]]]
    h100 = predicted_step(plan, cfg, steps, world=1, gpu="H100-80GB")
    a100 = predicted_step(plan, cfg, steps, world=1, gpu="A100-80GB")
    assert 0 < h100["step_seconds"] < a100["step_seconds"]
    assert h100["step_seconds"] == pytest.approx(sum(h100["breakdown"].values()))


def _moe(**parallel):
    return plan_from_dict(
        {
            "model": "qwen3-30b-a3b",
            "parallel": {"gpus": 16, "sp": parallel.get("tp", 1) > 1, **parallel},
            "training": {"seq_length": 4096, "recompute": "none"},
        }
    )


def test_experts_see_the_tokens_the_dispatcher_routes_to_them():
    """token_dispatcher.py: a rank routes its TP shard, all-to-alls over EP, all-gathers over expert TP."""
    from advisor.model.perf.gemms import layer_gemms

    def expert_rows(plan):
        g = next(g for g in layer_gemms(plan, 4096, moe=True) if g.name == "expert_fc1")
        return g.m * g.count  # rows over the rank's local experts

    m = _moe(tp=1).model
    topk = m.moe_router_topk
    # per GPU the experts process tokens x topk x (share of experts held) x (ranks whose tokens arrive)
    assert expert_rows(_moe(tp=1, ep=1)) == pytest.approx(4096 * topk)
    assert expert_rows(_moe(tp=2, ep=8, etp=1)) == pytest.approx(4096 / 2 * topk)  # TP shard, no expert TP gather
    assert expert_rows(_moe(tp=2, ep=8, etp=2)) == pytest.approx(4096 * topk)  # gathered back over expert TP


def test_a2a_overlap_hides_the_all_to_all_behind_the_other_micro_batch():
    """overlap_moe_expert_parallel_comm: each dispatch and combine runs behind a block of the other micro batch, so
    the exposed all-to-all shrinks and nothing else changes; never below zero, never above the plain one."""
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=8)
    plain = step_time(_moe(tp=1, ep=16), work, EFFICIENCY).breakdown
    over = step_time(_moe(tp=1, ep=16, moe_a2a_overlap=True), work, EFFICIENCY).breakdown
    assert plain["moe_all_to_all"] > 0 and 0 <= over["moe_all_to_all"] < plain["moe_all_to_all"]
    assert {k: v for k, v in over.items() if k != "moe_all_to_all"} == {
        k: v for k, v in plain.items() if k != "moe_all_to_all"
    }


def test_the_flex_dispatcher_permutes_while_it_sends():
    """DeepEP and HybridEP write the received tokens in expert order: no separate permutation pass over HBM."""
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=8)
    plain = step_time(_moe(tp=1, ep=8), work, EFFICIENCY).breakdown
    flex = step_time(_moe(tp=1, ep=8, moe_dispatcher="flex_hybridep"), work, EFFICIENCY).breakdown
    assert flex["memory_bound"] < plain["memory_bound"]
    assert flex["moe_all_to_all"] == plain["moe_all_to_all"] and flex["gemm"] == plain["gemm"]


def test_grouped_experts_share_the_waves_so_ep_does_not_win_by_artefact():
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=8)
    ep1 = step_time(_moe(tp=1, ep=1), work, EFFICIENCY).breakdown["gemm"]
    ep8 = step_time(_moe(tp=1, ep=8), work, EFFICIENCY).breakdown["gemm"]
    # the same expert FLOPs per GPU (EP brings other ranks' tokens to fewer experts), one grouped kernel each way
    assert ep8 == pytest.approx(ep1, rel=0.15)


def test_context_parallel_splits_attention_at_the_cost_of_its_chunks_tiles():
    """CP r splits each sequence's attention r ways, and the kernels run on chunks of s / 2r tokens whose edges round
    up to 128-token tiles: 2,048-token sequences cost CP 8 the tiles of 128-token chunks."""
    from advisor.model.perf.kernels import ring_tile_share

    base = {"model": "llama3.1-8b", "training": {"seq_length": 16384, "recompute": "none"}}
    work = StepWork(tokens=16384, seqlen_squared_sum=8 * 2048.0**2, micro_batches=4)
    per_gpu = {
        cp: step_time(plan_from_dict({**base, "parallel": {"gpus": cp, "cp": cp}}), work, EFFICIENCY).breakdown[
            "attention"
        ]
        * cp
        for cp in (1, 2, 4, 8)
    }
    for cp in (2, 4, 8):
        share = ring_tile_share(2048, cp) / ring_tile_share(2048)
        assert per_gpu[cp] == pytest.approx(per_gpu[1] / share, rel=1e-9)
    assert per_gpu[1] < per_gpu[2] < per_gpu[4] < per_gpu[8]


def test_lora_adapters_are_sharded_by_tp_like_their_layers():
    from advisor.model.perf.gemms import layer_gemms

    def adapter_flops(tp):
        plan = plan_from_dict(
            {"model": "llama3.1-70b", "parallel": {"gpus": tp, "tp": tp, "sp": tp > 1}, "training": {"peft": "lora"}}
        )
        return sum(g.flops() for g in layer_gemms(plan, 4096, moe=False) if "lora" in g.name)

    assert adapter_flops(8) == pytest.approx(adapter_flops(1) / 8)


@pytest.mark.parametrize(
    ("precision", "gpu", "peak_key"),
    [
        ("fp8", "H100-80GB", "fp8_tflops"),
        ("mxfp8", "B200", "fp8_tflops"),
        ("nvfp4", "GB300", "fp4_tflops"),
        ("bf16", "B200", "bf16_tflops"),
    ],
)
def test_mfu_is_of_the_peak_the_linear_layers_run_at(chat, precision, gpu, peak_key):
    """NVIDIA publishes FP8 runs' MFU against the FP8 peak (dgxc-benchmarking): so does the estimate, in both
    directions (the model's MFU, and a fixed MFU's step time)."""
    plan = _sft().changed({"training": {"precision": precision}, "hardware": {"gpu": gpu}})
    est = estimate(plan, chat)
    peak = plan.hardware.table[peak_key] * 1e12
    assert est.time.peak_format == peak_key.split("_")[0]
    assert est.time.mfu == pytest.approx(est.flops.model_per_step / (est.time.step_seconds * 8 * peak), rel=1e-6)
    fixed = estimate(plan, chat, mfu=0.4).time
    assert fixed.step_seconds == pytest.approx(est.flops.computed_per_step / (8 * peak * 0.4) * fixed.straggler_factor)


def test_a_given_bf16_peak_scales_the_other_precisions_peaks():
    """A GPU outside the table (H100's bandwidths) or a preset with its BF16 peak overridden keeps the row's ratios
    of FP8 and FP4 to BF16, instead of H100's or the datasheet's absolute FP8 peak."""
    from advisor.plan.presets import GPU_PRESETS

    custom = plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": "X1", "memory_gib": 96, "bf16_tflops": 500}})
    assert custom.hardware.table["fp8_tflops"] == pytest.approx(500 * 1979 / 989)
    capped = plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": "B200", "bf16_tflops": 1800}})
    row = GPU_PRESETS["B200"]
    assert capped.hardware.table["fp8_tflops"] == pytest.approx(row["fp8_tflops"] * 1800 / row["bf16_tflops"])
    assert capped.hardware.table["fp4_tflops"] == pytest.approx(row["fp4_tflops"] * 1800 / row["bf16_tflops"])
    assert (
        plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": "B200"}}).hardware.table["fp8_tflops"]
        == row["fp8_tflops"]
    )


def test_a_fixed_mfu_cannot_rank_precisions(chat):
    from advisor.advice.search import search

    with pytest.raises(ValueError, match="--vary precision with --mfu"):
        search(_sft(), chat, mfu=0.4, vary={"precision"})


def test_lora_adapts_only_its_targets_experts_included():
    """Adapters (two rank-r GEMMs each) beside the targeted linears only; linear_fc1 names the experts' too
    (Megatron-Bridge matches modules by name); parameters and time grow with the targets."""
    from advisor.model.memory import lora_parameters
    from advisor.model.perf.gemms import layer_gemms

    def adapters(model, targets, moe):
        plan = plan_from_dict(
            {
                "model": model,
                "parallel": {"gpus": 8, "ep": 8 if moe else 1},
                "training": {"peft": "lora", "lora_targets": targets},
            }
        )
        return {g.name for g in layer_gemms(plan, 4096, moe=moe) if g.name.endswith(("_lora_a", "_lora_b"))}, plan

    names, qkv = adapters("llama3.1-8b", ["linear_qkv"], False)
    assert names == {"linear_qkv_lora_a", "linear_qkv_lora_b"}
    names, _ = adapters("qwen3-30b-a3b", ["linear_fc1"], True)
    assert names == {"expert_fc1_lora_a", "expert_fc1_lora_b"}
    _, every = adapters("llama3.1-8b", ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], False)
    assert every == plan_from_dict(
        {"model": "llama3.1-8b", "parallel": {"gpus": 8}, "training": {"peft": "lora"}}
    )  # Megatron-Bridge's default targets
    assert 0 < lora_parameters(qkv) < lora_parameters(every)
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=4)
    assert step_time(qkv, work, EFFICIENCY).step_seconds < step_time(every, work, EFFICIENCY).step_seconds
    with pytest.raises(PlanError, match="lists a layer twice"):
        plan_from_dict({"model": "llama3.1-8b", "training": {"peft": "lora", "lora_targets": ["linear_qkv"] * 2}})
    with pytest.raises(PlanError):
        plan_from_dict({"model": "llama3.1-8b", "training": {"peft": "lora", "lora_targets": []}})


def test_lora_parameters_count_shared_experts_and_dense_layers_of_moe_models():
    """DeepSeek-V3: the routed experts share one adapter a layer, the shared expert has its own, and the first three
    (dense) layers adapt the dense MLP's width."""
    from advisor.model.memory import lora_parameters
    from advisor.model.parameters import moe_layer_pattern

    def params(**model):
        return lora_parameters(
            plan_from_dict(
                {
                    "model": {"preset": "deepseek-v3", **model},
                    "parallel": {"gpus": 64, "ep": 8},
                    "training": {"peft": "lora", "lora_targets": ["linear_fc2"]},
                }
            )
        )

    plan = plan_from_dict({"model": "deepseek-v3", "parallel": {"gpus": 64, "ep": 8}})
    m, moe_layers = plan.model, sum(moe_layer_pattern(plan.model))
    dense_layers = m.num_layers - moe_layers
    assert dense_layers == 3
    # fc2's adapter: r (in + out) = r (width + h), per layer by its kind
    expected = 32 * (
        dense_layers * (m.ffn_hidden_size + m.hidden_size)
        + moe_layers * (m.moe_ffn_hidden_size + m.hidden_size + m.moe_shared_expert_intermediate_size + m.hidden_size)
    )
    assert params() == expected
    assert params(moe_shared_expert_intermediate_size=None) < expected
