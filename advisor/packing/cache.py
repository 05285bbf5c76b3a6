"""Packings cached on the length histogram's contents and the packing settings, so a rerun never packs again.

>>> from advisor.data.lengths import LengthHistogram
>>> from advisor.packing.config import PackingConfig
>>> h = LengthHistogram.from_samples([3, 5, 7])
>>> packing_for(h, PackingConfig(pack_size=8)) is packing_for(h, PackingConfig(pack_size=8))
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from advisor.data.lengths import LengthHistogram
from advisor.packing.config import PackingConfig
from advisor.packing.offline import PackingResult, pack

PACKING_CACHE_SIZE = 32  # a page's whole sweep (6 sizes x 3 algorithms) plus the plan's own packing


class HistogramCache:
    """Results keyed on a histogram's contents and a hashable setting, the ``size`` most recent kept.

    The key is the histogram's content fingerprint (a digest, computed once per histogram), not the object, so
    nothing outlives its entry, and an equal histogram read again hits the same entry. Dashboard sessions share it:
    a lock keeps two reruns from corrupting the order (a value may be computed twice, never half-stored).
    """

    def __init__(self, size: int, max_bytes: int | None = None, arrays=None):
        # arrays(value) -> the numpy arrays a value holds; the budget counts each array once over all entries, since
        # entries share them (every analysis of one data set holds the same packing)
        self.size, self.max_bytes, self.arrays = size, max_bytes, arrays
        self.entries: OrderedDict = OrderedDict()
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def get(self, hist: LengthHistogram, setting, compute):
        key = (hist.fingerprint, setting)
        with self._lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                self.hits += 1
                value = self.entries[key]
                self._trim()  # values grow after they are stored (an analysis computes its estimate lazily)
                return value
            self.misses += 1
        value = compute()
        with self._lock:
            self.entries[key] = value
            self._trim()
        return value

    def _trim(self) -> None:
        """Drop the oldest entries past ``size`` or the byte budget (the newest always stays)."""
        while len(self.entries) > self.size or (len(self.entries) > 1 and self._over_budget()):
            self.entries.popitem(last=False)

    def peek(self, hist: LengthHistogram, setting):
        """The kept value, or None (nothing computed, nothing counted): a caller that must first ask for the
        server's room to compute it knows whether it needs to."""
        with self._lock:
            return self.entries.get((hist.fingerprint, setting))

    def _over_budget(self) -> bool:
        if self.max_bytes is None or self.arrays is None:
            return False
        held = {id(a): a.nbytes for v in self.entries.values() for a in self.arrays(v)}
        return sum(held.values()) > self.max_bytes


def cache_budget(most: int = 2 << 30) -> int:
    """Bytes each cache may hold: ``most``, or an eighth of this process's address-space limit if one is set
    (``ulimit -v``, RLIMIT_AS): a 2 GiB process once filled 2 GiB of caches with a search's online candidates. An
    eighth: the analyses and the schedules each have a budget, and a schedule being computed needs as much again.

    >>> 0 < cache_budget() <= 2 << 30
    True
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows): the fixed budget
        return most
    return most if soft in (resource.RLIM_INFINITY, -1) or soft <= 0 else min(most, soft // 8)


# a 16M-sample packing holds ~700 MB once estimated: about three, then the oldest goes
PACKING_CACHE_BYTES = cache_budget()


def held_arrays(value, depth: int = 3) -> list:
    """The numpy arrays a cached value holds in its attributes (dataclasses, dicts, tuples), ``depth`` levels
    down: what a schedule or an estimate keeps alive, for a cache's byte budget.

    >>> import numpy as np
    >>> class R: pass
    >>> r = R(); r.a = np.zeros(3); r.inner = R(); r.inner.b = (np.ones(2),)
    >>> sorted(a.size for a in held_arrays(r))
    [2, 3]
    """
    import numpy as np

    if isinstance(value, np.ndarray):
        return [value]
    if depth == 0 or value is None or isinstance(value, (str, bytes, int, float, bool)):
        return []
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return []
    return [a for item in items for a in held_arrays(item, depth - 1)]


def packing_arrays(result: PackingResult | None) -> list:
    """The arrays a packing holds, those computed later on it included (per-pack sums, micro batches)."""
    if result is None:
        return []
    arrays = [result.offsets, result.items, *result.__dict__.get("per_pack", ())]
    for mb in result.__dict__.get("_micro_batches", {}).values():
        arrays += [mb.real_tokens, mb.computed_tokens, mb.attention_thd, mb.attention_block, mb.samples]
    return arrays


PACKINGS = HistogramCache(PACKING_CACHE_SIZE, PACKING_CACHE_BYTES, packing_arrays)


def packing_for(hist: LengthHistogram, cfg: PackingConfig, progress=None) -> PackingResult:
    """Pack once per (histogram, settings); later calls with the same pair return the same result."""
    return PACKINGS.get(hist, cfg, lambda: pack(hist, cfg, progress=progress) if progress else pack(hist, cfg))
