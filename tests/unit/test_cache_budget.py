"""Result caches stay within their byte budget also when a kept value grows after it was stored (an analysis
computes its estimate lazily): a whole test run once grew one process to 24 GB that way."""

from __future__ import annotations

import numpy as np

from advisor.caches import HistogramCache, held_arrays
from advisor.data.lengths import LengthHistogram


class Lazy:
    """A value whose arrays appear after it is cached, as Analysis.estimate does."""

    def grow(self, nbytes: int) -> None:
        self.big = np.zeros(nbytes, np.uint8)


def test_values_that_grow_after_storing_are_evicted_on_the_next_use():
    cache = HistogramCache("test", 64, 10_000, held_arrays)
    hists = [LengthHistogram.from_samples([i + 1]) for i in range(5)]
    values = [cache.get(h, "x", Lazy) for h in hists]
    for v in values:
        v.grow(4_000)  # 20,000 bytes held in all, twice the budget, none counted when stored
    assert cache.get(hists[-1], "x", Lazy) is values[-1]  # a hit trims
    held = sum(a.nbytes for v in cache.entries.values() for a in held_arrays(v))
    assert held <= 10_000 and len(cache.entries) == 2 and values[-1] in cache.entries.values()
