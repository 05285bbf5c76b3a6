"""One dashboard server shared fairly: a cap on the heavy jobs it runs at once and a CPU budget per visitor.

Alternatives: a job queue with its own workers (Celery, Ray Serve: one more service to deploy for a planning tool)
or nothing (one visitor's 16M-sample schedule or raw upload holds the server's memory and cores while every other
session waits). Here a heavy job (online schedules, the layout search, the packing sweep, raw-data tokenization)
first passes its session's budget, then takes a slot of the server's gate with the memory it declares, and is
charged the CPU seconds it used. A visitor over budget, or a server full, gets one message and keeps its state.

    >>> gate = Gate(Budget(slots=1, memory_bytes=1 << 30, session_cpu_seconds=60, window_seconds=600))
    >>> meter = Meter()
    >>> with gate.heavy(meter, "the online schedule", memory=1 << 20):
    ...     pass
    >>> gate.running, len(meter.charges)
    (0, 1)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What the server gives heavy work: ``slots`` jobs at once holding at most ``memory_bytes`` together (each job
    declares its own), and each session ``session_cpu_seconds`` of them over the last ``window_seconds``; a job
    waits up to ``wait_seconds`` for a slot before its visitor is told the server is busy."""

    slots: int = 2
    memory_bytes: int = 3 << 29  # 1.5 GiB: with the server's own ~0.5 GiB and its caches, under 3 GB
    session_cpu_seconds: float = 180.0
    window_seconds: float = 600.0
    wait_seconds: float = 20.0  # a visitor waits behind a spinner for a slot rather than retrying by hand


class Busy(RuntimeError):
    """A heavy job not started: its session is over budget or the server is full (the message says which)."""


class Meter:
    """One session's charges: (when, CPU seconds) of its heavy jobs, the old ones forgotten."""

    def __init__(self) -> None:
        self.charges: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()

    def spent(self, now: float, window: float) -> float:
        with self._lock:
            while self.charges and self.charges[0][0] < now - window:
                self.charges.popleft()
            return sum(seconds for _, seconds in self.charges)

    def charge(self, now: float, seconds: float) -> None:
        with self._lock:
            self.charges.append((now, seconds))

    def free_again_in(self, now: float, budget: Budget) -> float:
        """Seconds until enough old charges expire to bring the session back under its budget."""
        with self._lock:
            over, left = sum(s for _, s in self.charges) - budget.session_cpu_seconds, 0.0
            for when, seconds in self.charges:
                left = when + budget.window_seconds - now
                over -= seconds
                if over < 0:
                    break
            return max(0.0, left)


class Gate:
    """The server's heavy-job slots and their memory (a condition variable: a finished job wakes the waiters)."""

    def __init__(self, budget: Budget = Budget()):
        self.budget = budget
        self.running = 0
        self.waiting = 0  # visitors' jobs waiting for a slot
        self.memory = 0
        self._free = threading.Condition()

    def busy(self) -> bool:
        """Whether a visitor's heavy job runs or waits: background work (advisor/ui/ahead.py) stands aside."""
        return self.running > 0 or self.waiting > 0

    def claim(self, memory: int) -> bool:
        """Background work's share of the memory budget, taken only while no visitor's heavy job runs or waits and
        it fits (no slot: a visitor's job that arrives makes it stop, ``release``, and go first)."""
        with self._free:
            if self.busy() or self.memory + memory > self.budget.memory_bytes:
                return False
            self.memory += memory
            return True

    def release(self, memory: int) -> None:
        with self._free:
            self.memory -= memory
            self._free.notify_all()

    @contextmanager
    def heavy(self, meter: Meter, what: str, *, memory: int, child_cpu=None) -> Iterator[None]:
        """Run the body as one heavy job of ``meter``'s session, declaring ``memory`` bytes; ``Busy`` if it may
        not start. Charged: this thread's CPU time over the body, plus ``child_cpu()`` (seconds its child
        processes used) when given."""
        b, now = self.budget, time.monotonic()
        if meter.spent(now, b.window_seconds) >= b.session_cpu_seconds:
            raise Busy(
                f"{what}: this session has used its {b.session_cpu_seconds:.0f} CPU seconds of heavy work for "
                f"the last {b.window_seconds / 60:.0f} minutes; it can start again in "
                f"{meter.free_again_in(now, b):.0f} s (or run it on your own machine: python -m advisor)"
            )
        if memory > b.memory_bytes:
            raise Busy(
                f"{what}: needs about {memory / 2**30:.1f} GiB, more than this server gives one job "
                f"({b.memory_bytes / 2**30:.1f} GiB); run it with python -m advisor on your own machine"
            )
        with self._free:
            fits = lambda: self.running < b.slots and self.memory + memory <= b.memory_bytes  # noqa: E731
            self.waiting += 1
            try:
                ok = self._free.wait_for(fits, timeout=b.wait_seconds)
            finally:
                self.waiting -= 1
            if not ok:
                raise Busy(
                    f"{what}: the server is running {self.running} heavy job(s) for other visitors; try again "
                    "in a moment"
                )
            self.running += 1
            self.memory += memory
        cpu = time.thread_time()
        try:
            yield
        finally:
            used = time.thread_time() - cpu + (child_cpu() if child_cpu is not None else 0.0)
            meter.charge(time.monotonic(), used)
            with self._free:
                self.running -= 1
                self.memory -= memory
                self._free.notify_all()


GATE = Gate()  # the server's one gate: every session of this process shares it


def meter_of(state) -> Meter:
    """The session's meter, made on first use (kept in the session's state)."""
    meter = state.get("_meter")
    if not isinstance(meter, Meter):
        meter = state["_meter"] = Meter()
    return meter
