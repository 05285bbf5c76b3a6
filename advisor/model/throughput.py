"""Step time, tokens per second per GPU and time per epoch, with the data-parallel straggler effect simulated.

The step time comes from the performance model (``advisor.model.perf``: kernels, communication, pipeline, data
parallel, fitted on published runs); an explicit MFU replaces it with FLOPs / (GPUs x peak x MFU), the old model.

Each step, every data-parallel rank runs its share of the global batch's micro batches; the step ends when the
slowest rank does. Packs whose attention work sum(s^2) is far above the mean make ranks wait: the straggler
factor is (sum over steps of the slowest rank) / (sum over steps of the mean rank), simulated on the real
micro batches in a seeded random order (Megatron's samplers shuffle them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from advisor.model.flops import FlopsCoefficients
from advisor.model.micro_batches import MicroBatches
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time
from advisor.packing.permutation import permutation
from advisor.plan import Plan


@dataclass(frozen=True, kw_only=True)
class TimeEstimate:
    step_seconds: float
    tokens_per_second_per_gpu: float
    steps_per_epoch: float
    epoch_seconds: float
    straggler_factor: float
    mfu: float  # Megatron-LM's model FLOPs (real tokens) / (step x GPUs x peak): an output unless given
    ideal_step_seconds: float  # without the straggler wait
    breakdown: dict = field(default_factory=dict)  # seconds per step by what they model; sums to step_seconds
    model: str = "performance model"
    peak_format: str = "bf16"  # whose dense peak the MFU is of: the format the linear layers run in


def straggler_factor(costs: np.ndarray, global_batch: int, dp: int, seed: int = 0, max_steps: int = 2000) -> float:
    """Slowest over mean rank time per step, on micro batches dealt in random order.

    >>> straggler_factor(np.ones(64), global_batch=8, dp=4)
    1.0
    """
    per_rank = global_batch // dp
    if per_rank < 1:
        raise ValueError(f"global batch {global_batch} is smaller than data parallelism {dp}")
    order = permutation(costs.size, seed)  # cached: a GPU or MFU change re-estimates without redrawing 8M swaps
    steps = min(max_steps, costs.size // global_batch)
    if steps == 0:
        return 1.0
    shaped = costs[order[: steps * global_batch]].reshape(steps, dp, per_rank).sum(axis=2)
    return float(shaped.max(axis=1).sum() / shaped.mean(axis=1).sum())


def rank_straggler(rank_tokens: np.ndarray, rank_work: np.ndarray, coef: FlopsCoefficients) -> float:
    """Slowest over mean rank, summed over steps, from each rank's tokens and attention work per step (online
    packing's schedule): the same FLOPs cost as for offline packs, so linear work counts as well as sum(s^2).

    >>> from advisor.model.flops import FlopsCoefficients
    >>> rank_straggler(np.array([[2.0, 2.0]]), np.array([[4.0, 0.0]]), FlopsCoefficients(linear=1.0, core=1.0))
    1.5
    """
    cost = coef(rank_tokens, rank_work)
    busy = cost.sum(axis=1) > 0
    if not busy.any():
        return 1.0
    return float(cost[busy].max(axis=1).sum() / cost[busy].mean(axis=1).sum())


def estimate_time(
    mb: MicroBatches,
    coef: FlopsCoefficients,
    *,
    plan: Plan,
    global_batch: float,
    dp: int,
    gpus: int,
    peak_flops: float,
    mfu: float | None = None,
    seed: int = 0,
    straggler: float | None = None,
    model_flops: float | None = None,
    cp_groups: tuple[tuple[float, int, float, float], ...] = (),
) -> TimeEstimate:
    """Seconds per step for ``global_batch`` micro batches (rows) over ``dp`` ranks, from the performance model
    or, when ``mfu`` is given, computed FLOPs / (GPUs x peak x MFU); both times the straggler factor (simulated
    from the micro batches dealt in random order, unless the schedule gives it: ``straggler``). ``global_batch``
    may be a mean (online packing's micro batches per step vary). ``cp_groups``: dynamic CP's runtime group sizes
    (``StepWork.cp_groups``), whose rings replace the layout's CP exchange."""
    costs = coef(mb.computed_tokens, mb.attention_computed)
    factor = straggler if straggler is not None else straggler_factor(costs, int(global_batch), dp, seed)
    if model_flops is None:
        model_flops = global_batch * coef(float(mb.real_tokens.mean()), float(mb.attention_thd.mean()))
    if mfu is not None:
        ideal = global_batch * float(costs.mean()) / (gpus * peak_flops * mfu)
        step = ideal * factor
        breakdown = {"compute": ideal, "straggler": step - ideal}
        label, mfu_out = f"fixed MFU {mfu:g}", mfu
    else:
        work = StepWork(
            tokens=float(mb.computed_tokens.mean()),
            seqlen_squared_sum=float(mb.attention_computed.mean()),
            micro_batches=global_batch / dp,
            straggler=factor,
            cp_groups=cp_groups,
        )
        timed = step_time(plan, work, EFFICIENCY)
        step, breakdown, label = timed.step_seconds, timed.breakdown, "performance model"
        ideal = step - breakdown["straggler"]
        mfu_out = model_flops / (step * gpus * peak_flops) if step > 0 else 0.0
    steps = mb.total_micro_batches / global_batch
    real_per_step = global_batch * float(mb.real_tokens.mean())
    rate = real_per_step / step / gpus if step > 0 else 0.0  # no work at all (every runtime length 0): no rate
    return TimeEstimate(
        step_seconds=step,
        tokens_per_second_per_gpu=rate,
        steps_per_epoch=steps,
        epoch_seconds=steps * step,
        straggler_factor=factor,
        mfu=mfu_out,
        ideal_step_seconds=ideal,
        breakdown=breakdown,
        model=label,
    )


def loader_bound(
    time: TimeEstimate, *, samples_per_rank: float, seconds_per_sample: float, workers: int
) -> TimeEstimate:
    """The step when samples are tokenized on the fly: each DP rank's loader workers prepare the next step's samples
    while the GPUs run this one (PyTorch's DataLoader prefetches), so a step takes the longer of the two; the GPUs'
    wait is the ``dataloader`` term of the breakdown. Rates and the epoch follow the longer step; the MFU with it.

    >>> t = TimeEstimate(step_seconds=2.0, tokens_per_second_per_gpu=100.0, steps_per_epoch=10, epoch_seconds=20.0,
    ...                  straggler_factor=1.0, mfu=0.4, ideal_step_seconds=2.0, breakdown={"gemm": 2.0})
    >>> slow = loader_bound(t, samples_per_rank=16, seconds_per_sample=0.5, workers=2)
    >>> slow.step_seconds, slow.breakdown["dataloader"], slow.tokens_per_second_per_gpu, slow.mfu
    (4.0, 2.0, 50.0, 0.2)
    >>> loader_bound(t, samples_per_rank=16, seconds_per_sample=0.1, workers=2) == t
    True
    """
    loader = samples_per_rank * seconds_per_sample / workers
    if loader <= time.step_seconds or time.step_seconds <= 0:
        return time
    k = time.step_seconds / loader
    return replace(
        time,
        step_seconds=loader,
        tokens_per_second_per_gpu=time.tokens_per_second_per_gpu * k,
        epoch_seconds=time.steps_per_epoch * loader,
        mfu=time.mfu * k,
        breakdown={**time.breakdown, "dataloader": loader - time.step_seconds},
    )
