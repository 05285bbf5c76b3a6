"""Packing figures of a whole data set estimated from a uniform random sample of it, with bootstrap intervals.

Alternatives: tokenize and pack everything (exact, hours on 100M samples) or report the sample's own figures with
no uncertainty. Here: the sample is packed as Megatron-Bridge would pack it, then resampled with replacement
(a population bootstrap), and each figure's interval is its estimate +- z x the spread of the replicates and of
the packing's own shuffle; packs scale with the data set's size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from statistics import NormalDist

import numpy as np

from advisor.data.lengths import LengthHistogram
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack

BOOTSTRAPS = 200
LEVEL = 0.95
# Why not pack the sample as it is: a set of 2,000 lengths packs worse than 100M of the same shape (fewer ways to
# fill each pack's tail; on a lognormal chat-like data set 99.0 % against 99.5 %), so intervals from the sample's
# own packing miss the truth almost always. Every figure is therefore taken at the data set's size (capped here,
# where the size no longer matters), on the sample blown up to it.
MAX_SCALED = 1_000_000
SEED_DRAWS = 8
# Each replicate packs the blown-up population (~60 ns a record) over histograms of pack-size length (~16 ns a
# token of pack size): 10,000 replicates at a 4M pack size were 11 minutes, 200 over a million records at 4M a
# minute. Replicates x (population + pack size) is kept under this: about half a minute on one core.
MAX_BOOTSTRAP_WORK = 1 << 29
# Blowing a sample up repeats each length ~size/n times, and a data set of repeated lengths packs a little worse
# than a fresh one of the same shape (fewer exact sizes to fill a pack's last gap: -0.02 points at 20k samples x5).
# The copies are therefore nudged by ~2 % (log-normal noise); never the lengths at or above the cap, where
# truncated samples pile up and a nudge would move them below it.
JITTER = 0.02


@dataclass(frozen=True, kw_only=True)
class Interval:
    estimate: float
    low: float
    high: float

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True, kw_only=True)
class SampleEstimate:
    """What packing the whole data set gives, from ``sample_size`` of its ``total`` records."""

    sample_size: int
    total: int
    pack_size: int
    packs: Interval  # for the whole data set
    packing_factor: Interval
    efficiency: Interval  # Megatron-Bridge's packing_efficiency, %
    bootstraps: int
    level: float

    def as_dict(self) -> dict:
        return asdict(self)  # the intervals become dicts too


def _figures(lengths: np.ndarray, cfg: PackingConfig) -> tuple[float, float, float]:
    """(packs, packing factor, efficiency %) of packing these lengths."""
    result = pack(LengthHistogram.from_samples(lengths, source="sample"), cfg)
    m = result.metrics  # its efficiency is unrounded (the metadata rounds to 0.01 %, the width of an interval)
    return float(result.num_packs), result.packing_factor, float(m.packing_efficiency)


def _student_t(p: float, dof: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion around the normal one (within 1e-3 from 10 dof).

    >>> round(_student_t(0.975, 49), 3), round(_student_t(0.975, 10**6), 3)
    (2.01, 1.96)
    """
    z = NormalDist().inv_cdf(p)
    v = max(1, dof)
    return z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)


def _population(sample: np.ndarray, size: int, rng: np.random.Generator, cap: int | None = None) -> np.ndarray:
    """The sample blown up to ``size`` records: each one ``size // n`` times, the remainder drawn at random, the
    copies nudged (``JITTER``) below ``cap`` (lengths at or above it are kept as they are)."""
    n = sample.size
    if size <= n:
        return sample
    whole, rest = divmod(size, n)
    out = np.concatenate([np.repeat(sample, whole), sample[rng.choice(n, rest, replace=False)]])
    if JITTER and cap is not None and cap > 3:
        copy = np.ones(out.size, bool)
        copy[: n * whole : whole] = False  # the first copy of each sampled length stays exact
        below = copy & (out < cap - 1)
        noisy = np.clip(np.rint(out * np.exp(rng.normal(0.0, JITTER, out.size))), 1, cap - 2).astype(np.int64)
        out = np.where(below, noisy, out)
    return out


