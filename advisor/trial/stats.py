"""Statistics of repeated timed steps: median and spread per way, the speed-up from medians with its interval, and
the warnings that say when the spread is too large to call the speed-up.

Medians, not means: on a shared machine one step in ten can take ten times as long (another process got the
cores), and a mean of three steps is then whatever that step was. The speed-up's interval is a paired percentile
bootstrap over steps: step i of every way trains on the same samples, so resampling step indices keeps each
step's composition on both sides of the ratio.

>>> s = spread([1.0, 2.0, 3.0, 4.0, 100.0])
>>> s.median, s.minimum, s.maximum, s.iqr
(3.0, 1.0, 100.0, 2.0)
>>> sp = speedup([2.0, 2.1, 1.9, 2.0, 2.05, 1.95], [1.0, 1.02, 0.98, 1.0, 1.01, 0.99])
>>> round(sp.point, 2), sp.low > 1.8, sp.high < 2.2
(2.0, True, True)
>>> noise_warnings(sp, {"packed": spread([2.0, 2.1, 1.9, 2.0, 2.05, 1.95])})
()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_STEPS = 5
# Why 25 %: for roughly normal step noise the IQR is 1.35 sigma, so IQR/median = 0.25 is a coefficient of variation
# of 0.185. The median of n steps then has a relative standard error of about 1.25 * 0.185 / sqrt(n), and the
# ratio of two such medians sqrt(2) times that: 0.10 at the default 10 steps, a 95 % interval of about +-20 %.
# Packing's speed-ups on real data are 1.1-1.5x, so past this spread the run cannot resolve the effect it exists
# to measure, whatever its interval happens to say.
MAX_RELATIVE_IQR = 0.25
_BOOTSTRAP_CELLS = 2_000_000  # resamples x steps drawn at once (a 100,000-step run is bootstrapped in chunks)


@dataclass(frozen=True)
class Spread:
    """Order statistics of one way's per-step values (tokens/s or seconds)."""

    n: int
    median: float
    minimum: float
    maximum: float
    q1: float
    q3: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def relative_iqr(self) -> float:
        """Interquartile range over the median: the noise of a typical step, unit-free."""
        return self.iqr / self.median if self.median > 0 else float("inf")

    def to_dict(self) -> dict:
        return asdict(self) | {"iqr": self.iqr, "relative_iqr": self.relative_iqr}


@dataclass(frozen=True)
class Speedup:
    """Median throughput of one way over another's, with a ``confidence`` interval from ``steps`` paired steps."""

    point: float
    low: float
    high: float
    confidence: float
    steps: int

    def to_dict(self) -> dict:
        return asdict(self)


def _values(values: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{what}: no timed steps")
    if not np.isfinite(a).all() or (a <= 0).any():
        raise ValueError(f"{what}: step values must be finite and above 0")
    return a


def spread(values: Sequence[float], what: str = "steps") -> Spread:
    """Median, extremes and quartiles (linear interpolation) of per-step values."""
    a = _values(values, what)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return Spread(
        n=int(a.size), median=float(med), minimum=float(a.min()), maximum=float(a.max()), q1=float(q1), q3=float(q3)
    )


def speedup(
    fast: Sequence[float],
    slow: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Speedup:
    """median(fast) / median(slow) of per-step throughputs, and its paired percentile-bootstrap interval.

    ``fast[i]`` and ``slow[i]`` are the same step (same samples) of two ways. The bootstrap draws step indices with
    replacement (seeded: the same steps give the same interval); the interval is widened to hold the point if the
    bootstrap's percentiles miss it (possible with very few steps).
    """
    x, y = _values(fast, "packed"), _values(slow, "padded")
    if x.size != y.size:
        raise ValueError(f"{x.size} packed steps against {y.size} padded ones: the speed-up pairs steps")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} must be between 0 and 1")
    n = x.size
    point = float(np.median(x) / np.median(y))
    rng = np.random.default_rng(seed)
    ratios = []
    chunk = max(1, _BOOTSTRAP_CELLS // n)
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, n, (min(chunk, resamples - start), n))
        ratios.append(np.median(x[idx], axis=1) / np.median(y[idx], axis=1))
    low, high = np.quantile(np.concatenate(ratios), [(1 - confidence) / 2, (1 + confidence) / 2])
    return Speedup(
        point=point, low=min(float(low), point), high=max(float(high), point), confidence=confidence, steps=n
    )


def noise_warnings(
    speed: Speedup,
    spreads: Mapping[str, Spread],
    *,
    min_steps: int = MIN_STEPS,
    max_relative_iqr: float = MAX_RELATIVE_IQR,
) -> tuple[str, ...]:
    """Why the speed-up cannot be called, if it cannot: empty when the run is tight enough to trust.

    ``spreads`` are the per-step throughputs of the ways compared (packed and padded). Three reasons: too few
    steps for a bootstrap to mean anything (below ``min_steps`` the median of a resample takes only a handful of
    values and the interval is too narrow), an interval that holds 1.0 (the run cannot say which way is faster),
    and a way whose steps spread more than ``max_relative_iqr`` (see ``MAX_RELATIVE_IQR``).
    """
    out = []
    if speed.steps < min_steps:
        out.append(
            f"only {speed.steps} timed step(s) per way: too few to call the speed-up (at least {min_steps}; "
            "raise --steps)"
        )
    if speed.low <= 1.0 <= speed.high:
        out.append(
            f"the speed-up's {speed.confidence:.0%} interval {speed.low:.2f}x-{speed.high:.2f}x contains "
            "1.0: this run cannot tell packed from padded"
        )
    for way, s in spreads.items():
        if s.relative_iqr > max_relative_iqr:
            out.append(
                f"{way} steps spread {s.relative_iqr:.0%} (interquartile range over median, above "
                f"{max_relative_iqr:.0%}; fastest {s.maximum:,.0f}, slowest {s.minimum:,.0f} tokens/s): "
                "the machine was busy; rerun with more steps, on an idle machine, or (CPU) with --threads 1"
            )
    return tuple(out)
