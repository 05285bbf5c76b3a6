"""The Megatron-LM export parsed by Megatron-LM's own argument parser (dev d48bd6be ``arguments.py``): for every
preset the parsed namespace has the preset's architecture, and ``validate_args`` accepts it with the plan's GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from advisor.advice.exports import MAX_CONNECTIONS, megatron_lm_args
from advisor.plan import plan_from_dict
from advisor.plan.presets import HF_REPOS, MODEL_PRESETS
from tests.support import ROOT
from tests.support.mlm_args_check import missing_reason

REASON = missing_reason()
# Megatron-LM's argument parser takes ~15 s to load
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
LAYOUTS = {
    "llama3.1-405b": {"gpus": 64, "tp": 8, "pp": 2, "sp": True},
    "nemotron4-340b": {"gpus": 64, "tp": 8, "pp": 4, "sp": True},
    "deepseek-v3": {"gpus": 64, "tp": 2, "ep": 8},
    "grok1-314b": {"gpus": 64, "tp": 8, "ep": 8, "sp": True},
    "qwen3-30b-a3b": {"gpus": 16, "tp": 2, "ep": 8, "sp": True},
    "mixtral-8x7b": {"gpus": 16, "tp": 2, "ep": 8, "sp": True},
    "qwen3-235b-a22b": {
        "gpus": 64,
        "tp": 2,
        "ep": 8,
        "sp": True,
        "pp": 2,
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    },
    "gpt-oss-120b": {"gpus": 64, "ep": 8},
}


PRECISIONS = [
    ("fp8/tensorwise", {"precision": "fp8"}, {"tp": 2, "sp": True}),
    ("fp8/delayed", {"precision": "fp8", "fp8_recipe": "delayed"}, {}),
    ("fp8/blockwise", {"precision": "fp8", "fp8_recipe": "blockwise"}, {}),
    ("mxfp8/fsdp", {"precision": "mxfp8"}, {"fsdp": True}),
    ("mxfp8", {"precision": "mxfp8"}, {}),
    ("nvfp4", {"precision": "nvfp4"}, {"tp": 2, "sp": True}),
]
OWN_TOKENIZER = "/models/tokenizer"  # what a user sets where a preset names no Hugging Face repository


def shell_argv(text: str, tokenizer: str | None = None) -> list[str]:
    """The arguments as bash passes them to a program (comments dropped, quotes and ${...} expanded), with
    TOKENIZER_MODEL set to ``tokenizer`` or unset."""
    body = "".join(line for line in text.splitlines(True) if not line.startswith("#"))
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZER_MODEL"}
    env.update({"ARGS": body}, **({"TOKENIZER_MODEL": tokenizer} if tokenizer else {}))
    proc = subprocess.run(
        ["bash", "-c", 'eval "set -- $ARGS"; printf "%s\\0" "$@"'], env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.split("\0")[:-1]


def test_a_preset_without_a_repository_needs_the_tokenizer():
    text = megatron_lm_args(plan_from_dict({"model": "nemotron4-15b"}))
    with pytest.raises(subprocess.CalledProcessError) as e:
        shell_argv(text)
    assert "set TOKENIZER_MODEL to the tokenizer path" in e.value.stderr
    assert OWN_TOKENIZER in shell_argv(text, OWN_TOKENIZER)


def plans() -> dict:
    out = {}
    for name in MODEL_PRESETS:
        layout = LAYOUTS.get(name, {"gpus": 16, "tp": 2, "sp": True})
        out[name] = plan_from_dict(
            {
                "model": name,
                "parallel": layout,
                "packing": {"mode": "none"},
                "training": {"seq_length": 4096, "global_batch_samples": 256, "epochs": 1},
            }
        )
    # the precisions and Megatron FSDP (Megatron-LM's parser does not look at the GPU: H100's 9.0 is stubbed in)
    for name, training, parallel in PRECISIONS:
        out[name] = plan_from_dict(
            {
                "model": "llama3.1-8b",
                "parallel": {"gpus": 16, **parallel},
                "training": {"seq_length": 4096, "global_batch_samples": 256, **training},
                "hardware": {"gpu": "B200"},
            }
        )
    # the reviewer's plan: Llama 3.1 8B chat SFT on 16 H100s, TP 2 + SP, offline packing, CP 2
    # the MoE dispatcher and EP overlap: flex with HybridEP, the all-to-all behind the other micro batch (VPP with PP)
    out["qwen3-30b-a3b/flex-overlap"] = plan_from_dict(
        {
            "model": "qwen3-30b-a3b",
            "parallel": {
                "gpus": 16,
                "pp": 2,
                "vpp": 2,
                "ep": 8,
                "moe_a2a_overlap": True,
                "moe_dispatcher": "flex_hybridep",
            },
            "training": {"seq_length": 4096, "global_batch_samples": 256, "recompute": "none"},
        }
    )
    # DeepSeek-V3's 61 layers at PP 4 x VP 4: Megatron-Bridge's recipe layout, passed as Megatron-LM's own flag
    out["deepseek-v3/layout"] = plan_from_dict(
        {
            "model": "deepseek-v3",
            "parallel": {"gpus": 64, "pp": 4, "vpp": 4, "ep": 8},
            "training": {"seq_length": 4096, "global_batch_samples": 256},
            "packing": {"mode": "none"},
        }
    )
    out["deepseek-v3/layout-mtp"] = plan_from_dict(
        {
            "model": {"preset": "deepseek-v3", "mtp_num_layers": 1},
            "parallel": {"gpus": 64, "pp": 8, "vpp": 2, "ep": 8},
            "training": {"seq_length": 4096, "global_batch_samples": 256},
            "packing": {"mode": "none"},
        }
    )
    out["llama3.1-8b/cp"] = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "tp": 2, "cp": 2, "sp": True},
            "training": {"seq_length": 8192, "global_batch_samples": 128},
        }
    )
    # activation offloading as Megatron-Bridge's GB200 FSDP recipe runs it: pp 1, no recompute
    out["llama3.1-8b/offload"] = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "fsdp": True},
            "hardware": {"gpu": "GB200"},
            "training": {
                "seq_length": 8192,
                "global_batch_samples": 128,
                "recompute": "none",
                "cpu_offloading_num_layers": 20,
            },
        }
    )
    # block recompute, as Megatron-Bridge's H100 recipes set recompute_num_layers
    out["llama3.1-8b/block-recompute"] = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "pp": 2},
            "training": {
                "seq_length": 8192,
                "global_batch_samples": 128,
                "recompute": "full",
                "recompute_num_layers": 5,
            },
        }
    )
    return out


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """Every plan's export, parsed and validated in one Megatron-LM process."""
    cases = plans()
    items = []
    for p in cases.values():
        text = megatron_lm_args(p, num_samples=100_000)
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if MAX_CONNECTIONS in text else {}  # as the export asks
        items.append(
            {
                "argv": shell_argv(text, None if p.model.preset in HF_REPOS else OWN_TOKENIZER),
                "world_size": p.parallel.gpus,
                "env": env,
                "capability": divmod(round(p.hardware.table["compute_capability"] * 10), 10),
            }
        )
    path = tmp_path_factory.mktemp("mlm") / "argv.json"
    path.write_text(json.dumps(items))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.mlm_args_check", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True)), cases


