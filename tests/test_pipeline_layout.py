"""The pipeline layout against Megatron-Core's own parser and validator and Megatron-Bridge's recipe layouts (both
from their wheels), and what a layout changes in the plan, the step time, the memory and the exports."""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.model.memory import estimate_memory
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time
from advisor.plan import PlanError, plan_from_dict
from advisor.plan.pipeline_layout import (
    RECIPE_LAYOUTS,
    layout_problems,
    layout_string,
    parse_layout,
    rank_layers,
    recipe_layout,
)
from tests.mb_reference import load_function, load_module

LETTERS = "EtmL"


@pytest.fixture(scope="module")
def mcore():
    """Megatron-Core 0.19.2's PipelineParallelLayerLayout, its pipeline state stubbed with the vpp asked for."""
    state = {"vpp": None}
    module = load_module("megatron.core.transformer.pipeline_parallel_layer_layout", stubs={
        "megatron.core.parallel_state": {
            "get_virtual_pipeline_model_parallel_world_size": lambda: state["vpp"],
            "get_pipeline_model_parallel_rank": lambda: 0}})
    module.state = state
    return module


def _names(stages) -> tuple:
    return tuple(tuple(k.name for k in stage) for stage in stages)


stage_text = st.text(alphabet=LETTERS, min_size=0, max_size=5)
layout_text = st.lists(
    st.one_of(stage_text, st.tuples(stage_text, st.integers(1, 4)).map(lambda x: f"{x[0][:1] or 't'}*{x[1]}"),
              st.tuples(st.lists(stage_text, min_size=1, max_size=3), st.integers(1, 3)).map(
                  lambda x: "(" + "|".join(x[0]) + "|)*" + str(x[1]))),
    min_size=1, max_size=6).map(lambda parts: ",".join(parts[:-1]) + "|".join(parts[-1:]))


@settings(max_examples=300, deadline=None)
@given(layout_text)
def test_strings_parse_as_megatron_core_parses_them(mcore, text):
    theirs = mcore.PipelineParallelLayerLayout.parse_str_to_list(text)
    assert parse_layout(text) == _names(theirs)


@pytest.mark.parametrize("text", ["Ex|L", "E|t+|L", "E|T|L"])
def test_unknown_letters_are_refused_as_megatron_core_refuses_them(mcore, text):
    with pytest.raises(AssertionError):
        mcore.PipelineParallelLayerLayout.parse_str_to_list(text)
    with pytest.raises(ValueError, match="invalid layer character"):
        parse_layout(text)


