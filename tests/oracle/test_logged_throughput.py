"""The figures the logs will print (advisor/model/logged.py) against Megatron-Bridge 0.6.2's own code: its
``num_floating_point_operations`` (training/utils/flop_utils.py) and ``report_throughput``
(training/utils/train_utils.py), run from the wheel on the plan's numbers, and Megatron-LM's FLOPs count."""

from __future__ import annotations

import functools
import math
import types
from pathlib import Path

import pytest

from advisor.analysis import analyze
from advisor.data.ingest import load_lengths
from advisor.plan import load_plan
from tests.support import ROOT


@pytest.fixture(scope="module")
def mb():
    from tests.support.mb_reference import load_function

    cached = load_function(
        "megatron/training/vocab_utils.py",
        "_calculate_padded_vocab_size_cached",
        {"math": math, "lru_cache": functools.lru_cache},
    )
    padded = load_function(
        "megatron/training/vocab_utils.py",
        "calculate_padded_vocab_size",
        {"_calculate_padded_vocab_size_cached": cached, "print_rank_0": print},
    )

    class LoRA:  # isinstance(cfg.peft, LoRA) is False: the plan trains every weight
        pass

    flops = load_function(
        "megatron/bridge/training/utils/flop_utils.py",
        "num_floating_point_operations",
        {"LoRA": LoRA, "Path": Path, "calculate_padded_vocab_size": padded},
    )
    return flops


def mb_config(plan):
    m, p = plan.model, plan.parallel
    model = types.SimpleNamespace(
        seq_length=plan.training.seq_length,
        hidden_size=m.hidden_size,
        num_layers=m.num_layers,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.query_groups,
        kv_channels=m.head_dim,
        ffn_hidden_size=m.ffn_hidden_size,
        gated_linear_unit=m.gated_linear_unit,
        num_moe_experts=m.num_moe_experts,
        mtp_num_layers=None,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        multi_latent_attention=False,
        vocab_size=m.vocab_size,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=p.tp,
    )
    return types.SimpleNamespace(model=model, peft=None, dataset=None)


def _chat():
    plan = load_plan(str(ROOT / "sample_data" / "plans" / "llama8b_chat_8k.yaml"))
    hist = load_lengths(str(ROOT / plan.data.lengths), column=plan.data.column)
    return plan, analyze(plan, hist).estimate


def test_the_megatron_bridge_tflops_of_the_chat_plan_are_its_own_functions(mb):
    plan, est = _chat()
    mbs, rows = est.micro_batches, plan.global_batch_packs(est.packing.packing_factor)
    theirs = mb(
        mb_config(plan),
        batch_size=rows,
        seqlen_sum=rows * float(mbs.computed_tokens.mean()),
        seqlen_squared_sum=rows * float(mbs.attention_thd.mean()),
    )
    per_gpu = theirs / est.time.step_seconds / plan.parallel.gpus / 1e12
    assert est.logged.mb_thd_counted  # packed, CP 1: Megatron-Bridge counts the rows as THD
    assert est.logged.mb_model_tflops_per_gpu == pytest.approx(per_gpu, rel=1e-9)


def test_with_cp_megatron_bridge_counts_the_step_dense(mb):
    plan, _ = _chat()
    plan = plan.changed({"parallel": {"cp": 2}})
    hist = load_lengths(str(ROOT / plan.data.lengths), column=plan.data.column)
    est = analyze(plan, hist).estimate
    rows = plan.global_batch_packs(est.packing.packing_factor)
    theirs = mb(mb_config(plan), batch_size=rows)  # cp_use_thd is False: no runtime sums, seq_length per row
    assert not est.logged.mb_thd_counted
    assert est.logged.mb_model_tflops_per_gpu == pytest.approx(
        theirs / est.time.step_seconds / plan.parallel.gpus / 1e12, rel=1e-9
    )


def test_megatron_bridges_logged_tokens_per_second_is_its_report_throughput():
    from tests.support.mb_reference import load_function

    plan, est = _chat()
    report = load_function(
        "megatron/bridge/training/utils/train_utils.py",
        "report_throughput",
        {"get_world_size_safe": lambda: plan.parallel.gpus, "print_rank_0": print},
    )
    rows = plan.global_batch_packs(est.packing.packing_factor)
    step = est.time.step_seconds
    train = types.SimpleNamespace(global_batch_size=rows, micro_batch_size=1)
    out = report(
        train,
        iteration=10,
        seq_length=plan.training.seq_length,
        history_wct=[i * step for i in range(10)],
        window_size=10,
    )
    assert est.logged.mb_tokens_per_second == pytest.approx(out["throughput/tokens_per_sec"], rel=1e-9)
    # packed rows are not full: what Megatron-Bridge logs is above the tokens trained on
    assert est.logged.mb_tokens_per_second > est.logged.useful_tokens_per_second
