"""Memory: Megatron-Bridge's own estimate reproduced against its real function; the advisor's own estimate
checked against bytes PyTorch really saves for backward."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from advisor.model.memory import activation_bytes_per_token_per_layer, estimate_memory, megatron_bridge_memory
from advisor.model.parameters import count_parameters, padded_vocab_size
from advisor.plan import plan_from_dict
from advisor.trial.model import SwiGLU
from advisor.trial.run import saved_tensor_bytes


@pytest.fixture(scope="session")
def mb_memory():
    """theoretical_memory_utils from the Megatron-Bridge wheel; its vocab padding from the Megatron-Core wheel."""
    from tests.support.mb_reference import load_module

    vocab = load_module("megatron.training.vocab_utils", stubs={"megatron.training.utils": {"print_rank_0": print}})
    return load_module(
        "megatron.bridge.training.utils.theoretical_memory_utils",
        stubs={
            "megatron.bridge.training.config": {"ConfigContainer": object},
            "megatron.bridge.utils.vocab_utils": {"calculate_padded_vocab_size": vocab.calculate_padded_vocab_size},
        },
    )


def mb_config(plan):
    """The ConfigContainer fields Megatron-Bridge's estimator reads, filled from the plan."""
    m, p, t = plan.model, plan.parallel, plan.training
    model = types.SimpleNamespace(
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.head_dim,
        ffn_hidden_size=m.ffn_hidden_size,
        gated_linear_unit=m.gated_linear_unit,
        activation_func=F.silu if m.gated_linear_unit else F.gelu,
        vocab_size=m.vocab_size,
        make_vocab_size_divisible_by=128,
        should_pad_vocab=True,
        share_embeddings_and_output_weights=m.share_embeddings_and_output_weights,
        num_moe_experts=m.num_moe_experts,
        moe_router_topk=m.moe_router_topk,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_layer_freq=m.moe_layer_freq,
        tensor_model_parallel_size=p.tp,
        pipeline_model_parallel_size=p.pp,
        context_parallel_size=p.cp,
        expert_model_parallel_size=p.ep,
        expert_tensor_parallel_size=p.etp,
        virtual_pipeline_model_parallel_size=p.vpp,
        seq_length=t.seq_length,
        sequence_parallel=p.sp,
        recompute_granularity=t.recompute,
    )
    return types.SimpleNamespace(
        model=model,
        train=types.SimpleNamespace(micro_batch_size=t.micro_batch_size),
        optimizer=types.SimpleNamespace(use_distributed_optimizer=t.distributed_optimizer),
        data_parallel_size=p.dp,
    )


LAYOUTS = [
    ("llama3.1-8b", dict(gpus=8, tp=1), dict(seq_length=4096, global_batch_samples=64)),
    ("llama3.1-70b", dict(gpus=64, tp=8, pp=2, cp=2, sp=True), dict(seq_length=16384, global_batch_samples=64)),
    ("llama3.1-405b", dict(gpus=576, tp=8, pp=9, vpp=2, cp=2, sp=True), dict(seq_length=8192, global_batch_samples=64)),
    (
        "qwen3-8b",
        dict(gpus=16, tp=2, cp=4, sp=True),
        dict(seq_length=32768, micro_batch_size=1, global_batch_samples=32, distributed_optimizer=False),
    ),
    ("qwen3-30b-a3b", dict(gpus=32, tp=2, pp=2, ep=8, sp=True), dict(seq_length=8192, global_batch_samples=64)),
    ("mixtral-8x7b", dict(gpus=64, tp=4, pp=4, ep=4, etp=1, sp=True), dict(seq_length=4096, global_batch_samples=128)),
    ("nemotron4-340b", dict(gpus=768, tp=8, pp=12, vpp=8, sp=True), dict(seq_length=4096, global_batch_samples=64)),
    ("deepseek-v3", dict(gpus=128, tp=2, ep=64, etp=1, sp=True), dict(seq_length=4096, global_batch_samples=1024)),
    (
        "qwen3-32b",
        dict(gpus=16, tp=4, pp=4, sp=False),
        dict(seq_length=8192, micro_batch_size=2, task="pretrain", global_batch_samples=32, recompute="full"),
    ),
]


