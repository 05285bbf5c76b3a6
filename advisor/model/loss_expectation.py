"""Will my loss change with packing? The loss weighting a plan's settings give on its data, and the step-0 loss ratio
packed / unpacked to expect.

Alternatives: a rule of thumb ("packing changes the loss": it says neither how much nor whether the plan's settings
already avoid it), or running both (the trial does, on a small model). Here the weights of ``loss_weights`` are
applied to sampled steps of the plan's run (``loss_steps``) and of the same run unpacked, on the same samples and on
independent draws, with a per-token loss curve l(p) (``loss_curve``) standing in for the model.

What it says, and why (sources in ``loss_weights``):

- Megatron-Bridge's reported ``lm loss`` is always token-weighted over the global batch (training/train.py
  ``train_step``: sums and counts all-reduced over DP x CP), so its packed / unpacked ratio on the same samples is 1
  exactly, whatever the settings; on two random step-0 draws it is 1 in expectation, with a spread.
- The objective the gradient descends is not: without ``calculate_per_token_loss`` each micro batch's loss is its
  own token mean, so a pack (many samples) and an unpacked micro batch (one sample at micro batch size 1) weigh the
  same tokens differently. Frameworks that report the mean of per-micro-batch means (Megatron-LM ``evaluate`` with
  ``--sft``) show that objective, and it moves when packing is turned on.
- With ``calculate_per_token_loss`` (and ``average_in_collective`` off, which Megatron-Core requires with it) every
  token weighs 1 / N: packing-invariant. Weights still sum to 1, so no learning-rate rescale is implied; the relative
  weight of long-answer samples grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from advisor.data.lengths import LengthHistogram
from advisor.model.loss_curve import LossCurve
from advisor.model.loss_steps import (
    MAX_SAMPLES_DRAWN,
    STEPS_SAMPLED,
    as_rows,
    drawn_steps,
    packed_steps,
    same_samples_unpacked,
    scaled,
    spans_of_runtime,
)
from advisor.model.loss_weights import (
    Steps,
    Weights,
    moved_from_uniform,
    spread,
    step_losses,
    uniform_sample_weights,
    weigh,
)
from advisor.packing.config import OVERLONG_OF_FORMAT, PackingConfig
from advisor.packing.offline import PackingResult, runtime_lengths
from advisor.plan import Plan

# The share of a step's gradient weight that must move between samples, packed against unpacked on the same samples,
# before the objective is said to depend on packing. Why 1 %: the objective moves by at most this share times the
# spread of per-token losses (|J_p - J_u| <= TV x (max l - min l), the weights of both summing to 1), so a few nats of
# spread make it a few hundredths of a nat at most; it is also the trial's agreement target, the least the advisor
# claims to measure. Offline packing without per-token loss moves 10-40 % on the bundled samples.
MOVED_THRESHOLD = 0.01
SEED = 0


def _per_step(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b step by step, NaN where a step has no loss (0 / 0): ``Ratio.of`` leaves those steps out (a mean over
    them was NaN, which no JSON reader takes)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _signed(x: float) -> str:
    """A share with its sign, a rounding's -0.0 % shown as +0.0 %."""
    return f"{0.0 if abs(x) < 5e-4 else x:+.1%}"


LOSS_TOKENS = "every label token (length - 1): the lengths carry no loss mask, so answer-only loss is not modelled"
MASKED_LOSS_TOKENS = (
    "the data's loss mask ({share:.1%} of label positions carry loss: answer-only SFT, assistant "
    "turns), each sample's loss tokens taken as the end of the sample"
)


def loss_tokens_text(hist: LengthHistogram) -> str:
    """Where the loss tokens come from: the data's loss mask, or every label position.

    >>> loss_tokens_text(LengthHistogram.from_samples([5, 9], loss=[2, 4]))[:40]
    "the data's loss mask (50.0% of label pos"
    """
    share = hist.loss_fraction
    return LOSS_TOKENS if share is None else MASKED_LOSS_TOKENS.format(share=share)