stages_lists = st.lists(st.lists(st.sampled_from(["embedding", "decoder", "mtp", "loss"]), max_size=4),
                        min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(stages_lists, st.integers(1, 4), st.integers(0, 8), st.integers(0, 2))
def test_validation_agrees_with_megatron_core(mcore, stages, pp, num_layers, mtp):
    """A layout passes here exactly when Megatron-Core's constructor and validate_layer_layout accept it."""
    try:
        layout = mcore.PipelineParallelLayerLayout([list(s) for s in stages], pp)
        layout.validate_layer_layout(num_layers, mtp if mtp else None)
        accepted = True
    except (AssertionError, IndexError):  # an empty layout has no first layer to check: refused all the same
        accepted = False
    parsed = parse_layout([list(s) for s in stages])
    vpp = len(stages) // pp if len(stages) % pp == 0 else None
    problems = layout_problems(parsed, pp, vpp if vpp and vpp > 1 else None, num_layers, mtp)
    assert (problems == []) == accepted, problems


@settings(max_examples=200, deadline=None)
@given(stages_lists, st.integers(1, 4))
def test_each_rank_holds_the_layers_megatron_core_builds_there(mcore, stages, pp):
    if len(stages) % pp:
        return
    vpp = len(stages) // pp
    layout = mcore.PipelineParallelLayerLayout([list(s) for s in stages], pp)
    mcore.state["vpp"] = vpp if vpp > 1 else None
    for r, rank in enumerate(rank_layers(parse_layout([list(s) for s in stages]), pp)):
        theirs = [i for v in range(vpp) for i in layout.get_layer_id_list(mcore.LayerType.decoder, v, r)]
        assert list(rank.decoders) == theirs
        assert rank.mtp == sum(layout.get_num_layers_to_build(mcore.LayerType.mtp, v, r) for v in range(vpp))
        assert rank.embedding == any(layout.get_num_layers_to_build(mcore.LayerType.embedding, v, r)
                                     for v in range(vpp))


@settings(max_examples=200, deadline=None)
@given(stages_lists)
def test_layout_string_reads_back_as_the_same_stages(mcore, stages):
    parsed = parse_layout([list(s) for s in stages])
    text = layout_string(parsed)
    assert parse_layout(text) == parsed
    assert _names(mcore.PipelineParallelLayerLayout.parse_str_to_list(text)) == parsed


def test_recipe_layouts_are_megatron_bridges():
    kimi = load_function("megatron/bridge/recipes/kimi/h100/kimi_k2.py", "_get_kimi_k2_pipeline_layout")
    deepseek = load_function("megatron/bridge/recipes/deepseek/h100/deepseek_v3.py",
                             "set_deepseek_v3_pipeline_model_parallel_layout")
    for pp, vp in RECIPE_LAYOUTS["kimi-k2"]:
        assert recipe_layout("kimi-k2", pp, vp if vp > 1 else None, 0) == kimi(pp, vp)
    assert kimi(1, 1) is None and recipe_layout("kimi-k2", 1, None, 0) is None
    for (pp, vp) in RECIPE_LAYOUTS["deepseek-v3"]:
        for mtp in (0, 1):
            cfg = types.SimpleNamespace(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp,
                                        mtp_num_layers=mtp, pipeline_model_parallel_layout=None)
            deepseek(cfg)
            assert recipe_layout("deepseek-v3", pp, vp if vp > 1 else None, mtp) == cfg.pipeline_model_parallel_layout
    assert recipe_layout("llama3.1-8b", 4, None, 0) is None


DEEPSEEK = {"model": "deepseek-v3", "hardware": {"gpu": "GB200"},
            "parallel": {"gpus": 256, "pp": 4, "vpp": 4, "ep": 64, "moe_dispatcher": "flex_hybridep"},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": 2048},
            "packing": {"mode": "none"}}


def test_deepseek_at_megatron_bridges_published_pipelines_is_accepted():
    """61 layers divide by no pipeline: Megatron-Bridge's recipe layout places them (its GB200 runs: PP 4 VP 4)."""
    plan = plan_from_dict(DEEPSEEK)
    ranks = rank_layers(plan.pipeline_stages, 4)
    assert [len(r.decoders) for r in ranks] == [16, 16, 16, 13]
    with pytest.raises(PlanError, match="not divisible by pp\\*vpp = 12"):
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "vpp": 3}})
    own = {**DEEPSEEK["parallel"], "vpp": 2, "pp": 8, "ep": 32, "pipeline_layout": "Et*4|(t*4|)*14tmL"}
    with pytest.raises(PlanError, match="has 1 MTP layers \\(m\\), the model 0"):  # Megatron-Core refuses the m
        plan_from_dict({**DEEPSEEK, "parallel": own})
    with_mtp = plan_from_dict({**DEEPSEEK, "model": {"preset": "deepseek-v3", "mtp_num_layers": 1}, "parallel": own})
    assert rank_layers(with_mtp.pipeline_stages, 8)[7].mtp == 1


def test_a_layout_is_checked_and_every_problem_named():
    with pytest.raises(PlanError) as e:
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pipeline_layout": "Et*4|(t*4|)*14L",
                                                 "account_for_loss_in_pipeline_split": True}})
    text = str(e.value)
    assert "parallel.pipeline_layout has 60 decoder layers (t), the model 61" in text
    assert "set account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split false" in text
    with pytest.raises(PlanError, match="invalid layer character 'x'"):
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pipeline_layout": "Ex|L"}})
    with pytest.raises(PlanError, match="set vpp to 2"):
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pp": 8, "ep": 32,
                                                 "pipeline_layout": "Et*4|(t*4|)*14tL"}})