@pytest.mark.parametrize("name,parallel,training", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_megatron_bridge_estimate_reproduced(mb_memory, name, parallel, training):
    plan = plan_from_dict({"model": name, "parallel": parallel, "training": training})
    dp = plan.parallel.dp
    num_microbatches = plan.training.global_batch_samples // (plan.training.micro_batch_size * dp)
    theirs = mb_memory.estimate_training_memory(mb_config(plan), num_microbatches=num_microbatches)
    ours = megatron_bridge_memory(plan, num_microbatches)
    assert ours.weight_and_optimizer_bytes == pytest.approx(theirs.weight_and_optimizer_bytes, rel=1e-3)
    assert ours.activation_bytes == pytest.approx(theirs.activation.memory_bytes, rel=1e-3)
    assert ours.printed_in_log == (plan.parallel.sp and plan.training.recompute == "selective")


def test_parameter_counts_match_published_sizes():
    def billions(name):
        return count_parameters(plan_from_dict({"model": name}).model).total / 1e9

    assert billions("llama3.1-8b") == pytest.approx(8.03, abs=0.01)
    assert billions("llama3.1-70b") == pytest.approx(70.6, abs=0.1)
    assert billions("llama3.1-405b") == pytest.approx(405.9, abs=0.5)
    assert billions("mixtral-8x7b") == pytest.approx(46.7, abs=0.1)
    assert billions("qwen3-30b-a3b") == pytest.approx(30.5, abs=0.2)
    assert billions("qwen2.5-vl-7b") == pytest.approx(8.3, abs=0.1)  # 7.6B LLM + 0.67B vision encoder
    assert padded_vocab_size(151936, 2) == 152064


def test_packing_changes_activation_memory_and_the_difference_is_explained():
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "tp": 2, "cp": 2, "sp": True},
            "training": {"seq_length": 8192, "global_batch_samples": 64},
        }
    )
    full = estimate_memory(plan, tokens_per_micro_batch=8192, num_microbatches=32)
    half = estimate_memory(plan, tokens_per_micro_batch=4096, num_microbatches=32)
    assert half.activations == pytest.approx(full.activations / 2)
    assert full.weights == half.weights and full.total > half.total
    assert any("hold 4,096" in d for d in half.differences)


def test_lora_freezes_the_base():
    base = {"model": "llama3.1-8b", "parallel": {"gpus": 8}, "training": {"global_batch_samples": 64}}
    full = estimate_memory(plan_from_dict(base), 4096, 8)
    lora = estimate_memory(plan_from_dict({**base, "training": {"global_batch_samples": 64, "peft": "lora"}}), 4096, 8)
    assert lora.gradients < full.gradients / 50 and lora.optimizer < full.optimizer / 50
    assert lora.weights >= full.weights


class _Layer(torch.nn.Module):
    """One pre-norm transformer layer with SwiGLU MLP and flash-style (fused) causal attention."""

    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv, self.proj = torch.nn.Linear(h, 3 * h, bias=False), torch.nn.Linear(h, h, bias=False)
        self.up, self.down = torch.nn.Linear(h, 2 * ffn, bias=False), torch.nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        s, h = x.shape[1], x.shape[2]
        q, k, v = self.qkv(self.norm1(x)).view(1, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, s, h)
        x = x + self.proj(a)
        return x + self.down(SwiGLU.apply(self.up(self.norm2(x))))


@pytest.mark.slow  # PyTorch autograd on a real layer
def test_activation_formula_against_bytes_saved_for_backward():
    """The formula's per-layer bytes (no TP, selective recompute) against what autograd really keeps (bf16)."""
    torch.manual_seed(0)
    h, heads, ffn, s = 256, 4, 1024, 512
    layer = _Layer(h, heads, ffn).to(torch.bfloat16)
    x = torch.randn(1, s, h, dtype=torch.bfloat16, requires_grad=True)
    total, out = saved_tensor_bytes(lambda: layer(x), layer.parameters())
    out.sum().backward()
    plan = plan_from_dict(
        {
            "model": {
                "hidden_size": h,
                "num_layers": 1,
                "num_attention_heads": heads,
                "ffn_hidden_size": ffn,
                "vocab_size": 1000,
            }
        }
    )
    predicted = activation_bytes_per_token_per_layer(plan) * s
    assert 0.9 < total / predicted < 1.1, (total, predicted)
