"""Exports checked against the real Megatron-Bridge 0.3.1 and 0.6.2 wheels (and their Megatron-Core)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.advice.exports import megatron_lm_args, mock_lengths_csv, overrides, python_snippet
from advisor.advice.rules import check
from advisor.analysis import analyze
from advisor.data.ingest import load_lengths
from advisor.errors import InputError
from advisor.model.numerics import numerics_of
from advisor.plan import dump_plan, plan_from_dict
from tests.support import ROOT, SAMPLE
from tests.support.snippet_check import PACKING_FACTOR as N
from tests.support.snippet_check import check_exports
from tests.support.tiers import slow_after

PLANS = {
    "offline-cp-sp": {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 16, "tp": 4, "cp": 2, "sp": True},
        "training": {"seq_length": 8192, "global_batch_samples": 64},
    },
    "offline-cudagraphs-full": {
        "model": "qwen3-8b",
        "parallel": {"gpus": 16, "tp": 2, "pp": 2, "vpp": 2, "cp": 2, "sp": True},
        "training": {"seq_length": 16384, "global_batch_samples": 32, "cuda_graphs": True, "recompute": "full"},
    },
    "offline-hierarchical": {
        "model": "llama3.1-70b",
        "parallel": {
            "gpus": 64,
            "tp": 8,
            "cp": 8,
            "sp": True,
            "cp_comm_type": "a2a+p2p",
            "hierarchical_cp_sizes": [2, 4],
        },
        "training": {"seq_length": 131072, "global_batch_samples": 8},
    },
    "vlm-in-batch": {
        "model": "qwen2.5-vl-7b",
        "parallel": {"gpus": 8, "tp": 2, "sp": True},
        "training": {"task": "vlm-sft", "micro_batch_size": 4, "global_batch_samples": 64},
    },
    "pretrain": {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8},
        "training": {"task": "pretrain", "global_batch_samples": 64},
    },
    "offline-overrides": {
        "model": {
            "preset": "qwen3-30b-a3b",
            "num_layers": 24,
            "moe_router_topk": 4,
            "share_embeddings_and_output_weights": True,
        },
        "parallel": {"gpus": 8, "tp": 2, "cp": 2, "ep": 2},
        "training": {"global_batch_samples": 64},
    },
    "offline-405b-split": {
        "model": "llama3.1-405b",
        "parallel": {
            "gpus": 128,
            "tp": 8,
            "pp": 8,
            "vpp": 8,
            "sp": True,
            "tp_comm_overlap": True,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        },
        "training": {"global_batch_samples": 64, "grad_reduce_in_fp32": False},
    },
    "pretrain-mxfp8-fsdp": {
        "model": "llama3.1-70b",
        "parallel": {"gpus": 64, "fsdp": True},
        "training": {
            "task": "pretrain",
            "global_batch_samples": 256,
            "precision": "mxfp8",
            "grad_reduce_in_fp32": False,
        },
        "hardware": {"gpu": "GB200"},
    },
    "pretrain-fp8-fsdp-offload": {
        "model": "llama3.1-70b",
        "parallel": {"gpus": 64, "fsdp": True},
        "training": {
            "task": "pretrain",
            "global_batch_samples": 256,
            "precision": "fp8",
            "micro_batch_size": 2,
            "recompute": "none",
            "cpu_offloading_num_layers": 40,
        },
        "hardware": {"gpu": "GB200"},
    },
    "offline-block-recompute": {
        "model": "llama3.1-70b",
        "parallel": {"gpus": 8, "pp": 4, "vpp": 5},
        "training": {"recompute": "full", "recompute_num_layers": 1, "global_batch_samples": 32},
    },
    "offline-fp8-tensorwise": {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 16, "tp": 2, "sp": True},
        "training": {"global_batch_samples": 64, "precision": "fp8"},
    },
    "offline-nvfp4": {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8},
        "hardware": {"gpu": "GB300"},
        "training": {"global_batch_samples": 64, "precision": "nvfp4"},
    },
    "offline-custom": {
        "model": {
            "hidden_size": 1024,
            "num_layers": 4,
            "num_attention_heads": 8,
            "num_query_groups": 2,
            "ffn_hidden_size": 4096,
            "vocab_size": 32000,
            "normalization": "LayerNorm",
        },
        "parallel": {"gpus": 8, "cp": 2},
        "training": {"global_batch_samples": 64},
    },
    "offline-per-token-loss": {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8},
        "training": {"global_batch_samples": 64, "calculate_per_token_loss": True},
    },
    "pretrain-moe-flex-overlap": {
        "model": "qwen3-30b-a3b",
        "parallel": {
            "gpus": 16,
            "pp": 2,
            "vpp": 2,
            "ep": 8,
            "moe_a2a_overlap": True,
            "moe_dispatcher": "flex_hybridep",
        },
        "training": {"task": "pretrain", "global_batch_samples": 64, "recompute": "none"},
    },
    "in-batch-average-in-collective": {
        "model": "qwen2.5-vl-7b",
        "parallel": {"gpus": 8, "tp": 2, "sp": True},
        "training": {
            "task": "vlm-sft",
            "micro_batch_size": 4,
            "global_batch_samples": 64,
            "average_in_collective": True,
        },
    },
}


def run_check(version, name, tmp_path, recipe="specs", peft="full", **size):
    """The plan (one of PLANS by name, or a plan) and what Megatron-Bridge ``version``'s real code made of its exports
    (tests/support/snippet_check.py), written at packing factor N."""
    plan = name if not isinstance(name, str) else plan_from_dict(PLANS[name])
    return plan, check_exports(plan, version, tmp_path, recipe, peft, **size)


@pytest.mark.parametrize("version", ["0.6.2", "0.3.1"])
@pytest.mark.parametrize("recipe", ["full", "lora"])
def test_a_lora_plan_trains_lora_on_either_recipe(version, recipe, tmp_path):
    """The plan's LoRA rank lands on the recipe's LoRA (the LoRA recipe's own object, or Megatron-Bridge's LoRA on
    a full fine-tuning recipe); a full fine-tuning plan takes a LoRA recipe's adapters off."""
    lora = plan_from_dict(
        {
            **PLANS["offline-cp-sp"],
            "training": {
                **PLANS["offline-cp-sp"].get("training", {}),
                "peft": "lora",
                "lora_rank": 16,
                "lora_targets": ["linear_qkv"],
            },
        }
    )
    _, out = run_check(version, lora, tmp_path, peft=recipe)
    assert out["unknown"] == [] and out["bad_overrides"] == []
    lora_fields = {"dim": 16, "target_modules": ["linear_qkv"]}  # the performance scripts' LoRA: QKV only
    assert out["peft"] == lora_fields and out["peft_created"] is (recipe == "full")
    # a dotlist cannot create the LoRA object: on a full recipe the overrides are reported, not applied
    assert (out["override_peft"], out["unapplied_overrides"]) == (
        (lora_fields, []) if recipe == "lora" else (None, ["peft.dim=16", "peft.target_modules=[linear_qkv]"])
    )
    full = plan_from_dict(PLANS["offline-cp-sp"])
    _, out = run_check(version, full, tmp_path, peft=recipe)
    assert out["unknown"] == [] and out["bad_overrides"] == []
    assert out["peft"] is None and out["override_peft"] is None


