"""A training run's global batches under ``--sequence-packing-scheduler``, step by step, for main or dev.

Followed: megatron/core/datasets/data_schedule.py ``wrap_data_iterator`` and the schedulers' ``run`` (sampler,
padding, scheduling, the FLOPs sums); the alternative, the real code, needs torch.distributed and one process a
rank, and runs a 1M-sample epoch orders of magnitude slower (bench/bench_schedule.py).
"""

from __future__ import annotations

import numpy as np

from advisor.data.lengths import check_expandable
from advisor.errors import InputError, excerpt
from advisor.findings import Finding
from advisor.packing.online.config import COMMITS, SOURCE, OnlineConfig
from advisor.packing.online.dp_balanced import dp_balanced
from advisor.packing.online.dynamic_cp import dynamic_cp
from advisor.packing.online.inputs import SampleOrder
from advisor.packing.online.loads import loads, straggler
from advisor.packing.online.padding import padded_lengths, padding_divisor, wanted_tokens
from advisor.packing.online.results import Refusal, RunSchedule, RunSummary
from advisor.packing.online.sampler import sample_indices, steps_in_epoch
from advisor.packing.online.validation import check

# What one simulation may hold, computed from the options before anything is allocated (a 2 GiB process runs the
# largest of each; measured with bench/fuzz_options.py). Why bounds of their own: --help allows a global batch of
# 16M samples, 131,072 ranks and 16M steps, whose products no machine holds.
MAX_SUB_SAMPLES = 1 << 23  # steps x global batch: ~10 int64 arrays each (order, lengths, packs, ids)
MAX_RANK_CELLS = 1 << 24  # steps x DP x CP: the per-rank token and work totals (float64, two arrays and copies)
MAX_GROUPS = 1 << 23  # packs (dp_balanced) or CP groups (dynamic CP) over the run, VPP's empty packs included
# dynamic CP: each micro batch scans every sequence left in its step (times the CP sizes tried); a step may need as
# many micro batches as sequences, so steps x GBS^2 / 2 x log2(ranks), ~3e8 a second (2 steps of GBS 32,768 on
# 128 ranks: 7.5e9, 23 s)
MAX_DYNAMIC_WORK = 1 << 32
MAX_ALIGNED_LISTS = 1 << 21  # dynamic CP with VPP aligns micro batches as Python rank lists: steps x MBs x ranks

DP_SOURCE = "megatron/core/datasets/data_schedule.py DpBalancedScheduler.get_groups_and_subsamples"
DCP_SOURCE = "megatron/core/datasets/data_schedule_utils.py DefaultDynamicCPScheduler helpers"