@dataclass(frozen=True, kw_only=True)
class Ratio:
    """A ratio over sampled steps: its mean and the 5th-95th percentile range."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: np.ndarray) -> Ratio:
        """Over the steps where it is defined (a step no loss token reaches divides 0 by 0: left out)."""
        v = values[np.isfinite(values)]
        if v.size == 0:
            return cls(mean=1.0, low=1.0, high=1.0)
        return cls(mean=float(v.mean()), low=float(np.percentile(v, 5)), high=float(np.percentile(v, 95)))

    def as_dict(self) -> dict:
        return {"mean": self.mean, "p5": self.low, "p95": self.high}


@dataclass(frozen=True, kw_only=True)
class RunFigures:
    """One run's weights over its sampled steps, against the token-uniform objective (each token 1 / N)."""

    name: str
    micro_batches_per_step: float  # DP x M: what each micro batch's mean is divided by
    weight_max_over_min: float  # of the tokens' weights within their steps
    weight_cv: float  # coefficient of variation over tokens of weight x N
    moved_from_uniform: float  # mean over steps of the share of weight placed otherwise than token-uniform
    short_shift: float  # weight on samples shorter than the median, minus their token-uniform weight

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True, kw_only=True)
class WeightBins:
    """Shares by sample length (loss tokens): of the data's samples, and of a step's gradient under token-uniform
    weights, the plan's run and the same samples unpacked (means over the sampled steps)."""

    edges: np.ndarray
    samples: np.ndarray
    uniform: np.ndarray
    plan: np.ndarray
    unpacked: np.ndarray


@dataclass(frozen=True, kw_only=True)
class LossWeighting:
    """What the plan's loss settings do to each token's weight, and the step-0 ratios packed / unpacked to expect."""

    mode: str
    per_token_loss: bool
    average_in_collective: bool
    forced: str | None
    packed: RunFigures | None  # the plan's packed run (None without packing)
    unpacked: RunFigures  # the same run without packing
    moved_vs_unpacked: float  # same samples: share of the gradient's weight that moves between samples
    short_shift_vs_unpacked: float  # same samples: weight moved onto samples shorter than the median
    short_below: float  # the median sample's loss tokens
    reported_same: float  # Megatron-Bridge's lm loss, packed / unpacked, same samples (1)
    reported_drawn: Ratio  # the same on independent step-0 draws
    objective_same: Ratio  # the gradient's objective, packed / unpacked, same samples
    objective_drawn: Ratio
    curve: LossCurve
    bins: WeightBins = field(repr=False)
    steps_sampled: int
    notes: tuple[str, ...] = ()
    loss_tokens: str = LOSS_TOKENS  # where each sample's loss tokens come from (``loss_tokens_text``)
    masked: bool = False  # from the data's loss mask
    scale: str | None = None  # the plan's step is beyond the samples drawn: what stands in for it

    @property
    def invariant(self) -> bool:
        """Packing cannot change the objective: per-token loss (Megatron-Core refuses it with average_in_collective)."""
        return self.per_token_loss and not self.average_in_collective

    @property
    def depends_on_packing(self) -> bool:
        """Offline packing without per-token loss, moving more than ``MOVED_THRESHOLD`` of a step's weight between
        samples against the same samples unpacked."""
        return self.mode == "offline" and not self.per_token_loss and self.moved_vs_unpacked > MOVED_THRESHOLD

    def lines(self) -> list[str]:
        """The figures as the CLI and the pages say them."""
        settings = (
            f"calculate_per_token_loss={self.per_token_loss}"
            + (f" ({self.forced})" if self.forced else "")
            + f", average_in_collective={self.average_in_collective}"
        )
        out = [
            f"loss weighting ({settings}): "
            + (
                "packing-invariant, every token weighs 1/N"
                if self.invariant
                else "each micro batch's loss is its own token mean"
            )
        ]
        for run in (self.packed, self.unpacked):
            if run is None:
                continue
            out.append(
                f"  {run.name}: token weights max/min {run.weight_max_over_min:.2f}, CV {run.weight_cv:.2f}; "
                f"{run.moved_from_uniform:.1%} of a step's weight moved from token-uniform, "
                f"{_signed(run.short_shift)} onto samples under {self.short_below:,.0f} loss tokens"
            )
        if self.packed is not None:
            out.append(
                f"  packed against unpacked, same samples: {self.moved_vs_unpacked:.1%} of the weight moves "
                f"({_signed(self.short_shift_vs_unpacked)} onto the short samples)"
            )
        o, d = self.objective_same, self.reported_drawn
        out.append(
            f"  step 0, packed / unpacked: reported lm loss {self.reported_same:.4f} on the same samples "
            f"({d.mean:.3f}, {d.low:.3f}-{d.high:.3f} on random draws); per-micro-batch-mean objective "
            f"{o.mean:.4f} ({o.low:.3f}-{o.high:.3f}) with the {self.curve.describe()}"
        )
        if self.scale:
            out.append(f"  scale model: {self.scale}")
        return out

    def as_dict(self) -> dict:
        b = self.bins
        return {
            "mode": self.mode,
            "calculate_per_token_loss": self.per_token_loss,
            "average_in_collective": self.average_in_collective,
            "forced": self.forced,
            "packing_invariant": self.invariant,
            "depends_on_packing": self.depends_on_packing,
            "moved_threshold": MOVED_THRESHOLD,
            "packed": self.packed.as_dict() if self.packed else None,
            "unpacked": self.unpacked.as_dict(),
            "moved_vs_unpacked": self.moved_vs_unpacked,
            "short_shift_vs_unpacked": self.short_shift_vs_unpacked,
            "short_below_loss_tokens": self.short_below,
            "step0_ratio": {
                "reported_same_samples": self.reported_same,
                "reported_random_draws": self.reported_drawn.as_dict(),
                "objective_same_samples": self.objective_same.as_dict(),
                "objective_random_draws": self.objective_drawn.as_dict(),
            },
            "loss_curve": self.curve.as_dict(),
            "loss_tokens": self.loss_tokens,
            "loss_mask": self.masked,
            "steps_sampled": self.steps_sampled,
            "weight_share_by_length": {
                "edges": b.edges.tolist(),
                "samples": b.samples.tolist(),
                "token_uniform": b.uniform.tolist(),
                "plan": b.plan.tolist(),
                "unpacked": b.unpacked.tolist(),
            },
            "notes": list(self.notes),
            "scale_model": self.scale,
        }


