"""The trial's loss-weighting phase: the step-0 ratio packed / unpacked it measures on the chat-like and SFT-like
samples is within 1 % of the prediction under both loss settings, exactly 1 with per-token loss; and its reduction
is Megatron-Core's (autograd through the wheels' code, tests/support/loss_oracle.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.model.loss_weights import Steps
from advisor.trial.config import TrialConfig
from advisor.trial.loss import TARGET, reduce_step
from advisor.trial.run import check_loss_weighting, setup
from advisor.ui.samples import default_plan, load_sample
from tests.support.loss_oracle import oracle_weights


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=4), min_size=1, max_size=6),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_the_trials_reduction_is_megatron_cores(micro_batches, per_token_loss, seed):
    """reduce_step over each micro batch's (loss sum, tokens) equals sum(weight x loss) with every weight taken from
    masked_next_token_loss and forward_step_calc_loss."""
    flat = [n for mb in micro_batches for n in mb]
    steps = Steps(
        loss_start=np.zeros(len(flat)),
        loss_end=np.array(flat, float),
        seq_length=np.array(flat),
        micro_batch=np.repeat(np.arange(len(micro_batches)), [len(m) for m in micro_batches]),
        step_of_micro_batch=np.zeros(len(micro_batches), dtype=np.int64),
        micro_batches_per_step=np.array([len(micro_batches)]),
        cp=1,
    )
    rng = np.random.default_rng(seed)
    losses = [rng.random(n) * 5 for n in flat]  # per-token losses of each sample
    weights = oracle_weights(steps, per_token_loss)[:, 0] / np.array(flat)  # each token's weight
    expected = sum(w * v.sum() for w, v in zip(weights, losses, strict=True))
    sums, counts, i = [], [], 0
    for mb in micro_batches:
        sums.append(sum(losses[i + j].sum() for j in range(len(mb))))
        counts.append(sum(mb))
        i += len(mb)
    assert reduce_step(sums, counts, per_token_loss) == pytest.approx(expected, rel=1e-6)  # MB reduces in float32


@pytest.mark.slow  # a small model trained a few steps, per sample and setting
@pytest.mark.parametrize("sample", ["chat-like (180k)", "SFT-like (200k)"])
@pytest.mark.parametrize("per_token_loss", [False, True])
def test_measured_step0_ratio_within_one_percent_of_the_prediction(sample, per_token_loss):
    torch.set_num_threads(1)
    plan = default_plan(sample).changed(
        {"training": {"seq_length": 8192, "calculate_per_token_loss": per_token_loss}, "packing": {"pack_size": 8192}}
    )
    cfg = TrialConfig(device="cpu")
    check = check_loss_weighting(plan, setup(plan, load_sample(sample), cfg), cfg)
    rows = {r.per_token_loss: r for r in check.rows}
    assert rows[per_token_loss].plan and not rows[not per_token_loss].plan
    for r in check.rows:
        assert abs(r.objective_predicted / r.objective_measured - 1) < TARGET and r.ok
        assert r.reported_predicted == 1.0 and r.reported_measured == pytest.approx(1.0, abs=1e-6)
    assert rows[True].objective_measured == pytest.approx(1.0, abs=1e-6)  # per-token loss: packing-invariant
    assert abs(rows[False].objective_measured - 1) > 0.01  # without it the objective moves: the check is not idle
    assert check.position_losses[0] > check.position_losses[-1] + 1  # early tokens cost more: the loss has shape