def _even_and_by_layout(parallel: dict, layout: str, model: str = "llama3.1-8b"):
    base = {"model": model, "parallel": parallel, "packing": {"mode": "none"},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": 64}}
    return plan_from_dict(base), plan_from_dict({**base, "parallel": {**parallel, "pipeline_layout": layout}})


@pytest.mark.parametrize("parallel,layout", [
    ({"gpus": 8, "pp": 4}, "Et*8|t*8|t*8|t*8L"),
    ({"gpus": 16, "pp": 4, "tp": 2, "sp": True}, "Et*8|t*8|t*8|t*8L"),
    ({"gpus": 8, "pp": 2, "account_for_embedding_in_pipeline_split": False}, [["embedding"] + ["decoder"] * 16,
                                                                              ["decoder"] * 16 + ["loss"]]),
])
def test_the_even_split_written_as_a_layout_times_and_weighs_the_same(parallel, layout):
    even, written = _even_and_by_layout(parallel, layout)
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0 ** 2, micro_batches=16)
    assert step_time(written, work, EFFICIENCY).step_seconds == pytest.approx(
        step_time(even, work, EFFICIENCY).step_seconds, rel=1e-12)
    a, b = estimate_memory(even, 4096, 16), estimate_memory(written, 4096, 16)
    assert b.total == pytest.approx(a.total, rel=1e-4)  # the final norm's few parameters aside
    assert b.stage == a.stage


def test_a_heavier_rank_is_the_slowest_and_the_fullest():
    even, eleven = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*5|t*11|t*8|t*8L")
    _, moved = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*5|t*8|t*11|t*8L")
    _, twelve = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*4|t*12|t*8|t*8L")
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0 ** 2, micro_batches=16)
    times = [step_time(p, work, EFFICIENCY) for p in (even, eleven, moved, twelve)]
    assert times[1].stage_seconds == pytest.approx(times[2].stage_seconds, rel=1e-12)  # where it is does not matter
    assert times[3].stage_seconds == pytest.approx(times[1].stage_seconds * 12 / 11, rel=1e-9)  # layer by layer
    assert times[1].step_seconds > times[0].step_seconds
    assert estimate_memory(eleven, 4096, 16).stage == "middle rank 1"


def test_exports_carry_the_layout(tmp_path):
    from advisor.advice.exports import megatron_lm_args, overrides

    plan = plan_from_dict(DEEPSEEK)
    text = overrides(plan)
    assert "model.pipeline_model_parallel_layout=Et*4|t*4|" in text
    assert parse_layout(text.split("model.pipeline_model_parallel_layout=")[1].split("\n")[0]) == plan.pipeline_stages
    args = megatron_lm_args(plan)
    assert "--pipeline-model-parallel-layout 'Et*4|" in args
    assert "--num-layers-per-virtual-pipeline-stage" not in args  # Megatron-LM takes one or the other


def test_an_mtp_layer_costs_the_same_on_the_last_stage_with_or_without_a_layout():
    """Without a layout Megatron-Core builds the MTP layers on the last stage; written out, the same layout."""
    base = {"model": {"preset": "llama3.1-8b", "mtp_num_layers": 1}, "packing": {"mode": "none"},
            "parallel": {"gpus": 8, "pp": 4}, "training": {"task": "pretrain", "seq_length": 4096,
                                                             "global_batch_size": 64}}
    even = plan_from_dict(base)
    written = plan_from_dict({**base, "parallel": {"gpus": 8, "pp": 4, "pipeline_layout": "Et*8|t*8|t*8|t*8mL"}})
    without = plan_from_dict({**base, "model": "llama3.1-8b"})
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0 ** 2, micro_batches=16)
    a, b, c = (step_time(p, work, EFFICIENCY) for p in (even, written, without))
    assert a.step_seconds == pytest.approx(b.step_seconds, rel=1e-12)
    assert a.stage_seconds > c.stage_seconds  # one more layer and output layer on the slowest stage
    m_even, m_written = estimate_memory(even, 4096, 16), estimate_memory(written, 4096, 16)
    assert (m_even.stage, m_even.total) == (m_written.stage, pytest.approx(m_written.total, rel=1e-4))
    one = {**base, "parallel": {"gpus": 8}}  # one stage: the MTP layer's logits beside the model's
    assert estimate_memory(plan_from_dict(one), 4096, 16).logits == pytest.approx(
        2 * estimate_memory(plan_from_dict({**one, "model": "llama3.1-8b"}), 4096, 16).logits)
