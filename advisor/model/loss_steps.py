"""A plan's optimizer steps as the loss reduction sees them (``loss_weights.Steps``): which samples share a micro batch,
how many micro batches a step averages over, how CP cuts each sequence. Sampled: a fixed number of steps.

Alternatives: every step of the epoch (16.3M Wikipedia samples are 2M packs: exact, but the figures are means over
steps and settle long before), or the pack and micro-batch order of Megatron-Bridge's sampler (not simulated: a
token's weight without per-token loss depends on its own micro batch only, and with it on its step's total).

- ``packed_steps``: offline packing, one pack per micro batch (micro batch size 1), K = Megatron-Bridge's global
  batch in packs (DP x M) packs a step, drawn at random from the packs (``PackingResult``: CSR ``offsets``/``items``
  of runtime lengths).
- ``same_samples_unpacked``: the same steps' samples without packing, shuffled into micro batches of the plan's
  micro batch size (BSHD rows: CP cuts the row, padded to its longest sample).
- ``drawn_steps``: a run's own steps, samples drawn from the data's length distribution, micro batches of the plan's
  micro batch size (without packing; in-batch packing concatenates such a micro batch into one THD row).

Loss tokens: a sample's real label tokens at positions ``[0, a)`` where the data has no loss mask (every label token);
with one (``LengthHistogram.loss_tokens``: answer-only SFT, assistant turns) the last ``b`` of them, ``[a - b, a)``:
the answer ends the sample. With ``pad_seq_to_mult`` a runtime length stands for several real lengths, so a and b are
their means (``spans_of_runtime``).

>>> from advisor.data.lengths import LengthHistogram
>>> from advisor.packing.config import PackingConfig
>>> spans_of_runtime(LengthHistogram.from_samples([5, 6, 9]), PackingConfig(pack_size=16, pad_seq_to_mult=4))[0][[4, 8]]
array([4. , 6.5])
"""

from __future__ import annotations

import numpy as np

from advisor.data.lengths import LengthHistogram
from advisor.model.loss_weights import Steps
from advisor.packing.config import PackingConfig
from advisor.packing.offline import PackingResult, runtime_per_length

STEPS_SAMPLED = 400  # steps drawn per run: the figures are means over steps (bench/bench_loss.py times them)
# Samples drawn per run at most, so that every batch the schema accepts is bounded work: a global batch of 2^24
# packs once drew 400 steps of it (a 50 GiB allocation). At the defaults (128 packs of ~7 samples, 400 steps) a run
# draws ~360k samples; beyond the budget fewer steps are drawn (at least MIN_STEPS), then smaller steps stand in for
# the plan's (a scale model: each micro batch is weighted as in the plan's step; the step-to-step spread is wider).
MAX_SAMPLES_DRAWN = 1 << 20
MIN_STEPS = 8


