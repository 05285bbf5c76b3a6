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
from tests.support.mb_reference import load_function, load_module

LETTERS = "EtmL"


@pytest.fixture(scope="module")
def mcore():
    """Megatron-Core 0.19.2's PipelineParallelLayerLayout, its pipeline state stubbed with the vpp asked for."""
    state = {"vpp": None}
    module = load_module(
        "megatron.core.transformer.pipeline_parallel_layer_layout",
        stubs={
            "megatron.core.parallel_state": {
                "get_virtual_pipeline_model_parallel_world_size": lambda: state["vpp"],
                "get_pipeline_model_parallel_rank": lambda: 0,
            }
        },
    )
    module.state = state
    return module


def _names(stages) -> tuple:
    return tuple(tuple(k.name for k in stage) for stage in stages)


stage_text = st.text(alphabet=LETTERS, min_size=0, max_size=5)
layout_text = st.lists(
    st.one_of(
        stage_text,
        st.tuples(stage_text, st.integers(1, 4)).map(lambda x: f"{x[0][:1] or 't'}*{x[1]}"),
        st.tuples(st.lists(stage_text, min_size=1, max_size=3), st.integers(1, 3)).map(
            lambda x: "(" + "|".join(x[0]) + "|)*" + str(x[1])
        ),
    ),
    min_size=1,
    max_size=6,
).map(lambda parts: ",".join(parts[:-1]) + "|".join(parts[-1:]))


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


stages_lists = st.lists(
    st.lists(st.sampled_from(["embedding", "decoder", "mtp", "loss"]), max_size=4), min_size=1, max_size=12
)


@st.composite
def valid_layouts(draw):
    """A layout Megatron-Core accepts: pp x vpp stages, the decoder layers cut anywhere (empty stages too), the
    embedding first, the MTP layers and the loss last."""
    pp, vpp = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    num_layers, mtp = draw(st.integers(0, 10)), draw(st.integers(0, 2))
    cuts = sorted(draw(st.lists(st.integers(0, num_layers), min_size=pp * vpp - 1, max_size=pp * vpp - 1)))
    bounds = [0, *cuts, num_layers]
    stages = [["decoder"] * (bounds[i + 1] - bounds[i]) for i in range(pp * vpp)]
    stages[0].insert(0, "embedding")
    stages[-1] += ["mtp"] * mtp + ["loss"]
    return stages, pp, num_layers, mtp


def _mutated(draw_data, stages: list, num_layers: int, mtp: int):
    """One change Megatron-Core may or may not accept: a layer dropped, added, moved or swapped, or the model's
    layer or MTP count off by one."""
    stages = [list(x) for x in stages]
    flat = [(i, j) for i, stage in enumerate(stages) for j in range(len(stage))]
    kind = draw_data.draw(st.sampled_from(["none", "drop", "add", "move", "swap", "layers", "mtp"]))
    if kind in ("drop", "move", "swap") and flat:
        i, j = draw_data.draw(st.sampled_from(flat))
        item = stages[i].pop(j)
        if kind == "move":
            k = draw_data.draw(st.integers(0, len(stages) - 1))
            stages[k].insert(draw_data.draw(st.integers(0, len(stages[k]))), item)
        elif kind == "swap":
            k = draw_data.draw(st.integers(0, len(stages) - 1))
            stages[k].insert(draw_data.draw(st.integers(0, len(stages[k]))), item)
            stages[i].insert(j, stages[k].pop(0) if stages[k] else item)
    elif kind == "add":
        k = draw_data.draw(st.integers(0, len(stages) - 1))
        stages[k].insert(
            draw_data.draw(st.integers(0, len(stages[k]))),
            draw_data.draw(st.sampled_from(["embedding", "decoder", "mtp", "loss"])),
        )
    elif kind == "layers":
        num_layers = max(0, num_layers + draw_data.draw(st.sampled_from([-1, 1])))
    elif kind == "mtp":
        mtp = max(0, mtp + draw_data.draw(st.sampled_from([-1, 1])))
    return stages, num_layers, mtp


def _megatron_core_accepts(mcore, stages, pp, num_layers, mtp) -> bool:
    try:
        layout = mcore.PipelineParallelLayerLayout([list(x) for x in stages], pp)
        layout.validate_layer_layout(num_layers, mtp if mtp else None)
        return True
    except (AssertionError, IndexError):  # an empty layout has no first layer to check: refused all the same
        return False


