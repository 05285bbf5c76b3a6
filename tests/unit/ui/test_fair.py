"""The dashboard's fair sharing (advisor/ui/fair.py): heavy-job slots and memory across sessions, CPU budgets per
session, and what a page shows a visitor who meets them."""

from __future__ import annotations

import threading
import time

import pytest

from advisor.ui import fair
from advisor.ui import state as ui
from tests.support.apptest import open_page


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_full_server_says_so_and_a_finished_job_lets_the_next_in():
    gate = fair.Gate(fair.Budget(slots=1, memory_bytes=100, wait_seconds=0.2))
    inside, release = threading.Event(), threading.Event()

    def hold():
        with gate.heavy(fair.Meter(), "first", memory=10):
            inside.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(5)
    with pytest.raises(fair.Busy, match="running 1 heavy job"):
        with gate.heavy(fair.Meter(), "second", memory=10):
            pass
    threading.Timer(0.05, release.set).start()  # the first ends while the third waits: the third gets in
    with gate.heavy(fair.Meter(), "third", memory=10):
        assert gate.running == 1
    t.join()
    assert (gate.running, gate.memory) == (0, 0)


def test_memory_is_shared_and_a_job_over_all_of_it_is_refused_at_once():
    gate = fair.Gate(fair.Budget(slots=4, memory_bytes=100, wait_seconds=0.1))
    with pytest.raises(fair.Busy, match="more than this server gives one job"):
        with gate.heavy(fair.Meter(), "huge", memory=101):
            pass
    with gate.heavy(fair.Meter(), "a", memory=60):
        with pytest.raises(fair.Busy, match="other visitors"):
            with gate.heavy(fair.Meter(), "b", memory=60):
                pass
        with gate.heavy(fair.Meter(), "c", memory=40):
            assert gate.memory == 100


def test_a_failing_job_gives_back_its_slot_and_is_still_charged():
    gate, meter = fair.Gate(fair.Budget(slots=1, memory_bytes=10)), fair.Meter()
    with pytest.raises(ZeroDivisionError):
        with gate.heavy(meter, "x", memory=5):
            _burn(0.05)
            raise ZeroDivisionError("the job failed")
    assert (gate.running, gate.memory) == (0, 0)
    assert meter.spent(time.monotonic(), 60) >= 0.04


def test_a_session_over_its_cpu_budget_waits_while_another_session_runs():
    gate = fair.Gate(fair.Budget(slots=2, memory_bytes=10, session_cpu_seconds=0.1, window_seconds=30))
    greedy, other = fair.Meter(), fair.Meter()
    with gate.heavy(greedy, "burn", memory=1):
        _burn(0.15)
    with pytest.raises(fair.Busy, match=r"used its 0 CPU seconds.*start again in (29|30) s"):
        with gate.heavy(greedy, "again", memory=1):
            pass
    with gate.heavy(other, "fine", memory=1):  # the budget is the session's, not the server's
        pass
    assert greedy.spent(time.monotonic() + 31, 30) == 0  # old charges expire with the window


def test_child_process_cpu_is_charged_too():
    meter = fair.Meter()
    with fair.Gate().heavy(meter, "child", memory=1, child_cpu=lambda: 7.5):
        pass
    assert 7.5 <= meter.spent(time.monotonic(), 60) < 8


@pytest.mark.slow  # AppTest
def test_a_session_over_budget_keeps_its_page_and_is_told_why(monkeypatch):
    """The Online packing page on a plan not computed yet: refused with the budget's message, the plan kept."""
    monkeypatch.setattr(fair, "GATE", fair.Gate(fair.Budget(session_cpu_seconds=1.0)))
    meter = fair.Meter()
    meter.charge(time.monotonic(), 5.0)
    plan = ui.default_plan().changed({"parallel": {"cp": 2}, "training": {"global_batch_samples": 96}})
    at = open_page("pages/6_Online_packing.py", {"_meter": meter, "plan": plan})
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("used its 1 CPU seconds" in e for e in errors), errors
    assert at.session_state["plan"] == plan