@pytest.mark.parametrize("version", slow_after(["0.6.2", "0.3.1"]))
@pytest.mark.parametrize("name", slow_after(list(PLANS)))  # a subprocess each
def test_snippet_and_overrides_resolve_in_the_real_wheel(version, name, tmp_path):
    plan, out = run_check(version, name, tmp_path)
    assert out["version"] == version
    assert out["unknown"] == [], out["unknown"]
    assert out["bad_overrides"] == [], out["bad_overrides"]
    assert out["unapplied_overrides"] == []  # the recipe-like config has the specs each override sets
    if plan.training.task == "llm-sft":
        module = (
            "megatron.bridge.data.packing.config"
            if version == "0.6.2"
            else "megatron.bridge.data.datasets.packed_sequence"
        )
        assert out["specs_is_real"] and out["specs_class"] == f"{module}.PackedSequenceSpecs"
        assert out["specs_not_fields"] == []  # no attribute the dataclass lacks was set on the recipe's object
        for specs in (out["specs"], out["override_specs"]):
            assert specs["packed_sequence_size"] == plan.training.seq_length
            assert specs["pad_cu_seqlens"] is plan.training.cuda_graphs
            assert specs["pad_seq_to_mult"] == plan.pad_seq_to_mult
            assert (
                specs["pad_seq_to_mult"] % (2 * plan.parallel.cp) == 0
                if plan.parallel.cp > 1
                else specs["pad_seq_to_mult"] == 1
            )  # the recipes' rule: no CP, no per-sequence padding
            for field, value in out["recipe_specs"].items():  # the recipe's other fields survive
                if field != "packed_sequence_size":
                    assert specs[field] == value, field
        for dataset in (out["dataset"], out["override_dataset"]):  # the recipe's seed and kwargs stay
            assert dataset["seed"] == 5678 and dataset["dataset_kwargs"]["num_workers"] == 2
    else:
        assert out["specs"] is None
    if plan.parallel.cp > 1:
        assert "cfg.model.calculate_per_token_loss" in out["set"] and "cfg.ddp.average_in_collective" in out["set"]
    if plan.training.calculate_per_token_loss:
        assert "cfg.model.calculate_per_token_loss" in out["set"]
    if plan.average_in_collective:
        assert "cfg.ddp.average_in_collective" in out["set"]
    if name == "offline-overrides":  # the preset's overrides reach the recipe, and nothing else of the model
        assert {
            "cfg.model.num_layers",
            "cfg.model.moe_router_topk",
            "cfg.model.share_embeddings_and_output_weights",
        } <= set(out["set"]) and "cfg.model.hidden_size" not in out["set"]
    if name == "offline-405b-split":  # Megatron-Core TransformerConfig / ModelParallelConfig fields
        assert {
            "cfg.model.account_for_embedding_in_pipeline_split",
            "cfg.model.account_for_loss_in_pipeline_split",
            "cfg.model.tp_comm_overlap",
            "cfg.model.virtual_pipeline_model_parallel_size",
        } <= set(out["set"])
    if name == "offline-custom":
        assert {"cfg.model.hidden_size", "cfg.model.num_query_groups", "cfg.model.normalization"} <= set(out["set"])
    num = numerics_of(plan)
    if num.quantized:  # the version's own recipe, named as it registers it, and the fields the export adds
        assert out["precision_recipes"] == [num.mb_recipe] and num.mb_recipe in out["recipes_registered"]
        assert out["mixed_precision"].get("grad_reduce_in_fp32", True) is plan.training.grad_reduce_in_fp32
        if num.name == "fp8 tensorwise":
            assert out["mixed_precision"]["first_last_layers_bf16"] is False
    else:
        assert out["precision_recipes"] == []
    if plan.parallel.fsdp:
        assert {"cfg.ddp.use_megatron_fsdp", "cfg.ddp.data_parallel_sharding_strategy"} <= set(out["set"])
    if plan.training.recompute_num_layers:  # Megatron-Core's block method, as the performance recipes set it
        assert {"cfg.model.recompute_method", "cfg.model.recompute_num_layers"} <= set(out["set"])
    if plan.training.cpu_offloading_num_layers:  # ModelParallelConfig's fields in both generations
        assert {"cfg.model.cpu_offloading", "cfg.model.cpu_offloading_num_layers"} <= set(out["set"])
    if plan.model.num_moe_experts:  # TransformerConfig / CommOverlapConfig fields of the version
        assert "cfg.model.moe_token_dispatcher_type" in out["set"]
    if plan.parallel.moe_dispatcher != "alltoall":
        assert "cfg.model.moe_flex_dispatcher_backend" in out["set"]
    if plan.parallel.moe_a2a_overlap:
        assert {
            "cfg.comm_overlap.overlap_moe_expert_parallel_comm",
            "cfg.comm_overlap.delay_wgrad_compute",
            "cfg.model.moe_shared_expert_overlap",
        } <= set(out["set"])