def scaled(steps: int, per_step: int, samples_each: float = 1.0, *, budget: int = MAX_SAMPLES_DRAWN) -> tuple[int, int]:
    """(steps, units per step) to draw within ``budget`` samples, a step being ``per_step`` units (packs or samples)
    of ``samples_each`` samples: fewer steps first (down to MIN_STEPS), then fewer units a step.

    >>> scaled(400, 128, 7.0), scaled(400, 1 << 24, 7.0), scaled(400, 2000, 1.0)
    ((400, 128), (8, 18724), (400, 2000))
    """
    per_step = max(1, per_step)
    each = max(1.0, samples_each)
    if steps * per_step * each <= budget:
        return steps, per_step
    steps = max(min(steps, MIN_STEPS), int(budget // (per_step * each)))
    return steps, max(1, min(per_step, int(budget // (steps * each))))


def spans_of_runtime(hist: LengthHistogram, cfg: PackingConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """Per runtime length (the index), means over the kept samples of that length: their real label tokens, and
    their first loss-carrying label position (real tokens less loss tokens; truncation cuts the prompt first, as
    GPTSFTDataset's default ``truncation_field`` does, so the answer's tokens stay while they fit), None when the
    data has no loss mask.

    >>> real, first = spans_of_runtime(LengthHistogram.from_samples([5, 9], loss=[2, 3]), PackingConfig(pack_size=16))
    >>> real[[4, 8]].tolist(), first[[4, 8]].tolist()
    ([4.0, 8.0], [2.0, 5.0])
    """
    runtime, real, keep = runtime_per_length(hist, cfg)
    at, n, real = runtime[keep], hist.counts[keep].astype(np.float64), real[keep]
    size = int(runtime.max(initial=0)) + 1
    count = np.bincount(at, weights=n, minlength=size)

    def mean(values: np.ndarray, empty: np.ndarray) -> np.ndarray:
        return np.divide(np.bincount(at, weights=n * values, minlength=size), count, out=empty, where=count > 0)

    real_mean = mean(real, np.arange(size, dtype=np.float64))
    if hist.loss_tokens is None:
        return real_mean, None
    return real_mean, mean(real - np.minimum(hist.loss_tokens[keep], real), np.zeros(size))


def _ceil_to(x: np.ndarray, m: int) -> np.ndarray:
    return -(-x // m) * m


def _grouped(
    loss_end: np.ndarray,
    seq_length: np.ndarray,
    micro_batch: np.ndarray,
    steps_of_mb: np.ndarray,
    per_step: np.ndarray,
    cp: int,
    sample_id: np.ndarray | None,
    loss_start: np.ndarray | None = None,
) -> Steps:
    start = np.zeros(loss_end.size) if loss_start is None else loss_start.astype(np.float64)
    return Steps(
        loss_start=start,
        loss_end=loss_end.astype(np.float64),
        seq_length=seq_length,
        micro_batch=micro_batch,
        step_of_micro_batch=steps_of_mb,
        micro_batches_per_step=per_step,
        cp=cp,
        sample_id=sample_id,
    )


def _row_lengths(loss_end: np.ndarray, micro_batch: np.ndarray, cp: int) -> np.ndarray:
    """Each sample's BSHD row length: its micro batch's longest sample, padded to the CP multiple 2 CP (what CP
    cuts into 2 CP chunks; ``get_batch_on_this_cp_rank`` per-sequence zigzag)."""
    longest = np.zeros(int(micro_batch.max(initial=-1)) + 1)
    np.maximum.at(longest, micro_batch, np.ceil(loss_end))
    rows = longest[micro_batch].astype(np.int64)
    return _ceil_to(np.maximum(rows, 1), 2 * cp) if cp > 1 else rows


def _first(first: np.ndarray | None, runtime: np.ndarray) -> np.ndarray | None:
    return None if first is None else first[np.minimum(runtime, first.size - 1)]


def packed_steps(
    packing: PackingResult,
    real: np.ndarray,
    packs_per_step: int,
    cp: int,
    steps: int,
    rng: np.random.Generator,
    first: np.ndarray | None = None,
) -> Steps:
    """``steps`` optimizer steps of ``packs_per_step`` packs each, the packs drawn at random without replacement
    (an epoch holding fewer steps gives that many; data with fewer packs than a step repeats them, as a cyclic
    loader would). ``first``: the first loss position per runtime length (``spans_of_runtime``)."""
    total_packs = packing.num_packs
    k = max(1, packs_per_step)
    n_steps = max(1, min(steps, total_packs // k))
    want = n_steps * k
    if want <= total_packs:
        chosen = rng.choice(total_packs, size=want, replace=False)
    else:
        chosen = np.concatenate([rng.permutation(total_packs) for _ in range(-(-want // total_packs))])[:want]
    starts = packing.offsets[chosen]
    lens = packing.offsets[chosen + 1] - starts
    before = np.cumsum(lens) - lens
    pos = np.repeat(starts - before, lens) + np.arange(int(lens.sum()))
    runtime = packing.items[pos].astype(np.int64)
    loss = real[np.minimum(runtime, real.size - 1)]
    micro_batch = np.repeat(np.arange(want), lens)
    return _grouped(
        loss,
        runtime,
        micro_batch,
        np.arange(want) // k,
        np.full(n_steps, k),
        cp,
        np.arange(runtime.size),
        _first(first, runtime),
    )


def same_samples_unpacked(packed: Steps, micro_batch_size: int, rng: np.random.Generator) -> Steps:
    """The packed steps' samples without packing: each step's samples shuffled into micro batches of
    ``micro_batch_size`` (BSHD rows), the step averaging over its own count of them."""
    step = packed.step_of_sample
    order = np.lexsort((rng.random(step.size), step))
    step = step[order]
    per_step_samples = np.bincount(step, minlength=packed.num_steps)
    first = np.cumsum(per_step_samples) - per_step_samples
    rank = np.arange(step.size) - first[step]
    rows = -(-per_step_samples // micro_batch_size)
    row_first = np.cumsum(rows) - rows
    micro_batch = row_first[step] + rank // micro_batch_size
    loss = packed.loss_end[order]
    return _grouped(
        loss,
        _row_lengths(loss, micro_batch, packed.cp),
        micro_batch,
        np.repeat(np.arange(packed.num_steps), rows),
        rows,
        packed.cp,
        packed.sample_id[order] if packed.sample_id is not None else None,
        packed.loss_start[order],
    )


def drawn_steps(
    counts: np.ndarray,
    real: np.ndarray,
    samples_per_step: int,
    micro_batch_size: int,
    cp: int,
    steps: int,
    rng: np.random.Generator,
    *,
    thd_multiple: int | None = None,
    first: np.ndarray | None = None,
) -> Steps:
    """``steps`` steps of ``samples_per_step`` samples drawn from the runtime-length histogram ``counts``, in micro
    batches of ``micro_batch_size``. ``thd_multiple``: in-batch packing, each sample padded to it and cut by CP on
    its own (THD); otherwise BSHD rows."""
    mbs = max(1, micro_batch_size)
    rows = max(1, -(-samples_per_step // mbs))
    n = steps * rows * mbs
    p = counts / counts.sum()
    runtime = rng.choice(counts.size, size=n, p=p).astype(np.int64)
    loss = real[np.minimum(runtime, real.size - 1)]
    micro_batch = np.arange(n) // mbs
    seq = (
        _ceil_to(np.maximum(runtime, 1), max(thd_multiple, 1))
        if thd_multiple is not None
        else _row_lengths(loss, micro_batch, cp)
    )
    return _grouped(
        loss,
        seq,
        micro_batch,
        np.arange(steps * rows) // rows,
        np.full(steps, rows),
        cp,
        np.arange(n),
        _first(first, runtime),
    )


def as_rows(steps: Steps) -> Steps:
    """The same micro batches as BSHD rows (no packing): in-batch packing's micro batches unpacked."""
    return _grouped(
        steps.loss_end,
        _row_lengths(steps.loss_end, steps.micro_batch, steps.cp),
        steps.micro_batch,
        steps.step_of_micro_batch,
        steps.micro_batches_per_step,
        steps.cp,
        steps.sample_id,
        steps.loss_start,
    )
