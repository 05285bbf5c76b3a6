"""The bundled length histograms as tests read them, and smaller copies of the same shape."""

from __future__ import annotations

import pandas as pd

from advisor.data.lengths import LengthHistogram
from tests.support import SAMPLE


def read_hist(name: str) -> LengthHistogram:
    frame = pd.read_csv(SAMPLE / name)
    return LengthHistogram.from_pairs(frame["length"], frame["count"], source=name)


def scaled(hist: LengthHistogram, divisor: int) -> LengthHistogram:
    """The same shape with fewer samples (counts divided, rounded up), so Megatron-Bridge's Python packer is quick."""
    return LengthHistogram(lengths=hist.lengths, counts=-(-hist.counts // divisor), source=f"{hist.source}/{divisor}")
