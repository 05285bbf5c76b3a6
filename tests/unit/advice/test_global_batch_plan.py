"""Megatron-Bridge 0.7's global-batch packing as a plan mode: what the plan refuses (as it does for online packing),
what the rules report (the releases it needs, then every rule of Megatron-Bridge's validation, each with its fix),
the alignment multiple, and, where the copy of Megatron-Bridge 7bdc5ef4 is here, that a plan's findings are exactly
what Megatron-Bridge's own validation says of it as exported."""

from __future__ import annotations

import pytest

from advisor.advice.global_batch import global_batch_padding_multiple, settings_of
from advisor.advice.rules import check
from advisor.plan import PlanError, plan_from_dict
from tests.support import mb07

V07 = {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"}


def plan(**over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 16, "cp": 2},
        "training": {"seq_length": 8192, "global_batch_samples": 64},
        "packing": {"mode": "global-batch", "max_seqlen_per_dp_cp_rank": 4096},
        "versions": V07,
    }
    for section, fields in over.items():
        base = raw.get(section)
        raw[section] = {**base, **fields} if isinstance(base, dict) and isinstance(fields, dict) else fields
    return plan_from_dict(raw)


def gb(findings) -> dict:
    return {f.id: f for f in findings if f.id.startswith("global_batch.")}


def test_a_valid_plan_has_no_global_batch_finding_and_pretraining_may_use_it():
    assert gb(check(plan())) == {}
    pre = check(plan(training={"task": "pretrain"}))
    assert gb(pre) == {} and "packing.pretrain" not in {f.id for f in pre}
    assert "packing.mode" not in {f.id for f in check(plan())}  # no "use offline packing" for LLM SFT


def test_releases_it_needs_are_errors_whose_fix_is_the_release():
    old = check(plan(versions={"megatron_bridge": "0.6.2", "megatron_core": "0.19.2"}))
    found = gb(old)
    assert found["global_batch.megatron_bridge"].severity == "error"
    assert found["global_batch.megatron_bridge"].fix == {"versions": {"megatron_bridge": "0.7.1"}}
    assert found["global_batch.megatron_core"].fix == {"versions": {"megatron_core": "0.20.0"}}
    assert "0.6.2" in found["global_batch.megatron_bridge"].message


@pytest.mark.parametrize(
    ("over", "fid", "fix"),
    [
        ({"training": {"micro_batch_size": 2}}, "global_batch.micro_batch_size", {"training": {"micro_batch_size": 1}}),
        ({"training": {"cuda_graphs": True}}, "global_batch.cuda_graphs", {"training": {"cuda_graphs": False}}),
        ({"parallel": {"gpus": 16, "pp": 2}}, "global_batch.pp", {"parallel": {"pp": 1, "vpp": None}}),
        ({"parallel": {"fsdp": True}}, "global_batch.fsdp", {"parallel": {"fsdp": False}}),
        ({"packing": {"max_seqlen_per_dp_cp_rank": None}}, "global_batch.max_seqlen", None),
        (
            {"training": {"seq_length": 8194}},
            "global_batch.seq_length_multiple",
            {"training": {"seq_length": 8196}, "packing": {"max_seqlen_per_dp_cp_rank": 4098}},
        ),
    ],
)
def test_each_megatron_bridge_rule_is_a_finding_naming_the_field_and_its_fix(over, fid, fix):
    if fid == "global_batch.seq_length_multiple":
        over = {**over, "packing": {"max_seqlen_per_dp_cp_rank": 4097}}
    p = plan(**over)
    f = gb(check(p))[fid]
    assert f.severity == "error" and "7bdc5ef4" in f.source
    if fix is not None:
        assert f.fix == fix
    fixed = p.changed(f.fix)
    assert fid not in gb(check(fixed))