@settings(max_examples=600, deadline=None)
@given(valid_layouts(), st.data())
def test_validation_agrees_with_megatron_core(mcore, layout, data):
    """Near-valid layouts (a valid one, changed once): accepted here exactly when Megatron-Core's constructor and
    validate_layer_layout accept them."""
    stages, pp, num_layers, mtp = layout
    stages, num_layers, mtp = _mutated(data, stages, num_layers, mtp)
    parsed = parse_layout([list(x) for x in stages])
    vpp = len(stages) // pp
    problems = layout_problems(parsed, pp, vpp if vpp > 1 else None, num_layers, mtp)
    assert (problems == []) == _megatron_core_accepts(mcore, stages, pp, num_layers, mtp), problems


@settings(max_examples=200, deadline=None)
@given(stages_lists, st.integers(1, 4), st.integers(0, 8), st.integers(0, 2))
def test_random_layouts_are_refused_as_megatron_core_refuses_them(mcore, stages, pp, num_layers, mtp):
    parsed = parse_layout([list(s) for s in stages])
    vpp = len(stages) // pp if len(stages) % pp == 0 else None
    problems = layout_problems(parsed, pp, vpp if vpp and vpp > 1 else None, num_layers, mtp)
    assert (problems == []) == _megatron_core_accepts(mcore, stages, pp, num_layers, mtp), problems


@settings(max_examples=300, deadline=None)
@given(valid_layouts())
def test_each_rank_holds_the_layers_megatron_core_builds_there(mcore, layout):
    stages, pp, _, _ = layout
    vpp = len(stages) // pp
    theirs = mcore.PipelineParallelLayerLayout([list(s) for s in stages], pp)
    mcore.state["vpp"] = vpp if vpp > 1 else None
    for r, rank in enumerate(rank_layers(parse_layout([list(s) for s in stages]), pp)):
        assert list(rank.decoders) == [
            i for v in range(vpp) for i in theirs.get_layer_id_list(mcore.LayerType.decoder, v, r)
        ]
        assert rank.mtp == sum(theirs.get_num_layers_to_build(mcore.LayerType.mtp, v, r) for v in range(vpp))
        # GPTModel builds the embedding on the first rank (pre_process) and the output layer and loss on the last
        assert (rank.embedding, rank.loss) == (r == 0, r == pp - 1)


@settings(max_examples=200, deadline=None)
@given(stages_lists)
def test_layout_string_reads_back_as_the_same_stages(mcore, stages):
    parsed = parse_layout([list(s) for s in stages])
    text = layout_string(parsed)
    assert parse_layout(text) == parsed
    assert _names(mcore.PipelineParallelLayerLayout.parse_str_to_list(text)) == parsed


def test_recipe_layouts_are_megatron_bridges():
    """Every pipeline either recipe is asked for: the same layout, or none where Bridge has none (Kimi-K2's
    recipe raises, DeepSeek-V3's leaves the layout alone)."""
    kimi = load_function("megatron/bridge/recipes/kimi/h100/kimi_k2.py", "_get_kimi_k2_pipeline_layout")
    deepseek = load_function(
        "megatron/bridge/recipes/deepseek/h100/deepseek_v3.py", "set_deepseek_v3_pipeline_model_parallel_layout"
    )
    known = 0
    for pp in (1, 2, 3, 4, 8, 16, 32):
        for vp in (1, 2, 3, 4, 8):
            try:
                theirs = kimi(pp, vp)
            except ValueError:
                theirs = None
            assert recipe_layout("kimi-k2", pp, vp if vp > 1 else None, 0) == theirs, (pp, vp)
            for mtp in (0, 1):
                cfg = types.SimpleNamespace(
                    pipeline_model_parallel_size=pp,
                    virtual_pipeline_model_parallel_size=vp,
                    mtp_num_layers=mtp,
                    pipeline_model_parallel_layout=None,
                )
                deepseek(cfg)
                assert (
                    recipe_layout("deepseek-v3", pp, vp if vp > 1 else None, mtp) == cfg.pipeline_model_parallel_layout
                ), (pp, vp, mtp)
                known += cfg.pipeline_model_parallel_layout is not None
    assert known == 2 * len(RECIPE_LAYOUTS["deepseek-v3"])
    assert recipe_layout("llama3.1-8b", 4, None, 0) is None


DEEPSEEK = {
    "model": "deepseek-v3",
    "hardware": {"gpu": "GB200"},
    "parallel": {"gpus": 256, "pp": 4, "vpp": 4, "ep": 64, "moe_dispatcher": "flex_hybridep"},
    "training": {"task": "pretrain", "seq_length": 4096, "global_batch_samples": 2048},
    "packing": {"mode": "none"},
}


