"""The plan file: presets, YAML/JSON round trips, and every inconsistency reported at once."""

from __future__ import annotations

import json

import pytest

from advisor.plan import PlanError, dump_plan, load_plan, plan_from_dict
from advisor.plan.presets import GPU_PRESETS, MODEL_PRESETS
from tests.support import ROOT


def test_every_preset_makes_a_valid_plan():
    for name in MODEL_PRESETS:
        plan = plan_from_dict({"model": name, "parallel": {"gpus": 8}, "training": {"global_batch_samples": 64}})
        assert plan.model.name == name and plan.model_name == name
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200"} <= set(GPU_PRESETS)


def test_all_problems_at_once():
    raw = {
        "model": {"preset": "qwen3-30b-a3b", "num_layers": 47},
        "parallel": {"gpus": 30, "tp": 8, "pp": 2, "ep": 6},
        "training": {"global_batch_samples": 100, "task": "rl"},
        "packing": {"mode": "sometimes"},
        "hardware": {"gpu": "TPU"},
    }
    with pytest.raises(PlanError) as err:
        plan_from_dict(raw, "p.yaml")
    problems = err.value.problems
    expected = [
        "parallel.gpus 30 is not divisible by tp*pp*cp = 16",
        "model.num_query_groups 4 is not divisible by parallel.tp 8",
        "model.num_layers 47 is not divisible by pp*vpp = 2",
        "model.num_moe_experts 128 is not divisible by parallel.ep 6",
        "training.task: Input should be 'llm-sft', 'vlm-sft' or 'pretrain' (got 'rl')",
        "packing.mode: Input should be 'offline', 'in-batch', 'online', 'global-batch', 'none' or 'auto' "
        "(got 'sometimes')",
        "hardware.gpu: unknown GPU 'TPU'",
        "parallel.gpus 30 is not divisible by ep*etp*pp = 12",
    ]
    for text in expected:
        assert sum(text in p for p in problems) == 1, (text, problems)
    assert str(err.value).startswith("p.yaml: 8 problem(s):")


def test_moe_dispatcher_and_overlap_follow_megatron_cores_checks():
    """transformer_config.py: overlap_moe_expert_parallel_comm asserts EP > 1, a virtual pipeline with PP > 1 and no
    full recompute; the flex dispatcher is a MoE setting."""
    with pytest.raises(PlanError) as err:
        plan_from_dict(
            {
                "model": "qwen3-30b-a3b",
                "parallel": {"gpus": 16, "pp": 2, "moe_a2a_overlap": True},
                "training": {"recompute": "full"},
            }
        )
    problems = err.value.problems
    for text in (
        "moe_a2a_overlap needs expert parallelism",
        "moe_a2a_overlap with pp > 1 needs a virtual pipeline",
        "moe_a2a_overlap cannot run with training.recompute full",
    ):
        assert sum(text in p for p in problems) == 1, (text, problems)
    with pytest.raises(PlanError, match="moe_dispatcher flex_hybridep needs a MoE model"):
        plan_from_dict({"model": "llama3.1-8b", "parallel": {"moe_dispatcher": "flex_hybridep"}})
    plan = plan_from_dict(
        {
            "model": "qwen3-30b-a3b",
            "parallel": {
                "gpus": 16,
                "pp": 2,
                "vpp": 2,
                "ep": 8,
                "moe_a2a_overlap": True,
                "moe_dispatcher": "flex_deepep",
            },
        }
    )
    assert plan.parallel.moe_a2a_overlap and plan.parallel.moe_dispatcher == "flex_deepep"


def test_batch_and_preset_errors():
    with pytest.raises(PlanError, match="global_batch_samples 30 is not divisible by micro_batch_size\\*dp = 2\\*4"):
        plan_from_dict(
            {
                "model": "llama3.1-8b",
                "parallel": {"gpus": 8, "tp": 2},
                "packing": {"mode": "none"},
                "training": {"micro_batch_size": 2, "global_batch_samples": 30},
            }
        )
    # with offline packing the samples per step need not divide: the export rounds the packs to DP
    assert (
        plan_from_dict(
            {"model": "llama3.1-8b", "parallel": {"gpus": 8, "tp": 2}, "training": {"global_batch_samples": 30}}
        ).global_batch_packs(2.0)
        == 16
    )
    with pytest.raises(PlanError, match="unknown preset 'llama9'"):
        plan_from_dict({"model": "llama9"})
    with pytest.raises(PlanError, match="num_attention_heads 28 is not divisible by parallel.tp 8"):
        plan_from_dict({"model": "qwen2.5-vl-7b", "parallel": {"gpus": 8, "tp": 8}})
    with pytest.raises(PlanError, match="parallel.gpu: unknown field"):
        plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpu": 8}})


def test_custom_model_and_round_trip(tmp_path):
    raw = {
        "model": {
            "hidden_size": 1024,
            "num_layers": 4,
            "num_attention_heads": 8,
            "ffn_hidden_size": 4096,
            "vocab_size": 32000,
            "gated_linear_unit": False,
        },
        "parallel": {"gpus": 2, "tp": 2},
        "training": {"global_batch_samples": 8},
    }
    plan = plan_from_dict(raw)
    for fmt, name in (("yaml", "p.yaml"), ("json", "p.json")):
        path = tmp_path / name
        path.write_text(dump_plan(plan, fmt))
        assert load_plan(path) == plan
    preset = plan_from_dict({"model": "llama3.1-8b"})
    assert "model: llama3.1-8b" in dump_plan(preset)


