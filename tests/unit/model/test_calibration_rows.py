"""Fine-tuning rows of a published table (task sft or lora, packed) become fine-tuning plans on packed SQuAD, not
pre-training: what ``bench/calibrate.py --csv`` predicts for a kept-aside fine-tuning table."""

from __future__ import annotations

import csv

import pytest

from advisor.model.perf.calibration import EFFICIENCY, LORA_RANK, load_measurements
from advisor.model.perf.step import step_time

HEADER = (
    "model,task,gpu,precision,gpus,tp,pp,cp,ep,vpp,micro_batch_size,global_batch_size,seq_length,packed,"
    "step_seconds,tflops_per_gpu,source"
)


def _rows(tmp_path, lines: list[str]):
    path = tmp_path / "finetune.csv"
    path.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    return {r.name: r for r in load_measurements(path)}, list(csv.DictReader(path.open()))


def test_fine_tuning_rows_are_packed_fine_tuning_plans(tmp_path):
    rows, _ = _rows(
        tmp_path,
        [
            "llama3.1-8b,pretrain,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,no,1.0,0,t",
            "llama3.1-8b,sft,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t",
            "llama3.1-8b,lora,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t",
        ],
    )
    pre, sft, lora = (
        rows["llama3.1-8b H100-80GB bf16 8"],
        rows["llama3.1-8b sft H100-80GB bf16 8"],
        rows["llama3.1-8b lora H100-80GB bf16 8"],
    )
    assert pre.plan.training.task == "pretrain" and pre.plan.packing_mode == "none"
    assert sft.plan.training.task == "llm-sft" and sft.plan.packing_mode == "offline"
    assert sft.plan.pack_size == 4096 and sft.plan.batch_in_packs == 8  # the table counts packs
    assert lora.plan.training.peft == "lora" and lora.plan.training.lora_rank == 8  # llama3_8b_peft_config
    # SQuAD packs nearly full at 4096, each sample a few hundred tokens: little attention work per pack
    assert 0.95 * 4096 < sft.work.tokens <= 4096
    assert sft.work.seqlen_squared_sum < 0.1 * pre.work.seqlen_squared_sum
    assert sft.work.micro_batches == 1
    t_pre, t_sft, t_lora = (step_time(r.plan, r.work, EFFICIENCY).step_seconds for r in (pre, sft, lora))
    assert t_sft < t_pre  # the same tokens without full causal attention over 4096
    # LoRA skips the frozen weights' gradient GEMMs: a third of the linear work, less the adapters'
    assert 0.6 < t_lora / t_sft < 0.8


def test_a_task_the_harness_does_not_know_is_refused(tmp_path):
    with pytest.raises(ValueError, match="task 'rlhf'"):
        _rows(tmp_path, ["llama3.1-8b,rlhf,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t"])


def test_a_row_the_plan_refuses_is_listed_not_dropped(tmp_path):
    """A table's row for a model without a preset: the harness lists it with its line and why, and reads the rest."""
    path = tmp_path / "mixed.csv"
    path.write_text(
        HEADER
        + "\n"
        + "\n".join(
            [
                "nemotronh-56b,pretrain,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,no,1.0,0,t",
                "llama3.1-8b,pretrain,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,no,1.0,0,t",
            ]
        )
        + "\n"
    )
    refused: list = []
    rows = load_measurements(path, refused)
    assert [r.name for r in rows] == ["llama3.1-8b H100-80GB bf16 8"]
    assert [(t, line, what) for t, line, what, _ in refused] == [("mixed.csv", 2, "nemotronh-56b H100-80GB bf16 8")]
    assert "unknown preset 'nemotronh-56b'" in refused[0][3]
    with pytest.raises(Exception, match="unknown preset"):  # without the list, as the shipped tables are read
        load_measurements(path)