def _lengths(lengths, source: str) -> np.ndarray:
    """A 1-D array of whole, non-negative sample lengths, kept in order."""
    a = np.asarray(lengths)
    if a.ndim != 1 or a.size == 0:
        raise InputError(source, None, f"needs a flat, non-empty list of sample lengths (got shape {a.shape})")
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.floor(a)):
            bad = int(np.flatnonzero(~np.isfinite(a) | (a != np.floor(a)))[0])
            raise InputError(source, f"sample {bad}", f"{excerpt(a[bad])} is not a whole number of tokens")
    elif a.dtype.kind not in "iu":
        raise InputError(source, None, f"lengths must be numbers, not {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= 1 << 31):
        bad = int(np.flatnonzero((a < 0) | (a >= 1 << 31))[0])
        raise InputError(source, f"sample {bad}", f"{excerpt(a[bad])} is not a sample length")
    return a.astype(np.int64)


def _squared_sums(seqlens: np.ndarray) -> np.ndarray:
    """Σ s² per step as ``float(sum(s**2))`` gives it (exact integers, rounded once)."""
    top = int(seqlens.max()) if seqlens.size else 0
    if top * top * seqlens.shape[1] < 1 << 63:
        return (seqlens * seqlens).sum(axis=1).astype(np.float64)
    return np.array([float(sum(int(s) ** 2 for s in row)) for row in seqlens])


class _Samples:
    """The data set's samples as the scheduler reads them: each one's padded length and its tokens of data, looked
    up by position. From a per-sample array (the command line: padded once, 16 bytes a sample) or from a
    ``SampleOrder`` (a histogram's shuffled order: padded once per distinct length, read through its indices, so a
    scale model of 16M samples touches only the samples its steps hold)."""

    order: SampleOrder | None
    dataset: str

    def __init__(self, lengths, cfg: OnlineConfig, divisor: int, source: str):
        self.dataset = cfg.dataset
        if isinstance(lengths, SampleOrder):
            self.order, self.size = lengths, lengths.size
            distinct = _lengths(lengths.lengths, source)
            self.table = padded_lengths(distinct, seq_length=cfg.seq_length, divisor=divisor, dataset=cfg.dataset)
            counts = lengths.counts()
            cut = wanted_tokens(distinct, cfg.dataset) - self.table.real  # as padded_lengths counts the cut
            long = (cut > 0) & (cfg.dataset != "custom")
            self.whole = np.array(
                [
                    int((self.table.real * counts).sum()),
                    int(counts[long].sum()),
                    int((cut[long] * counts[long]).sum()),
                ]
            )
            self.smallest = int(distinct[counts > 0].min())
        else:
            self.order = None
            values = _lengths(lengths, source)
            self.values, self.size = values, int(values.size)
            self.padded = padded_lengths(values, seq_length=cfg.seq_length, divisor=divisor, dataset=cfg.dataset)
            self.whole = np.array(
                [int(self.padded.real.sum()), self.padded.truncated_samples, self.padded.truncated_tokens]
            )
            self.smallest = int(values.min())

    def at(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, padded lengths, real tokens) of the samples at these positions."""
        if self.order is None:
            return self.values[index], self.padded.padded[index], self.padded.real[index]
        codes = self.order.codes[index]
        return self.order.lengths[codes], self.table.padded[codes], self.table.real[codes]

    def first_zero(self) -> int:
        if self.order is None:
            return int(np.argmin(self.values))
        return int(np.flatnonzero(self.order.lengths[self.order.codes] == 0)[0])

    def consumed_totals(self, consumed: int) -> tuple[int, int, int]:
        """(real tokens, truncated samples, tokens cut) over the first ``consumed`` samples the steps read, the
        data wrapping around: whole passes plus a prefix, the prefix counted as all but its tail when that is
        shorter."""
        n = self.size
        passes, rest = divmod(consumed, n)

        def part(lo: int, hi: int) -> np.ndarray:
            lengths, _, real = self.at(np.arange(lo, hi))
            cut = wanted_tokens(lengths, self.dataset) - real
            return np.array([int(real.sum()), int(np.count_nonzero(cut > 0)), int(cut[cut > 0].sum())])

        prefix = part(0, rest) if rest <= n - rest else self.whole - part(rest, n)
        out = passes * self.whole + prefix
        return int(out[0]), int(out[1]), int(out[2])


def _refusal_reason(cfg: OnlineConfig, need: int, spare: int, multiple: int) -> str:
    if cfg.commit == "main":
        return (
            f"DpBalancedScheduler asserts i > 0 ('Not enough samples to move'): the packs need {need} more to "
            f"reach a multiple of {multiple}, but only {spare} sequence(s) can leave packs 1.. (main never "
            "splits pack 0)"
        )
    return (
        f"DpBalancedScheduler asserts i >= 0 ('Not enough samples to move'): the packs need {need} more to "
        f"reach a multiple of {multiple}, but only {spare} sequence(s) can leave a pack"
    )


def schedule(
    lengths,
    cfg: OnlineConfig,
    *,
    steps: int | None = None,
    source: str = "lengths",
    max_samples: int | None = None,
    only_steps: np.ndarray | None = None,
) -> RunSchedule:
    """Simulate ``steps`` global batches (default: one epoch) of ``lengths`` (per sample, in dataset order).

    ``max_samples`` makes a scale model of an epoch that would schedule more samples than that: about
    ``max_samples / global_batch_size`` of its steps, spread evenly over it, each exactly as the real run sees it
    (global batches are scheduled independently, so per-step figures are unbiased; the summary says how many of
    the epoch's steps were simulated). Why: a 16M-sample epoch holds gigabytes of per-sample arrays, which a
    shared dashboard cannot give one visitor. ``only_steps`` (increasing step numbers of the run) schedules just
    those, exactly: the step a page shows, whatever the scale model holds.

    ``lengths`` is a per-sample array, or a ``SampleOrder`` (a histogram's samples as indices into their distinct
    lengths: only the samples the scheduled steps hold are ever looked up).

    >>> cfg = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=8, global_batch_size=4, dp=2, cp=1)
    >>> run = schedule([3, 5, 2, 8, 1, 1, 1, 1], cfg)
    >>> run.num_micro_batches.tolist(), run.seqlen_sum.tolist(), run.step(0).samples
    ([2, 1], [18.0, 4.0], (((0,), (1,)), ((3,), (2,))))
    """
    if isinstance(lengths, SampleOrder) and lengths.size == 0:
        raise InputError(source, None, "needs a flat, non-empty list of sample lengths (got shape (0,))")
    divisor = padding_divisor(
        commit=cfg.commit,
        dataset=cfg.dataset,
        cp=cfg.cp,
        tp=cfg.tp,
        sequence_parallel=cfg.sequence_parallel,
        dp=cfg.dp,
        dynamic_cp=cfg.dynamic_cp,
    )
    samples = _Samples(lengths, cfg, divisor, source)
    if cfg.dataset == "custom" and samples.smallest == 0:  # no dataset pads it; dcp_gpus_needed fails on log2(0)
        raise InputError(
            source,
            f"sample {samples.first_zero()}",
            "a sequence of 0 tokens: a custom data set hands the scheduler lengths of at least 1",
        )
    checked = check(cfg)
    max_seqlen = checked.max_seqlen_per_dp_cp_rank
    n = samples.size
    epoch = steps is None
    if steps is None:
        steps = steps_in_epoch(n, cfg.global_batch_size)
        if steps == 0:
            raise InputError(
                source,
                None,
                f"{n:,} samples are fewer than one global batch of "
                f"{cfg.global_batch_size:,}: give steps to cycle through them",
            )
    elif isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(source, "steps", f"{excerpt(steps)} is not a positive whole number of steps")
    check_expandable(steps * cfg.global_batch_size, source, "schedule")
    epoch_steps, step_ids = steps, None
    keep = steps if max_samples is None else max(1, max_samples // cfg.global_batch_size)
    if epoch:  # an epoch past what one simulation holds (16M samples, say) is a scale model of it, never refused
        keep = min(keep, steps_within_cost(cfg, steps))
    if only_steps is not None:
        step_ids = np.asarray(only_steps, dtype=np.int64)
        if step_ids.size == 0 or np.any(np.diff(step_ids) <= 0) or step_ids[0] < 0 or step_ids[-1] >= steps:
            raise InputError(source, "steps", f"steps to schedule must be increasing within 0..{steps - 1}")
        steps = int(step_ids.size)
    elif keep < steps:
        step_ids = np.unique(np.linspace(0, steps - 1, keep).round().astype(np.int64))
        steps = int(step_ids.size)
    check_cost(cfg, steps)
    index = sample_indices(
        n,
        steps=steps,
        global_batch_size=cfg.global_batch_size,
        micro_batch_size=cfg.micro_batch_size,
        dp=cfg.dp,
        step_ids=step_ids,
    )
    _, seqlens, real = samples.at(index)
    groups, capacity, refusals, defects, found = _scheduled(cfg, seqlens, max_seqlen)
    tokens, work, rank_tokens, rank_work = loads(groups, seqlens)
    nmb = np.diff(groups.mb_offsets)
    step_sums = seqlens.sum(axis=1)
    summary = _summary(
        cfg,
        samples,
        epoch_steps,
        nmb,
        rank_work,
        int(step_sums.sum()),
        len(refusals),
        len(defects),
        None if step_ids is None else index,
    )
    return RunSchedule(
        config=cfg,
        max_seqlen_per_dp_cp_rank=max_seqlen,
        capacity=capacity,
        padding_divisor=divisor,
        findings=checked.findings + found,
        sample_index=index,
        seqlens=seqlens,
        groups=groups,
        group_tokens=tokens,
        group_work=work,
        num_micro_batches=nmb,
        seqlen_sum=step_sums.astype(np.float64),
        seqlen_squared_sum=_squared_sums(seqlens),
        rank_tokens=rank_tokens,
        rank_work=rank_work,
        step_straggler=straggler(rank_work),
        refusals=refusals,
        defects=defects,
        summary=summary,
        real_sum=real.sum(axis=1).astype(np.float64),
        step_ids=np.arange(steps, dtype=np.int64) if step_ids is None else step_ids,
    )


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def run_cost(cfg: OnlineConfig, steps: int) -> dict[str, tuple[int, int, str]]:
    """What a run of ``steps`` steps holds and does, bounded above from the options alone: name -> (cost, limit,
    what to change). Packs per step are at most GBS + 1 (an empty pack 0), rounded up to DP x the VPP group.

    >>> c = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=4096, global_batch_size=64, dp=4, cp=2)
    >>> run_cost(c, 10)["sub-samples"][:2], run_cost(c, 10)["per-rank totals"][:2]
    ((640, 8388608), (80, 16777216))
    """
    gbs, v = cfg.global_batch_size, cfg.vpp_multiple or 1
    fewer = "give fewer --steps"
    cost = {
        "sub-samples": (steps * gbs, MAX_SUB_SAMPLES, f"{fewer} or a smaller --global-batch-size"),
        "per-rank totals": (steps * cfg.ranks, MAX_RANK_CELLS, f"{fewer} or fewer DP x CP ranks"),
    }
    if cfg.dynamic_cp:
        cost["CP groups"] = (steps * (gbs + v), MAX_GROUPS, f"{fewer} or a smaller --global-batch-size")
        sizes = max(1, cfg.ranks.bit_length() - 1)  # the CP sizes a sequence may take: powers of two to ranks
        cost["sequence scans"] = (
            steps * gbs * gbs * sizes // 2,
            MAX_DYNAMIC_WORK,
            f"{fewer} or a smaller --global-batch-size",
        )
        if v > 1:
            cost["VPP rank lists"] = (
                steps * _round_up(gbs, v) * cfg.ranks,
                MAX_ALIGNED_LISTS,
                f"{fewer}, a smaller --vpp-group or fewer DP x CP ranks",
            )
    else:
        cost["packs"] = (
            steps * _round_up(gbs + 1, cfg.dp * v),
            MAX_GROUPS,
            f"{fewer}, a smaller --vpp-group or a smaller DP",
        )
    return cost


def steps_within_cost(cfg: OnlineConfig, steps: int) -> int:
    """The most steps (at least 1) of this layout within every bound of run_cost (each cost grows with the steps).

    >>> c = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=4096, global_batch_size=64, dp=4, cp=2)
    >>> steps_within_cost(c, 10), steps_within_cost(c, 10**7)
    (10, 123361)
    """
    fit = steps
    for cost, limit, _ in run_cost(cfg, steps).values():
        if cost > limit:
            fit = min(fit, limit * steps // cost)
    return max(1, fit)


def check_cost(cfg: OnlineConfig, steps: int) -> None:
    """Refuse, before any allocation, a run beyond one of run_cost's bounds: one message with the numbers."""
    for name, (cost, limit, fix) in run_cost(cfg, steps).items():
        if cost > limit:
            raise InputError(
                SOURCE,
                None,
                f"{steps:,} steps of this layout need {cost:,} {name}, more than the "
                f"{limit:,} one simulation holds; {fix}",
            )