def test_dynamic_cp_needs_a_power_of_two_pool_and_is_said_to_be_branch_material():
    pool = plan(
        parallel={"gpus": 24, "cp": 2},
        training={"global_batch_samples": 48},
        packing={"scheduler": "default_dynamic_cp"},
    )
    assert gb(check(pool))["global_batch.dcp_pool"].fix == {}  # 12 x 2 = 24: another GPU count
    found = gb(check(plan(packing={"scheduler": "default_dynamic_cp"})))
    assert set(found) == {"global_batch.branch_only"} and found["global_batch.branch_only"].severity == "warning"


def test_the_plan_refuses_what_cannot_be_simulated_as_for_online_packing():
    with pytest.raises(PlanError, match="training.task must be llm-sft or pretrain"):
        plan(model="qwen2.5-vl-7b", training={"task": "vlm-sft", "micro_batch_size": 1})
    with pytest.raises(PlanError, match="Megatron-Bridge refuses a bin smaller than a sequence"):
        plan(packing={"max_seqlen_per_dp_cp_rank": 2048})  # x CP 2 < 8192
    plan(packing={"max_seqlen_per_dp_cp_rank": 512, "scheduler": "default_dynamic_cp"})  # x DP x CP 16 = 8192
    with pytest.raises(PlanError, match="packing.megatron_lm applies to online packing"):
        plan(packing={"megatron_lm": "main"})
    with pytest.raises(PlanError, match="fold_alignment_padding applies to global-batch packing only"):
        plan(packing={"mode": "offline", "max_seqlen_per_dp_cp_rank": None, "fold_alignment_padding": True})


@pytest.mark.parametrize(
    ("parallel", "dcp", "task", "expected"),
    [
        ({"gpus": 16, "cp": 2}, False, "llm-sft", 4),
        ({"gpus": 16, "cp": 2}, True, "llm-sft", 32),  # 2 x DP 8 x CP 2
        ({"gpus": 16, "cp": 2, "tp": 2, "sp": True}, False, "llm-sft", 4),  # lcm(4, 4)
        ({"gpus": 16, "cp": 2, "tp": 2, "sp": True}, False, "pretrain", 8),  # VarlenDataset: 4 x TP 2
        ({"gpus": 8}, True, "llm-sft", 16),  # dynamic CP pads to 2 x DP x CP even at CP 1
    ],
)
def test_the_alignment_multiple_is_megatron_bridges(parallel, dcp, task, expected):
    p = plan(
        parallel=parallel,
        training={"task": task},
        packing={"scheduler": "default_dynamic_cp" if dcp else "dp_balanced", "max_seqlen_per_dp_cp_rank": 8192},
    )
    assert p.pad_seq_to_mult == expected
    assert p.collate_padding_multiple == global_batch_padding_multiple(settings_of(p))
    assert plan(parallel=parallel, packing={"pad_seq_to_mult": 64}).pad_seq_to_mult != 64  # MB sets its own


REASON = mb07.missing_reason()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize(
    "over",
    [
        {},
        {"training": {"micro_batch_size": 2}},
        {"parallel": {"gpus": 16, "pp": 2}, "training": {"cuda_graphs": True}},
        {
            "parallel": {"gpus": 24, "cp": 2},
            "training": {"global_batch_samples": 48},
            "packing": {"scheduler": "default_dynamic_cp"},
        },
        {"packing": {"max_seqlen_per_dp_cp_rank": None}},
        {"training": {"seq_length": 8194}, "packing": {"max_seqlen_per_dp_cp_rank": 4097}},
    ],
)
def test_a_plans_megatron_bridge_findings_are_megatron_bridges_own_refusals(over):
    p = plan(**over)
    ours = [f.id for f in check(p) if f.id.startswith("global_batch.") and f.id[13:] not in ("branch_only",)]
    messages, _ = mb07.mb07_collected(settings_of(p))
    assert len(ours) == len(messages) and (not ours) == (mb07.mb07_first_refusal(settings_of(p)) is None)