def test_deepseek_at_megatron_bridges_published_pipelines_is_accepted():
    """61 layers divide by no pipeline: Megatron-Bridge's recipe layout places them (its GB200 runs: PP 4 VP 4)."""
    plan = plan_from_dict(DEEPSEEK)
    ranks = rank_layers(plan.pipeline_stages, 4)
    assert [len(r.decoders) for r in ranks] == [16, 16, 16, 13]
    with pytest.raises(PlanError, match="not divisible by pp\\*vpp = 12") as e:
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "vpp": 3}})
    assert "Megatron-Bridge's deepseek-v3 recipe has layouts for PP x VP 4 x 1, 4 x 2, 4 x 4, 8 x 1" in str(e.value)
    own = {**DEEPSEEK["parallel"], "vpp": 2, "pp": 8, "ep": 32, "pipeline_layout": "Et*4|(t*4|)*14tmL"}
    with pytest.raises(PlanError, match="has 1 MTP layers \\(m\\), the model 0"):  # Megatron-Core refuses the m
        plan_from_dict({**DEEPSEEK, "parallel": own})
    with_mtp = plan_from_dict({**DEEPSEEK, "model": {"preset": "deepseek-v3", "mtp_num_layers": 1}, "parallel": own})
    assert rank_layers(with_mtp.pipeline_stages, 8)[7].mtp == 1


def test_a_layout_is_checked_and_every_problem_named():
    with pytest.raises(PlanError) as e:
        plan_from_dict(
            {
                **DEEPSEEK,
                "parallel": {
                    **DEEPSEEK["parallel"],
                    "pipeline_layout": "Et*4|(t*4|)*14L",
                    "account_for_loss_in_pipeline_split": True,
                },
            }
        )
    text = str(e.value)
    assert "parallel.pipeline_layout has 60 decoder layers (t), the model 61" in text
    assert "set account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split false" in text
    with pytest.raises(PlanError, match="invalid layer character 'x'"):
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pipeline_layout": "Ex|L"}})
    with pytest.raises(PlanError, match="set vpp to 2"):
        plan_from_dict(
            {**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pp": 8, "ep": 32, "pipeline_layout": "Et*4|(t*4|)*14tL"}}
        )


def _even_and_by_layout(parallel: dict, layout: str, model: str = "llama3.1-8b"):
    base = {
        "model": model,
        "parallel": parallel,
        "packing": {"mode": "none"},
        "training": {"task": "pretrain", "seq_length": 4096, "global_batch_samples": 64},
    }
    return plan_from_dict(base), plan_from_dict({**base, "parallel": {**parallel, "pipeline_layout": layout}})


@pytest.mark.parametrize(
    "parallel,layout",
    [
        ({"gpus": 8, "pp": 4}, "Et*8|t*8|t*8|t*8L"),
        ({"gpus": 16, "pp": 4, "tp": 2, "sp": True}, "Et*8|t*8|t*8|t*8L"),
        (
            {"gpus": 8, "pp": 2, "account_for_embedding_in_pipeline_split": False},
            [["embedding"] + ["decoder"] * 16, ["decoder"] * 16 + ["loss"]],
        ),
    ],
)
def test_the_even_split_written_as_a_layout_times_and_weighs_the_same(parallel, layout):
    even, written = _even_and_by_layout(parallel, layout)
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=16)
    assert step_time(written, work, EFFICIENCY).step_seconds == pytest.approx(
        step_time(even, work, EFFICIENCY).step_seconds, rel=1e-12
    )
    a, b = estimate_memory(even, 4096, 16), estimate_memory(written, 4096, 16)
    assert b.total == pytest.approx(a.total, rel=1e-4)  # the final norm's few parameters aside
    assert b.stage == a.stage


def test_a_heavier_rank_is_the_slowest_and_the_fullest():
    even, eleven = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*5|t*11|t*8|t*8L")
    _, moved = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*5|t*8|t*11|t*8L")
    _, twelve = _even_and_by_layout({"gpus": 8, "pp": 4}, "Et*4|t*12|t*8|t*8L")
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=16)
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
    # the Bridge provider builds DeepSeek-V3's MTP layer from its checkpoint; the plan's layout and estimate have none
    assert "model.mtp_num_layers=null" in text
    args = megatron_lm_args(plan)
    assert "--pipeline-model-parallel-layout 'Et*4|" in args
    assert "--num-layers-per-virtual-pipeline-stage" not in args  # Megatron-LM takes one or the other
    # no layout here (the embedding and the loss counted as layers): the recipe's own layout is taken off
    split = plan_from_dict(
        {
            **DEEPSEEK,
            "parallel": {
                "gpus": 288,
                "pp": 9,
                "ep": 32,
                "vpp": 7,
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
            },
        }
    )
    assert split.pipeline_stages is None
    assert "model.pipeline_model_parallel_layout=null" in overrides(split)


