"""Every process-wide cache is registered in advisor/caches.py, bounded, locked and reset by one call."""

from __future__ import annotations

import importlib
import pkgutil
import re
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import advisor
from advisor import caches
from advisor.data.lengths import LengthHistogram
from advisor.packing.cache import PACKINGS, packing_for
from advisor.packing.config import PackingConfig

ROOT = Path(advisor.__file__).parent


def _all_modules():
    for info in pkgutil.walk_packages([str(ROOT)], prefix="advisor."):
        if info.name.startswith("advisor.__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_module_level_cache_is_registered_and_bounded():
    seen: set[int] = set()
    modules = list(_all_modules())
    registered = caches.every()
    for module in modules:
        for name, obj in vars(module).items():
            if id(obj) in seen:
                continue  # imported by another module too
            if isinstance(obj, caches.BoundedCache):
                seen.add(id(obj))
                assert registered.get(obj.name) is obj, f"{module.__name__}.{name} is not registered"
                assert obj.size >= 1
            elif callable(obj) and hasattr(obj, "cache_info"):
                seen.add(id(obj))
                assert obj.cache_info().maxsize is not None, f"{module.__name__}.{name}: unbounded lru_cache"
                assert any(getattr(c, "fn", None) is obj for c in registered.values()), (
                    f"{module.__name__}.{name} is an lru_cache missing from advisor/caches.py's registry"
                )
    assert len(seen) == len(registered) >= 8  # and nothing registered that no module holds


def test_no_source_writes_into_an_objects_dict():
    """Caches are owned (PackingResult.derived, Analysis parts), never written into a frozen object's __dict__
    (``object.__setattr__`` in a ``__post_init__`` that normalises a field as it is built is not a cache)."""
    writes = re.compile(r"__dict__\s*(\[[^\]]*\]\s*=|\.(setdefault|update|pop)\()")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in ROOT.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if writes.search(line)
    ]
    assert not found, found


def test_clear_empties_every_cache_and_the_next_call_computes_again():
    hist = LengthHistogram.from_samples([3, 5, 7, 9])
    first = packing_for(hist, PackingConfig(pack_size=12))
    assert PACKINGS.peek(hist, PackingConfig(pack_size=12)) is first
    caches.clear()
    assert all(len(c.entries) == 0 for c in caches.every().values())
    assert PACKINGS.peek(hist, PackingConfig(pack_size=12)) is None
    again = packing_for(hist, PackingConfig(pack_size=12))
    assert again is not first and np.array_equal(again.items, first.items)
    rows = {r["cache"]: r for r in caches.report()}
    assert rows["packings"]["entries"] == 1 and rows["packings"]["misses"] == 1
    assert rows["packings"]["held_bytes"] >= first.offsets.nbytes + first.items.nbytes


def test_micro_batches_are_kept_with_their_packing_and_counted_in_its_budget():
    from advisor.model.micro_batches import offline_micro_batches
    from advisor.packing.cache import packing_arrays

    result = packing_for(LengthHistogram.from_samples(list(range(1, 200))), PackingConfig(pack_size=256))
    before = sum(a.nbytes for a in packing_arrays(result))
    mb = offline_micro_batches(result, fixed_length=True)
    assert offline_micro_batches(result, fixed_length=True) is mb  # kept, not recomputed
    assert sum(a.nbytes for a in packing_arrays(result)) >= before + mb.real_tokens.nbytes + mb.samples.nbytes


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 5), keys=st.lists(st.integers(0, 8), max_size=40))
def test_a_bounded_cache_keeps_the_most_recently_used(size, keys):
    cache = caches.BoundedCache("test", size)
    model: OrderedDict = OrderedDict()  # least recently used first
    for k in keys:
        assert cache.get(k, lambda k=k: k * 10) == k * 10
        model.pop(k, None)
        model[k] = None
        while len(model) > size:
            model.popitem(last=False)
    assert list(cache.entries) == list(model)
    assert cache.hits + cache.misses == len(keys)


def test_the_byte_budget_drops_the_oldest_but_keeps_the_newest():
    cache = caches.BoundedCache("test", 10, max_bytes=2_000, arrays=lambda v: [v])
    for k in range(5):
        cache.get(k, lambda: np.zeros(100))  # 800 bytes each: two fit
    assert list(cache.entries) == [3, 4]
    cache.get("big", lambda: np.zeros(1_000))  # over the budget alone: kept anyway, the others go
    assert list(cache.entries) == ["big"]


def test_sessions_sharing_a_cache_never_see_it_past_its_bound():
    cache = caches.BoundedCache("test", 3)
    seen: list = []

    def session(offset: int) -> None:
        for i in range(300):
            k = (i * 7 + offset) % 11
            seen.append(cache.get(k, lambda k=k: str(k)) == str(k))

    threads = [threading.Thread(target=session, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(seen) and len(seen) == 1200 and len(cache.entries) <= 3


def test_two_caches_cannot_share_a_name():
    import pytest

    with pytest.raises(ValueError, match="already exists"):
        caches.bounded("packings", size=1)


def test_a_key_being_computed_is_computed_once_and_shared():
    cache = caches.BoundedCache("test", 4)
    started, release, calls = threading.Event(), threading.Event(), []

    def slow():
        calls.append(1)
        started.set()
        release.wait(5)
        return np.arange(3)

    got = []
    first = threading.Thread(target=lambda: got.append(cache.get("k", slow)))
    first.start()
    started.wait(5)
    assert cache.in_flight("k")
    second = threading.Thread(target=lambda: got.append(cache.get("k", slow)))
    second.start()
    release.set()
    first.join()
    second.join()
    assert len(calls) == 1 and got[0] is got[1] and not cache.in_flight("k")
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_failed_computation_lets_the_waiting_caller_compute_its_own():
    cache = caches.BoundedCache("test", 4)
    started, release = threading.Event(), threading.Event()

    def failing():
        started.set()
        release.wait(5)
        raise RuntimeError("refused")

    errors = []

    def first():
        try:
            cache.get("k", failing)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    started.wait(5)
    threading.Timer(0.05, release.set).start()
    assert cache.get("k", lambda: "mine") == "mine"  # waited for the first, which failed, then computed
    t.join()
    assert len(errors) == 1


def test_a_value_offered_ahead_of_need_evicts_nothing_and_goes_first():
    cache = caches.BoundedCache("test", 3, max_bytes=2_000, arrays=lambda v: [v])
    cache.get("a", lambda: np.zeros(100))  # 800 bytes
    cache.get("b", lambda: np.zeros(100))
    assert not cache.offer("ahead", np.zeros(100))  # 2,400 bytes: over the budget, so not kept
    assert list(cache.entries) == ["a", "b"]
    cache.entries.pop("b")
    assert cache.offer("ahead", np.zeros(100))
    assert list(cache.entries) == ["ahead", "a"]  # kept as the oldest: the first to make room
    cache.get("c", lambda: np.zeros(100))
    assert list(cache.entries) == ["a", "c"]
