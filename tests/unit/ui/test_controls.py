"""The plan-bound controls (advisor/ui/controls.py) without Streamlit: any sequence of edits lands in the plan and the
control, one after another, and a refused edit leaves both as the plan was (the AppTest and browser tests drive the
same functions through the pages, in the full suite)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.plan import PlanError
from advisor.ui import state as ui
from advisor.ui.controls import CONTROLS, apply, current

EDITS = {
    "parallel.gpus": [1, 2, 6, 7, 8, 16, 64],
    "parallel.tp": [1, 2, 3, 4, 8],
    "parallel.cp": [1, 2, 3, 4],
    "parallel.pp": [1, 2, 4],
    "training.seq_length": [128, 384, 1000, 1024, 4096],
    "packing.pack_size": [128, 384, 512],
    "training.recompute": ["none", "selective", "full"],
    "packing.algorithm": ["first_fit_shuffle", "first_fit_decreasing"],
    "parallel.sp": [True, False],
    # mxfp8 and nvfp4 are refused on H100 and applied on B200, whichever comes first
    "training.precision": ["bf16", "fp8", "mxfp8", "nvfp4"],
    "hardware.gpu": ["H100-80GB", "B200"],
    "parallel.fsdp": [True, False],
}


def _expected(plan, name: str, value):
    """The plan this edit asks for, built here from the field's path, or None when Megatron's rules refuse it."""
    section, field = name.split(".")
    changes = {section: {field: value}}
    if name == "packing.pack_size" and value == plan.pack_size:
        return plan  # the control shows the pack in use (seq_length's when unpinned): the same value pins nothing
    if name == "training.seq_length" and plan.packing.pack_size == plan.training.seq_length:
        changes["packing"] = {"pack_size": None}  # a pack pinned at seq_length follows it (pinned elsewhere: stays)
    try:
        return plan.changed(changes)
    except PlanError:
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(sorted(EDITS)).flatmap(lambda n: st.tuples(st.just(n), st.sampled_from(EDITS[n]))),
        min_size=1,
        max_size=8,
    )
)
def test_consecutive_edits_apply_or_leave_the_plan_and_control_as_they_were(edits):
    state: dict = {}
    ui.init_state(state)
    for name, value in edits:
        control = CONTROLS[name]
        before = state["plan"]
        current(state, name)  # the page draws the control with the plan's value
        state[control.key] = value  # the visitor's edit
        wanted = _expected(before, name, value)
        if apply(state, name):
            assert wanted is not None and state["plan"] == wanted, (name, value)
            assert current(state, name) == value and "plan_error" not in state
        else:
            assert wanted is None and state["plan"] is before, (name, value)
            assert state[control.key] == control.read(state) and state["plan_error"]


def test_another_precision_drops_the_fp8_recipe():
    state: dict = {}
    ui.init_state(state)
    state["plan"] = state["plan"].changed(
        {"training": {"precision": "fp8", "fp8_recipe": "delayed"}, "hardware": {"gpu": "B200"}}
    )
    current(state, "training.precision")
    state[CONTROLS["training.precision"].key] = "mxfp8"
    assert apply(state, "training.precision")
    assert (state["plan"].training.precision, state["plan"].training.fp8_recipe) == ("mxfp8", None)
    state[CONTROLS["hardware.gpu"].key] = "H100-80GB"  # H100 has no MXFP8: refused, the plan and control stay
    assert not apply(state, "hardware.gpu")
    assert state["plan"].hardware.gpu == "B200" and "mxfp8" in state["plan_error"]


def test_an_edit_that_takes_the_recipes_pipeline_flags_says_so_until_dismissed():
    from advisor.plan import plan_from_dict

    state = {
        "plan": plan_from_dict(
            {"model": "qwen3-235b-a22b", "parallel": {"gpus": 64, "tp": 2, "pp": 2, "ep": 16, "sp": True}}
        )
    }
    assert ui.set_plan(state, {"parallel": {"gpus": 256, "pp": 8, "vpp": 4}})
    assert state["plan"].parallel.pipeline_slots == 2
    assert len(state["plan_notes"]) == 1 and "as Megatron-Bridge's qwen3-235b-a22b recipes" in state["plan_notes"][0]
    assert ui.set_plan(state, {"training": {"seq_length": 8192}})  # an edit that sets nothing more says nothing more
    assert len(state["plan_notes"]) == 1