def test_api_generations_differ_where_they_should():
    plan = plan_from_dict(PLANS["offline-cp-sp"])
    old, new = python_snippet(plan, "0.5.1", N), python_snippet(plan, "0.6.2", N)
    assert "from megatron.bridge.data.datasets.packed_sequence import PackedSequenceSpecs" in old
    assert "cfg.dataset.packed_sequence_specs = PackedSequenceSpecs(" in old and "enable_offline_packing" not in old
    assert "from megatron.bridge.data.packing import PackedSequenceSpecs" in new
    assert "cfg.dataset.enable_offline_packing = True" in new and "offline_packing_specs" in new
    vlm = plan_from_dict(PLANS["vlm-in-batch"])
    assert "pack_sequences_in_batch = True" in python_snippet(vlm, "0.4.0")
    assert "enable_in_batch_packing = True" in python_snippet(vlm, "0.6.0")
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        python_snippet(plan, "six", N)
    with pytest.raises(ValueError, match="packing factor"):  # packs per step cannot be written without the data
        python_snippet(plan, "0.6.2")
    assert f"cfg.train.global_batch_size = {plan.global_batch_packs(N)}" in new
    assert plan.global_batch_packs(N) == 26  # 64 samples / 2.5 per pack = 25.6 packs, to the nearest multiple of DP 2