def _scheduled(cfg: OnlineConfig, seqlens: np.ndarray, max_seqlen: int):
    """(groups, pack capacity, refusals, defects, data-dependent findings) of the configured scheduler."""
    at = f" ({cfg.commit} {COMMITS[cfg.commit]})"
    if cfg.dynamic_cp:
        got = dynamic_cp(
            seqlens,
            dp=cfg.dp,
            cp=cfg.cp,
            max_seqlen_per_dp_cp_rank=max_seqlen,
            min_cp=cfg.min_dynamic_cp,
            vpp_multiple=cfg.vpp_multiple,
        )
        refusals = tuple(Refusal(step=k, reason=r, source=DCP_SOURCE + at) for k, r in enumerate(got.reasons) if r)
        defects = tuple(Refusal(step=k, reason=r, source=DCP_SOURCE + at) for k, r in enumerate(got.defects) if r)
        return got.groups, max_seqlen, refusals, defects, ()
    capacity = max_seqlen * cfg.cp
    balanced = dp_balanced(
        seqlens,
        cap=capacity,
        dp=cfg.dp,
        cp=cfg.cp,
        vpp_multiple=cfg.vpp_multiple,
        commit=cfg.commit,
        max_num_seqs=cfg.max_num_seqs,
    )
    multiple = cfg.dp * (cfg.vpp_multiple or 1)
    refusals = tuple(
        Refusal(
            step=int(k),
            reason=_refusal_reason(cfg, int(balanced.need[k]), int(balanced.spare[k]), multiple),
            source=DP_SOURCE + at,
        )
        for k in np.flatnonzero(balanced.refused)
    )
    return balanced.groups, capacity, refusals, (), _overlong(seqlens, capacity, cfg)