# ------------------------------------------------------------------------------------------------ computing
def _figures(name: str, steps: Steps, w: Weights, short: np.ndarray) -> RunFigures:
    top, cv = spread(steps, w)
    uniform = uniform_sample_weights(steps, w)
    shift = np.bincount(steps.step_of_sample, weights=(w.sample - uniform) * short, minlength=steps.num_steps)
    return RunFigures(
        name=name,
        micro_batches_per_step=float(steps.micro_batches_per_step.mean()),
        weight_max_over_min=top,
        weight_cv=cv,
        moved_from_uniform=float(moved_from_uniform(steps, w).mean()),
        short_shift=float(shift.mean()),
    )


def _by_id(steps: Steps, values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size)
    out[steps.sample_id] = values
    return out


def _bins(edges: np.ndarray, steps: Steps, values: np.ndarray) -> np.ndarray:
    """Mean over steps of the weight falling in each length bin."""
    which = np.clip(np.searchsorted(edges, steps.loss_tokens, side="right") - 1, 0, edges.size - 2)
    return np.bincount(which, weights=values, minlength=edges.size - 1) / max(1, steps.num_steps)


def _median(values: np.ndarray, weights: np.ndarray) -> float:
    """The weighted median (the lower one at an even split).

    >>> _median(np.array([3.0, 1.0, 2.0]), np.array([1, 1, 5]))
    2.0
    """
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)]) if cum.size else 0.0