def test_megatron_lm_args_count_the_embedding_and_loss_as_layers():
    args = megatron_lm_args(plan_from_dict(PLANS["offline-405b-split"]))
    # arguments.py: (126 + 1 + 1) layers / PP 8 = 16 per rank, / 2 per virtual stage = VPP 8
    for flag in (
        "--num-layers-per-virtual-pipeline-stage 2",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--tp-comm-overlap",
        "--grad-reduce-in-bf16",
    ):
        assert flag in args


def test_megatron_lm_args_and_mock_lengths_round_trip(tmp_path, squad):
    plan = plan_from_dict(PLANS["offline-hierarchical"])
    args = megatron_lm_args(plan)
    for flag in (
        "--context-parallel-size 8",
        "--cp-comm-type a2a+p2p",
        "--hierarchical-context-parallel-sizes 2 4",
        "--calculate-per-token-loss",
        "--no-create-attention-mask-in-dataloader",
        "--sft",
        '--data-path "${DATA_PATH:?',
    ):
        assert flag in args
    # round 4: the export trained on mock data without a word; now only when asked, naming the file written
    assert "--mock-data" not in args and "--sft-mock-dataset-config-json" not in args
    mock = megatron_lm_args(plan, "lengths_b.csv")
    assert "--mock-data" in mock and '"path": "lengths_b.csv"' in mock and '--data-path "' not in mock
    assert "mock data, as asked" in mock and "read from lengths_b.csv" in mock
    csv = tmp_path / "lengths.csv"
    csv.write_text(mock_lengths_csv(squad))
    (tmp_path / "mock.json").write_text(json.dumps({"mode": "file", "path": str(csv)}))
    back = load_lengths(tmp_path / "mock.json")  # read as Megatron-LM reads it: line 1 dropped
    assert back.lengths.tolist() == squad.lengths.tolist() and back.counts.tolist() == squad.counts.tolist()


