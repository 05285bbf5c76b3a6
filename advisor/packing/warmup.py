"""Compile every packing kernel once, so no user waits on numba: run at set-up (`python -m advisor warmup`) and in a
background thread when the dashboard starts. numba caches the machine code beside the sources (``cache=True``),
so this costs seconds once per install and milliseconds after.

>>> warm_up()  # doctest: +ELLIPSIS
[...]
"""

from __future__ import annotations

import time

from advisor.data.lengths import LengthHistogram
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.packing.packers import PACKERS


def warm_up(progress=None) -> list[tuple[str, float]]:
    """Pack a tiny histogram with every algorithm (with and without padding to a multiple): (algorithm, seconds)."""
    tiny = LengthHistogram.from_samples([3, 5, 8, 13, 21, 34, 55, 60, 64, 2, 7] * 3, source="warm-up")
    out: list[tuple[str, float]] = []
    for i, algorithm in enumerate(PACKERS):
        if progress is not None:
            progress(f"compiling {algorithm}", i / len(PACKERS))
        t0 = time.perf_counter()
        for mult in (1, 4):
            pack(tiny, PackingConfig(pack_size=64, algorithm=algorithm, pad_seq_to_mult=mult))
        out.append((algorithm, time.perf_counter() - t0))
    return out
