"""Each token's weight in one optimizer step's gradient, as Megatron-Bridge 0.6.2 on Megatron-Core reduces the loss.

Alternatives: run the loss code on every token (exact, and what the tests do through Megatron-Bridge's and
Megatron-Core's own functions, but one tensor per token) or a per-sample rule of thumb (it misses CP and empty
micro batches). Here a step is flat arrays (``Steps``: per sample its loss span and micro batch, per micro batch its
step) and the weights are closed forms over per-micro-batch sums (``np.add.reduceat``), so a whole data set's
sampled steps weigh in milliseconds.

The reduction followed, with the functions followed:

- Megatron-Bridge ``training/losses.py:masked_next_token_loss`` returns the micro batch's loss SUM and its loss-token
  count n (with CP, both of this CP rank's slice: ``gpt_step.py:get_batch``).
- Megatron-Core ``pipeline_parallel/schedules.py:forward_step_calc_loss``: without ``calculate_per_token_loss`` the
  sum is divided by ``clamp(n, 1)`` and by the number of micro batches M; with it, left a sum.
- ``distributed/distributed_data_parallel.py`` (``gradient_scaling_factor`` 1 / (DP x CP), or ReduceOp.AVG with
  ``average_in_collective``: the same) and ``finalize_model_grads.py:finalize_model_grads`` (with per-token loss,
  the gradient scaled by 1 / N, N the loss tokens all-reduced over DP x CP).

So a token's weight is 1 / (K C n) without per-token loss (K = DP x M micro batches of the step, C the CP size, n the
loss tokens of its micro batch on its CP rank; a micro batch with none still counts in K) and 1 / N with it. Only K,
never DP and M apart, enters; ``average_in_collective`` changes nothing. With THD and CP every sequence is cut into
2 C chunks and rank r holds chunks r and 2C - 1 - r (Megatron-Core ``utils.py`` per-document zigzag); a BSHD row is
cut the same way as one sequence.

>>> s = Steps(loss_start=np.zeros(3), loss_end=np.array([6.0, 2.0, 4.0]), seq_length=np.array([6, 2, 4]),
...           micro_batch=np.array([0, 0, 1]), step_of_micro_batch=np.array([0, 0]),
...           micro_batches_per_step=np.array([2]), cp=1)
>>> w = weigh(s, per_token_loss=False)
>>> w.sample.round(4).tolist(), w.token[:, 0].round(4).tolist()
([0.375, 0.125, 0.5], [0.0625, 0.0625, 0.125])
>>> weigh(s, per_token_loss=True).sample.round(4).tolist()
[0.5, 0.1667, 0.3333]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.model.loss_curve import LossCurve


@dataclass(frozen=True, kw_only=True)
class Steps:
    """Optimizer steps as flat arrays. Per sample: the label positions ``[loss_start, loss_end)`` that carry loss
    (fractional where a mean stands for several samples), the length CP splits its sequence by (the sample's padded
    runtime length in THD, the row's length in BSHD) and its micro batch (sorted); per micro batch its step (sorted);
    per step the micro batches its loss is averaged over (DP x M, empty ones included). ``sample_id`` names each
    sample so two groupings of the same samples can be compared."""

    loss_start: np.ndarray
    loss_end: np.ndarray
    seq_length: np.ndarray
    micro_batch: np.ndarray
    step_of_micro_batch: np.ndarray
    micro_batches_per_step: np.ndarray
    cp: int
    sample_id: np.ndarray | None = None

    def __post_init__(self):
        n = self.loss_end.size
        if not (self.loss_start.size == self.seq_length.size == self.micro_batch.size == n):
            raise ValueError("Steps: one loss span, length and micro batch per sample")
        if self.cp < 1 or (
            n and (np.any(np.diff(self.micro_batch) < 0) or self.micro_batch[-1] >= self.step_of_micro_batch.size)
        ):
            raise ValueError("Steps: micro batches sorted and within range, cp >= 1")

    @property
    def num_steps(self) -> int:
        return int(self.micro_batches_per_step.size)

    @property
    def loss_tokens(self) -> np.ndarray:
        """Loss tokens per sample."""
        return np.maximum(self.loss_end - self.loss_start, 0.0)

    @property
    def step_of_sample(self) -> np.ndarray:
        return self.step_of_micro_batch[self.micro_batch]


def cp_spans(steps: Steps) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The loss positions each CP rank holds of each sample, as two intervals per (sample, rank): ``(lo1, hi1, lo2,
    hi2)``, each (samples, C), empty where hi <= lo. Rank r holds chunks r and 2C - 1 - r of 2C equal chunks."""
    c = steps.cp
    start, end = steps.loss_start[:, None], steps.loss_end[:, None]
    chunk = steps.seq_length.astype(np.float64)[:, None] / (2 * c)
    ranks = np.arange(c)[None, :]
    lo1, lo2 = ranks * chunk, (2 * c - 1 - ranks) * chunk
    return (np.maximum(start, lo1), np.minimum(end, lo1 + chunk), np.maximum(start, lo2), np.minimum(end, lo2 + chunk))


def rank_counts(steps: Steps) -> np.ndarray:
    """Loss tokens of each sample on each CP rank, (samples, C)."""
    if steps.cp == 1:
        return steps.loss_tokens[:, None]
    lo1, hi1, lo2, hi2 = cp_spans(steps)
    return np.maximum(hi1 - lo1, 0.0) + np.maximum(hi2 - lo2, 0.0)


def rank_loss_sums(steps: Steps, curve: LossCurve) -> np.ndarray:
    """Sum of the curve's per-token loss over each sample's loss tokens on each CP rank, (samples, C)."""
    if steps.cp == 1:
        return curve.span_sums(steps.loss_start, steps.loss_end)[:, None]
    lo1, hi1, lo2, hi2 = cp_spans(steps)
    shape = lo1.shape
    first = curve.span_sums(lo1.ravel(), np.maximum(hi1, lo1).ravel()).reshape(shape)
    return first + curve.span_sums(lo2.ravel(), np.maximum(hi2, lo2).ravel()).reshape(shape)


def _per_micro_batch(steps: Steps, values: np.ndarray) -> np.ndarray:
    """Sums of per-sample rows over each micro batch, (micro batches, C); a micro batch without samples sums 0."""
    out = np.zeros((steps.step_of_micro_batch.size, values.shape[1]))
    if steps.micro_batch.size:
        starts = np.flatnonzero(np.r_[True, steps.micro_batch[1:] != steps.micro_batch[:-1]])
        out[steps.micro_batch[starts]] = np.add.reduceat(values, starts, axis=0)
    return out


def _per_step(steps: Steps, values: np.ndarray) -> np.ndarray:
    return np.bincount(steps.step_of_sample, weights=values, minlength=steps.num_steps)


@dataclass(frozen=True, kw_only=True)
class Weights:
    """``counts[i, c]`` loss tokens of sample i on CP rank c, each weighing ``token[i, c]`` in its step's gradient;
    ``sample[i]`` the sample's whole weight; ``step_tokens`` N, the loss tokens of each step."""

    counts: np.ndarray
    token: np.ndarray
    sample: np.ndarray
    step_tokens: np.ndarray


def weigh(steps: Steps, per_token_loss: bool) -> Weights:
    """Every loss token's weight in its step's gradient (module docstring: the reduction and its sources)."""
    counts = rank_counts(steps)
    per_mb = _per_micro_batch(steps, counts)  # n of each micro batch on each CP rank
    step_tokens = np.bincount(steps.step_of_micro_batch, weights=per_mb.sum(axis=1), minlength=steps.num_steps)
    if per_token_loss:  # finalize_model_grads: the summed gradient over DP x CP, scaled by 1 / N
        token = np.broadcast_to(
            (1.0 / np.maximum(step_tokens, 1.0))[steps.step_of_sample][:, None], counts.shape
        ).copy()
    else:  # forward_step_calc_loss: / clamp(n, 1) / M; DDP: / (DP x CP)
        k = steps.micro_batches_per_step[steps.step_of_micro_batch].astype(np.float64)
        per_mb_weight = 1.0 / (k[:, None] * steps.cp * np.maximum(per_mb, 1.0))
        token = per_mb_weight[steps.micro_batch]
    token = np.where(counts > 0, token, 0.0)
    return Weights(counts=counts, token=token, sample=(counts * token).sum(axis=1), step_tokens=step_tokens)


# ------------------------------------------------------------------------------------------------ figures
def relative_token_weights(steps: Steps, w: Weights) -> tuple[np.ndarray, np.ndarray]:
    """(weight x N of its step, tokens) per (sample, CP rank) with loss tokens: 1 everywhere under the token-uniform
    objective."""
    n = w.step_tokens[steps.step_of_sample][:, None]
    keep = w.counts > 0
    return (w.token * n)[keep], w.counts[keep]


def spread(steps: Steps, w: Weights) -> tuple[float, float]:
    """(max / min, coefficient of variation over tokens) of the tokens' relative weights."""
    rel, tokens = relative_token_weights(steps, w)
    if rel.size == 0:
        return 1.0, 0.0
    mean = float(np.average(rel, weights=tokens))
    cv = float(np.sqrt(np.average((rel - mean) ** 2, weights=tokens)) / mean) if mean > 0 else 0.0
    return float(rel.max() / rel.min()), cv


def moved_from_uniform(steps: Steps, w: Weights) -> np.ndarray:
    """Per step, the share of the gradient's weight placed otherwise than token-uniform: half the sum over tokens
    of |weight - 1 / N| (the total variation distance)."""
    uniform = (1.0 / np.maximum(w.step_tokens, 1.0))[steps.step_of_sample][:, None]
    return 0.5 * _per_step(steps, (w.counts * np.abs(w.token - uniform)).sum(axis=1))


def uniform_sample_weights(steps: Steps, w: Weights) -> np.ndarray:
    """Each sample's weight under the token-uniform objective (per-token loss): a_i / N."""
    return w.counts.sum(axis=1) / np.maximum(w.step_tokens, 1.0)[steps.step_of_sample]


def step_losses(steps: Steps, w: Weights, curve: LossCurve) -> tuple[np.ndarray, np.ndarray]:
    """Per step, with the curve's per-token loss: the objective the gradient descends (sum of weight x loss) and
    the loss Megatron-Bridge reports (``lm loss``: sum of losses / sum of loss tokens over DP x CP, whatever the
    settings: training/train.py train_step)."""
    sums = rank_loss_sums(steps, curve)
    objective = _per_step(steps, (w.token * sums).sum(axis=1))
    reported = _per_step(steps, sums.sum(axis=1)) / np.maximum(w.step_tokens, 1.0)
    return objective, reported