CASES = [
    *MODEL_PRESETS,
    *(name for name, _, _ in PRECISIONS),
    "llama3.1-8b/cp",
    "qwen3-30b-a3b/flex-overlap",
    "deepseek-v3/layout",
    "deepseek-v3/layout-mtp",
    "llama3.1-8b/offload",
    "llama3.1-8b/block-recompute",
]


def test_megatron_lm_recomputes_the_block_the_plan_names(parsed):
    results, cases = parsed
    a = results["llama3.1-8b/block-recompute"]["parsed"]
    assert (a["recompute_granularity"], a["recompute_method"], a["recompute_num_layers"]) == ("full", "block", 5)
    assert results["llama3.1-8b/block-recompute"]["validate_args"] == "ok"


def test_megatron_lm_offloads_the_plans_layers(parsed):
    """The count is Megatron-LM's own flag; validate_args turns cpu_offloading on from it."""
    results, cases = parsed
    a = results["llama3.1-8b/offload"]["parsed"]
    assert a["cpu_offloading_num_layers"] == cases["llama3.1-8b/offload"].training.cpu_offloading_num_layers
    assert a["cpu_offloading_after_validation"] is True
    assert results["llama3.1-8b/offload"]["validate_args"] == "ok"
    assert not results["llama3.1-8b/cp"]["parsed"]["cpu_offloading_after_validation"]


