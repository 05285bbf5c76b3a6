"""Global-batch packing's estimate: the same Megatron-Core schedulers online packing runs (one path, not two), on
Megatron-Bridge's GPT-SFT data set (L-1 shifted tokens, padded to Megatron-Bridge's multiple), and its figures in
``estimate`` (text and JSON) and on the Packing page."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import estimate
from advisor.packing.online.padding import padding_divisor
from advisor.plan import plan_from_dict
from advisor.plan.schema import multiple_of_layout
from advisor.ui import screens
from advisor.ui.blocks import Text
from tests.support.cli import in_process

HIST = LengthHistogram.from_samples(list(np.random.default_rng(0).integers(40, 4000, 600)))


def plan(mode="global-batch", **packing):
    return plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "cp": 2},
            "training": {"seq_length": 4096, "global_batch_samples": 32},
            "packing": {"mode": mode, **packing},
            "versions": {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"},
        }
    )


def test_global_batch_runs_the_online_schedulers_on_megatron_bridges_data_set():
    gb, online = estimate(plan(max_seqlen_per_dp_cp_rank=2048), HIST), estimate(plan("online"), HIST)
    assert gb.online is not None and online.online is not None
    assert gb.online.config.dataset == "gpt_sft" and gb.online.config.scheduler == online.online.config.scheduler
    assert gb.micro_batches.mode == "global-batch" and gb.pad_seq_to_mult == gb.online.padding_divisor == 4
    # GPT-SFT trains on L-1 tokens a sample, Megatron-LM's mock data set on L: one token a sample apart
    steps = gb.online.summary.steps
    assert online.online.summary.real_tokens - gb.online.summary.real_tokens == steps * 32
    assert abs(gb.time.step_seconds / online.time.step_seconds - 1) < 0.05


def test_dynamic_cp_pads_to_two_dp_cp_and_forms_groups_of_every_size():
    e = estimate(plan(scheduler="default_dynamic_cp", max_seqlen_per_dp_cp_rank=2048), HIST)
    assert e.online.padding_divisor == 2 * 4 * 2 == e.pad_seq_to_mult
    assert set(np.unique(e.online.groups.cp)) > {1}  # short sequences on one rank, long ones on a group
    assert any("dynamic CP" in n and "need more than one rank" in n for n in e.notes)


def test_without_a_cap_the_estimate_simulates_megatron_bridges_suggestion():
    e = estimate(plan(), HIST)
    assert e.online.max_seqlen_per_dp_cp_rank == 2048 and "seq_length / CP" in " ".join(e.notes)


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("dcp", [False, True])
def test_the_data_sets_multiple_is_the_plans(sp, dcp):
    for dp, cp, tp in [(1, 1, 1), (4, 2, 2), (2, 4, 8), (8, 1, 4)]:
        assert padding_divisor(
            commit="dev", dataset="gpt_sft", cp=cp, tp=tp, sequence_parallel=sp, dp=dp, dynamic_cp=dcp
        ) == multiple_of_layout(dp=dp, cp=cp, tp=tp, sp=sp, dynamic_cp=dcp)


def test_pretraining_plans_schedule_megatron_lms_variable_length_data():
    p = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "cp": 2, "tp": 2, "sp": True},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_samples": 32},
            "packing": {"mode": "global-batch", "max_seqlen_per_dp_cp_rank": 2048},
        }
    )
    e = estimate(p, HIST)
    assert e.online.config.dataset == "mock_sft" and e.online.padding_divisor == p.pad_seq_to_mult == 8


def test_the_estimate_command_and_the_packing_page_say_the_schedule(tmp_path, capsys):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("length\n" + "\n".join(str(x) for x in np.repeat(HIST.lengths, HIST.counts)) + "\n")
    raw = plan(max_seqlen_per_dp_cp_rank=2048).to_dict()
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({**raw, "data": {"lengths": str(lengths)}}))
    text = in_process(capsys, "estimate", tmp_path / "plan.yaml", "--quiet")
    assert text.returncode == 0, text.stderr
    assert "packing global-batch" in text.stdout
    assert "schedule: global-batch packing (Megatron-Bridge 0.7" in text.stdout
    assert "lost: 0 samples truncated or skipped" in text.stdout
    out = json.loads(in_process(capsys, "estimate", tmp_path / "plan.yaml", "--json", "--quiet").stdout)
    assert out["mode"] == "global-batch" and out["online"]["scheduler"] == "dp_balanced"
    assert out["online"]["data_set"] == "gpt_sft" and out["lost"] == {"samples": 0, "tokens": 0}
    blocks = screens.micro_batches(plan(), estimate(plan(), HIST))
    assert any(isinstance(b, Text) and "global-batch packing (Megatron-Bridge 0.7" in b.text for b in blocks)
