"""Megatron-Bridge's recipe placement: a preset whose recipes count the embedding and the loss as pipeline layers is
never refused a PP x VP that divides its layers that way, and says so; what the user set is kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.errors import PlanError
from advisor.model.estimate import estimate
from advisor.plan import plan_from_dict
from advisor.plan.presets import MODEL_PRESETS, RECIPE_PIPELINE_SLOTS


def _plan(model: str, pp: int, vpp: int | None, **parallel):
    tp = 2
    ep = 8 if MODEL_PRESETS[model].get("num_moe_experts") else 1
    layout = {"gpus": tp * pp * ep, "tp": tp, "pp": pp, "ep": ep, "sp": True, **parallel}
    if vpp:
        layout["vpp"] = vpp
    return plan_from_dict({"model": model, "parallel": layout, "training": {"seq_length": 4096}})


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(sorted(RECIPE_PIPELINE_SLOTS)),
    pp=st.integers(2, 32),
    vpp=st.sampled_from([None, 2, 3, 4, 6, 8, 12]),
)
def test_a_layout_the_recipes_place_is_accepted_with_a_note(model, pp, vpp):
    layers, stages = MODEL_PRESETS[model]["num_layers"], pp * (vpp or 1)
    if layers % stages == 0 or (layers + 2) % stages:
        return
    plan = _plan(model, pp, vpp)
    assert plan.parallel.pipeline_slots == 2
    assert any("as Megatron-Bridge's" in note and f"{(layers + 2) // stages} a stage" in note for note in plan.notes)


@pytest.mark.parametrize("pp,vpp", [(8, 4), (4, 12), (8, None), (16, 3)])
def test_qwen3_235b_at_its_recipes_pipelines_is_estimated_and_the_note_travels(pp, vpp, chat):
    est = estimate(_plan("qwen3-235b-a22b", pp, vpp), chat)
    assert est.time.step_seconds > 0
    assert any("account_for_loss_in_pipeline_split set true" in n for n in est.notes)


def test_what_the_user_set_is_kept_and_a_layout_dividing_evenly_is_left_alone():
    with pytest.raises(PlanError, match="not divisible by pp\\*vpp = 32"):
        _plan("qwen3-235b-a22b", 8, 4, account_for_loss_in_pipeline_split=False)
    even = _plan("qwen3-235b-a22b", 2, None)  # 94 = 2 x 47
    assert even.parallel.pipeline_slots == 0 and not even.notes
    with pytest.raises(PlanError, match="not divisible"):  # 48 layers, no recipe knowledge: refused as before
        _plan("qwen3-30b-a3b", 5, None)


def test_a_changed_layer_count_is_not_the_recipes_model():
    with pytest.raises(PlanError, match="not divisible"):
        plan_from_dict(
            {
                "model": {"preset": "qwen3-235b-a22b", "num_layers": 90},
                "parallel": {"gpus": 256, "tp": 2, "pp": 8, "vpp": 4, "ep": 8, "sp": True},
            }
        )


def test_a_change_of_the_stages_decides_the_flags_anew_and_keeps_the_readers_own():
    two = _plan("qwen3-235b-a22b", 2, None)
    eight = two.changed({"parallel": {"gpus": 2 * 8 * 8, "pp": 8, "vpp": 4}})
    assert eight.parallel.pipeline_slots == 2 and any("as Megatron-Bridge's" in n for n in eight.notes)
    back = eight.changed({"parallel": {"gpus": 2 * 2 * 8, "pp": 2, "vpp": None}})
    assert back.parallel.pipeline_slots == 0 and not back.notes  # 94 = 2 x 47: the recipe's flags not needed
    assert eight.changed({"training": {"seq_length": 8192}}).parallel.pipeline_slots == 2  # not the stages: kept
    own = _plan(
        "llama3.1-405b", 8, None, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
    )
    with pytest.raises(PlanError, match="not divisible"):  # 126 + 2 over 7: the flags the reader set stay
        own.changed({"parallel": {"gpus": 2 * 7, "pp": 7}})


def test_the_note_reaches_the_estimate_whichever_equal_plan_ran_first(chat):
    from advisor.analysis import analyze

    noted = _plan("qwen3-235b-a22b", 8, 4)
    explicit = _plan(
        "qwen3-235b-a22b", 8, 4, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
    )
    assert noted == explicit and not explicit.notes
    assert not any("as Megatron-Bridge's" in n for n in analyze(explicit, chat).estimate.notes)
    assert any("as Megatron-Bridge's" in n for n in analyze(noted, chat).estimate.notes)


def test_the_note_stays_with_the_flags_it_explains_through_other_edits():
    eight = _plan("qwen3-235b-a22b", 8, 4)
    edited = eight.changed({"training": {"seq_length": 8192}}).changed({"hardware": {"gpu": "B200"}})
    assert edited.notes == eight.notes and edited.parallel.pipeline_slots == 2
    odd = edited.changed({"parallel": {"gpus": 2 * 8 * 6, "pp": 6, "vpp": None}})  # 96 = 6 x 16, 94 no
    assert odd.parallel.pipeline_slots == 2 and "no 6 stages" in odd.notes[0]
