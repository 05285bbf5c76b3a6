"""FLOPs against Megatron-LM's own ``num_floating_point_operations`` (from the megatron-core wheel)."""

from __future__ import annotations

import types

import pytest

from advisor.model.flops import flops_coefficients
from advisor.model.parameters import padded_vocab_size
from advisor.plan import plan_from_dict


@pytest.fixture(scope="session")
def mlm_flops():
    from tests.support.mb_reference import load_function

    return load_function(
        "megatron/training/training.py",
        "num_floating_point_operations",
        {
            "is_hybrid_model": lambda args: False,
            "is_linear_attention_variant": lambda variant: False,
            "is_gated_delta_net_variant": lambda variant: False,
        },
    )


def mlm_args(plan, tp=1):
    m = plan.model
    return types.SimpleNamespace(
        seq_length=plan.training.seq_length,
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.query_groups,
        group_query_attention=m.query_groups != m.num_attention_heads,
        kv_channels=m.head_dim,
        ffn_hidden_size=m.ffn_hidden_size,
        swiglu=m.gated_linear_unit,
        num_experts=m.num_moe_experts,
        moe_layer_freq=m.moe_layer_freq,
        moe_router_topk=m.moe_router_topk,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_latent_size=None,
        mtp_num_layers=None,
        multi_latent_attention=False,
        attention_output_gate=False,
        experimental_attention_variant=None,
        padded_vocab_size=padded_vocab_size(m.vocab_size, tp),
    )


@pytest.mark.parametrize(
    "name",
    ["llama3.1-8b", "llama3.1-70b", "qwen3-30b-a3b", "mixtral-8x7b", "nemotron4-340b", "deepseek-v3", "qwen3-8b"],
)
@pytest.mark.parametrize("seq_length,batch", [(4096, 8), (131072, 1)])
def test_padded_batches_equal_megatron_lm(mlm_flops, name, seq_length, batch):
    plan = plan_from_dict({"model": name, "training": {"seq_length": seq_length}})
    theirs = mlm_flops(mlm_args(plan), batch)
    coef = flops_coefficients(plan.model)
    assert coef(batch * seq_length, batch * seq_length**2) == pytest.approx(theirs, rel=1e-12)


def test_thd_counts_equal_megatron_lm(mlm_flops):
    plan = plan_from_dict({"model": "qwen3-8b", "training": {"seq_length": 8192}})
    lengths = [100, 3000, 5000, 92]
    theirs = mlm_flops(
        mlm_args(plan),
        1,
        seqlen_squared_sum_in_batch=sum(s * s for s in lengths),
        total_real_tokens_in_batch=sum(lengths),
    )
    assert flops_coefficients(plan.model)(sum(lengths), sum(s * s for s in lengths)) == pytest.approx(theirs)
