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

    @property
    def scale(self) -> float:
        """Steps of the run per simulated step: 1.0 unless the steps are a scale model of a longer run."""
        return self.summary.epoch_steps / self.summary.steps if self.summary.steps else 1.0

    def step(self, k: int) -> StepSchedule:
        """Step ``k`` in full (nested tuples: built on demand)."""
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
            step=k, refused=refused, defect=defect, num_micro_batches=nmb, seqlen_sum=float(self.seqlen_sum[k]),
            seqlen_squared_sum=float(self.seqlen_squared_sum[k]), global_ids=ids, samples=samples,
            local_cp_size=tuple(local_cp), tokens=per_micro_batch(g, self.group_tokens, k),
            work=per_micro_batch(g, self.group_work, k), straggler=float(straggler(self.rank_work[k:k + 1])[0]))
