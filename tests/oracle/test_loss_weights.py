"""The loss weighting: each token's gradient weight equals what Megatron-Bridge's and Megatron-Core's own loss code
gives it (autograd through the wheels' functions), on random groupings, CP sizes, DP x M splits and both loss
settings; and what follows on the bundled samples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.analysis import analyze
from advisor.data.lengths import LengthHistogram
from advisor.model.loss_curve import LossCurve
from advisor.model.loss_expectation import plan_steps
from advisor.model.loss_weights import Steps, step_losses, weigh
from advisor.plan import plan_from_dict
from advisor.ui.samples import default_plan, load_sample
from tests.support.loss_oracle import oracle_weights

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def groupings(draw) -> tuple[Steps, int, bool]:
    """Random steps: 1-3 steps of K = DP x M micro batches, 1-3 samples each, loss spans anywhere in a sample
    (answer-only loss at the end included, and samples with none), CP 1-3, THD or BSHD."""
    cp = draw(st.integers(1, 3))
    thd = draw(st.booleans())
    dp = draw(st.integers(1, 2))
    starts, ends, lengths, mbs, mb_steps, per_step = [], [], [], [], [], []
    mb = 0
    for step in range(draw(st.integers(1, 3))):
        k = dp * draw(st.integers(1, 3))
        per_step.append(k)
        for _ in range(k):
            rows = []
            for _ in range(draw(st.integers(1, 3))):
                n = 2 * cp * draw(st.integers(1, 6))
                a = draw(st.integers(0, n))
                b = draw(st.integers(a, n))
                rows.append((a, b, n))
            row = max(n for _, _, n in rows)
            for a, b, n in rows:
                starts.append(a)
                ends.append(b)
                lengths.append(n if thd else row)
                mbs.append(mb)
            mb_steps.append(step)
            mb += 1
    steps = Steps(
        loss_start=np.array(starts, float),
        loss_end=np.array(ends, float),
        seq_length=np.array(lengths),
        micro_batch=np.array(mbs),
        step_of_micro_batch=np.array(mb_steps),
        micro_batches_per_step=np.array(per_step),
        cp=cp,
    )
    return steps, dp, thd


@SETTINGS
@given(groupings(), st.booleans())
def test_every_tokens_weight_is_megatrons_own(case, per_token_loss):
    steps, dp, thd = case
    w = weigh(steps, per_token_loss)
    expected = oracle_weights(steps, per_token_loss, data_parallel=dp, thd=thd)
    np.testing.assert_allclose(w.counts * w.token, expected, rtol=1e-6, atol=1e-9)


@SETTINGS
@given(groupings())
def test_per_token_weights_sum_to_one_and_are_equal(case):
    steps, _, _ = case
    w = weigh(steps, per_token_loss=True)
    sums = np.bincount(steps.step_of_sample, weights=w.sample, minlength=steps.num_steps)
    has_tokens = w.step_tokens > 0
    np.testing.assert_allclose(sums[has_tokens], 1.0)
    nonzero = w.token[w.counts > 0]
    per_step = (1 / np.maximum(w.step_tokens, 1))[steps.step_of_sample][:, None].repeat(steps.cp, 1)[w.counts > 0]
    np.testing.assert_allclose(nonzero, per_step)


def test_cp_weighs_the_ranks_means_not_the_tokens():
    """Answer-only loss at a sample's end: with CP 2 its 2 loss tokens sit on rank 0 (chunks 0 and 3), and without
    per-token loss each rank's mean counts 1/C: the 2 tokens weigh half as much as the other
    sample's 8, and rank 1's empty mean still counts, so the step's weights sum to 3/4. Per-token loss: 2/10, 8/10."""
    s = Steps(
        loss_start=np.array([6.0, 0.0]),
        loss_end=np.array([8.0, 8.0]),
        seq_length=np.array([8, 8]),
        micro_batch=np.array([0, 1]),
        step_of_micro_batch=np.array([0, 0]),
        micro_batches_per_step=np.array([2]),
        cp=2,
    )
    biased, fair = weigh(s, False), weigh(s, True)
    assert biased.sample.tolist() == pytest.approx([0.25, 0.5])
    assert fair.sample.tolist() == pytest.approx([0.2, 0.8])
    np.testing.assert_allclose(biased.counts * biased.token, oracle_weights(s, False, thd=True))


@pytest.fixture(scope="module")
def chat():
    hist = load_sample("chat-like (180k)")
    plan = default_plan("chat-like (180k)").changed({"training": {"seq_length": 8192}, "packing": {"pack_size": 8192}})
    return plan, hist, analyze(plan, hist)


def test_chat_like_at_8k_without_per_token_loss_moves_weight_off_short_samples(chat):
    plan, hist, a = chat
    lw = a.loss
    assert not lw.per_token_loss and lw.depends_on_packing
    assert lw.unpacked.moved_from_uniform > 0.3 > 0.01 > lw.packed.moved_from_uniform  # packs are nearly full
    assert lw.short_shift_vs_unpacked < -0.2 and lw.unpacked.short_shift > 0.2
    assert lw.reported_same == pytest.approx(1.0, abs=1e-12)  # lm loss is token-weighted either way
    assert lw.objective_same.mean < 0.95  # short samples (high early-token loss) weigh less packed


def test_per_token_loss_is_packing_invariant(chat):
    plan, hist, a = chat
    lw = analyze(plan.changed({"training": {"calculate_per_token_loss": True}}), hist).loss
    assert lw.invariant and not lw.depends_on_packing
    assert lw.moved_vs_unpacked == pytest.approx(0, abs=1e-12)
    assert lw.objective_same.mean == pytest.approx(1, abs=1e-12) == lw.objective_same.low
    assert lw.packed.weight_max_over_min == pytest.approx(1) and lw.packed.weight_cv == pytest.approx(0, abs=1e-9)
    assert (lw.bins.plan == pytest.approx(lw.bins.uniform)) and (lw.bins.unpacked == pytest.approx(lw.bins.uniform))


def test_average_in_collective_changes_no_weight(chat):
    plan, hist, a = chat
    other = analyze(plan.changed({"training": {"average_in_collective": True}}), hist).loss
    assert other.as_dict() | {"average_in_collective": False} == a.loss.as_dict()


def test_cp_in_sft_forces_per_token_loss(chat):
    plan, hist, _ = chat
    lw = analyze(plan.changed({"parallel": {"cp": 2}}), hist).loss
    assert lw.per_token_loss and "CP > 1" in lw.forced and not lw.depends_on_packing


def test_objective_of_same_samples_is_the_curves_weighted_sum(chat):
    """The step objective is sum(weight x loss): with a flat curve every weighting gives the same loss."""
    plan, hist, a = chat
    ps = plan_steps(plan, hist, a.packing, steps=20)
    flat = LossCurve.measured([2.0], "flat")
    for steps in (ps.packed, ps.same):
        objective, reported = step_losses(steps, weigh(steps, False), flat)
        np.testing.assert_allclose(objective, 2.0)
        np.testing.assert_allclose(reported, 2.0)


def test_no_packing_has_no_packed_run_and_no_finding():
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "training": {"seq_length": 512, "global_batch_samples": 32},
            "packing": {"mode": "none"},
        }
    )
    a = analyze(plan, LengthHistogram.from_samples(list(range(20, 500, 7)) * 3))
    assert a.loss.packed is None and not a.loss.depends_on_packing
    assert not [f for f in a.findings if f.id == "loss.per_token"]