@pytest.mark.slow  # the command line or the real wheel in subprocesses
def test_cli_recommend_json_and_export_recommended():
    plan_file = str(SAMPLE / "plans" / "llama8b_squad.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "recommend", plan_file, "--json", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"id", "severity", "message", "fix"} <= set(out["findings"][0])
    assert out["recommended_plan"]["model"] == "llama3.1-8b"
    best = plan_from_dict(out["recommended_plan"])
    assert not [f for f in check(best) if f.severity == "error"]
    exp = subprocess.run(
        [sys.executable, "-m", "advisor", "export", plan_file, "--format", "python", "--recommended", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    n = analyze(best, load_lengths(SAMPLE / "squad_v1.1_len384_hist.csv")).packing_factor
    assert exp.returncode == 0 and exp.stdout == python_snippet(best, packing_factor=n)


def test_markdown_and_plan_exports(squad):
    plan = plan_from_dict({**PLANS["offline-cp-sp"], "training": {"seq_length": 384, "global_batch_samples": 64}})
    analysis = analyze(plan, squad)
    md = analysis.export("markdown")
    assert "## Findings" in md and "`cp.loss`" in md and "Megatron-Bridge packing metadata" in md
    assert analysis.export("plan") == dump_plan(plan)
    slurm = analyze(plan_from_dict({**PLANS["offline-hierarchical"]}), squad).export("slurm")
    assert "#SBATCH --nodes=8" in slurm and "torchrun --nnodes 8 --nproc-per-node 8" in slurm
    assert '-m advisor trial "$PLAN" --device cuda' in analysis.export("torchrun")
    with pytest.raises(ValueError, match="unknown export format"):
        analysis.export("docx")


REVIEWER = {
    "model": "llama3.1-8b",
    "parallel": {"gpus": 16, "tp": 2, "sp": True},
    "training": {"seq_length": 8192, "global_batch_samples": 128},
}


@pytest.mark.parametrize(
    "layout,offline,in_batch",
    [
        ({"tp": 2, "sp": True}, 1, 2),
        ({"tp": 2, "cp": 2}, 4, 4),
        ({"tp": 4, "cp": 2, "sp": True}, 8, 8),
        ({"tp": 2, "cp": 2, "sp": True}, 4, 4),
    ],
)
def test_pad_seq_to_mult_follows_the_recipes_offline_and_validate_in_batch(layout, offline, in_batch):
    """MB 0.6.2: recipes pad 1 without CP, 2 CP with CP (qwen3.py's TP 4 CP 2 SP recipe: 8); in-batch packing pads
    to ConfigContainer.validate's lcm(2 CP, CP TP with SP)."""
    plan = plan_from_dict({**REVIEWER, "parallel": {"gpus": 16, **layout}})
    assert plan.pad_seq_to_mult == offline
    assert f"offline_packing_specs.pad_seq_to_mult = {offline}\n" in python_snippet(plan, "0.6.2", N)
    vlm = plan.changed({"model": {"preset": "qwen2.5-vl-7b"}, "training": {"task": "vlm-sft", "micro_batch_size": 2}})
    assert vlm.packing_mode == "in-batch" and vlm.pad_seq_to_mult == in_batch == vlm.collate_padding_multiple
    assert plan.changed({"packing": {"pad_seq_to_mult": 8}}).pad_seq_to_mult == 8  # the plan's own wins


@pytest.mark.slow  # the command line or the real wheel in subprocesses
@pytest.mark.parametrize("version", ["0.3.1", "0.6.2"])
def test_a_recipe_without_specs_gets_them_and_an_explicit_seed_is_written(version, tmp_path):
    plan = plan_from_dict({**REVIEWER, "packing": {"seed": 42}})
    _, out = run_check(version, plan, tmp_path, recipe="none")
    assert out["specs_is_real"] and out["specs_not_fields"] == []
    assert out["specs"]["packed_sequence_size"] == 8192 and out["specs"]["pad_seq_to_mult"] == 1
    assert out["dataset"]["seed"] == 42 and out["dataset"]["dataset_kwargs"]["num_workers"] == 2
    # a dotlist sets fields one by one and cannot create the object: the recipe must have specs (SFT recipes do)
    assert out["unapplied_overrides"] and all(
        "packed_sequence_specs." in line or "offline_packing_specs." in line for line in out["unapplied_overrides"]
    )


def test_the_packing_simulated_is_the_recipes_unless_the_plan_says(squad):
    plan = plan_from_dict({**REVIEWER, "training": {"seq_length": 384, "global_batch_samples": 64}})
    assert plan.packing.seed is None and analyze(plan, squad).packing.config.seed == 5678
    assert "seed" not in python_snippet(plan, "0.6.2", N) and "dataset.seed" not in overrides(plan, "0.6.2", N)
    from advisor.cli import build_parser
    from advisor.plan.schema import MB_RECIPE_SEED

    cli = build_parser("schedule").parse_args(
        ["schedule", "l.csv", "--seq-length", "8", "--dp", "1", "--cp", "1", "--global-batch-size", "1"]
    )
    assert cli.seed == MB_RECIPE_SEED == plan.packing_seed  # the CLI's schedule default is the plan's


@pytest.mark.slow  # the command line or the real wheel in subprocesses
def test_epochs_become_train_iters_in_packs_or_samples(squad, tmp_path):
    plan = plan_from_dict({**REVIEWER, "training": {"seq_length": 384, "global_batch_samples": 64, "epochs": 2}})
    analysis = analyze(plan, squad)
    packs, gbs = analysis.packing.num_packs, analysis.global_batch_packs
    iters = -(-2 * packs // gbs)
    assert f"cfg.train.train_iters = {iters}\n" in analysis.export("python")
    assert f"train.train_iters={iters}\n" in analysis.export("overrides")
    samples = squad.num_samples
    mlm_gbs = 64  # Megatron-LM counts samples: 64 is a multiple of micro batch 1 x DP 8
    assert f"--train-iters {-(-2 * samples // mlm_gbs)} " in analysis.export("megatron-lm")
    _, out = run_check("0.6.2", plan, tmp_path, num_samples=samples, num_packs=packs)
    at_n = -(-2 * packs // plan.global_batch_packs(N))  # run_check writes the global batch at packing factor N
    assert out["override_train"]["train_iters"] == at_n and "cfg.train.train_iters" in out["set"]
    assert "train_iters" not in python_snippet(
        plan.changed({"training": {"epochs": None}}), "0.6.2", N, num_samples=samples, num_packs=packs
    )


def test_exports_point_at_a_prepared_folder(tmp_path):
    """A plan whose data is a folder `advisor prepare` wrote: the snippet, the overrides and the paths name its files
    (a file or a shard glob per split, never the folder: Megatron-Bridge would read the validation file too)."""
    from advisor.advice.exports import packed_paths, prepare_command
    from advisor.data.prepared import find_prepared, metadata_file, split_file
    from advisor.plan import plan_from_dict

    for name in (
        split_file("training", 1024, shard=0),
        split_file("training", 1024, shard=1),
        split_file("validation", 1024),
    ):
        (tmp_path / name).write_bytes(b"x")
    entry = {
        "max_samples_per_bin": 4,
        "dataset_max_seqlen": 900,
        "packing_factor": 2.0,
        "packing_efficiency": 95.5,
        "pack_size": 1024,
        "min_packed_seqlen": 800,
    }
    (tmp_path / metadata_file(1024)).write_text(json.dumps([entry, entry]))
    plan = plan_from_dict(
        {"model": "llama3.1-8b", "training": {"seq_length": 1024}, "data": {"lengths": str(tmp_path), "format": "chat"}}
    )
    found = find_prepared(str(tmp_path), 1024)
    assert found.train == str(tmp_path.resolve() / "training_1024_*.idx.parquet")
    assert found.validation == str(tmp_path.resolve() / "validation_1024.idx.parquet")
    snippet = python_snippet(plan, packing_factor=2.0)
    for key, value in (
        ("packed_train_data_path", found.train),
        ("packed_val_data_path", found.validation),
        ("packed_metadata_path", found.metadata),
    ):
        assert f".offline_packing_specs.{key} = {value!r}" in snippet
        assert f"dataset.offline_packing_specs.{key}={value}" in overrides(plan, packing_factor=2.0)
    assert "prepare" not in packed_paths(plan, packing_factor=2.0).split("\n")[-2]
    assert find_prepared(str(tmp_path), 2048) is None  # another pack size: nothing prepared for it
    # round 4: a metadata file Megatron-Bridge cannot use was exported as valid
    for garbage, message in (
        (b"x", r"1024_metadata\.jsonl: is not JSON"),
        (
            json.dumps([{**entry, "pack_size": 2048}]).encode(),
            r"entry 1: pack_size is 2,048, but the file is named for 1,024",
        ),
        (
            json.dumps([{**entry, "max_samples_per_bin": "4"}]).encode(),
            r"entry 1: max_samples_per_bin: input should be a valid integer",
        ),
    ):
        (tmp_path / metadata_file(1024)).write_bytes(garbage)
        with pytest.raises(InputError, match=message):
            python_snippet(plan, packing_factor=2.0)
    other = plan.changed({"training": {"seq_length": 2048}})
    assert "packed_train_data_path" not in python_snippet(other, packing_factor=2.0)
    command = prepare_command(other)
    assert (
        "--pack-size 2048" in command
        and "--format chat" in command
        and command in packed_paths(other, packing_factor=2.0)
    )
