"""The GPU registry (advisor/plan/gpus.py): one record per GPU read by the plan, the performance model and the
trial; an unknown name is one message (exit 2), never a KeyError."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from advisor.cli import main
from advisor.model.perf.hardware import gpu_of
from advisor.plan import PlanError, plan_from_dict
from advisor.plan.gpus import BY_NAME, GPUS, match_device, unknown_gpu
from advisor.trial.run import gpu_preset
from tests.support import ROOT


@pytest.mark.parametrize("record", GPUS, ids=lambda g: g.name)
def test_each_record_matches_its_own_device_name_and_feeds_the_performance_model(record):
    assert match_device(record.device_example) == record.name == gpu_preset(record.device_example)
    g = gpu_of(plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": record.name}}))
    assert g.peak == record.bf16_tflops * 1e12 and g.sms == record.sms and g.domain == record.nvlink_domain


@pytest.mark.parametrize(
    "device, expected",
    [
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB300", "GB300"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA H200 NVL", "H200-141GB"),
    ],
)
def test_device_names_that_share_digits_match_their_own_record(device, expected):
    """The round's regression: "NVIDIA GB200" matched the B200 row, and B300/GB300 matched nothing."""
    assert match_device(device) == expected


@given(st.sampled_from(list(BY_NAME)), st.sampled_from([str.lower, str.upper, lambda s: s.replace("-", "")]))
def test_a_near_name_is_suggested_never_taken(name, spell):
    typed = spell(name)
    if typed in BY_NAME:
        return
    with pytest.raises(PlanError) as e:
        plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": typed}})
    assert f"did you mean {name!r}" in str(e.value) and "known: A100-40GB" in str(e.value)


def test_a_name_far_from_every_record_lists_the_known_ones():
    assert "did you mean" not in unknown_gpu("RTX-4090") and "GB300" in unknown_gpu("RTX-4090")


@pytest.mark.parametrize("command", ["estimate", "recommend", "export"])
@pytest.mark.parametrize("gpu", ["b200", "H100", "gb200", "RTX-4090"])
def test_an_unknown_gpu_in_a_plan_is_exit_2_with_one_message(tmp_path, capsys, command, gpu):
    plan = yaml.safe_load((ROOT / "sample_data" / "plans" / "llama8b_chat_8k.yaml").read_text())
    plan["hardware"] = {"gpu": gpu}
    plan["data"]["lengths"] = str(ROOT / "sample_data" / "chat_like_hist.csv")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan))
    code = main([command, str(tmp_path / "p.yaml"), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2 and f"hardware.gpu: unknown GPU {gpu!r}" in err and "Traceback" not in err