def test_moe_rows_run_the_dispatcher_their_release_ran():
    """Megatron-Bridge's performance scripts changed Qwen3 30B-A3B's dispatcher on H100 between releases (v0.2.0
    all-to-all with the overlap, v0.3.0 DeepEP with it, v0.3.1 HybridEP without); a later release's row gets the
    newest settings; the overlap is dropped where the published layout has PP without a virtual pipeline (Megatron-Core
    would refuse it)."""
    from advisor.model.perf.calibration import plan_of_row

    row = {
        "model": "qwen3-30b-a3b",
        "task": "pretrain",
        "system": "H100-80GB",
        "precision": "fp8",
        "gpus": "16",
        "tp": "1",
        "pp": "2",
        "cp": "1",
        "vpp": "12",
        "ep": "8",
        "fsdp": "no",
        "micro_batch_size": "1",
        "global_batch_size": "1024",
        "seq_length": "4096",
    }
    seen = {
        release: plan_of_row({**row, "release": release}, "mb_performance_pretrain.csv").parallel
        for release in ("25.11", "26.02", "26.02.01", "26.08")
    }
    assert [(p.moe_dispatcher, p.moe_a2a_overlap) for p in seen.values()] == [
        ("alltoall", True),
        ("flex_deepep", True),
        ("flex_hybridep", False),
        ("flex_hybridep", False),
    ]
    no_vp = plan_of_row({**row, "release": "25.11", "vpp": ""}, "mb_performance_pretrain.csv").parallel
    assert no_vp.moe_dispatcher == "alltoall" and not no_vp.moe_a2a_overlap


def test_lora_rows_adapt_what_the_performance_scripts_adapt(tmp_path):
    """LoRA rows adapt linear_qkv only, as Megatron-Bridge's and NeMo's performance scripts set it, unless the table
    says its rank and targets."""
    path = tmp_path / "lora.csv"
    path.write_text(
        HEADER + ",lora_rank,lora_targets\n"
        "llama3.1-70b,lora,H100-80GB,bf16,8,1,4,1,1,5,1,32,4096,yes,1.0,0,t,,\n"
        "llama3.1-70b,lora,H100-80GB,bf16,16,1,4,1,1,5,1,32,4096,yes,1.0,0,t,16,linear_qkv linear_fc1\n"
    )
    default, own = load_measurements(path)
    assert default.plan.training.lora_targets == ["linear_qkv"]
    assert default.plan.training.lora_rank == 16  # Megatron-Bridge's llama3_70b_peft_config
    assert own.plan.training.lora_targets == ["linear_qkv", "linear_fc1"] and own.plan.training.lora_rank == 16
    from advisor.model.perf.calibration import plan_of_row

    row = {
        "model": "llama3-8b",
        "task": "lora",
        "system": "B200",
        "precision": "bf16",
        "gpus": "8",
        "tp": "1",
        "pp": "1",
        "cp": "1",
        "vpp": "",
        "ep": "1",
        "fsdp": "no",
        "micro_batch_size": "1",
        "global_batch_size": "32",
        "seq_length": "4096",
    }
    old = plan_of_row({**row, "release": "25.11"}, "mb_performance_pretrain.csv").training  # no targets set yet
    new = plan_of_row({**row, "release": "26.02"}, "mb_performance_pretrain.csv").training
    assert (len(old.lora_targets), new.lora_targets, new.lora_rank) == (4, ["linear_qkv"], 8)
    assert plan_of_row({**row, "model": "qwen3-8b"}, "t.csv").training.lora_rank == LORA_RANK


def test_the_harness_reads_a_dense_fine_tuning_table_and_names_bad_cells(tmp_path):
    """bench/calibrate.py on a table of dense fine-tuning rows only (as a kept-aside SFT or LoRA table is): the fit
    per group prints without a MoE line, and a bad lora_rank or target is one refused row naming its cell."""
    import subprocess
    import sys

    from tests.support import ROOT

    path = tmp_path / "sft.csv"
    path.write_text(
        HEADER + ",lora_rank,lora_targets\n"
        "llama3.1-8b,sft,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t,,\n"
        "llama3.1-8b,lora,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t,abc,\n"
        "llama3.1-8b,lora,H100-80GB,bf16,8,1,1,1,1,,1,8,4096,yes,1.0,0,t,16,linear_q\n"
    )
    proc = subprocess.run(
        [sys.executable, "bench/calibrate.py", "--quick", "--csv", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dense models: 1 rows" in proc.stdout and "MoE models" not in proc.stdout
    assert "refused 2 of 3 rows" in proc.stdout
    assert "lora_rank 'abc' is not a whole number" in proc.stdout and "(got 'linear_q')" in proc.stdout
