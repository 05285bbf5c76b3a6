"""Precisions (FP8 recipes, MXFP8, NVFP4), Megatron FSDP and the new presets' attention, in the plan, memory, FLOPs,
step time and rules, checked against what Transformer Engine, Megatron-Core and Megatron-Bridge do."""

from __future__ import annotations

import pytest

from advisor.advice.rules import check
from advisor.model.flops import flops_coefficients
from advisor.model.memory import activation_bytes_per_token_per_layer, estimate_memory
from advisor.model.numerics import NUMERICS, numerics_of
from advisor.model.parameters import count_parameters
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time, windowed_layer_share
from advisor.plan import PlanError, plan_from_dict

WORK = StepWork(tokens=8192, seqlen_squared_sum=8192.0**2, micro_batches=8)


def _plan(model="llama3.1-8b", gpu="H100-80GB", **training):
    return plan_from_dict(
        {
            "model": model,
            "parallel": {"gpus": 8},
            "hardware": {"gpu": gpu},
            "training": {
                "task": "pretrain",
                "seq_length": 8192,
                "global_batch_samples": 64,
                "recompute": "none",
                **training,
            },
            "packing": {"mode": "none"},
        }
    )


@pytest.mark.parametrize("precision,gpu", [("mxfp8", "H100-80GB"), ("nvfp4", "H200-141GB"), ("fp8", "A100-80GB")])
def test_a_gpu_without_the_tensor_cores_is_refused_naming_the_field(precision, gpu):
    with pytest.raises(PlanError, match=f"training.precision {precision} needs compute capability"):
        _plan(gpu=gpu, precision=precision)


def test_an_fp8_recipe_applies_to_fp8_only():
    with pytest.raises(PlanError, match="training.fp8_recipe delayed applies to precision fp8 only"):
        _plan(gpu="B200", precision="mxfp8", fp8_recipe="delayed")
    assert numerics_of(_plan(precision="fp8")).name == "fp8 tensorwise"  # Megatron-Bridge's default fp8_recipe


def test_fp8_gains_less_than_its_peak_on_h100():
    """Twice the tensor-core peak, but the casts, attention (BF16), norms and the output layer do not speed up:
    NVIDIA's own Llama 3.1 runs gained 1.3-1.6x (published_step_times.csv)."""
    bf16 = step_time(_plan(), WORK, EFFICIENCY)
    fp8 = step_time(_plan(precision="fp8"), WORK, EFFICIENCY)
    assert 1.2 < bf16.step_seconds / fp8.step_seconds < 1.8
    assert fp8.breakdown["quantize"] > 0 == bf16.breakdown["quantize"]
    assert fp8.breakdown["attention"] == pytest.approx(bf16.breakdown["attention"])  # attention stays BF16


def test_the_recipes_cost_what_their_casts_move():
    times = {
        r: step_time(_plan(precision="fp8", fp8_recipe=r), WORK, EFFICIENCY).breakdown["quantize"]
        for r in ("tensorwise", "delayed", "blockwise")
    }
    # current scaling reads each tensor twice (its amax, then the cast); delayed scaling once
    assert times["tensorwise"] > times["blockwise"] > times["delayed"]
    blackwell = {
        p: step_time(_plan(gpu="B200", precision=p), WORK, EFFICIENCY).step_seconds for p in ("bf16", "mxfp8", "nvfp4")
    }
    assert blackwell["bf16"] > blackwell["mxfp8"] > blackwell["nvfp4"]


def test_quantized_layers_keep_quantized_inputs_for_backward():
    """QKV input, attention output, MLP input and FC2 input: 2 bytes an element in BF16, 1 in FP8, 0.5625 in
    NVFP4 (E2M1 plus an E4M3 scale per 16); q, k, v and the SwiGLU's FC1 output stay BF16."""
    m = _plan().model
    h, q, f = m.hidden_size, m.head_dim * m.num_attention_heads, m.ffn_hidden_size
    linear_inputs = h + q + h + f
    bf16 = activation_bytes_per_token_per_layer(_plan())
    for precision, gpu in (("fp8", "H100-80GB"), ("nvfp4", "B200")):
        plan = _plan(gpu=gpu, precision=precision)
        saved = numerics_of(plan).saved_input_bytes
        assert bf16 - activation_bytes_per_token_per_layer(plan) == pytest.approx((2 - saved) * linear_inputs)


def test_gradients_take_the_ddp_buffers_dtype():
    fp32 = estimate_memory(_plan(), 8192, 8)
    bf16 = estimate_memory(_plan(grad_reduce_in_fp32=False), 8192, 8)
    assert bf16.gradients == pytest.approx(fp32.gradients / 2)


