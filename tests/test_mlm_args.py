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
from tests.conftest import ROOT
from tests.mlm_args_check import missing_reason

REASON = missing_reason()
# Megatron-LM's argument parser takes ~15 s to load
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
LAYOUTS = {"llama3.1-405b": {"gpus": 64, "tp": 8, "pp": 2, "sp": True}, "nemotron4-340b": {"gpus": 64, "tp": 8,
           "pp": 4, "sp": True}, "deepseek-v3": {"gpus": 64, "tp": 2, "ep": 8}, "grok1-314b": {"gpus": 64, "tp": 8,
           "ep": 8, "sp": True}, "qwen3-30b-a3b": {"gpus": 16, "tp": 2, "ep": 8, "sp": True},
           "mixtral-8x7b": {"gpus": 16, "tp": 2, "ep": 8, "sp": True}}


OWN_TOKENIZER = "/models/tokenizer"  # what a user sets where a preset names no Hugging Face repository


def shell_argv(text: str, tokenizer: str | None = None) -> list[str]:
    """The arguments as bash passes them to a program (comments dropped, quotes and ${...} expanded), with
    TOKENIZER_MODEL set to ``tokenizer`` or unset."""
    body = "".join(line for line in text.splitlines(True) if not line.startswith("#"))
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZER_MODEL"}
    env.update({"ARGS": body}, **({"TOKENIZER_MODEL": tokenizer} if tokenizer else {}))
    proc = subprocess.run(["bash", "-c", 'eval "set -- $ARGS"; printf "%s\\0" "$@"'], env=env,
                          capture_output=True, text=True, check=True)
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
        out[name] = plan_from_dict({"model": name, "parallel": layout, "packing": {"mode": "none"},
                                    "training": {"seq_length": 4096, "global_batch_size": 256, "epochs": 1}})
    # the reviewer's plan: Llama 3.1 8B chat SFT on 16 H100s, TP 2 + SP, offline packing, CP 2
    out["llama3.1-8b/cp"] = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "tp": 2, "cp": 2,
                                                                                 "sp": True},
                                            "training": {"seq_length": 8192, "global_batch_size": 128}})
    return out


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """Every plan's export, parsed and validated in one Megatron-LM process."""
    cases = plans()
    items = []
    for p in cases.values():
        text = megatron_lm_args(p, num_samples=100_000)
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if MAX_CONNECTIONS in text else {}  # as the export asks
        items.append({"argv": shell_argv(text, None if p.model.preset in HF_REPOS else OWN_TOKENIZER),
                      "world_size": p.parallel.gpus, "env": env})
    path = tmp_path_factory.mktemp("mlm") / "argv.json"
    path.write_text(json.dumps(items))
    proc = subprocess.run([sys.executable, "-m", "tests.mlm_args_check", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True)), cases


@pytest.mark.parametrize("name", [*MODEL_PRESETS, "llama3.1-8b/cp"])
def test_megatron_lm_parses_the_presets_architecture(parsed, name):
    results, cases = parsed
    plan, out = cases[name], results[name]
    a, m = out["parsed"], plan.model
    assert (a["num_layers"], a["hidden_size"], a["ffn_hidden_size"], a["num_attention_heads"], a["kv_channels"]) == \
        (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.head_dim)
    assert a["group_query_attention"] is (m.query_groups != m.num_attention_heads)
    if a["group_query_attention"]:
        assert a["num_query_groups"] == m.query_groups
    assert (a["normalization"], a["layernorm_epsilon"], a["layernorm_zero_centered_gamma"]) == \
        (m.normalization, m.norm_epsilon, m.layernorm_zero_centered_gamma)
    assert a["swiglu"] is (m.gated_linear_unit and m.activation == "silu")
    assert a["squared_relu"] is (m.activation == "squared_relu")
    assert (a["add_bias_linear"], a["add_qkv_bias"], a["qk_layernorm"]) == (m.add_bias_linear, m.add_qkv_bias,
                                                                           m.qk_layernorm)
    assert a["position_embedding_type"] == m.position_embedding_type
    assert (a["rotary_base"], a["rotary_percent"]) == (m.rotary_base, m.rotary_percent)
    assert a["use_rope_scaling"] is bool(m.rope_scaling_factor)
    if m.rope_scaling_factor:
        assert a["rope_scaling_factor"] == m.rope_scaling_factor
    assert a["mrope_section"] == m.mrope_section
    assert a["untie_embeddings_and_output_weights"] is not m.share_embeddings_and_output_weights
    assert a["num_experts"] == m.num_moe_experts
    if m.num_moe_experts:
        assert (a["moe_router_topk"], a["moe_ffn_hidden_size"], a["moe_shared_expert_intermediate_size"],
                a["moe_layer_freq"], a["moe_router_score_function"], a["moe_router_enable_expert_bias"],
                a["moe_router_num_groups"], a["moe_router_group_topk"], a["moe_router_topk_scaling_factor"]) == \
            (m.moe_router_topk, m.moe_ffn_hidden_size, m.moe_shared_expert_intermediate_size, m.moe_layer_freq,
             m.moe_router_score_function, m.moe_router_enable_expert_bias, m.moe_router_num_groups,
             m.moe_router_group_topk, m.moe_router_topk_scaling_factor)
    assert (a["attention_dropout"], a["hidden_dropout"], a["bf16"]) == (0.0, 0.0, True)
    assert a["tokenizer_type"] == "HuggingFaceTokenizer"
    assert a["tokenizer_model"] == HF_REPOS.get(m.preset, OWN_TOKENIZER)
    assert (a["tensor_model_parallel_size"], a["context_parallel_size"], a["seq_length"], a["sft"]) == \
        (plan.parallel.tp, plan.parallel.cp, plan.training.seq_length, True)
    if plan.training.epochs:  # ceil(1 epoch x 100,000 samples / 256 a step)
        assert a["train_iters"] == -(-100_000 // 256)


@pytest.mark.parametrize("name", [*MODEL_PRESETS, "llama3.1-8b/cp"])
def test_megatron_lm_validate_args(parsed, name):
    """validate_args runs on CPU (it reads WORLD_SIZE, no process group); its verdict on each export."""
    results, _ = parsed
    assert results[name]["validate_args"] == "ok", results[name]["validate_args"]