def test_sample_plan_loads_and_bad_files_are_one_message(tmp_path):
    load_plan(ROOT / "sample_data" / "plans" / "llama8b_squad.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(PlanError, match="is not valid YAML"):
        load_plan(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(json.dumps(["not", "a", "mapping"]))
    with pytest.raises(PlanError, match="expected a mapping"):
        load_plan(bad_json)


def test_a_change_of_packing_mode_keeps_what_the_batch_means():
    """global_batch_size counts packs offline and samples otherwise: a mode change that says nothing of the batch
    keeps its meaning (samples become global_batch_samples) or is refused (packs cannot become samples without n)."""
    samples = plan_from_dict(
        {"version": 2, "model": "llama3.1-8b", "packing": {"mode": "none"}, "training": {"global_batch_size": 64}}
    )
    offline = samples.changed({"packing": {"mode": "offline"}})
    assert offline.requested_samples == 64 and offline.batch_in_packs is None
    packs = plan_from_dict({"version": 2, "model": "llama3.1-8b", "training": {"global_batch_size": 64}})
    with pytest.raises(PlanError, match="give training.global_batch_samples"):
        packs.changed({"packing": {"mode": "online"}})
    both = packs.changed({"packing": {"mode": "online"}, "training": {"global_batch_size": 256}})
    assert both.requested_samples == 256


def test_the_batch_in_samples_in_every_mode():
    """Every plan has samples per step but an offline one giving packs (``batch_in_samples``); a plan counting
    samples in global_batch_size (not offline) has packs at n too (global_batch_packs raised a TypeError)."""
    none = plan_from_dict({"model": "llama3.1-8b", "packing": {"mode": "none"}, "training": {"global_batch_size": 64}})
    assert none.batch_in_samples == 64 and none.global_batch_packs(2.0) == 32
    assert plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_samples": 64}}).batch_in_samples == 64
    packs = plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_size": 16}})
    with pytest.raises(ValueError, match="an offline plan giving packs"):
        _ = packs.batch_in_samples
    assert packs.effective_samples_per_step(None) is None and packs.global_batch_packs(None) == 16


def test_a_version_1_plan_is_read_with_the_new_meaning_and_one_note():
    old = plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_size": 128}})
    assert old.batch_in_packs == 128 and len(old.notes) == 1 and "global_batch_samples: 128" in old.notes[0]
    packs = plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_packs": 16}})
    assert packs.batch_in_packs == 16 and "written training.global_batch_size now" in packs.notes[0]
    unpacked = plan_from_dict(
        {"model": "llama3.1-8b", "packing": {"mode": "none"}, "training": {"global_batch_size": 128}}
    )
    assert unpacked.requested_samples == 128 and not unpacked.notes  # the meaning did not change: nothing to say
    assert plan_from_dict(old.to_dict()) == old and not plan_from_dict(old.to_dict()).notes  # written as version 2
    with pytest.raises(PlanError, match="version: 3 is not a plan file version"):
        plan_from_dict({"version": 3, "model": "llama3.1-8b"})


@pytest.mark.parametrize(
    "raw, field, says",
    [
        ({"model": "llama3.1-8b", "parallel": {"gpus": 8, "tp": 1, "sp": True}}, "parallel.sp", "needs tp > 1"),
        ({"model": "llama3.1-8b", "parallel": {"gpus": 8, "etp": 2}}, "parallel.etp 2", "dense model"),
        (
            {"model": "llama3.1-8b", "training": {"lora_targets": ["linear_qkv"]}},
            "training.lora_targets",
            "peft is none",
        ),
        ({"model": "llama3.1-8b", "training": {"lora_rank": 8}}, "training.lora_rank", "peft is none"),
        (
            {
                "model": "deepseek-v3",
                "parallel": {"gpus": 256, "ep": 64, "tp": 2, "sp": True},
                "training": {"peft": "lora", "lora_targets": ["linear_qkv", "linear_proj"]},
            },
            "training.lora_targets",
            "multi-latent attention has no linear_qkv",
        ),
        (
            {"model": "llama3.1-8b", "training": {"task": "vlm-sft", "micro_batch_size": 2}},
            "training.task vlm-sft",
            "text model",
        ),
        # found by bench/fuzz_round4.py: a pack shorter than CP's padding multiple holds nothing (a traceback before)
        (
            {
                "model": "llama3.1-8b",
                "parallel": {"gpus": 8, "cp": 2},
                "training": {"seq_length": 2048},
                "packing": {"pack_size": 3},
            },
            "packing.pack_size 3",
            "pads every sequence to (4",
        ),
    ],
)
def test_the_plan_refuses_what_the_frameworks_refuse_or_ignore(raw, field, says):
    """Round 4: sp without tp, LoRA settings without LoRA, linear_qkv on MLA, etp on a dense model and vlm-sft on a
    text model were accepted silently. Each is one message naming the field."""
    with pytest.raises(PlanError) as e:
        plan_from_dict({"version": 2, **raw})
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith(field) and says in e.value.problems[0]
