"""Sequence lengths as a histogram: the one form every reader returns and every packer takes.

A histogram (distinct lengths and their counts) keeps 10M samples in a few kB and is all that Megatron-Bridge's
offline packing looks at (it builds one itself in ``create_hist``). Order of samples is not kept; where an
order matters (random micro batches) it is drawn from a seed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from advisor.errors import InputError

# Packing simulates every sample (8-16 bytes each in its arrays): past this a histogram is summarised, not packed.
# 100M samples is six times Wikipedia; a valid histogram may claim up to 2^63 tokens, which no machine can expand.
MAX_EXPANDED_SAMPLES = 100_000_000


def check_expandable(num_samples: int, source: str, what: str) -> None:
    """Refuse to simulate more samples one by one than memory allows, saying what to do instead.

    >>> check_expandable(10, "h.csv", "pack")
    >>> check_expandable(10**12, "h.csv", "pack")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: h.csv: 1,000,000,000,000 samples are too many to pack one by one (at most 100,000,000)...
    """
    if num_samples > MAX_EXPANDED_SAMPLES:
        raise InputError(
            source or "data",
            None,
            f"{num_samples:,} samples are too many to {what} one by one (at most "
            f"{MAX_EXPANDED_SAMPLES:,}); scale the histogram's counts down (the packing factor and "
            "efficiency depend on the shape, not the total)",
        )


COMMON_PACK_SIZES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


# Past this many samples, overviews that pack the data many times (the pack-size sweep: 3 algorithms x 10 sizes; the
# layout search and memory grid: up to 14 packings) run on a scale model of it. Efficiency and n of the bundled
# Wikipedia sample (16.3M samples) agree with the full data's to 0.02 points at 250,000 and at 500,000 samples
# (bench/bench_dashboard.py prints the estimate's difference); the plan's own packing always uses all the data.
SCALE_MODEL_SAMPLES = 250_000


@dataclass(frozen=True, kw_only=True)
class Exclusion:
    """Rows that were read but not used, and why: never dropped silently."""

    reason: str
    count: int
    first_at: str = ""


@dataclass(frozen=True, kw_only=True)
class LengthHistogram:
    """Token counts per sample (the length of ``input_ids`` as tokenized) as distinct lengths and counts.

    >>> h = LengthHistogram.from_samples([3, 5, 3], source="demo")
    >>> h.lengths.tolist(), h.counts.tolist(), h.num_samples, h.total_tokens
    ([3, 5], [2, 1], 3, 11)
    """

    lengths: np.ndarray
    counts: np.ndarray
    source: str = ""
    excluded: tuple[Exclusion, ...] = ()
    notes: tuple[str, ...] = ()
    packs: object | None = field(default=None, compare=False)  # a PackedDatasetAudit when read from packs
    # per-sample lengths in file order, where the file lists samples (not for a length,count table): Megatron-LM's
    # online packing schedules samples in data-set order, and a histogram has none
    order: np.ndarray | None = field(default=None, compare=False, repr=False)
    # per distinct length, the mean label positions that carry loss (the loss mask as Megatron-Bridge trains on it:
    # answer-only SFT, assistant turns of a chat), where the data has masks (a packed folder, a lengths file with a
    # ``loss_tokens`` column); None = every label position (length - 1), all a length alone can say
    loss_tokens: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        lengths = np.asarray(self.lengths, dtype=np.int64)
        counts = np.asarray(self.counts, dtype=np.int64)
        if lengths.shape != counts.shape or lengths.ndim != 1:
            raise ValueError("lengths and counts must be 1-D arrays of the same size")
        if lengths.size and (np.any(np.diff(lengths) <= 0) or lengths[0] < 1 or np.any(counts < 1)):
            raise ValueError("lengths must be strictly increasing and positive, counts positive")
        if lengths.size and _tokens_reach_int64(lengths, counts):
            # the readers refuse such input with an InputError first; this keeps total_tokens from wrapping
            raise ValueError("lengths x counts sum to 2**63 or more: int64 totals would wrap")
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "counts", counts)
        if self.loss_tokens is not None:
            loss = np.asarray(self.loss_tokens, dtype=np.float64)
            if loss.shape != lengths.shape or np.any(loss < 0) or np.any(loss > np.maximum(lengths - 1, 0)):
                raise ValueError("loss_tokens: one mean per length, within 0 .. length - 1")
            object.__setattr__(self, "loss_tokens", loss)

    @classmethod
    def from_samples(cls, samples, *, loss=None, **kw) -> LengthHistogram:
        """From per-sample lengths; ``loss``: each sample's loss-carrying label positions (kept as a mean per length).

        >>> h = LengthHistogram.from_samples([3, 5, 3], loss=[1, 4, 2])
        >>> h.lengths.tolist(), h.loss_tokens.tolist()
        ([3, 5], [1.5, 4.0])
        """
        if loss is None:  # the common case: no inverse to build
            values, counts = np.unique(np.asarray(samples, dtype=np.int64), return_counts=True)
            return cls(lengths=values, counts=counts, **kw)
        values, inverse, counts = np.unique(
            np.asarray(samples, dtype=np.int64), return_inverse=True, return_counts=True
        )
        loss = np.asarray(loss, dtype=np.float64)
        if loss.shape != inverse.shape:
            raise ValueError("loss: one count per sample")
        return cls(
            lengths=values,
            counts=counts,
            loss_tokens=np.bincount(inverse, weights=loss, minlength=values.size) / counts,
            **kw,
        )

    @property
    def loss_fraction(self) -> float | None:
        """The share of label positions that carry loss (None: the data has no loss mask, so all of them).

        >>> LengthHistogram.from_samples([3, 5], loss=[1, 3]).loss_fraction
        0.6666666666666666
        """
        if self.loss_tokens is None:
            return None
        labels = float(np.dot(np.maximum(self.lengths - 1, 0), self.counts))
        return float(np.dot(self.loss_tokens, self.counts)) / labels if labels else 0.0

    @classmethod
    def from_pairs(cls, lengths, counts, **kw) -> LengthHistogram:
        """Merge (length, count) pairs, summing repeated lengths and leaving out zero counts.

        The sums are exact int64 (``np.add.reduceat`` over sorted pairs): a float-weighted ``bincount`` would round
        counts above 2**53.

        >>> h = LengthHistogram.from_pairs([7, 3, 7, 9], [2**53, 1, 1, 0])
        >>> h.lengths.tolist(), h.counts.tolist()
        ([3, 7], [1, 9007199254740993])
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        keep = counts > 0
        lengths, counts = lengths[keep], counts[keep]
        order = np.argsort(lengths, kind="stable")
        lengths, counts = lengths[order], counts[order]
        starts = np.flatnonzero(np.r_[True, lengths[1:] != lengths[:-1]]) if lengths.size else np.zeros(0, np.intp)
        summed = np.add.reduceat(counts, starts) if starts.size else counts
        return cls(lengths=lengths[starts], counts=summed, **kw)

    @property
    def num_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def total_tokens(self) -> int:
        return int((self.lengths * self.counts).sum())

    @property
    def max_length(self) -> int:
        return int(self.lengths[-1]) if self.lengths.size else 0

    @property
    def num_excluded(self) -> int:
        return sum(e.count for e in self.excluded)

    def scale_model(self, samples: int = SCALE_MODEL_SAMPLES) -> LengthHistogram:
        """The same length distribution with ``samples`` samples, for overviews (a pack-size sweep, the layout
        search) where the shape decides the figures and the total only the time.

        Counts are rounded on the cumulative distribution, so every quantile stays within one sample of the data's:
        rounding each length's count up to at least 1 instead gave a long tail of rare lengths 1/ratio times its
        weight (a 4M-sample lognormal's share of tokens over 16k went from 21 % to 49 %). Only the longest length is
        kept at 1 even if rare, because it sets truncation.

        >>> LengthHistogram.from_pairs([10, 20, 30], [1000, 3000, 1]).scale_model(400).counts.tolist()
        [100, 300, 1]
        """
        if self.num_samples <= samples:
            return self
        ratio = samples / self.num_samples
        cumulative = np.round(np.cumsum(self.counts.astype(np.float64)) * ratio).astype(np.int64)
        scaled = np.diff(cumulative, prepend=0)
        scaled[-1] = max(1, int(scaled[-1]))
        keep = scaled > 0
        return LengthHistogram(
            lengths=self.lengths[keep].copy(),
            counts=scaled[keep],
            source=f"{self.source} (scale model, {int(scaled.sum()):,} samples)",
            loss_tokens=None if self.loss_tokens is None else self.loss_tokens[keep].copy(),
        )

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the source and the (length, count) pairs: what caches key on (a histogram of a million
        distinct lengths is 16 MB of bytes; its digest is 32 characters, computed once)."""
        digest = hashlib.blake2b(digest_size=16)
        parts = [self.source.encode(), self.lengths.tobytes(), self.counts.tobytes()]
        if self.loss_tokens is not None:  # a masked histogram weighs its loss differently: not the same key
            parts.append(self.loss_tokens.tobytes())
        for part in parts:
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        return digest.hexdigest()

    @cached_property
    def order_digest(self) -> str:
        """A digest of the file order (empty without one): the online schedule's cache key beside ``fingerprint``."""
        return "" if self.order is None else hashlib.blake2b(self.order.tobytes(), digest_size=16).hexdigest()

    def samples(self) -> np.ndarray:
        """Every sample's length, in ascending order (memory: 8 bytes a sample)."""
        check_expandable(self.num_samples, self.source, "list")
        return np.repeat(self.lengths, self.counts)

    def dense_counts(self, size: int) -> np.ndarray:
        """Counts indexed by length 0..size-1; lengths >= size are left out (callers cap first)."""
        out = np.zeros(size, dtype=np.int64)
        keep = self.lengths < size
        out[self.lengths[keep]] = self.counts[keep]
        return out

    def percentile(self, q: float) -> int:
        """The smallest length with at least q % of samples at or below it (a sample that exists)."""
        cum = np.cumsum(self.counts)
        idx = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
        return int(self.lengths[min(idx, self.lengths.size - 1)])


