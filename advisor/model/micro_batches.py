"""What each micro batch holds under a packing mode: real tokens, computed tokens and attention work.

Online packing (Megatron-LM's scheduler) and global-batch packing (Megatron-Bridge 0.7, the same schedulers): a
micro batch is one pack per DP rank, split over its CP group; the entries are per DP x CP rank, scaled to a whole
micro batch (x CP), so means are per micro batch as elsewhere.

Offline packing (LLM SFT): a micro batch is one pack (micro batch size 1). In-batch packing (VLM SFT): a micro
batch of b samples concatenated into one THD row, each sample padded to the CP/SP multiple
(Megatron-Bridge data/packing/in_batch.py). No packing: b samples padded to the longest, rounded up to 16
(GPTSFTDataset.collate_fn), or to the sequence length when lengths must be fixed (PP or EP > 1, CUDA graphs);
pre-training: full ``seq_length`` rows of concatenated documents with a full causal mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.data.lengths import check_expandable
from advisor.packing.offline import PackingResult
from advisor.packing.online.results import RunSchedule


@dataclass(frozen=True, kw_only=True)
class MicroBatches:
    """One entry per micro batch (a sample of them for large data sets, drawn in data order)."""

    mode: str
    real_tokens: np.ndarray  # data tokens
    computed_tokens: np.ndarray  # tokens the GEMMs run on, padding included
    attention_thd: np.ndarray  # sum(s_i^2) over the samples (what variable-length kernels compute)
    attention_computed: np.ndarray  # the attention the run really computes (THD when packed, padded BSHD if not)
    attention_block: np.ndarray  # (sum s_i)^2 per row: one dense causal mask over the packed row
    samples: np.ndarray  # samples per micro batch
    total_micro_batches: int  # in one epoch of the data set

    @property
    def peak_tokens(self) -> int:
        return int(self.computed_tokens.max())


def _ceil_to(x: np.ndarray, m: int) -> np.ndarray:
    return -(-x // m) * m


def offline_micro_batches(result: PackingResult, fixed_length: bool) -> MicroBatches:
    """One micro batch per pack (kept on the packing: a change of GPU or layout re-estimates without rebuilding)."""
    return result.derived(("micro_batches", fixed_length), lambda: _offline_micro_batches(result, fixed_length))


def _offline_micro_batches(result: PackingResult, fixed_length: bool) -> MicroBatches:
    fill, nseq, work = result.per_pack
    size = result.config.pack_size
    real_share = result.runtime.real_tokens / max(1, int(fill.sum()))  # pad_seq_to_mult padding is not data
    computed = np.full(fill.size, size, np.int64) if fixed_length else np.minimum(size, _ceil_to(fill, 16))
    thd = work.astype(np.float64)  # one array for both: packed attention computes exactly the THD work
    return MicroBatches(
        mode="offline",
        real_tokens=fill * real_share,
        computed_tokens=computed,
        attention_thd=thd,
        attention_computed=thd,
        attention_block=(fill.astype(np.float64)) ** 2,
        samples=nseq,
        total_micro_batches=fill.size,
    )


def _random_batches(runtime_counts: np.ndarray, micro_batch_size: int, seed: int) -> np.ndarray:
    """Samples in a seeded random order, cut into rows of ``micro_batch_size`` (the last one dropped if short)."""
    check_expandable(int(runtime_counts.sum()), "data", "batch")
    items = np.repeat(np.arange(runtime_counts.size, dtype=np.int64), runtime_counts)
    np.random.RandomState(seed).shuffle(items)
    full = items.size // micro_batch_size * micro_batch_size
    if full == 0:
        raise ValueError(f"fewer samples ({items.size}) than one micro batch of {micro_batch_size}")
    return items[:full].reshape(-1, micro_batch_size)


def in_batch_micro_batches(
    runtime_counts: np.ndarray, micro_batch_size: int, multiple: int, seed: int, seq_length: int
) -> MicroBatches:
    rows = _random_batches(runtime_counts, micro_batch_size, seed)
    padded = _ceil_to(rows, multiple)
    tokens = padded.sum(axis=1)
    sq = (padded.astype(np.float64) ** 2).sum(axis=1)
    return MicroBatches(
        mode="in-batch",
        real_tokens=rows.sum(axis=1).astype(np.float64),
        computed_tokens=tokens,
        attention_thd=(rows.astype(np.float64) ** 2).sum(axis=1),
        attention_computed=sq,
        attention_block=tokens.astype(np.float64) ** 2,
        samples=np.full(rows.shape[0], micro_batch_size),
        total_micro_batches=rows.shape[0],
    )


def padded_micro_batches(
    runtime_counts: np.ndarray, micro_batch_size: int, seq_length: int, seed: int, fixed_length: bool
) -> MicroBatches:
    rows = _random_batches(runtime_counts, micro_batch_size, seed)
    longest = (
        np.full(rows.shape[0], seq_length) if fixed_length else np.minimum(seq_length, _ceil_to(rows.max(axis=1), 16))
    )
    tokens = longest * micro_batch_size
    return MicroBatches(
        mode="none",
        real_tokens=rows.sum(axis=1).astype(np.float64),
        computed_tokens=tokens,
        attention_thd=(rows.astype(np.float64) ** 2).sum(axis=1),
        attention_computed=micro_batch_size * longest.astype(np.float64) ** 2,
        attention_block=micro_batch_size * longest.astype(np.float64) ** 2,
        samples=np.full(rows.shape[0], micro_batch_size),
        total_micro_batches=rows.shape[0],
    )


def pretrain_micro_batches(total_tokens: int, micro_batch_size: int, seq_length: int) -> MicroBatches:
    rows = max(1, total_tokens // (seq_length * micro_batch_size))
    tokens = np.full(rows, seq_length * micro_batch_size, np.int64)
    square = np.full(rows, micro_batch_size * float(seq_length) ** 2)
    return MicroBatches(
        mode="none",
        real_tokens=tokens.astype(np.float64),
        computed_tokens=tokens,
        attention_thd=square,
        attention_computed=square,
        attention_block=square,
        samples=np.full(rows, micro_batch_size),
        total_micro_batches=rows,
    )


def online_micro_batches(run: RunSchedule, mode: str = "online") -> MicroBatches:
    """One entry per rank of each scheduled CP group, holding that rank's share x CP (a micro batch's worth), for
    either scheduled mode (``mode``: online, or global-batch, whose schedulers are the same).

    Under dynamic CP a group's CP size varies: its ranks each hold tokens / its CP, which x the plan's CP is what a
    static-CP micro batch of the same per-GPU load would hold.
    """
    g, cp = run.groups, run.config.cp
    count = g.rank_count
    scale = cp / g.cp
    tokens = np.repeat(run.group_tokens * scale, count)
    work = np.repeat(run.group_work * scale, count)
    items = np.diff(g.item_offsets).astype(np.float64)
    s = run.summary
    real_share = s.real_tokens / s.padded_tokens if s.padded_tokens else 1.0
    return MicroBatches(
        mode=mode,
        real_tokens=tokens * real_share,
        computed_tokens=np.rint(tokens).astype(np.int64),
        attention_thd=work,
        attention_computed=work,
        attention_block=np.repeat(run.group_tokens.astype(np.float64) ** 2 * scale, count),
        samples=np.repeat(items * cp / count, count),
        # a scale model's steps stand for the whole run's
        total_micro_batches=max(1, int(round(tokens.size / cp * run.scale))),
    )
