"""The per-token loss a step-0 prediction assumes: a curve l(p) over a loss token's position p in its sample.

Alternatives: a flat loss (every weighting then gives the same objective, so it predicts nothing), or the per-token
losses of the user's model on the user's data (not available before a run). Only how per-token loss correlates
with the gradient weights matters to the ratios predicted (``advisor/model/loss_expectation.py``): with packing,
short samples (whose tokens sit at early positions, where a model has seen little context) weigh differently.

Position p counts label tokens from the start of the sample: label p predicts token p + 1 from the p + 1 tokens
before it (Megatron-Bridge's ``labels = input_ids[1:]``). The default is a power law in position, the form Kaplan
et al. 2020 ("Scaling Laws for Neural Language Models", arXiv:2001.08361, appendix D: per-token loss against the
token's position in the context) report for pretrained transformers; its three constants are the advisor's
assumption (a few nats for the first tokens, about one far into a sample), not a fit to any model. The trial
measures its own model's curve and predicts with it (``LossCurve.measured``).

>>> c = LossCurve()
>>> c.values(3).round(3).tolist()
[3.5, 3.031, 2.798]
>>> bool(np.isclose(c.span_sums(np.array([0.0]), np.array([3.0]))[0], c.values(3).sum()))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_SOURCE = (
    "power law l(p) = floor + scale (p + 1)^-exponent (form: Kaplan et al. 2020, arXiv:2001.08361, "
    "appendix D; constants assumed)"
)


@dataclass(frozen=True, kw_only=True)
class LossCurve:
    """l(p) = floor + scale * (p + 1) ** -exponent nats, or a measured table (``table[p]``; past its end, its last
    value)."""

    floor: float = 1.0
    scale: float = 2.5
    exponent: float = 0.3
    table: tuple[float, ...] | None = None
    source: str = DEFAULT_SOURCE

    def __post_init__(self):
        for name in ("floor", "scale", "exponent"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"LossCurve.{name} {value!r} must be a finite number >= 0")
        if self.table is not None and (not self.table or not np.all(np.isfinite(self.table))):
            raise ValueError("LossCurve.table must hold at least one finite loss")

    @classmethod
    def measured(cls, table, source: str) -> LossCurve:
        """A curve from measured mean losses by position (the trial's)."""
        return cls(table=tuple(float(v) for v in table), source=source)

    def values(self, n: int) -> np.ndarray:
        """l(0), ..., l(n - 1)."""
        if self.table is not None:
            t = np.asarray(self.table, dtype=np.float64)
            return t[np.minimum(np.arange(n), t.size - 1)]
        return self.floor + self.scale * (np.arange(n, dtype=np.float64) + 1.0) ** -self.exponent

    def span_sums(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """sum of l(p) over p in [start, end) per entry; fractional bounds (a sample's mean real tokens) are
        interpolated on the cumulative sum."""
        start = np.asarray(start, dtype=np.float64)
        end = np.maximum(np.asarray(end, dtype=np.float64), start)
        top = int(np.ceil(end.max())) if end.size else 0
        cumulative = np.concatenate([[0.0], np.cumsum(self.values(top + 1))])
        grid = np.arange(cumulative.size, dtype=np.float64)
        return np.interp(end, grid, cumulative) - np.interp(start, grid, cumulative)

    def describe(self) -> str:
        """The curve in a few words, for a line of text.

        >>> LossCurve().describe()
        'assumed l(p) = 1 + 2.5 (p + 1)^-0.3 nats'
        """
        if self.table is not None:
            return f"{self.source} ({len(self.table)} positions)"
        return f"assumed l(p) = {self.floor:g} + {self.scale:g} (p + 1)^-{self.exponent:g} nats"

    def as_dict(self) -> dict:
        if self.table is not None:
            return {"source": self.source, "positions": len(self.table)}
        return {"floor": self.floor, "scale": self.scale, "exponent": self.exponent, "source": self.source}