def _tokens_reach_int64(lengths: np.ndarray, counts: np.ndarray) -> bool:
    """Whether sum(lengths x counts) >= 2**63, judged in float and, only near the edge, in exact Python ints."""
    if float(np.dot(lengths.astype(np.float64), counts.astype(np.float64))) < 2.0**61:
        return False
    return sum(int(n) * int(c) for n, c in zip(lengths.tolist(), counts.tolist(), strict=True)) >= 2**63


@dataclass(frozen=True, kw_only=True)
class LengthSummary:
    num_samples: int
    total_tokens: int
    mean: float
    std: float
    min: int
    p50: int
    p90: int
    p99: int
    max: int
    share_above: dict[int, float]  # pack size -> share of samples longer than it
    excluded: int

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summarize(hist: LengthHistogram, pack_sizes=COMMON_PACK_SIZES) -> LengthSummary:
    """Count, mean, percentiles, max and the share of samples above common pack sizes.

    >>> s = summarize(LengthHistogram.from_samples([1, 2, 3, 4, 100]), pack_sizes=(50,))
    >>> s.mean, s.p50, s.max, s.share_above
    (22.0, 3, 100, {50: 0.2})
    """
    if hist.num_samples == 0:
        raise ValueError(f"{hist.source or 'data'}: no samples to summarize")
    n, tokens = hist.num_samples, hist.total_tokens
    mean = tokens / n
    var = float((hist.counts * (hist.lengths - mean) ** 2).sum() / n)
    above = {int(p): float(hist.counts[hist.lengths > p].sum() / n) for p in pack_sizes}
    return LengthSummary(
        num_samples=n,
        total_tokens=tokens,
        mean=mean,
        std=var**0.5,
        min=int(hist.lengths[0]),
        p50=hist.percentile(50),
        p90=hist.percentile(90),
        p99=hist.percentile(99),
        max=hist.max_length,
        share_above=above,
        excluded=hist.num_excluded,
    )
