"""The finding ``loss.per_token``: it fires on every plan whose training objective depends on packing, and never on
one whose objective does not, judged by Megatron-Bridge's and Megatron-Core's own loss code
(tests/support/loss_oracle.py) on the plan's own steps; its fix makes the plan packing-invariant without rescaling
anything."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from advisor.analysis import analyze
from advisor.data.lengths import LengthHistogram
from advisor.model.loss_expectation import MOVED_THRESHOLD, plan_steps
from advisor.plan import PlanError, plan_from_dict
from tests.support.loss_oracle import oracle_weights

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def plans_and_data(draw):
    """Random SFT plans (offline, in-batch or no packing; CP 1 or 2; DP 1-4; micro batch 1-2; per-token loss and
    average_in_collective on or off) on random small data whose label counts are whole multiples of 4, so every
    sample's loss span is whole under CP 2's padding multiple; half of them with a loss mask (answer-only loss: the
    last whole multiples of 4 of each sample's labels, a share fixed per data set)."""
    seq = draw(st.sampled_from([128, 256]))
    lengths = draw(st.lists(st.integers(1, seq // 4 + 4), min_size=8, max_size=120))
    share = draw(st.sampled_from([None, 0.25, 0.5, 0.9]))
    loss = None if share is None else [4 * int(j * share) for j in lengths]
    hist = LengthHistogram.from_samples([4 * j + 1 for j in lengths], loss=loss, source="random")
    cp, dp, mbs = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2]))
    mode = draw(st.sampled_from(["auto", "in-batch", "none"]))
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 2 * cp * dp, "tp": 2, "cp": cp, "sp": True},
        "training": {
            "seq_length": seq,
            "micro_batch_size": mbs,
            "global_batch_samples": mbs * dp * draw(st.integers(1, 8)),
            "calculate_per_token_loss": draw(st.booleans()),
            "average_in_collective": draw(st.booleans()),
        },
        "packing": {"mode": mode, "seed": draw(st.integers(0, 100))},
    }
    try:
        return plan_from_dict(raw), hist
    except PlanError:
        assume(False)


def _moved_by_megatron(plan, hist, packing) -> float:
    """Mean over the plan's steps of the share of gradient weight that moves between samples when the same samples
    are trained unpacked, each weight taken from the wheels' loss code."""
    ps = plan_steps(plan, hist, packing)
    if ps.packed is None:
        return 0.0
    packed = oracle_weights(ps.packed, plan.per_token_loss, thd=True).sum(axis=1)
    same = np.zeros_like(packed)
    same[ps.same.sample_id] = oracle_weights(ps.same, plan.per_token_loss, thd=False).sum(axis=1)
    moved = 0.5 * np.bincount(
        ps.packed.step_of_sample, weights=np.abs(packed - same[ps.packed.sample_id]), minlength=ps.packed.num_steps
    )
    return float(moved.mean())


@SETTINGS
@given(plans_and_data())
def test_fires_exactly_when_megatrons_objective_depends_on_packing(case):
    plan, hist = case
    a = analyze(plan, hist)
    moved = _moved_by_megatron(plan, hist, a.packing)
    assume(abs(moved - MOVED_THRESHOLD) > 1e-6)
    fired = [f for f in a.findings if f.id == "loss.per_token"]
    event(f"fires: {bool(fired)}, mode {plan.packing_mode}, masked {hist.loss_tokens is not None}")
    assert bool(fired) == (moved > MOVED_THRESHOLD), (moved, plan.packing_mode, plan.per_token_loss)
    if fired:
        assert plan.packing_mode == "offline" and not plan.per_token_loss
        fixed = analyze(plan.changed(fired[0].fix), hist)
        assert fixed.loss.invariant and not [f for f in fixed.findings if f.id.startswith("loss.")]
        assert _moved_by_megatron(fixed.plan, hist, fixed.packing) < 1e-12
