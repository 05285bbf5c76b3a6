"""What a simulated run returns: per-step arrays for the whole run, a step's full view, a summary.

Arrays keep a 1M-sample epoch in tens of MB; the alternative, Megatron-LM's nested ``sample_id_groups`` lists for
every step, is built only for the step asked for (``RunSchedule.step``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.findings import Finding
from advisor.packing.online.config import OnlineConfig
from advisor.packing.online.groups import Groups
from advisor.packing.online.loads import per_micro_batch, straggler


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """A step the real scheduler cannot run: it fails an assertion (or never returns) there."""

    step: int
    reason: str
    source: str


@dataclass(frozen=True, kw_only=True)
class StepSchedule:
    """One global batch as the scheduler returns it.

    ``samples[m][r]`` are the dataset indices DP×CP rank r runs in micro batch m (``global_ids`` the same by
    global id, as ``sample_id_groups`` holds them); ``local_cp_size[m][r]`` the CP size its sequences are split
    over; ``tokens``/``work`` are per micro batch and rank. ``straggler`` is the slowest rank's work summed over
    its micro batches, over the mean rank's.
    """

    step: int
    refused: str | None
    defect: str | None
    num_micro_batches: int
    seqlen_sum: float
    seqlen_squared_sum: float
    global_ids: tuple[tuple[tuple[int, ...], ...], ...]
    samples: tuple[tuple[tuple[int, ...], ...], ...]
    local_cp_size: tuple[tuple[int, ...], ...]
    tokens: np.ndarray
    work: np.ndarray
    straggler: float


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """The run at a glance (micro-batch counts and straggler over the steps the scheduler runs)."""

    steps: int  # simulated
    epoch_steps: int  # in the run: more than ``steps`` when they are a scale model of it (``schedule(max_samples)``)
    refused_steps: int
    defect_steps: int
    micro_batches_min: int
    micro_batches_mean: float
    micro_batches_max: int
    straggler_factor: float  # Σ over steps of the slowest rank's work / Σ of the mean rank's
    straggler_worst: float  # the worst single step
    padding_fraction: float  # tokens added by padding / tokens the scheduler packs
    padded_tokens: int
    real_tokens: int
    truncated_samples: int
    truncated_tokens: int
    samples: int  # samples consumed (epoch steps x global batch)
    unused_samples: int  # left over at the end of the data (a partial global batch is dropped)


@dataclass(frozen=True, kw_only=True)
class RunSchedule:
    """Every step of a run: ``sample_index``/``seqlens`` are ``(steps, GBS)`` in global-id order."""

    config: OnlineConfig
    max_seqlen_per_dp_cp_rank: int
    capacity: int  # tokens a pack may hold: max x CP (dp_balanced) or max per rank (dynamic CP)
    padding_divisor: int
    findings: tuple[Finding, ...]
    sample_index: np.ndarray
    seqlens: np.ndarray
    groups: Groups
    group_tokens: np.ndarray
    group_work: np.ndarray
    num_micro_batches: np.ndarray  # per step, 0 where refused
    seqlen_sum: np.ndarray  # per step, what wrap_data_iterator returns for the FLOPs count
    seqlen_squared_sum: np.ndarray
    rank_tokens: np.ndarray  # (steps, ranks)
    rank_work: np.ndarray  # (steps, ranks)
    step_straggler: np.ndarray  # (steps,)
    refusals: tuple[Refusal, ...]
    defects: tuple[Refusal, ...]  # steps that run but leave sequences untrained
    summary: RunSummary
    step_ids: np.ndarray  # the run's step number of each simulated step (0, 1, 2... unless a scale model)
    real_sum: np.ndarray | None = None  # per step: tokens of data in it (the rest of seqlen_sum is padding)

    def intervals(self, level: float = 0.95) -> dict[str, tuple[float, float]]:
        """The epoch's per-step figures as the simulated steps estimate them, each as (estimate, half-width of its
        ``level`` confidence interval): micro batches per step (a mean), the straggler factor and the padding
        fraction (ratios of sums over steps, with the delta method's variance). The steps of a scale model are an
        even spread of a shuffled data set's steps, read as a simple random sample (finite-population corrected);
        every step simulated gives half-widths of 0.

        >>> from advisor.packing.online import OnlineConfig, schedule
        >>> cfg = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=64, global_batch_size=4, dp=2, cp=2)
        >>> run = schedule(np.random.default_rng(0).integers(1, 64, 400), cfg, max_samples=80)
        >>> {k: bool(v[1] > 0) for k, v in run.intervals().items()}
        {'micro_batches_mean': True, 'straggler_factor': True, 'padding_fraction': True}
        """
        ran = self.num_micro_batches > 0
        k, total = int(ran.sum()), self.summary.epoch_steps
        fpc = float(np.sqrt(max(0.0, (total - self.summary.steps) / max(1, total - 1))))
        z = _z(level, k)
        out = {}
        nmb = self.num_micro_batches[ran].astype(np.float64)
        out["micro_batches_mean"] = (
            float(nmb.mean()) if k else 0.0,
            float(z * fpc * nmb.std(ddof=1) / np.sqrt(k)) if k > 1 else 0.0,
        )
        busy = self.rank_work[ran]
        out["straggler_factor"] = _ratio(busy.max(axis=1), busy.mean(axis=1), z, fpc)
        if self.real_sum is not None:
            pad, spread = _ratio(self.seqlen_sum - self.real_sum, self.seqlen_sum, _z(level, self.seqlen_sum.size), fpc)
            out["padding_fraction"] = (pad, spread)
        return out

    @property
    def over_cap_share(self) -> float:
        """The share of the scheduled sequences (padded) longer than ``max_seqlen_per_dp_cp_rank``: those that need
        more than one rank (under dynamic CP, a CP group above 1; with dp_balanced they are split over the CP
        group whatever their length)."""
        return float(np.mean(self.seqlens > self.max_seqlen_per_dp_cp_rank)) if self.seqlens.size else 0.0

    @property
    def small_group_share(self) -> float:
        """The share of the scheduled sequences run on a CP group smaller than the layout's CP (only dynamic CP
        forms one: a sequence short enough for fewer ranks than static CP would split it over)."""
        g = self.groups
        per_group = np.diff(g.item_offsets)
        total = int(per_group.sum())
        return float(per_group[g.cp < self.config.cp].sum() / total) if total else 0.0

    @property
    def scale(self) -> float:
        """Steps of the run per simulated step: 1.0 unless the steps are a scale model of a longer run."""
        return self.summary.epoch_steps / self.summary.steps if self.summary.steps else 1.0

    def step(self, k: int) -> StepSchedule:
        """Simulated step ``k`` in full (nested tuples: built on demand); its ``step`` is the run's step number."""
        if not 0 <= k < self.seqlens.shape[0]:
            raise IndexError(f"step {k} is outside 0..{self.seqlens.shape[0] - 1}")
        g = self.groups
        nmb = int(self.num_micro_batches[k])
        ids = tuple(g.rank_lists(k, m) for m in range(nmb))
        index = self.sample_index[k]
        samples = tuple(tuple(tuple(int(index[i]) for i in rank) for rank in mb) for mb in ids)
        m0 = int(g.mb_offsets[k])
        local_cp = []
        for m in range(nmb):
            row = [0] * g.num_ranks
            for q in range(int(g.group_offsets[m0 + m]), int(g.group_offsets[m0 + m + 1])):
                for r in range(int(g.rank_start[q]), int(g.rank_start[q] + g.rank_count[q])):
                    row[r] = int(g.cp[q])
            local_cp.append(tuple(row))
        refused = next((r.reason for r in self.refusals if r.step == k), None)
        defect = next((r.reason for r in self.defects if r.step == k), None)
        return StepSchedule(
            step=int(self.step_ids[k]),
            refused=refused,
            defect=defect,
            num_micro_batches=nmb,
            seqlen_sum=float(self.seqlen_sum[k]),
            seqlen_squared_sum=float(self.seqlen_squared_sum[k]),
            global_ids=ids,
            samples=samples,
            local_cp_size=tuple(local_cp),
            tokens=per_micro_batch(g, self.group_tokens, k),
            work=per_micro_batch(g, self.group_work, k),
            straggler=float(straggler(self.rank_work[k : k + 1])[0]),
        )


# two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom; past 30 the normal's
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def _z(level: float, k: int) -> float:
    if level != 0.95:
        raise ValueError("intervals are given at the 95 % level")
    return _T95[k - 2] if 2 <= k <= 31 else 1.96


def _ratio(y: np.ndarray, x: np.ndarray, z: float, fpc: float) -> tuple[float, float]:
    """sum(y) / sum(x) over sampled steps and its interval's half-width (the ratio estimator's linearised variance)."""
    k = y.size
    if k == 0 or float(x.sum()) == 0.0:
        return (1.0 if k == 0 else 0.0), 0.0
    r = float(y.sum() / x.sum())
    if k < 2:
        return r, 0.0
    d = y - r * x
    return r, float(z * fpc * d.std(ddof=1) / np.sqrt(k) / x.mean())
