"""Every process-wide cache, in one registry: each with its bound (entries and bytes), a lock, and a reset.

Results that outlive a call are kept here or by the object they belong to (a packing keeps its micro batches:
``PackingResult.derived``), never in a module-level dict of their own. A cache is created with ``bounded(name, ...)``
(or an ``functools.lru_cache`` function is listed with ``listed(name, fn)``), so ``every()`` lists them all with
their bounds, ``clear()`` resets them (tests), and ``report()`` says what each holds.

>>> c = bounded("doctest.squares", size=2)
>>> [c.get(n, lambda n=n: n * n) for n in (2, 3, 2, 4)], list(c.entries)
([4, 9, 4, 16], [2, 4])
>>> c.hits, c.misses
(1, 3)
>>> _ = _REGISTRY.pop("doctest.squares")
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload


class BoundedCache:
    """The ``size`` most recent values, and fewer while the numpy arrays they hold pass ``max_bytes``.

    Dashboard sessions share these: a lock keeps two reruns from corrupting the order, and a key being computed is
    computed once: a second caller waits for the first's value (``in_flight``) instead of computing it again (the
    background worker's packing of a pack size a visitor then asks for, say). ``arrays(value)`` lists the arrays a
    value holds; the budget counts each array once over all entries, since entries share them (every analysis of
    one data set holds the same packing), and it is counted again on every access because values grow after they
    are stored (an analysis computes its estimate lazily).
    """

    def __init__(self, name: str, size: int, max_bytes: int | None = None, arrays: Callable[[Any], list] | None = None):
        self.name, self.size, self.max_bytes, self.arrays = name, size, max_bytes, arrays
        self.entries: OrderedDict = OrderedDict()
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._computing: dict = {}  # key -> the thread computing it

    def get(self, key, compute: Callable[[], Any]):
        """The kept value for ``key``, or ``compute()``'s, kept; while another thread computes the same key, its
        value (or, if it fails, this caller's own)."""
        me = threading.get_ident()
        with self._lock:
            while key not in self.entries and self._computing.get(key, me) != me:
                self._done.wait()
            if key in self.entries:
                self.entries.move_to_end(key)
                self.hits += 1
                value = self.entries[key]
                self._trim()
                return value
            self.misses += 1
            self._computing[key] = me
        try:
            value = compute()  # outside the lock: a long computation never blocks another session's hit
        except BaseException:
            with self._lock:
                self._computing.pop(key, None)
                self._done.notify_all()
            raise
        with self._lock:
            self._computing.pop(key, None)
            value = self.entries.setdefault(key, value)
            self.entries.move_to_end(key)
            self._trim()
            self._done.notify_all()
        return value

    def offer(self, key, value) -> bool:
        """Keep a value computed ahead of need only if it fits beside every kept one, evicting nothing (the
        background worker's results never push out what a visitor uses); whether it was kept."""
        with self._lock:
            if key in self.entries:
                return True
            if len(self.entries) >= self.size:
                return False
            self.entries[key] = value
            self.entries.move_to_end(key, last=False)  # the first to go when a visitor needs the room
            if self.max_bytes is not None and self._held() > self.max_bytes:
                del self.entries[key]
                return False
            self._done.notify_all()
            return True

    def in_flight(self, key) -> bool:
        """Whether some thread is computing ``key`` now."""
        with self._lock:
            return key in self._computing

    def keep(self, key, value) -> bool:
        """Keep a value computed elsewhere for a caller waiting on it, as ``get`` keeps its own (the oldest go when
        there is no room); whether it was kept."""
        with self._lock:
            self.entries.setdefault(key, value)  # one kept meanwhile (its visitor gave up waiting) stays
            self.entries.move_to_end(key)
            self._trim()
            self._done.notify_all()
            return key in self.entries

    def peek(self, key):
        """The kept value, or None (nothing computed, nothing counted): a caller that must first ask for the
        server's room to compute it knows whether it needs to."""
        with self._lock:
            return self.entries.get(key)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.hits = self.misses = 0

    def held_bytes(self) -> int:
        with self._lock:
            return self._held()

    def _held(self) -> int:
        if self.arrays is None:
            return 0
        return sum({id(a): a.nbytes for v in self.entries.values() for a in self.arrays(v)}.values())

    def _trim(self) -> None:
        """Drop the oldest entries past ``size`` or the byte budget (the newest always stays)."""
        while len(self.entries) > self.size or (
            len(self.entries) > 1 and self.max_bytes is not None and self._held() > self.max_bytes
        ):
            self.entries.popitem(last=False)


class HistogramCache(BoundedCache):
    """Keyed on a length histogram's contents and a hashable setting.

    The key is the histogram's content fingerprint (a digest, computed once per histogram), not the object, so
    nothing outlives its entry, and an equal histogram read again hits the same entry.
    """

    def get(self, hist, setting, compute: Callable[[], Any]):  # type: ignore[override]
        return super().get((hist.fingerprint, setting), compute)

    def peek(self, hist, setting):  # type: ignore[override]
        return super().peek((hist.fingerprint, setting))

    def offer(self, hist, setting, value) -> bool:  # type: ignore[override]
        return super().offer((hist.fingerprint, setting), value)

    def keep(self, hist, setting, value) -> bool:  # type: ignore[override]
        return super().keep((hist.fingerprint, setting), value)

    def in_flight(self, hist, setting) -> bool:  # type: ignore[override]
        return super().in_flight((hist.fingerprint, setting))


class _Listed:
    """An ``lru_cache`` function in the registry (bounded and locked by functools)."""

    def __init__(self, name: str, fn):
        self.name, self.fn, self.size, self.max_bytes = name, fn, fn.cache_info().maxsize, None

    @property
    def entries(self) -> range:
        return range(self.fn.cache_info().currsize)

    @property
    def hits(self) -> int:
        return self.fn.cache_info().hits

    @property
    def misses(self) -> int:
        return self.fn.cache_info().misses

    def clear(self) -> None:
        self.fn.cache_clear()

    def held_bytes(self) -> int:
        return 0


_REGISTRY: dict[str, BoundedCache | _Listed] = {}
_REGISTRY_LOCK = threading.Lock()


def _register(cache):
    with _REGISTRY_LOCK:
        if cache.name in _REGISTRY:  # two caches under one name would make every() and clear() miss one
            raise ValueError(f"a cache named {cache.name!r} already exists")
        _REGISTRY[cache.name] = cache
    return cache


@overload
def bounded(
    name: str,
    *,
    size: int,
    max_bytes: int | None = None,
    arrays: Callable[[Any], list] | None = None,
    by_histogram: Literal[False] = False,
) -> BoundedCache: ...


@overload
def bounded(
    name: str,
    *,
    size: int,
    max_bytes: int | None = None,
    arrays: Callable[[Any], list] | None = None,
    by_histogram: Literal[True],
) -> HistogramCache: ...


def bounded(
    name: str,
    *,
    size: int,
    max_bytes: int | None = None,
    arrays: Callable[[Any], list] | None = None,
    by_histogram: bool = False,
) -> BoundedCache:
    """A new registered cache (``by_histogram``: keyed on a histogram's contents and a setting)."""
    return _register((HistogramCache if by_histogram else BoundedCache)(name, size, max_bytes, arrays))


def listed(name: str, fn):
    """Register an ``functools.lru_cache`` function (it must have a ``maxsize``) and return it."""
    if fn.cache_info().maxsize is None:
        raise ValueError(f"{name}: an unbounded lru_cache cannot be listed; give it a maxsize")
    _register(_Listed(name, fn))
    return fn


def every() -> dict[str, BoundedCache | _Listed]:
    """Every registered cache by name (the modules that create them must have been imported)."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


def clear() -> None:
    """Reset every cache: a test that must compute afresh, or a process handing its memory back."""
    for cache in every().values():
        cache.clear()


def report() -> list[dict]:
    """One row per cache: its bounds, what it holds now, its hits and misses."""
    return [
        {
            "cache": name,
            "max_entries": c.size,
            "max_bytes": c.max_bytes,
            "entries": len(c.entries),
            "held_bytes": c.held_bytes(),
            "hits": c.hits,
            "misses": c.misses,
        }
        for name, c in every().items()
    ]


def cache_budget(most: int = 2 << 30) -> int:
    """Bytes each large cache may hold: ``most``, or an eighth of this process's address-space limit if one is set
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
        items: Iterable = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return []
    return [a for item in items for a in held_arrays(item, depth - 1)]