def test_fsdp_shards_weights_and_gradients_over_dp_and_keeps_two_layers_whole():
    plan = plan_from_dict(
        {
            "model": "llama3.1-70b",
            "parallel": {"gpus": 64},
            "training": {"task": "pretrain", "global_batch_samples": 128, "grad_reduce_in_fp32": False},
            "packing": {"mode": "none"},
            "hardware": {"gpu": "GB200"},
        }
    )
    ddp = estimate_memory(plan, 4096, 2)
    fsdp = estimate_memory(plan.changed({"parallel": {"fsdp": True}}), 4096, 2)
    layer = count_parameters(plan.model).dense_by_layer[0]
    assert fsdp.optimizer == pytest.approx(ddp.optimizer)  # the distributed optimizer already shards it
    assert fsdp.weights == pytest.approx(ddp.weights / 64 + 2 * 2 * layer, rel=0.01)
    assert fsdp.gradients == pytest.approx(ddp.gradients / 64 + 2 * layer, rel=0.01)
    assert fsdp.total < 0.5 * ddp.total


def test_fsdp_hides_its_gathers_on_nvlink_and_not_on_one_slow_link():
    plan = plan_from_dict(
        {
            "model": "llama3.1-70b",
            "parallel": {"gpus": 64, "fsdp": True},
            "training": {
                "task": "pretrain",
                "global_batch_samples": 128,
                "seq_length": 8192,
                "recompute": "none",
                "grad_reduce_in_fp32": False,
            },
            "packing": {"mode": "none"},
            "hardware": {"gpu": "GB200"},
        }
    )
    work = StepWork(tokens=8192, seqlen_squared_sum=8192.0**2, micro_batches=2)
    rack = step_time(plan, work, EFFICIENCY).breakdown
    assert rack["fsdp_comm"] == 0.0 and rack["dp_comm"] < 0.01 * sum(rack.values())
    short = StepWork(tokens=256, seqlen_squared_sum=256.0**2, micro_batches=2)  # too little compute to hide 1.7 GB
    h100 = step_time(plan.changed({"hardware": {"gpu": "H100-80GB"}}), short, EFFICIENCY).breakdown
    assert h100["fsdp_comm"] > 0.3 * sum(h100.values())


def test_gpt_oss_windows_half_its_layers_and_has_sinks():
    m = plan_from_dict({"model": "gpt-oss-120b"}).model
    assert windowed_layer_share(m) == 0.5  # window_attn_skip_freq 2: every second layer attends fully
    c = flops_coefficients(m)
    full = flops_coefficients(m.model_copy(update={"window_size": None}))
    assert c.core + c.window_core == pytest.approx(full.core)
    s = 4096
    # a 4096-token sequence under a 128-token window: 2 x 128 x 4096 of the 4096^2 scale
    assert c.attention(s, s * s) == pytest.approx(full.core / 2 * s * s + full.core / 2 * 2 * 128 * s)
    sinks = count_parameters(m).total - count_parameters(m.model_copy(update={"softmax_type": "vanilla"})).total
    assert sinks == m.num_attention_heads * m.num_layers


def test_new_presets_have_their_published_sizes():
    qwen = count_parameters(plan_from_dict({"model": "qwen3-235b-a22b"}).model)
    oss = count_parameters(plan_from_dict({"model": "gpt-oss-120b"}).model)
    assert qwen.total / 1e9 == pytest.approx(235, abs=1)  # Qwen3-235B-A22B
    assert oss.total / 1e9 == pytest.approx(116.8, abs=0.5)  # gpt-oss-120b: 116.8B (OpenAI model card)


def test_precision_rules():
    odd = plan_from_dict(
        {
            "model": {"preset": "llama3.1-8b", "ffn_hidden_size": 14344},
            "hardware": {"gpu": "B200"},
            "training": {"precision": "mxfp8"},
            "parallel": {"gpus": 8},
        }
    )
    found = {f.id: f for f in check(odd)}
    assert found["precision.divisibility"].severity == "error" and "14344" in found["precision.divisibility"].message
    assert "precision.divisibility" not in {f.id for f in check(odd.changed(found["precision.divisibility"].fix))}
    block = _plan(gpu="B200", precision="fp8", fp8_recipe="blockwise")
    fix = {f.id: f for f in check(block)}["precision.blockwise_on_blackwell"].fix
    assert block.changed(fix).training.precision == "mxfp8"
    assert NUMERICS["mxfp8"].divisor == 32 and NUMERICS["nvfp4"].divisor == 16


def test_fsdp_on_one_rank_shards_nothing():
    plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8, "tp": 8, "sp": True, "fsdp": True}})
    assert "fsdp.nothing_to_shard" in {f.id for f in check(plan)}
