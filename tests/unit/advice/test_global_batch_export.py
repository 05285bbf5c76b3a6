"""Global-batch packing's export for Megatron-Bridge 0.7: the switches, the scheduler's model fields and the loss
settings it needs, refused with one message for an older release; every field the snippet and the overrides set is
a field of Megatron-Bridge 7bdc5ef4's config classes (read with ``ast`` from the copy tests/support/mb07.py finds,
and from Megatron-LM dev for the scheduler's fields of ModelParallelConfig)."""

from __future__ import annotations

import re

import pytest

from advisor.advice.exports import megatron_lm_args, overrides, python_snippet
from advisor.plan import plan_from_dict
from tests.support import mb07

V07 = {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"}


def plan(task="llm-sft", **packing):
    return plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "cp": 8},
            "training": {"task": task, "seq_length": 131072, "global_batch_samples": 64},
            "packing": {"mode": "global-batch", "max_seqlen_per_dp_cp_rank": 16384, **packing},
            "versions": V07,
        }
    )


def settings(text: str) -> dict[str, str]:
    return dict(re.findall(r"^cfg\.(\w+\.\w+) = (.+?)(?:  #.*)?$", text, re.M))


def test_the_snippet_writes_what_megatron_bridge_07_validates():
    s = settings(python_snippet(plan(), "0.7.1"))
    assert s["dataset.enable_global_batch_packing"] == "True" and s["dataset.dataloader_type"] == "'single'"
    assert s["model.max_seqlen_per_dp_cp_rank"] == "16384" and s["model.sequence_packing_scheduler"] == "'dp_balanced'"
    assert s["model.dynamic_context_parallel"] == "False" and "model.min_dynamic_context_parallel_size" not in s
    assert s["model.calculate_per_token_loss"] == "True" and s["ddp.average_in_collective"] == "False"
    assert s["train.micro_batch_size"] == "1" and s["train.global_batch_size"] == "64"  # samples
    assert "dataset.fold_alignment_padding" not in s  # left at the default unless the plan folds
    assert "dataset.global_batch_packing_pad_to_multiple_of" not in s  # validate sets it
    dcp = settings(python_snippet(plan(scheduler="default_dynamic_cp", fold_alignment_padding=True), "0.7.1"))
    assert dcp["model.dynamic_context_parallel"] == "True" and dcp["model.min_dynamic_context_parallel_size"] == "1"
    assert dcp["dataset.fold_alignment_padding"] == "True"
    head = python_snippet(plan(), "0.7.1").split("\n\n")[0]
    assert "7bdc5ef4" in head and "PR #6127" in head and "not reachable here" in head
    lines = overrides(plan(scheduler="default_dynamic_cp"), "0.7.1").splitlines()
    assert "dataset.enable_global_batch_packing=true" in lines and "model.dynamic_context_parallel=true" in lines


def test_an_older_release_is_refused_with_the_release_it_needs():
    for export in (python_snippet, overrides):
        with pytest.raises(ValueError, match=r"needs Megatron-Bridge 0\.7\.0 or later; the export targets 0\.6\.2"):
            export(plan(), "0.6.2")


def test_the_megatron_lm_export_runs_the_same_scheduler_with_the_cap():
    args = megatron_lm_args(plan(scheduler="default_dynamic_cp"))
    assert "--sequence-packing-scheduler default_dynamic_cp" in args and "--max-seqlen-per-dp-cp-rank 16384" in args


REASON = mb07.missing_reason()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("task", ["llm-sft", "pretrain"])
@pytest.mark.parametrize("scheduler", ["dp_balanced", "default_dynamic_cp"])
def test_every_field_the_snippet_and_the_overrides_set_is_one_of_megatron_bridge_07s(task, scheduler):
    p = plan(task, scheduler=scheduler, fold_alignment_padding=True)
    if task == "llm-sft":
        dataset = mb07.gpt_sft_fields()
        if dataset is None:
            pytest.skip("the excerpt of 7bdc5ef4 data/builders/gpt_sft.py is not beside the copy")
    else:
        dataset = mb07.config_fields("megatron.bridge.training.config", "GPTDatasetConfig")
    fields = {
        "model": mb07.config_fields("megatron.core.model_parallel_config", "ModelParallelConfig")
        | mb07.config_fields("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        "train": mb07.config_fields("megatron.bridge.training.config", "TrainingConfig"),
        "ddp": mb07.config_fields("megatron.bridge.training.config", "DistributedDataParallelConfig"),
        "dataset": dataset,
    }
    container = mb07.config_fields("megatron.bridge.training.config", "ConfigContainer")
    assert set(fields) <= container
    assert {"enable_global_batch_packing", "fold_alignment_padding", "dataloader_type"} <= dataset  # read, not typed
    written = set(settings(python_snippet(p, "0.7.1")))
    written |= {line.split("=")[0] for line in overrides(p, "0.7.1").splitlines() if line.count(".") == 1}
    unknown = sorted(f for f in written if f.split(".")[0] in fields and f.split(".")[1] not in fields[f.split(".")[0]])
    assert not unknown, unknown
    assert {"model.max_seqlen_per_dp_cp_rank", "model.sequence_packing_scheduler", "dataset.dataloader_type"} <= written
