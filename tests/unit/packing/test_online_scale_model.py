"""The dashboard's scale model of a long online-packing run: a spread of the epoch's steps, each scheduled exactly
as in the full run, and the epoch's figures taken from them (advisor/packing/online/schedule.py max_samples)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.data.ingest import load_lengths
from advisor.model.estimate import estimate
from advisor.packing.online import OnlineConfig, from_plan, schedule
from advisor.plan import plan_from_dict
from tests.support import SAMPLE


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(40, 400),
    gbs=st.sampled_from([4, 8, 16]),
    budget=st.integers(1, 200),
    seed=st.integers(0, 99),
    commit=st.sampled_from(["dev", "main"]),
)
def test_each_simulated_step_is_the_full_runs_step(n, gbs, budget, seed, commit):
    lengths = np.random.default_rng(seed).integers(1, 700, n)
    cfg = OnlineConfig(commit=commit, dataset="custom", seq_length=512, global_batch_size=gbs, dp=2, cp=2)
    full = schedule(lengths, cfg)
    model = schedule(lengths, cfg, max_samples=budget)
    ids = model.step_ids
    assert model.summary.epoch_steps == full.summary.steps
    assert ids.size == model.summary.steps <= max(1, budget // gbs) and np.all(np.diff(ids) > 0)
    assert ids[0] == 0 and (ids.size == 1 or ids[-1] == full.summary.steps - 1)  # the spread reaches both ends
    assert np.array_equal(model.seqlens, full.seqlens[ids])
    assert np.array_equal(model.num_micro_batches, full.num_micro_batches[ids])
    assert np.array_equal(model.rank_work, full.rank_work[ids])
    assert [r.reason for r in model.refusals] == [r.reason for r in full.refusals if r.step in set(ids.tolist())]
    for k in (0, ids.size - 1):
        assert model.step(k).samples == full.step(int(ids[k])).samples
    # truncation is counted over the whole run even when its steps are sampled
    assert model.summary.truncated_samples == full.summary.truncated_samples
    if budget >= full.summary.steps * gbs:
        assert model.scale == 1.0 and np.array_equal(ids, np.arange(full.summary.steps))


@pytest.mark.slow  # an online epoch of the 16.3M-sample Wikipedia sample
def test_wikipedia_epoch_from_a_scale_model_keeps_its_step_time_and_length():
    """16.3M real samples: past what one simulation holds (schedule.py run_cost), so the command line simulates
    about half the epoch's steps and the dashboard 2M samples' worth; step time and epoch length agree within the
    sampling error."""
    hist = load_lengths(SAMPLE / "wikipedia_bert_len512_hist.csv")
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "tp": 2, "sp": True},
            "training": {"seq_length": 512, "global_batch_size": 128},
            "packing": {"mode": "online"},
        }
    )
    before = from_plan._SAMPLE_BUDGET[0]  # a dashboard test in this process may have set the server's budget
    try:
        from_plan.limit_samples(None)
        exact = estimate(plan, hist)  # the command line's
        from_plan.limit_samples(2_000_000)
        scaled = estimate(plan, hist)
    finally:
        from_plan.limit_samples(before)
    assert scaled.online.scale > 7 and 1.0 < exact.online.scale < 2.5
    assert scaled.online.summary.epoch_steps == exact.online.summary.epoch_steps == 16_279_552 // 128
    assert any("scale model" in n for n in scaled.notes)
    assert scaled.time.step_seconds == pytest.approx(exact.time.step_seconds, rel=0.01)
    assert scaled.time.steps_per_epoch == pytest.approx(exact.time.steps_per_epoch, rel=0.01)
    assert scaled.online.summary.padding_fraction == pytest.approx(exact.online.summary.padding_fraction, abs=0.002)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(30, 600),
    seed=st.integers(0, 99),
    gbs=st.sampled_from([4, 8, 16]),
    cp=st.sampled_from([1, 2]),
    setting=st.sampled_from([("dev", "mock_sft"), ("dev", "sft"), ("main", "sft"), ("dev", "custom")]),
    budget=st.one_of(st.none(), st.integers(8, 300)),
)
def test_a_histograms_order_as_indices_schedules_as_the_lengths_themselves(n, seed, gbs, cp, setting, budget):
    """The dashboard schedules a histogram through its cached shuffled order (SampleOrder, indices into its distinct
    lengths); the command line, and every test against Megatron-LM's scheduler, through the lengths in that order."""
    from advisor.data.lengths import LengthHistogram

    rng = np.random.default_rng(seed)
    hist = LengthHistogram.from_samples(rng.integers(1, 1500, n))
    order = from_plan.sample_order(hist, seed)
    lengths = from_plan.dataset_order(hist, seed)
    assert np.array_equal(order.values(), lengths)
    commit, dataset = setting
    cfg = OnlineConfig(commit=commit, dataset=dataset, seq_length=1024, global_batch_size=gbs, dp=2, cp=cp)
    a, b = schedule(lengths, cfg, max_samples=budget), schedule(order, cfg, max_samples=budget)
    assert a.summary == b.summary
    assert np.array_equal(a.seqlens, b.seqlens) and np.array_equal(a.rank_work, b.rank_work)
    assert np.array_equal(a.real_sum, b.real_sum)


def test_any_step_of_the_epoch_is_scheduled_exactly_alone(chat):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 8, "tp": 2},
            "training": {"seq_length": 4096, "global_batch_size": 16},
            "packing": {"mode": "online"},
        }
    )
    full = schedule(from_plan.dataset_order(chat, plan.packing_seed), from_plan.online_config(plan))
    for k in (0, 7, full.summary.steps - 1):
        alone = from_plan.step_of(plan, chat, k)
        whole = full.step(k)
        assert alone.step == whole.step == k
        assert (alone.samples, alone.num_micro_batches, alone.seqlen_sum) == (
            whole.samples,
            whole.num_micro_batches,
            whole.seqlen_sum,
        )
        assert np.array_equal(alone.work, whole.work)


@pytest.mark.parametrize("dataset, cp", [("mock_sft", 2), ("custom", 1)])
def test_the_epoch_intervals_cover_the_whole_epochs_figures(dataset, cp):
    """95 % intervals from random samples of steps: the whole epoch's figure falls inside them about 95 times in
    100 (here at least 88 of 120 draws, for each figure), and an epoch simulated whole has none."""
    from dataclasses import replace

    lengths = np.minimum(np.random.default_rng(5).lognormal(6.0, 1.0, 60_000).astype(int) + 1, 8192)
    cfg = OnlineConfig(commit="dev", dataset=dataset, seq_length=8192, global_batch_size=32, dp=4, cp=cp)
    full = schedule(lengths, cfg)
    truth = {
        "micro_batches_mean": full.summary.micro_batches_mean,
        "straggler_factor": full.summary.straggler_factor,
        "padding_fraction": full.summary.padding_fraction,
    }
    assert all(half == 0 for _, half in full.intervals().values())
    rng = np.random.default_rng(0)
    inside = dict.fromkeys(truth, 0)
    for _ in range(120):
        ids = np.sort(rng.choice(full.summary.steps, 200, replace=False))
        sample = schedule(lengths, cfg, only_steps=ids)
        sample = replace(sample, summary=replace(sample.summary, steps=ids.size, epoch_steps=full.summary.steps))
        for name, (value, half) in sample.intervals().items():
            inside[name] += abs(value - truth[name]) <= half + 1e-12
    assert all(count >= 88 for count in inside.values()), inside