@pytest.mark.parametrize("version", ["0.6.2", "0.3.1"])
def test_the_layout_fields_are_the_bridges(version, tmp_path):
    """The snippet and the overrides with a layout and the MTP count, against the version's real dataclasses."""
    from tests.support.snippet_check import check_exports

    out = check_exports(plan_from_dict(DEEPSEEK), version, tmp_path)
    assert out["unknown"] == [] and out["bad_overrides"] == []
    assert {"cfg.model.pipeline_model_parallel_layout", "cfg.model.mtp_num_layers"} <= set(out["set"])


def test_a_changed_preset_gets_no_recipe_layout():
    """The recipe's layout is for its own 61 layers: a 64-layer DeepSeek-V3 splits evenly."""
    plan = plan_from_dict(
        {**DEEPSEEK, "model": {"preset": "deepseek-v3", "num_layers": 64, "moe_layer_freq": [0] * 3 + [1] * 61}}
    )
    assert plan.pipeline_stages is None


def test_an_mtp_layer_costs_the_same_on_the_last_stage_with_or_without_a_layout():
    """Without a layout Megatron-Core builds the MTP layers on the last stage; written out, the same layout."""
    base = {
        "model": {"preset": "llama3.1-8b", "mtp_num_layers": 1},
        "packing": {"mode": "none"},
        "parallel": {"gpus": 8, "pp": 4},
        "training": {"task": "pretrain", "seq_length": 4096, "global_batch_samples": 64},
    }
    even = plan_from_dict(base)
    written = plan_from_dict({**base, "parallel": {"gpus": 8, "pp": 4, "pipeline_layout": "Et*8|t*8|t*8|t*8mL"}})
    without = plan_from_dict({**base, "model": "llama3.1-8b"})
    work = StepWork(tokens=4096, seqlen_squared_sum=4096.0**2, micro_batches=16)
    a, b, c = (step_time(p, work, EFFICIENCY) for p in (even, written, without))
    assert a.step_seconds == pytest.approx(b.step_seconds, rel=1e-12)
    assert a.stage_seconds > c.stage_seconds  # one more layer and output layer on the slowest stage
    m_even, m_written = estimate_memory(even, 4096, 16), estimate_memory(written, 4096, 16)
    assert (m_even.stage, m_even.total) == (m_written.stage, pytest.approx(m_written.total, rel=1e-4))
    one = {**base, "parallel": {"gpus": 8}}  # one stage: the MTP layer's logits beside the model's
    assert estimate_memory(plan_from_dict(one), 4096, 16).logits == pytest.approx(
        2 * estimate_memory(plan_from_dict({**one, "model": "llama3.1-8b"}), 4096, 16).logits
    )


@pytest.mark.parametrize("text", ["(t*99999|)*99999", "t*999999999", "E" + "(t*999|)*999" * 3 + "L"])
def test_a_layout_that_unrolls_past_a_million_layers_is_refused_at_once(text):
    with pytest.raises(PlanError, match="unrolls past 1,000,000 characters"):
        plan_from_dict({**DEEPSEEK, "parallel": {**DEEPSEEK["parallel"], "pipeline_layout": text}})


def test_lora_needs_a_fine_tuning_task():
    with pytest.raises(PlanError, match="training.peft lora fine-tunes a pretrained model"):
        plan_from_dict({**DEEPSEEK, "training": {**DEEPSEEK["training"], "peft": "lora"}})


def test_the_estimate_says_which_layout_placed_the_layers(tmp_path, capsys):
    """A user sees the recipe layout that made their pipeline valid, and each rank's layers, in text and JSON."""
    import json

    from advisor.plan import dump_plan
    from tests.support import SAMPLE
    from tests.support.cli import in_process

    path = tmp_path / "plan.yaml"
    path.write_text(dump_plan(plan_from_dict(DEEPSEEK)))
    lengths = str(SAMPLE / "wikipedia_bert_len512_hist.csv")
    run = ["estimate", str(path), "--lengths", lengths]
    done = in_process(capsys, *run)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert (
        "(Megatron-Bridge's deepseek-v3 recipe layout for PP 4 x VP 4): decoder layers per rank 16, 16, 16, 13" in text
    )
    out = json.loads(in_process(capsys, *run, "--json").stdout)
    assert out["pipeline_layout"]["layers_per_rank"] == [16, 16, 16, 13]
    assert parse_layout(out["pipeline_layout"]["layout"]) == plan_from_dict(DEEPSEEK).pipeline_stages