def _runtime(
    plan: Plan, hist: LengthHistogram, packing: PackingResult | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(runtime-length histogram, mean real label tokens, mean first loss position or None without a loss mask),
    all indexed by the runtime length, of the samples the run trains on."""
    t = plan.training
    if packing is not None:
        counts, cfg = packing.runtime.counts, packing.config
    elif t.task == "pretrain":  # full seq_length rows of concatenated documents, every token a label
        counts = np.zeros(t.seq_length + 1, dtype=np.int64)
        counts[t.seq_length] = 1
        return counts, np.arange(t.seq_length + 1, dtype=np.float64), None
    else:
        cfg = PackingConfig(
            pack_size=t.seq_length,
            pad_seq_to_mult=1,
            seed=plan.packing_seed,
            overlong=OVERLONG_OF_FORMAT[plan.data.format],
        )
        counts = runtime_lengths(hist, cfg).counts
    real = np.arange(counts.size, dtype=np.float64)
    table, first = spans_of_runtime(hist, cfg)
    table = table[: counts.size]
    real[: table.size] = table
    if first is not None:
        first = np.pad(first[: counts.size], (0, max(0, counts.size - first.size)))
    return counts, real, first


@dataclass(frozen=True, kw_only=True)
class PlanSteps:
    """A plan's sampled steps: ``packed`` (the plan's packed run, None without packing), ``same`` (its samples
    without packing; None without packing), ``drawn`` (the unpacked run's own steps, drawn from the data), and the
    data's runtime-length histogram with the real label tokens per runtime length."""

    packed: Steps | None
    same: Steps | None
    drawn: Steps
    counts: np.ndarray
    real: np.ndarray
    first: np.ndarray | None  # first loss position per runtime length (None: every label position has loss)
    notes: tuple[str, ...]
    scale: str | None = None  # the plan's step is beyond MAX_SAMPLES_DRAWN: the smaller steps that stand in

    @property
    def loss(self) -> np.ndarray:
        """Mean loss tokens per runtime length."""
        return self.real if self.first is None else self.real - self.first


def _scale_note(plan_step: str, drawn: str, steps: int) -> str:
    return (
        f"a step of {plan_step} is beyond what the advisor draws ({MAX_SAMPLES_DRAWN:,} samples a run): {steps} "
        f"steps of {drawn} stand in for it (each micro batch weighted as in the plan's step; the spread from step "
        "to step is wider than the plan's)"
    )


def plan_steps(
    plan: Plan,
    hist: LengthHistogram,
    packing: PackingResult | None = None,
    *,
    steps: int = STEPS_SAMPLED,
    seed: int = SEED,
) -> PlanSteps:
    """The sampled steps of the plan's run and of the same run unpacked (``packing``: the plan's offline packing)."""
    mode, t, cp = plan.packing_mode, plan.training, plan.parallel.cp
    if mode == "offline" and packing is None:
        raise ValueError("offline packing: the loss weighting needs the plan's packing of the data")
    rng = np.random.default_rng(seed)
    counts, real, first = _runtime(plan, hist, packing)
    if counts.sum() == 0:
        raise ValueError(f"{hist.source or 'data'}: no samples left to train on, so no loss to weigh")
    notes = [f"loss tokens: {loss_tokens_text(hist)}"]
    scale = None
    packed: Steps | None
    same: Steps | None
    if mode == "offline" and packing is not None:  # (offline without a packing was refused above)
        k = plan.global_batch_packs(packing.packing_factor)
        samples_per_step = plan.requested_samples or round(k * packing.packing_factor)
        steps, k_drawn = scaled(steps, k, packing.packing_factor)
        if k_drawn < k:
            scale = _scale_note(f"{k:,} packs", f"{k_drawn:,}", steps)
            samples_per_step = max(1, round(k_drawn * packing.packing_factor))
        packed = packed_steps(packing, real, k_drawn, cp, steps, rng, first)
        same = same_samples_unpacked(packed, t.micro_batch_size, rng)
        if plan.data.format == "chat":
            notes.append(
                "chat data: the packed collate also masks every position whose input token is EOS "
                "(gpt_sft.py GPTSFTPackedDataset.collate_fn); if your template ends turns with EOS, packed "
                "samples have fewer loss tokens than unpacked (not modelled)"
            )
    else:
        samples_per_step = plan.batch_in_samples
        steps, drawn_per_step = scaled(steps, samples_per_step)
        if drawn_per_step < samples_per_step:
            scale = _scale_note(f"{samples_per_step:,} samples", f"{drawn_per_step:,}", steps)
            samples_per_step = drawn_per_step
    if mode == "offline":
        pass  # packed and same are drawn above
    elif mode in ("in-batch", "online", "global-batch"):
        packed = drawn_steps(
            counts,
            real,
            samples_per_step,
            t.micro_batch_size,
            cp,
            steps,
            rng,
            thd_multiple=plan.pad_seq_to_mult,
            first=first,
        )
        same = as_rows(packed)
        if mode in ("online", "global-batch"):
            notes.append(
                f"{mode} packing: the scheduler's grouping is not simulated here (micro batches of the plan's size "
                "stand in); with the per-token loss its export sets, no grouping changes the weights"
            )
    else:
        packed, same = None, None
    drawn = drawn_steps(counts, real, samples_per_step, t.micro_batch_size, cp, steps, rng, first=first)
    return PlanSteps(
        packed=packed, same=same, drawn=drawn, counts=counts, real=real, first=first, notes=tuple(notes), scale=scale
    )


def loss_weighting(
    plan: Plan,
    hist: LengthHistogram,
    packing: PackingResult | None = None,
    *,
    curve: LossCurve | None = None,
    steps: int = STEPS_SAMPLED,
    seed: int = SEED,
) -> LossWeighting:
    """The loss weighting of the plan's run on its data (``packing``: the plan's offline packing, needed when it
    packs offline), against token-uniform weights and the same run unpacked, with the step-0 ratios."""
    curve = curve or LossCurve()
    mode, ptl = plan.packing_mode, plan.per_token_loss
    ps = plan_steps(plan, hist, packing, steps=steps, seed=seed)
    packed, same, unpacked, counts, loss = ps.packed, ps.same, ps.drawn, ps.counts, ps.loss
    notes = list(ps.notes)
    reference = same if same is not None else unpacked
    present = counts > 0
    short_below = _median(loss[present], counts[present])
    w_ref = weigh(reference, ptl)
    w_drawn = weigh(unpacked, ptl)
    unpacked_fig = _figures("unpacked", reference, w_ref, reference.loss_tokens < short_below)
    j_drawn_u, r_drawn_u = step_losses(unpacked, w_drawn, curve)
    low = max(1.0, float(np.floor(loss[present].min())))  # bins span the loss tokens the data has
    top = max(low + 1, float(np.ceil(loss[present].max())) + 1)
    edges = np.unique(np.geomspace(low, top, 21).round())
    share_samples = np.bincount(
        np.clip(np.searchsorted(edges, loss[present], side="right") - 1, 0, edges.size - 2),
        weights=counts[present],
        minlength=edges.size - 1,
    )
    share_samples = share_samples / max(1.0, share_samples.sum())
    if packed is None or same is None:  # (a packed run always has its samples unpacked)
        j_u, r_u = step_losses(reference, w_ref, curve)
        bins = WeightBins(
            edges=edges,
            samples=share_samples,
            uniform=_bins(edges, reference, uniform_sample_weights(reference, w_ref)),
            plan=_bins(edges, reference, w_ref.sample),
            unpacked=_bins(edges, reference, w_ref.sample),
        )
        return LossWeighting(
            mode=mode,
            per_token_loss=ptl,
            average_in_collective=plan.average_in_collective,
            forced=plan.per_token_loss_forced,
            packed=None,
            unpacked=unpacked_fig,
            moved_vs_unpacked=0.0,
            short_shift_vs_unpacked=0.0,
            short_below=short_below,
            reported_same=1.0,
            reported_drawn=Ratio.of(_per_step(r_u, r_drawn_u[: r_u.size])),
            objective_same=Ratio.of(np.ones(1)),
            objective_drawn=Ratio.of(_per_step(j_u, j_drawn_u[: j_u.size])),
            curve=curve,
            bins=bins,
            steps_sampled=reference.num_steps,
            notes=tuple(notes),
            loss_tokens=loss_tokens_text(hist),
            masked=ps.first is not None,
            scale=ps.scale,
        )
    w_p = weigh(packed, ptl)
    short_p = packed.loss_tokens < short_below
    packed_fig = _figures(f"packed ({mode})", packed, w_p, short_p)
    size = packed.loss_end.size
    wp_id, wu_id = _by_id(packed, w_p.sample, size), _by_id(same, w_ref.sample, size)
    step_id = _by_id(packed, packed.step_of_sample.astype(np.float64), size).astype(np.int64)
    short_id = _by_id(packed, short_p.astype(np.float64), size)
    moved = 0.5 * np.bincount(step_id, weights=np.abs(wp_id - wu_id), minlength=packed.num_steps)
    shift = np.bincount(step_id, weights=(wp_id - wu_id) * short_id, minlength=packed.num_steps)
    j_p, r_p = step_losses(packed, w_p, curve)
    j_same, r_same = step_losses(same, w_ref, curve)
    n = min(j_p.size, j_drawn_u.size)
    bins = WeightBins(
        edges=edges,
        samples=share_samples,
        uniform=_bins(edges, packed, uniform_sample_weights(packed, w_p)),
        plan=_bins(edges, packed, w_p.sample),
        unpacked=_bins(edges, same, w_ref.sample),
    )
    return LossWeighting(
        mode=mode,
        per_token_loss=ptl,
        average_in_collective=plan.average_in_collective,
        forced=plan.per_token_loss_forced,
        packed=packed_fig,
        unpacked=unpacked_fig,
        moved_vs_unpacked=float(moved.mean()),
        short_shift_vs_unpacked=float(shift.mean()),
        short_below=short_below,
        reported_same=Ratio.of(_per_step(r_p, r_same)).mean,
        reported_drawn=Ratio.of(_per_step(r_p[:n], r_drawn_u[:n])),
        objective_same=Ratio.of(_per_step(j_p, j_same)),
        objective_drawn=Ratio.of(_per_step(j_p[:n], j_drawn_u[:n])),
        curve=curve,
        bins=bins,
        steps_sampled=packed.num_steps,
        notes=tuple(notes),
        loss_tokens=loss_tokens_text(hist),
        masked=ps.first is not None,
        scale=ps.scale,
    )