def _summary(
    cfg: OnlineConfig,
    samples: _Samples,
    steps: int,
    nmb: np.ndarray,
    rank_work: np.ndarray,
    total: int,
    refused: int,
    defects: int,
    sampled: np.ndarray | None = None,
) -> RunSummary:
    """The run at a glance; micro-batch counts and stragglers over the steps that run (none: zeros and 1.0).
    ``sampled``: the simulated steps' sample index when they are a scale model of ``steps`` (real tokens then
    over those steps, as the padded total is; truncation still over the whole run)."""
    consumed = steps * cfg.global_batch_size
    real, cut, cut_tokens = samples.consumed_totals(consumed)
    if sampled is not None:
        real = int(samples.at(sampled)[2].sum())
    ran = nmb > 0
    busy = rank_work[ran]
    return RunSummary(
        steps=int(nmb.size),
        epoch_steps=steps,
        refused_steps=refused,
        defect_steps=defects,
        micro_batches_min=int(nmb[ran].min()) if ran.any() else 0,
        micro_batches_mean=float(nmb[ran].mean()) if ran.any() else 0.0,
        micro_batches_max=int(nmb.max()),
        straggler_factor=float(busy.max(axis=1).sum() / busy.mean(axis=1).sum()) if ran.any() else 1.0,
        straggler_worst=float(straggler(busy).max()) if ran.any() else 1.0,
        padding_fraction=(total - real) / total if total else 0.0,
        padded_tokens=total,
        real_tokens=real,
        truncated_samples=cut,
        truncated_tokens=cut_tokens,
        samples=consumed,
        unused_samples=max(0, samples.size - consumed),
    )


def _overlong(seqlens: np.ndarray, capacity: int, cfg: OnlineConfig) -> tuple[Finding, ...]:
    """Sequences longer than a pack: next fit gives each a pack of its own, past the buffer (and leaves pack 0
    empty when one opens a global batch)."""
    over = seqlens > capacity
    if not over.any():
        return ()
    opening = int(np.count_nonzero(over[:, 0]))
    return (
        Finding(
            severity="warning",
            id="packing.overlong",
            message=f"{int(over.sum()):,} sequence(s) of up to {int(seqlens.max()):,} padded tokens exceed the pack "
            f"capacity {capacity:,}" + (f"; {opening} open a global batch, leaving an empty pack 0" if opening else ""),
            reason="DpBalancedScheduler closes the current pack (even an empty one) when a sequence does not fit, so "
            "an overlong sequence runs alone and over the per-rank buffer; padding to the divisor can push "
            "seq_length past max_seqlen_per_dp_cp_rank x CP",
            source=DP_SOURCE + f" ({cfg.commit} {COMMITS[cfg.commit]})",
        ),
    )
