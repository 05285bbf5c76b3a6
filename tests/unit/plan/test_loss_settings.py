"""The plan's loss settings: Megatron-Core's names and defaults, what the run really uses (forced on by the CP rule and
online packing), what the exports write, and the loss weighting in ``estimate`` and ``recommend``."""

from __future__ import annotations

import json

import pytest
import yaml

from advisor.advice.exports import megatron_lm_args, python_snippet
from advisor.cli import main
from advisor.plan import plan_from_dict
from tests.support import ROOT, SAMPLE

MLM_ARGUMENTS = ROOT / ".cache" / "megatron-lm-d48bd6be" / "megatron" / "training" / "arguments.py"


def test_defaults_are_megatrons_and_the_cp_rule_forces_per_token_loss():
    plan = plan_from_dict({"model": "llama3.1-8b"})
    assert plan.training.calculate_per_token_loss is False and plan.training.average_in_collective is False
    assert not plan.per_token_loss and plan.per_token_loss_forced is None
    cp = plan.changed({"parallel": {"cp": 2}, "training": {"average_in_collective": True}})
    assert cp.per_token_loss and not cp.average_in_collective  # the export writes MB's required pair
    pretrain = plan.changed(
        {"parallel": {"cp": 2}, "training": {"task": "pretrain", "global_batch_size": 64}, "packing": {"mode": "none"}}
    )
    assert not pretrain.per_token_loss  # Megatron-Bridge asserts it for SFT data sets only
    online = plan.changed({"packing": {"mode": "online"}, "training": {"global_batch_size": 64}})
    assert online.per_token_loss and "online" in online.per_token_loss_forced


def test_the_exports_write_the_plans_settings():
    ptl = plan_from_dict({"model": "llama3.1-8b", "training": {"calculate_per_token_loss": True}})
    assert "cfg.model.calculate_per_token_loss = True" in python_snippet(ptl, packing_factor=2.0)
    assert "--calculate-per-token-loss" in megatron_lm_args(ptl, packing_factor=2.0)
    aic = plan_from_dict({"model": "llama3.1-8b", "training": {"average_in_collective": True}})
    assert "cfg.ddp.average_in_collective = True" in python_snippet(aic, packing_factor=2.0)
    assert "--ddp-average-in-collective" in megatron_lm_args(aic, packing_factor=2.0)
    default = plan_from_dict({"model": "llama3.1-8b"})
    assert "calculate_per_token_loss" not in python_snippet(default, packing_factor=2.0)  # the recipe's default


@pytest.mark.skipif(not MLM_ARGUMENTS.is_file(), reason="Megatron-LM's source is not in .cache")
def test_megatron_lm_knows_both_flags():
    """--ddp-average-in-collective is spelled in arguments.py; --calculate-per-token-loss is built from Megatron-Core's
    TransformerConfig field by its ArgumentGroupFactory (dev d48bd6be)."""
    assert "'--ddp-average-in-collective'" in MLM_ARGUMENTS.read_text()
    config = ROOT / ".cache" / "megatron-lm-d48bd6be" / "megatron" / "core" / "transformer" / "transformer_config.py"
    assert "    calculate_per_token_loss: bool = False" in config.read_text()


@pytest.fixture()
def chat_plan(tmp_path):
    plan = tmp_path / "chat8k.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "model": "llama3.1-8b",
                "parallel": {"gpus": 16, "tp": 2, "sp": True},
                "training": {"seq_length": 8192, "global_batch_samples": 128},
                "data": {"lengths": str(SAMPLE / "chat_like_hist.csv")},
            }
        )
    )
    return plan


def test_estimate_says_the_loss_weighting_and_json_holds_it(chat_plan, capsys):
    assert main(["estimate", str(chat_plan), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "loss weighting (calculate_per_token_loss=False" in text and "step 0, packed / unpacked" in text
    assert main(["estimate", str(chat_plan), "--quiet", "--json"]) == 0
    lw = json.loads(capsys.readouterr().out)["loss_weighting"]
    assert lw["depends_on_packing"] and lw["step0_ratio"]["reported_same_samples"] == pytest.approx(1.0)
    assert lw["step0_ratio"]["objective_same_samples"]["mean"] < 0.95
    assert sum(lw["weight_share_by_length"]["plan"]) == pytest.approx(1.0, abs=1e-6)
