"""GPT-SFT in-batch packing (Megatron-Bridge 0.7.0, PR #5493): refused with the reason below 0.7, allowed from it,
padded to the CP/SP multiple and exported with the data loader it needs; and ``Plan.pads_between_sequences``, the
fact fold_alignment_padding changes (no token count, only the padding between a bin's sequences)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from advisor.advice.exports import python_snippet
from advisor.advice.rules import check
from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import estimate
from advisor.plan import plan_from_dict
from tests.support import mb07

HIST = LengthHistogram.from_samples(list(np.random.default_rng(1).integers(40, 4000, 400)))


def plan(version="0.7.1", **over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 16, "cp": 2},
        "training": {"seq_length": 4096, "global_batch_samples": 64, "micro_batch_size": 2},
        "packing": {"mode": "in-batch"},
        "versions": {"megatron_bridge": version},
    }
    for section, fields in over.items():
        raw[section] = {**raw.get(section, {}), **fields}
    return plan_from_dict(raw)


def ids(p) -> dict:
    return {f.id: f for f in check(p)}


def test_below_07_it_is_refused_with_the_release_it_needs():
    found = ids(plan("0.6.2"))
    f = found["packing.in_batch_release"]
    assert f.severity == "error" and f.fix == {"versions": {"megatron_bridge": "0.7.1"}}
    assert "VLM data sets" in f.reason and "packing.mode" not in found
    with pytest.raises(ValueError, match="needs Megatron-Bridge 0.7.0 or later; the export targets 0.6.2"):
        python_snippet(plan("0.6.2"), "0.6.2")
    assert "packing.in_batch_release" not in ids(plan("0.6.2").changed(f.fix))


def test_from_07_it_is_a_packing_mode_of_llm_sft():
    found = ids(plan())
    assert not {"packing.mode", "packing.in_batch_release", "packing.in_batch_seq_length"} & set(found)
    text = python_snippet(plan(), "0.7.1")
    assert "cfg.dataset.enable_in_batch_packing = True" in text and "cfg.dataset.dataloader_type = 'single'" in text
    assert "in_batch_packing_pad_to_multiple_of" not in text  # validate sets it
    assert "packing.in_batch_mbs" in ids(plan(training={"micro_batch_size": 1}))  # MBS > 1, as for VLMs


def test_its_seq_length_must_be_a_multiple_of_the_collate_multiple():
    p = plan(parallel={"gpus": 16, "cp": 2, "tp": 4, "sp": True}, training={"seq_length": 4100})  # lcm(4, 8) = 8
    f = ids(p)["packing.in_batch_seq_length"]
    assert f.fix == {"training": {"seq_length": 4104}}
    assert "packing.in_batch_seq_length" not in ids(p.changed(f.fix))


def test_each_sequence_is_padded_to_the_cp_sp_multiple_and_a_row_holds_the_micro_batch():
    e = estimate(plan(), HIST)
    assert e.pad_seq_to_mult == 4 and e.micro_batches.mode == "in-batch"
    assert e.memory.tokens_per_micro_batch == e.micro_batches.computed_tokens.max() > 4096 // 2
    assert float(e.micro_batches.samples.mean()) == 2


@pytest.mark.parametrize(
    ("over", "pads"),
    [
        ({"packing": {"mode": "offline"}, "training": {"micro_batch_size": 1}, "parallel": {"cp": 1}}, False),
        ({"packing": {"mode": "offline"}, "training": {"micro_batch_size": 1}}, True),  # 2 x CP
        ({}, True),
        ({"packing": {"mode": "none"}}, False),
        ({"packing": {"mode": "online"}, "training": {"micro_batch_size": 1}}, True),
        ({"packing": {"mode": "online", "megatron_lm": "main"}, "training": {"micro_batch_size": 1}}, False),
        ({"packing": {"mode": "global-batch"}, "training": {"micro_batch_size": 1}}, True),
        (
            {"packing": {"mode": "global-batch", "fold_alignment_padding": True}, "training": {"micro_batch_size": 1}},
            False,
        ),
    ],
)
def test_pads_between_sequences(over, pads):
    p = plan(**over)
    assert p.pads_between_sequences is pads
    if p.packing_mode == "global-batch":  # fold changes no token count
        folded = p.changed({"packing": {"fold_alignment_padding": True}})
        a, b = estimate(p, HIST), estimate(folded, HIST)
        assert a.flops.model_per_step == b.flops.model_per_step and a.time.step_seconds == b.time.step_seconds


@pytest.mark.skipif(mb07.missing_reason() is not None, reason=mb07.missing_reason() or "")
def test_the_fields_written_are_gpt_sft_dataset_configs():
    fields = mb07.gpt_sft_fields()
    if fields is None:
        pytest.skip("the excerpt of 7bdc5ef4 data/builders/gpt_sft.py is not beside the copy")
    written = re.findall(r"^cfg\.dataset\.(\w+) = ", python_snippet(plan(), "0.7.1"), re.M)
    assert {"enable_in_batch_packing", "dataloader_type"} <= set(written) <= fields