def population_size(sample_size: int, total: int) -> int:
    """How many records each figure is taken on: the data set's size, capped at ``MAX_SCALED``.

    >>> population_size(2_000, 100_000), population_size(2_000, 10**9)
    (100000, 1000000)
    """
    return int(min(total, max(sample_size, MAX_SCALED)))


def max_bootstraps(sample_size: int, total: int, pack_size: int) -> int:
    """The most replicates ``MAX_BOOTSTRAP_WORK`` allows (at least 2) for this sample, data set and pack size.

    >>> max_bootstraps(2_000, 10**9, 4096), max_bootstraps(2_000, 10**9, 1 << 22)
    (526, 95)
    """
    work = population_size(sample_size, total) + pack_size
    return max(2, MAX_BOOTSTRAP_WORK // work - SEED_DRAWS)


def sample_estimate(
    lengths, total: int, cfg: PackingConfig, *, bootstraps: int = BOOTSTRAPS, level: float = LEVEL, seed: int = 0
) -> SampleEstimate:
    """Packs, packing factor and efficiency of ``total`` records, estimated from these sampled ``lengths``.

    >>> rng = np.random.default_rng(0)
    >>> est = sample_estimate(rng.integers(100, 2000, 2000), 100_000, PackingConfig(pack_size=4096), bootstraps=50)
    >>> est.efficiency.low <= est.efficiency.estimate <= est.efficiency.high, round(est.packs.estimate / 1000)
    (True, 26)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    if n == 0:
        raise ValueError("no sampled lengths to estimate from")
    if bootstraps < 2:
        raise ValueError(f"bootstraps {bootstraps} must be at least 2 (an interval needs a spread)")
    if n >= total:  # the sample is the whole data set: its packing is the answer, exactly
        exact = _figures(lengths, cfg)
        return SampleEstimate(
            sample_size=n,
            total=n,
            pack_size=cfg.pack_size,
            **{
                k: Interval(estimate=v, low=v, high=v)
                for k, v in zip(("packs", "packing_factor", "efficiency"), exact, strict=True)
            },
            bootstraps=0,
            level=level,
        )
    rng = np.random.default_rng(seed)
    size = population_size(n, total)
    cap = cfg.effective_max_seq_length
    population = _population(lengths, size, rng, cap)
    point = np.array(_figures(population, cfg))
    scale = total / size

    def replicate(b: int) -> tuple[float, float, float]:
        # Booth, Butler and Hall's population bootstrap: the sample stands for the population it was drawn from
        # without replacement, so a replicate draws n without replacement from that pseudo-population and is
        # blown up to the population's size the same way
        # ... unless the data set is far larger than the blown-up copy (capped): then the draw is as good as with
        # replacement, and a pseudo-population of the cap would understate the spread by its finite-size factor
        if total > size:
            resampled = lengths[rng.integers(0, n, n)]
        else:
            resampled = _population(lengths, size, rng, cap)[rng.choice(size, n, replace=False)]
        # each replicate shuffles with its own seed: Megatron-Bridge's figure is one shuffle of the data set
        own_seed = replace(cfg, seed=(cfg.seed or 0) + SEED_DRAWS + b + 1)
        return _figures(_population(resampled, size, rng, cap), own_seed)

    boot = np.array([replicate(b) for b in range(bootstraps)])
    # the figure Megatron-Bridge will print is one shuffle of the whole data set: its spread over shuffle seeds
    # (0.016 % of efficiency at 20k samples, nothing at 100M) is part of what the interval must cover
    seeds = np.array([_figures(population, replace(cfg, seed=(cfg.seed or 0) + k + 1)) for k in range(SEED_DRAWS)])
    spread = np.sqrt(boot.var(axis=0, ddof=1) + seeds.var(axis=0, ddof=1))
    z = _student_t((1 + level) / 2, bootstraps - 1)  # the spread is itself estimated from the replicates

    def interval(k: int, factor_: float = 1.0) -> Interval:
        return Interval(
            estimate=float(point[k]) * factor_,
            low=float(point[k] - z * spread[k]) * factor_,
            high=float(point[k] + z * spread[k]) * factor_,
        )

    return SampleEstimate(
        sample_size=n,
        total=total,
        pack_size=cfg.pack_size,
        packs=interval(0, scale),
        packing_factor=interval(1),
        efficiency=interval(2),
        bootstraps=bootstraps,
        level=level,
    )
