"""Packings cached on the length histogram's contents and the packing settings, so a rerun never packs again.

>>> from advisor.data.lengths import LengthHistogram
>>> from advisor.packing.config import PackingConfig
>>> h = LengthHistogram.from_samples([3, 5, 7])
>>> packing_for(h, PackingConfig(pack_size=8)) is packing_for(h, PackingConfig(pack_size=8))
True
"""

from __future__ import annotations

from advisor import caches
from advisor.data.lengths import LengthHistogram
from advisor.packing.config import PackingConfig
from advisor.packing.offline import PackingResult, pack

PACKING_CACHE_SIZE = 32  # a page's whole sweep (6 sizes x 3 algorithms) plus the plan's own packing
# a 16M-sample packing holds ~700 MB once estimated: about three, then the oldest goes
PACKING_CACHE_BYTES = caches.cache_budget()


def packing_arrays(result: PackingResult | None) -> list:
    """The arrays a packing holds, those computed later on it included (its micro batches and its packs grouped
    on demand, ``derived``)."""
    if result is None:
        return []
    return [*(result.csr or ()), *result.per_pack, *caches.held_arrays(result.derived_values())]  # packs grouped
    # later are among the derived values


PACKINGS = caches.bounded(
    "packings", size=PACKING_CACHE_SIZE, max_bytes=PACKING_CACHE_BYTES, arrays=packing_arrays, by_histogram=True
)


def packing_for(hist: LengthHistogram, cfg: PackingConfig, progress=None) -> PackingResult:
    """Pack once per (histogram, settings); later calls with the same pair return the same result."""
    return PACKINGS.get(hist, cfg, lambda: pack(hist, cfg, progress=progress) if progress else pack(hist, cfg))