@pytest.mark.parametrize("name", ["deepseek-v3/layout", "deepseek-v3/layout-mtp"])
def test_megatron_lm_takes_the_pipeline_layout(parsed, name):
    """The layout flag sets the virtual pipeline itself (arguments.py), to the plan's vpp, and Megatron-Core's
    layout check passes with the MTP layers the export declares."""
    from advisor.plan.pipeline_layout import parse_layout

    results, cases = parsed
    a, plan = results[name]["parsed"], cases[name]
    assert parse_layout(a["pipeline_model_parallel_layout"]) == plan.pipeline_stages
    assert a["vpp_after_validation"] == plan.parallel.vpp
    assert (a["mtp_num_layers"] or 0) == plan.model.mtp_num_layers
    assert results[name]["validate_args"] == "ok"
    assert a["layout_check"] == "ok"


@pytest.mark.parametrize("name", CASES)
def test_megatron_lm_parses_the_presets_architecture(parsed, name):
    results, cases = parsed
    plan, out = cases[name], results[name]
    a, m = out["parsed"], plan.model
    assert (a["num_layers"], a["hidden_size"], a["ffn_hidden_size"], a["num_attention_heads"], a["kv_channels"]) == (
        m.num_layers,
        m.hidden_size,
        m.ffn_hidden_size,
        m.num_attention_heads,
        m.head_dim,
    )
    assert a["group_query_attention"] is (m.query_groups != m.num_attention_heads)
    if a["group_query_attention"]:
        assert a["num_query_groups"] == m.query_groups
    assert (a["normalization"], a["layernorm_epsilon"], a["layernorm_zero_centered_gamma"]) == (
        m.normalization,
        m.norm_epsilon,
        m.layernorm_zero_centered_gamma,
    )
    assert a["swiglu"] is (m.gated_linear_unit and m.activation == "silu")
    assert a["squared_relu"] is (m.activation == "squared_relu")
    assert (a["add_bias_linear"], a["add_qkv_bias"], a["qk_layernorm"]) == (
        m.add_bias_linear,
        m.add_qkv_bias,
        m.qk_layernorm,
    )
    assert a["position_embedding_type"] == m.position_embedding_type
    assert (a["rotary_base"], a["rotary_percent"]) == (m.rotary_base, m.rotary_percent)
    yarn = m.position_embedding_type == "yarn"  # YaRN's factor is --rotary-scaling-factor
    assert a["use_rope_scaling"] is bool(m.rope_scaling_factor and not yarn)
    if m.rope_scaling_factor and not yarn:
        assert a["rope_scaling_factor"] == m.rope_scaling_factor
    assert a["mrope_section"] == m.mrope_section
    assert a["untie_embeddings_and_output_weights"] is not m.share_embeddings_and_output_weights
    assert a["num_experts"] == m.num_moe_experts
    if m.num_moe_experts:
        assert (
            a["moe_router_topk"],
            a["moe_ffn_hidden_size"],
            a["moe_shared_expert_intermediate_size"],
            a["moe_layer_freq"],
            a["moe_router_score_function"],
            a["moe_router_enable_expert_bias"],
            a["moe_router_num_groups"],
            a["moe_router_group_topk"],
            a["moe_router_topk_scaling_factor"],
        ) == (
            m.moe_router_topk,
            m.moe_ffn_hidden_size,
            m.moe_shared_expert_intermediate_size,
            m.moe_layer_freq,
            m.moe_router_score_function,
            m.moe_router_enable_expert_bias,
            m.moe_router_num_groups,
            m.moe_router_group_topk,
            m.moe_router_topk_scaling_factor,
        )
    assert (a["attention_dropout"], a["hidden_dropout"], a["bf16"]) == (0.0, 0.0, True)
    assert a["tokenizer_type"] == "HuggingFaceTokenizer"
    assert a["tokenizer_model"] == HF_REPOS.get(m.preset, OWN_TOKENIZER)
    assert (a["tensor_model_parallel_size"], a["context_parallel_size"], a["seq_length"], a["sft"]) == (
        plan.parallel.tp,
        plan.parallel.cp,
        plan.training.seq_length,
        True,
    )
    if plan.training.epochs:  # ceil(1 epoch x 100,000 samples / 256 a step)
        assert a["train_iters"] == -(-100_000 // 256)


@pytest.mark.parametrize("name", CASES)
def test_megatron_lm_validate_args(parsed, name):
    """validate_args runs on CPU (it reads WORLD_SIZE, no process group); its verdict on each export."""
    results, _ = parsed
    if name == "nvfp4":  # validate_args asks Transformer Engine's version, and none is installed here
        assert results[name]["validate_args"].startswith("ValueError: --fp4-format requires Transformer Engine")
        return
    assert results[name]["validate_args"] == "ok", results[name]["validate_args"]


@pytest.mark.parametrize("name", CASES)
def test_megatron_lm_runs_the_plans_moe_dispatcher_and_overlap(parsed, name):
    """MoE models run the dispatcher the estimate models (Megatron-Core's default, allgather, is not modelled)."""
    results, cases = parsed
    plan, a = cases[name], results[name]["parsed"]
    p = plan.parallel
    if not plan.model.num_moe_experts:
        assert a["moe_token_dispatcher_type"] == "allgather" and not a["overlap_moe_expert_parallel_comm"]
        return
    assert a["moe_token_dispatcher_type"] == ("alltoall" if p.moe_dispatcher == "alltoall" else "flex")
    if p.moe_dispatcher != "alltoall":
        assert a["moe_flex_dispatcher_backend"] == p.moe_dispatcher.removeprefix("flex_")
    assert a["overlap_moe_expert_parallel_comm"] is p.moe_a2a_overlap


@pytest.mark.parametrize("name", [name for name, _, _ in PRECISIONS])
def test_megatron_lm_runs_the_plans_precision_and_fsdp(parsed, name):
    results, cases = parsed
    plan, a = cases[name], results[name]["parsed"]
    t = plan.training
    fp4 = t.precision == "nvfp4"
    assert (a["fp4"], a["fp4_recipe"] if fp4 else None) == (("e2m1", "nvfp4") if fp4 else (None, None))
    if t.precision == "fp8":
        assert (a["fp8"], a["fp8_recipe"]) == ("hybrid", t.fp8_recipe or "tensorwise")
    elif t.precision == "mxfp8":
        assert (a["fp8"], a["fp8_recipe"]) == ("e4m3", "mxfp8")
    else:
        assert a["fp8"] is None
    assert a["fp8_param_gather"] is (t.precision in ("mxfp8", "fp8") and t.fp8_recipe != "blockwise")
    assert a["use_megatron_fsdp"] is plan.parallel.fsdp
    if plan.parallel.fsdp:
        assert a["data_parallel_sharding_strategy"] == "optim_grads_params"


def test_megatron_lm_builds_gpt_oss_attention(parsed):
    results, _ = parsed
    a = results["gpt-oss-120b"]["parsed"]
    assert tuple(a["window_size"]) == (127, 0) and a["window_attn_skip_freq"] == 2
    assert (a["softmax_type"], a["quick_geglu"]) == ("learnable", True)
