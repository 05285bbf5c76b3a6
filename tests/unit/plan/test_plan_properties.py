"""Properties of the typed plan that hold for every plan: lossless round trips, fixes that are fixed points, search
candidates that keep the baseline's model, and fuzzed plans that fail only with ``PlanError``."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.advice.search import search
from advisor.analysis import analyze
from advisor.plan import PlanError, dump_plan, plan_from_dict
from advisor.plan.io import parse_plan_text, plan_from_text
from advisor.plan.schema import SECTIONS, json_schema
from advisor.ui.links import plan_from_query, plan_to_query
from tests.support.plans import SMALL, plans

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(plans())
def test_plans_round_trip_losslessly_through_yaml_json_and_the_link(plan):
    assert plan_from_text(dump_plan(plan), "p.yaml") == plan
    assert plan_from_text(dump_plan(plan, "json"), "p.json") == plan
    assert plan_from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    sample, back = plan_from_query(plan_to_query(plan, "chat-like (180k)"))
    # every field travels; the data path is the sample's (a link's path is never read on the server)
    assert back == plan.changed({"data": {"lengths": "sample_data/chat_like_hist.csv", "column": None}})
    assert sample == "chat-like (180k)"
    written = yaml.safe_load(dump_plan(plan))["model"]
    if plan.model.preset is not None:  # a preset stays a preset, its overrides kept
        assert written == plan.model.preset or written["preset"] == plan.model.preset


@pytest.mark.slow  # 60 plans analysed
@SETTINGS
@given(plans())
def test_every_fix_removes_its_finding_and_is_a_fixed_point(plan):
    for finding in analyze(plan, SMALL).findings:  # the memory rule included: its fixes must make the plan fit
        if not finding.fix:
            continue
        try:
            fixed = plan.changed(finding.fix)
        except PlanError as e:  # a fix must always give a valid plan
            raise AssertionError(f"fix of {finding.id} gives an invalid plan: {e}") from None
        assert fixed.changed(finding.fix) == fixed, finding.id
        after = [f for f in analyze(fixed, SMALL).findings if f.id == finding.id]
        assert finding.message not in [f.message for f in after], (finding.id, finding.fix)
        if finding.id.startswith("memory."):  # a memory fix makes the plan fit and adds no error of its own
            after_all = analyze(fixed, SMALL)
            assert after_all.estimate.memory.fits, (finding.id, finding.fix)
            errors = {f.id for f in after_all.findings if f.severity == "error"}
            assert errors <= {f.id for f in analyze(plan, SMALL).findings if f.severity == "error"}, finding.fix


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_every_search_candidate_keeps_the_baselines_model(plan):
    result = search(plan, SMALL, top=50)
    for candidate in (result.baseline, *result.best):
        assert candidate.plan.model == plan.model
        assert candidate.plan.training.seq_length == plan.training.seq_length  # the step's work: test_search.py


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


@st.composite
def fuzzed_plans(draw) -> dict:
    """A plan with some fields replaced by arbitrary JSON values, or arbitrary sections."""
    base = draw(plans()).to_dict()
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([*SECTIONS, "extra"]))
        if draw(st.booleans()) and isinstance(base.get(section), dict) and base[section]:
            key = draw(st.sampled_from(sorted(base[section])))
            base[section] = {**base[section], key: draw(_JSON)}
        else:
            base[section] = draw(_JSON)
    return base


@pytest.mark.slow  # long fuzzing
@settings(max_examples=300, deadline=None)
@given(fuzzed_plans())
def test_fuzzed_plans_fail_only_with_a_plan_error(raw):
    try:
        plan = plan_from_dict(raw, "fuzz.yaml")
    except PlanError as e:
        assert e.problems and all(isinstance(p, str) and p for p in e.problems)
        assert str(e).startswith("fuzz.yaml: ")
        return
    assert plan_from_dict(plan.to_dict()) == plan


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_plan_or_a_plan_error(text):
    for name in ("p.yaml", "p.json"):
        try:
            plan_from_text(text, name)
        except PlanError:
            pass


def test_schema_lists_every_section_and_documents_every_field():
    schema = json_schema()
    assert set(schema["properties"]) == {*SECTIONS, "version"}  # notes are what reading said, never written
    for definition in schema["$defs"].values():
        for name, field in definition["properties"].items():
            assert field.get("description"), name


@pytest.mark.slow  # expands bombs to their bound
def test_yaml_alias_bomb_and_deep_nesting_are_refused_fast():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    try:
        parse_plan_text(bomb, "bomb.yaml")
        raise AssertionError("an alias bomb was accepted")
    except PlanError as e:
        assert "expands to more than" in str(e)
    for text, name in (("[" * 2000 + "]" * 2000, "deep.json"), ("a: " + "[" * 2000 + "]" * 2000, "deep.yaml")):
        try:
            parse_plan_text(text, name)
            raise AssertionError("deep nesting was accepted")
        except PlanError as e:
            assert "nested deeper" in str(e) or "not valid" in str(e)


@SETTINGS
@given(plans())
def test_a_plan_file_uploaded_to_the_dashboard_is_the_plan_field_by_field(plan):
    """Issue 34: the dashboard's plan upload kept every field but the data path (once it dropped data.format)."""
    from advisor.ui import state as ui

    state: dict = {}
    ui.init_state(state)
    assert ui.use_plan_file(state, dump_plan(plan).encode(), "p.yaml"), state.get("plan_error")
    kept = state["plan"].data
    assert state["plan"] == plan.changed({"data": {"lengths": kept.lengths, "column": kept.column}})
    assert state["plan"].data.format == plan.data.format


@pytest.mark.parametrize(
    "name",
    ["chat_sample_answer_only.yaml", "llama8b_chat_8k.yaml", "llama8b_chat_8k_per_token.yaml", "llama8b_squad.yaml"],
)
def test_each_bundled_plan_through_the_upload_and_the_link_is_the_file(name):
    from advisor.plan import load_plan
    from advisor.ui import state as ui
    from tests.support import ROOT

    path = ROOT / "sample_data" / "plans" / name
    plan = load_plan(path)
    assert not plan.notes  # the bundled plans are version 2
    state: dict = {}
    ui.init_state(state)
    assert ui.use_plan_file(state, path.read_bytes(), name), state.get("plan_error")
    uploaded = state["plan"]
    assert uploaded == plan.changed({"data": {"lengths": uploaded.data.lengths, "column": uploaded.data.column}})
    _, linked = plan_from_query(plan_to_query(uploaded, "chat-like (180k)"))
    assert linked == uploaded.changed({"data": {"lengths": "sample_data/chat_like_hist.csv", "column": None}})
