"""Packings computed ahead in the background (advisor/ui/ahead.py): what the Packing page asks for next is kept
when the server is idle, the work stands aside for visitors' heavy jobs, and never pushes out what they use."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from advisor import caches
from advisor.packing.cache import PACKINGS
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.ui import ahead, fair
from advisor.ui import state as ui
from tests.support.histograms import read_hist, scaled


@pytest.fixture(autouse=True)
def _fresh():
    caches.clear()
    yield
    caches.clear()


def test_wished_packings_are_kept_and_equal_to_packing_them_now(wikipedia):
    hist = scaled(wikipedia, 40)  # 407k samples
    worker = ahead.Ahead(fair.Gate())
    configs = [PackingConfig(pack_size=p) for p in (768, 256)]
    assert worker.offer(hist, configs) == 2
    assert worker.wait_idle(120)
    for cfg in configs:
        kept = PACKINGS.peek(hist, cfg)
        assert kept is not None and kept.metadata == pack(hist, cfg).metadata
    assert worker.done == 2 and worker.offer(hist, configs) == 0  # kept already: nothing to do


def test_background_work_stops_for_a_visitors_heavy_job_and_finishes_after(wikipedia, monkeypatch):
    from advisor.packing import first_fit

    monkeypatch.setattr(first_fit, "CHUNK", 4096)  # many pauses on a small data set
    hist = scaled(wikipedia, 20)
    gate = fair.Gate(fair.Budget(slots=1, memory_bytes=4 << 30))
    worker = ahead.Ahead(gate, idle_poll=0.01)
    seen = {}

    def visitor():
        while worker._current is None or worker._current[1] < 0.15:  # the background packing is placing items
            time.sleep(0.001)
        with gate.heavy(fair.Meter(), "a visitor's job", memory=1 << 20):
            deadline = time.monotonic() + 10
            while worker._current is not None and time.monotonic() < deadline:
                time.sleep(0.001)
            seen["stood aside"] = worker._current is None
            seen["memory"] = gate.memory  # the background packing gave its share back
            time.sleep(0.2)
            seen["stayed aside"] = worker._current is None

    t = threading.Thread(target=visitor)
    worker.offer(hist, [PackingConfig(pack_size=640)])
    t.start()
    t.join(60)
    assert seen == {"stood aside": True, "memory": 1 << 20, "stayed aside": True}
    assert worker.wait_idle(120)
    assert worker.preempted >= 1 and PACKINGS.peek(hist, PackingConfig(pack_size=640)) is not None
    assert gate.memory == 0 and gate.running == 0


def test_a_visitor_asking_for_the_packing_being_computed_waits_for_it(wikipedia):
    hist = scaled(wikipedia, 20)
    worker = ahead.Ahead(fair.Gate())
    cfg = PackingConfig(pack_size=896)
    worker.offer(hist, [cfg])
    while worker._current is None and worker.pending():
        time.sleep(0.001)
    seen = []
    assert worker.join(hist, cfg, progress=lambda what, done: seen.append(done))
    kept = PACKINGS.peek(hist, cfg)
    assert kept is not None and PACKINGS.misses == 0  # computed once, by the background thread
    assert seen and all(0 <= f <= 1 for f in seen)


def test_results_that_do_not_fit_the_cache_are_dropped(wikipedia, monkeypatch):
    hist = scaled(wikipedia, 40)
    monkeypatch.setattr(PACKINGS, "max_bytes", 1)  # nothing fits beside what is kept
    PACKINGS.get(hist, PackingConfig(pack_size=512), lambda: pack(hist, PackingConfig(pack_size=512)))
    worker = ahead.Ahead(fair.Gate())
    worker.offer(hist, [PackingConfig(pack_size=768)])
    assert worker.wait_idle(120)
    assert worker.dropped == 1 and list(PACKINGS.entries) == [(hist.fingerprint, PackingConfig(pack_size=512))]


def test_a_result_a_visitor_waits_for_is_kept_even_without_room(wikipedia, monkeypatch):
    """Joined, the background packing is the visitor's own: dropped for lack of room, it had them wait and then
    pack again (seen on the 16M Wikipedia sample: 1.5 s for a pack size the worker had just started)."""
    from advisor.packing import first_fit

    monkeypatch.setattr(first_fit, "CHUNK", 4096)  # a packing long enough to join
    hist = scaled(wikipedia, 40)
    monkeypatch.setattr(PACKINGS, "max_bytes", 1)  # nothing fits beside what is kept
    first = PackingConfig(pack_size=512)
    PACKINGS.get(hist, first, lambda: pack(hist, first))
    worker = ahead.Ahead(fair.Gate())
    cfg = PackingConfig(pack_size=768)
    worker.offer(hist, [cfg])
    while worker._current is None and worker.pending():
        time.sleep(0.001)
    assert worker.join(hist, cfg)
    assert worker.wait_idle(120)
    assert worker.done == 1 and list(PACKINGS.entries) == [(hist.fingerprint, cfg)]  # the oldest made room
    assert PACKINGS.peek(hist, cfg).metadata == pack(hist, cfg).metadata


def test_the_packing_page_wishes_for_its_neighbours_on_big_data(monkeypatch):
    from advisor.model.estimate import packing_config
    from advisor.ui.samples import PACK_SIZE_STEP

    offered = []
    monkeypatch.setattr(ahead.WORKER, "offer", lambda hist, cfgs: offered.append(cfgs) or len(cfgs))
    plan = ui.default_plan("Wikipedia BERT (real, 16.3M)")
    plan = plan.changed(
        {"training": {"seq_length": plan.pack_size + PACK_SIZE_STEP}, "packing": {"pack_size": plan.pack_size}}
    )
    state = {"hist": ui.load_sample("Wikipedia BERT (real, 16.3M)"), "plan": plan}
    assert ui.pack_ahead(state) == 2
    size = state["plan"].pack_size
    assert [c.pack_size for c in offered[0]] == [size + PACK_SIZE_STEP, size - PACK_SIZE_STEP]
    assert offered[0][0] == packing_config(state["plan"].changed({"packing": {"pack_size": size + PACK_SIZE_STEP}}))
    # a pack longer than seq_length is refused by the plan: no neighbour beyond it is wished for
    state["plan"] = ui.default_plan("Wikipedia BERT (real, 16.3M)")
    assert ui.pack_ahead(state) == 1 and offered[-1][0].pack_size == state["plan"].pack_size - PACK_SIZE_STEP
    small = {"hist": ui.load_sample("SQuAD 1.1 (real, 88k)"), "plan": ui.default_plan("SQuAD 1.1 (real, 88k)")}
    assert ui.pack_ahead(small) == 0  # packed in milliseconds: nothing to do ahead


def test_the_gate_lends_background_work_memory_only_while_no_visitor_waits():
    gate = fair.Gate(fair.Budget(slots=1, memory_bytes=100))
    assert gate.claim(60)
    assert not gate.claim(50)  # 60 + 50 > 100
    gate.release(60)
    with gate.heavy(fair.Meter(), "visitor", memory=10):
        assert gate.busy() and not gate.claim(1)
    assert not gate.busy() and gate.claim(100)
    gate.release(100)
    assert gate.memory == 0


def test_shown_figures_survive_a_new_pack_size():
    """What the Packing page keeps of the last packing it showed: a few strings, not the packing."""
    from advisor.ui import views

    result = pack(read_hist("squad_v1.1_len384_hist.csv"), PackingConfig(pack_size=384))
    shown = views.packing_headline(result)
    assert shown["pack_size"] == 384 and [f[0] for f in shown["figures"]][:2] == ["packs", "packing factor n"]
    assert all(isinstance(v, str) for _, v, _ in shown["figures"])
    assert shown["figures"][0][1] == f"{result.num_packs:,}" and np.isfinite(result.metrics.straggler_ratio)
