"""The layout search keeps what the user fixed: seq_length, precision and the work of a step (±5 % of the samples asked
for) unless freed with ``vary``; the user's own layout is the baseline and never a candidate."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from advisor.advice.search import BATCH_TOLERANCE, _layout, check_vary, search
from advisor.data.ingest import load_lengths
from advisor.plan import plan_from_dict
from tests.conftest import ROOT
from tests.test_plan_properties import SMALL, plans


@pytest.fixture(scope="module")
def chat():
    return load_lengths(str(ROOT / "sample_data" / "chat_like_hist.csv")).scale_model(20_000)


def _plan(**sections):
    return plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16}, **sections})


def _keeps(result, plan, target):
    for c in result.best:
        assert c.plan.training.seq_length == plan.training.seq_length
        assert c.plan.training.precision == plan.training.precision
        assert abs(c.effective_samples_per_step / target - 1) <= BATCH_TOLERANCE, c.summary()
        assert _layout(c.plan) != _layout(plan)
        assert c.summary()["effective_samples_per_step"] == c.effective_samples_per_step


def test_chat_8k_on_16_gpus_keeps_seq_length_and_the_samples_asked_for(chat):
    plan = _plan(training={"seq_length": 8192, "global_batch_size": 128})
    result = search(plan, chat, top=10)
    assert result.best, "TP 4 (DP 4, 20 packs) keeps 128 samples within 5 %"
    _keeps(result, plan, 128)
    for c in result.best:  # each candidate's export writes exactly the packs it was judged with
        n = c.estimate.packing.packing_factor
        assert c.plan.global_batch_packs(n) == c.global_batch_packs and c.global_batch_packs % c.plan.dp == 0


def test_freeing_seq_length_and_batch_lets_the_search_change_them(chat):
    plan = _plan(training={"seq_length": 4096, "global_batch_size": 128}, packing={"pack_size": 4096})
    kept = search(plan, chat, top=50)
    free = search(plan, chat, top=50, vary=("seq_length", "batch"))
    assert all(c.plan.training.seq_length == 4096 for c in kept.best)
    assert any(c.plan.training.seq_length == 8192 for c in free.best)
    assert all(c.plan.pack_size <= 4096 for c in kept.best)


def test_a_plan_counting_packs_keeps_what_its_packs_hold(chat):
    plan = _plan(training={"seq_length": 8192, "global_batch_packs": 32})
    result = search(plan, chat, top=10)
    _keeps(result, plan, result.baseline.effective_samples_per_step)


def test_unknown_freedoms_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown 'layers'"):
        check_vary(["batch", "layers"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_every_candidate_keeps_the_users_constraints(plan):
    result = search(plan, SMALL, top=50)
    base = result.baseline.effective_samples_per_step
    target = plan.training.global_batch_size or base
    if target is not None:
        _keeps(result, plan, target)


def test_chat_data_is_never_recommended_a_pack_that_skips_more_of_it(chat):
    plan = _plan(training={"seq_length": 8192, "global_batch_size": 128}, data={"format": "chat"})
    result = search(plan, chat, top=50)
    skipped = result.baseline.estimate.packing.runtime.tokens_skipped
    assert skipped > 0 and result.best
    for c in result.best:
        assert c.estimate.packing.runtime.tokens_skipped <= skipped
