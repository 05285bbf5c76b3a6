"""Packings computed ahead, in one background thread, while the server has nothing else to do: the pack sizes next to
the one a visitor looks at on big data, so the next click finds its packing kept.

Alternatives: nothing ahead (every new pack size of 16M samples waits seconds), or a pool computing every size a
visitor might pick (the server's cores and memory spent on guesses, and visitors' own work slowed). Here one thread,
a short queue (the newest wishes first, the oldest dropped), and three rules of the server's fairness gate
(advisor/ui/fair.py): it starts only when no visitor's heavy job runs or waits, and takes its memory from the
server's budget (``Gate.claim``); it stops between chunks of items (``first_fit``'s pause, ~50 ms apart) as soon
as a visitor's heavy job arrives, dropping its partial work and giving the memory back, and tries again later;
and it keeps a result only where the packing cache has room beside everything kept, evicting nothing
(``BoundedCache.offer``). A visitor who asks for the packing it is
computing waits for it instead of packing again (``join``), and that result is then kept as the visitor's own.

    >>> worker = Ahead()
    >>> worker.pending(), worker.wait_idle(1.0)
    (0, True)
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from advisor.data.lengths import LengthHistogram
from advisor.packing.cache import PACKINGS
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.ui import fair

MAX_PENDING = 4  # wishes kept; older ones are dropped
MEMORY_PER_SAMPLE = 48  # bytes a packing needs while computed (advisor/ui/state.py analysis_memory)


class Preempted(Exception):
    """A visitor's heavy job arrived: the background packing stops between chunks, its work dropped."""


class Ahead:
    """The background worker: ``offer`` wishes, ``join`` the one being computed, ``wait_idle`` for tests."""

    def __init__(self, gate: fair.Gate | None = None, idle_poll: float = 0.05):
        self.gate = gate
        self.idle_poll = idle_poll
        self._wishes: OrderedDict = OrderedDict()  # key -> (hist, cfg), newest last
        self._current = None  # (key, progress fraction) of the packing being computed
        self._joined = 0  # visitors waiting for the current packing
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.done = self.dropped = self.preempted = 0  # what happened to the wishes (tests, the benchmark)

    def _gate(self) -> fair.Gate:
        return self.gate if self.gate is not None else fair.GATE

    @staticmethod
    def _key(hist: LengthHistogram, cfg: PackingConfig):
        return hist.fingerprint, cfg

    def offer(self, hist: LengthHistogram, configs: list[PackingConfig]) -> int:
        """Wish for these packings (the first most wanted); those kept or wished already are skipped. How many were
        queued."""
        added = 0
        with self._cond:
            for cfg in reversed(configs):
                key = self._key(hist, cfg)
                if PACKINGS.peek(hist, cfg) is not None or (self._current and self._current[0] == key):
                    continue
                self._wishes.pop(key, None)
                self._wishes[key] = (hist, cfg)
                added += 1
            while len(self._wishes) > MAX_PENDING:
                self._wishes.popitem(last=False)
                self.dropped += 1
            if self._wishes and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="advisor-ahead", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return added

    def pending(self) -> int:
        with self._cond:
            return len(self._wishes) + (self._current is not None)

    def join(
        self,
        hist: LengthHistogram,
        cfg: PackingConfig,
        progress: Callable[[str, float], None] | None = None,
        timeout: float = 120.0,
    ) -> bool:
        """If this packing is being computed in the background, wait for it (reporting its progress) and say whether
        it is now kept; False at once otherwise."""
        key = self._key(hist, cfg)
        deadline = time.monotonic() + timeout
        with self._cond:
            if not self._current or self._current[0] != key:
                return False
            self._joined += 1
            try:
                while self._current and self._current[0] == key and time.monotonic() < deadline:
                    if progress is not None:
                        progress(f"packing {hist.num_samples:,} samples (started ahead)", self._current[1])
                    self._cond.wait(0.1)
            finally:
                self._joined -= 1
        return PACKINGS.peek(hist, cfg) is not None

    def wait_idle(self, timeout: float = 120.0) -> bool:
        """Wait until no wish is left; whether that happened within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._wishes or self._current is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    # ------------------------------------------------------------------------------------------ the thread
    def _next(self):
        """The newest wish once the server is idle and has room for it, or None when there is none left."""
        gate = self._gate()
        while True:
            with self._cond:
                if not self._wishes:
                    return None
                key, (hist, cfg) = next(reversed(self._wishes.items()))
                if PACKINGS.peek(hist, cfg) is not None:
                    self._wishes.pop(key)
                    self._cond.notify_all()
                    continue
                if gate.claim(MEMORY_PER_SAMPLE * hist.num_samples):
                    self._wishes.pop(key)
                    self._current = (key, 0.0)
                    return key, hist, cfg
            time.sleep(self.idle_poll)

    def _pause(self) -> None:
        if self._joined == 0 and self._gate().busy():
            raise Preempted

    def _progress(self, what: str, fraction: float) -> None:
        with self._cond:
            if self._current is not None:
                self._current = (self._current[0], fraction)
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            key, hist, cfg = job
            memory, released = MEMORY_PER_SAMPLE * hist.num_samples, False
            try:
                result = pack(hist, cfg, progress=self._progress, pause=self._pause)
                self._gate().release(memory)  # computed: given back before anyone can see this packing done
                released = True
                with self._cond:
                    # a visitor waiting for it gets it kept as their own packing would be (the oldest kept goes if
                    # there is no room): offered like a guess and dropped, it had them wait and then pack again.
                    # Decided and kept under the lock, and no longer current before it is released, so a visitor
                    # joins either before (and is counted) or after (and finds it kept, or packs it themselves)
                    kept = (PACKINGS.keep if self._joined > 0 else PACKINGS.offer)(hist, cfg, result)
                    self._current = None
                self.done += kept
                self.dropped += not kept
                del result
            except Preempted:
                self.preempted += 1
                with self._cond:  # wished again, behind newer wishes
                    if key not in self._wishes and len(self._wishes) < MAX_PENDING:
                        self._wishes[key] = (hist, cfg)
                        self._wishes.move_to_end(key, last=False)
            except Exception:  # noqa: BLE001 - a wish the engine refuses is dropped; the visitor sees why if asked
                self.dropped += 1
            finally:
                if not released:
                    self._gate().release(memory)
                with self._cond:
                    self._current = None
                    self._cond.notify_all()


WORKER = Ahead()  # the server's one background worker
