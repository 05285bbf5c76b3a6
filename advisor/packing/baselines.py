"""The two ways to train without packing, as baselines: pad every sample to the sequence length, or pad each
random micro batch to its longest sample (Megatron-Bridge's GPTSFTDataset.collate_fn, rounding that length up
to ``pad_seq_length_to_mult``, 16 by default, and capping it at the sequence length)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from advisor.data.lengths import LengthHistogram, check_expandable
from advisor.packing.config import PackingConfig
from advisor.packing.offline import runtime_lengths


@dataclass(frozen=True, kw_only=True)
class Baseline:
    name: str
    micro_batches: int
    token_slots: int  # tokens computed on, padding included
    real_tokens: int
    efficiency: float  # real / slots, %

    @property
    def padding_fraction(self) -> float:
        return 1 - self.real_tokens / self.token_slots if self.token_slots else 0.0


def pad_to_sequence_length(counts: np.ndarray, seq_length: int, micro_batch_size: int = 1) -> Baseline:
    """Every sample padded to ``seq_length`` (``pad_to_max_length=True``).

    >>> pad_to_sequence_length(np.array([0, 1, 1, 0, 2]), 4).efficiency
    68.75
    """
    n = int(counts.sum())
    real = int((np.arange(counts.size) * counts).sum())
    return Baseline(
        name="pad to sequence length",
        micro_batches=-(-n // micro_batch_size),
        token_slots=n * seq_length,
        real_tokens=real,
        efficiency=_percent(real, n * seq_length),
    )


def _percent(real: int, slots: int) -> float:
    return real / slots * 100 if slots else 0.0  # all samples of runtime length 0: nothing to compute on


def pad_to_longest_in_batch(
    counts: np.ndarray, seq_length: int, micro_batch_size: int, seed: int = 1234, multiple: int = 16
) -> Baseline:
    """Random micro batches (seeded), each padded to its longest sample rounded up to ``multiple``.

    >>> pad_to_longest_in_batch(np.array([0, 0, 0, 0, 2]), 16, micro_batch_size=2, multiple=1).efficiency
    100.0
    """
    check_expandable(int(counts.sum()), "data", "batch")
    items = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    np.random.RandomState(seed).shuffle(items)
    n = items.size
    full = n // micro_batch_size * micro_batch_size
    longest = items[:full].reshape(-1, micro_batch_size).max(axis=1) if full else np.zeros(0, np.int64)
    sizes = np.full(longest.size, micro_batch_size)
    if full < n:  # the last, partial micro batch
        longest = np.append(longest, items[full:].max())
        sizes = np.append(sizes, n - full)
    padded = np.minimum(seq_length, -(-longest // multiple) * multiple)
    slots = int((padded * sizes).sum())
    real = int(items.sum())
    return Baseline(
        name=f"pad to longest in micro batch of {micro_batch_size}",
        micro_batches=int(longest.size),
        token_slots=slots,
        real_tokens=real,
        efficiency=_percent(real, slots),
    )


def without_packing(hist: LengthHistogram, cfg: PackingConfig, micro_batch_size: int) -> tuple[Baseline, Baseline]:
    """Both baselines of the data that ``cfg`` would pack: the command line's ``pack`` and the Packing page's sweep.

    Without packing nothing is pre-padded to ``pad_seq_to_mult``: the baselines see the lengths as truncated (or
    skipped) only, at the dataset's max length.

    >>> [round(b.efficiency, 2) for b in without_packing(LengthHistogram.from_samples([5, 9, 33, 17]),
    ...                                                  PackingConfig(pack_size=64, pad_seq_to_mult=4), 2)]
    [23.44, 62.5]
    """
    counts = runtime_lengths(hist, replace(cfg, pad_seq_to_mult=1)).counts
    size = cfg.effective_max_seq_length
    return (
        pad_to_sequence_length(counts, size),
        pad_to_longest_in_batch(counts, size, micro_batch_size, seed=cfg.seed or 0),
    )
