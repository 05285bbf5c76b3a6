"""Exports are data, not code: hostile strings in a plan or an option never become code in what users run."""

from __future__ import annotations

import ast
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.advice.exports import megatron_lm_args, overrides, python_snippet
from advisor.analysis import analyze
from advisor.data.lengths import LengthHistogram
from advisor.formats import ALL_FORMATS
from advisor.plan import PlanError, plan_from_dict
from advisor.plan.io import plan_from_text
from advisor.trial.launch import trial_slurm, trial_torchrun

HOSTILE = [
    "x'); import os; os.system('id') #",
    'a"\nimport os\n',
    "$(rm -rf ~)",
    "`id`",
    "; reboot",
    "a\nb",
    "\\",
    "{{7*7}}",
    "\u202eevil",
    "x" * 500,
]
DATA = LengthHistogram.from_samples([100, 200, 300, 700] * 20)
BASE = {
    "model": "llama3.1-8b",
    "parallel": {"gpus": 8, "tp": 2, "cp": 2, "sp": True},
    "training": {"seq_length": 1024, "global_batch_samples": 64},
}


@pytest.mark.parametrize(
    "section,field",
    [
        ("model", "family"),
        ("hardware", "gpu"),
        ("packing", "algorithm"),
        ("parallel", "cp_comm_type"),
        ("training", "recompute"),
        ("model", "preset"),
    ],
)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_names_are_refused_by_the_plan(section, field, value):
    raw = (
        {**BASE, section: {**BASE.get(section, {}), field: value}}
        if section != "model"
        else {**BASE, "model": {"preset": "llama3.1-8b", field: value}}
    )
    if section == "hardware":
        raw["hardware"] = {"gpu": value, "memory_gib": 80, "bf16_tflops": 900}
    with pytest.raises(PlanError) as err:
        plan_from_dict(raw)
    # the problem names the field (an unknown preset is the model itself), and quotes the value, never runs it
    place = "model: unknown preset " if field == "preset" else f"{section}.{field}: "
    assert err.value.problems[0].startswith(place), err.value.problems


def test_a_value_holding_a_semicolon_is_one_problem():
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": "a; b"})
    assert len(err.value.problems) == 1 and "'a; b'" in err.value.problems[0], err.value.problems


@pytest.mark.parametrize("version", HOSTILE + ["0.6", "0.6.2.1", "v0.6.2", "0.6.2 ", "1e3"])
def test_versions_are_major_minor_patch_only(version):
    plan = plan_from_dict(BASE)
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        python_snippet(plan, version, 2.0)
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        overrides(plan, version, 2.0)


@settings(max_examples=150, deadline=None)
@given(
    st.text(
        st.characters(exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", codec="utf-8"),
        min_size=1,
        max_size=60,
    )
)
def test_a_trial_plan_file_name_is_shell_quoted(name):
    plan = plan_from_dict(BASE)
    for script in (trial_torchrun(plan, name), trial_slurm(plan, name)):
        line = next(line for line in script.splitlines() if line.startswith("PLAN="))
        assert shlex.split(line, comments=False) == [f"PLAN={name}"]  # one word, whatever it holds
        assert 'advisor trial "$PLAN"' in script


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_every_export_parses_as_its_language(fmt):
    analysis = analyze(plan_from_dict(BASE), DATA)
    text = analysis.export(fmt, "0.6.2")
    if fmt == "python":
        tree = ast.parse(text)
        kinds = {type(node).__name__ for node in tree.body}
        assert kinds <= {"ImportFrom", "Assign", "If"}, kinds  # imports and attribute settings, nothing that runs
        for node in tree.body:  # the one branch: create the recipe's specs object where it has none
            if isinstance(node, ast.If):
                assert ast.unparse(node.test) in (
                    "cfg.dataset.offline_packing_specs is None",
                    "cfg.dataset.packed_sequence_specs is None",
                )
                assert ast.unparse(node.body[0]).endswith("= PackedSequenceSpecs()") and len(node.body) == 1
                assert not node.orelse
    elif fmt == "overrides":
        for line in text.splitlines():
            key, _, value = line.partition("=")
            assert key.replace(".", "").replace("_", "").isalnum() and "\n" not in value
    elif fmt in ("megatron-lm", "torchrun", "slurm"):
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        words = shlex.split(body.replace("\\\n", " "))
        if fmt == "megatron-lm":  # options and their values, each one word
            p = analysis.plan.parallel
            assert words[words.index("--context-parallel-size") + 1] == str(p.cp)
            assert words[words.index("--tensor-model-parallel-size") + 1] == str(p.tp)
        else:
            assert "torchrun" in words, words[:10]
    elif fmt == "plan":
        assert plan_from_text(text, "plan.yaml") == analysis.plan  # YAML that reads back as the same plan
    elif fmt == "paths":
        paths = [line.split()[1] for line in text.splitlines() if line.startswith(("train:", "val:", "metadata:"))]
        assert len(paths) == 3 and all(p.startswith("<dataset_root>/packed/") and " " not in p for p in paths)
        assert f"_pad_seq_to_mult{analysis.plan.pad_seq_to_mult}_" in paths[0]
    else:  # markdown: every table row has the header's cells, every code fence is closed
        lines = text.splitlines()
        assert sum(line.startswith("```") for line in lines) % 2 == 0
        rows = [line for line in lines if line.startswith("|")]
        assert rows and len({row.count("|") for row in rows}) == 1, rows


def test_mock_config_in_megatron_lm_args_is_one_shell_word():
    args = megatron_lm_args(plan_from_dict(BASE), "it's here; rm -rf ~.csv")
    words = shlex.split(args.replace("\\\n", " "))
    i = words.index("--sft-mock-dataset-config-json")
    assert words[i + 1] == '{"mode": "file", "path": "it\'s here; rm -rf ~.csv"}'
