"""Worker processes that die with their parent, and SIGTERM handled as Ctrl-C.

The alternatives: ``concurrent.futures``' pool as it is (its workers outlive a parent killed by SIGTERM or SIGKILL,
each holding its share of memory for good, and Ctrl-C prints one traceback per worker), or a service manager's
process group kill (not there when a user runs ``advisor prepare`` in a shell). Here every worker asks the kernel
to kill it when its parent dies (Linux's ``PR_SET_PDEATHSIG``; elsewhere it checks its parent at start), ignores
Ctrl-C (the parent handles it and kills the pool), and a pool left by an exception is killed, not waited for.

Below every layer: imports nothing of the advisor.

>>> with process_pool(2) as pool:
...     sorted(pool.map(abs, [-2, 1]))
[1, 2]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that every ``finally`` and ``except BaseException`` cleans up
    as for Ctrl-C (a staging folder removed, a pool killed). A KeyboardInterrupt, so code that cleans up after
    Ctrl-C needs nothing more."""

    exit_code = 143  # 128 + SIGTERM, as a shell reports a process that SIGTERM ended


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` in the main thread (outside it, or off the main thread,
    nothing changes)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _die_with(parent: int, then: Callable[[], None] | None) -> None:
    """A pool worker's initializer: killed when ``parent`` dies, deaf to Ctrl-C, SIGTERM back to its default."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent handles it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if then is not None:
        then()


@contextlib.contextmanager
def process_pool(workers: int, initializer: Callable[[], None] | None = None) -> Iterator[ProcessPoolExecutor]:
    """A forked ProcessPoolExecutor whose workers die with this process; leaving the block by an exception
    (Ctrl-C, SIGTERM, a refused record) kills the workers at once instead of waiting for their tasks."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork"), initializer=_die_with,
                               initargs=(os.getpid(), initializer))
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's workers and drop its pending tasks (``shutdown`` alone waits for the running ones)."""
    processes = dict(getattr(pool, "_processes", None) or {})  # the executor's own table of its workers
    for process in processes.values():
        with contextlib.suppress(Exception):
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes.values():
        with contextlib.suppress(Exception):
            process.join(timeout=5)


__all__ = ["Terminated", "kill_workers", "process_pool", "sigterm_as_interrupt"]
