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


_RAY_OWNER = "ADVISOR_RAY_OWNER"  # in the environment of every process a local Ray started: "{run's pid}-{random}"


@contextlib.contextmanager
def ray_session(cpus: int, address: str | None = None) -> Iterator[list[str]]:
    """Ray for a block: connected to ``address``, or a local Ray on ``cpus`` cores started here and stopped at the
    end (a Ray already running in this process is used as it is and left running). Yields notes: the processes of
    a local Ray whose run was killed outright (SIGKILL leaves Ray's agents running), stopped before this one starts.

    Why the signal handlers are put back: ``ray.init`` installs its own SIGTERM handler (``sys.exit(15)``), so a
    SIGTERM during a Ray run ended it with exit 15, no message, and Ray's dashboard and runtime-env agents alive for
    good; with the advisor's handler back, SIGTERM stops the run as Ctrl-C does and ``ray.shutdown`` runs."""
    import logging

    import ray

    logging.getLogger("ray").setLevel(logging.WARNING)  # the driver's own progress line is enough
    if ray.is_initialized():
        yield []
        return
    notes = [] if address else sweep_orphaned_ray()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    if not address:  # every process the local Ray starts inherits this: found again by it when Ray is stopped
        os.environ[_RAY_OWNER] = f"{os.getpid()}-{os.urandom(6).hex()}"
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(1, cpus), include_dashboard=False, log_to_driver=False)
    except BaseException as e:  # interrupted while starting: what was started is stopped
        _stop_ray(ray, local=not address)
        if isinstance(e, SystemExit) and e.code == signal.SIGTERM:  # Ray's own handler took a SIGTERM meanwhile
            raise Terminated() from None
        raise
    finally:
        # always set again, even where Python's own record still names the advisor's handler: Ray's C++ core puts
        # absl's failure-signal handler on SIGTERM below Python's, which prints a stack and aborts (exit 134)
        for s, handler in before.items():
            if handler is not None:
                with contextlib.suppress(ValueError):  # off the main thread: nothing was changed there either
                    signal.signal(s, handler)
    try:
        yield notes
    finally:
        _stop_ray(ray, local=not address)  # this block started Ray, so it stops it: no raylets left behind


def sweep_orphaned_ray() -> list[str]:
    """Stop the processes a local Ray of an earlier advisor run started, where that run is gone (its pid in their
    ``ADVISOR_RAY_OWNER`` is dead: it was killed with SIGKILL, which nothing can clean up after); a note each."""
    owners: dict[str, list[int]] = {}
    for pid, value in _values_of(_RAY_OWNER).items():
        owners.setdefault(value, []).append(pid)
    notes = []
    for owner, pids in owners.items():
        run = owner.split("-", 1)[0]
        if run.isdigit() and not os.path.exists(f"/proc/{run}"):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            notes.append(f"stopped {len(pids)} Ray process(es) left by an interrupted run (pid {run})")
    return notes


def _stop_ray(ray, *, local: bool) -> None:
    """``ray.shutdown``, then, for a local Ray, SIGKILL to every process it had started that is still alive (they
    carry this run's ``ADVISOR_RAY_OWNER`` in their environment). Why: a Ray stopped while it was still starting left
    its dashboard and runtime-env agents (the raylet's children, forked as it died) running for good."""
    import time

    with contextlib.suppress(Exception):
        ray.shutdown()
    owner = os.environ.pop(_RAY_OWNER, None) if local else None
    if owner is None:
        return
    # until none is seen three times in a row (at most 5 s): a raylet stopped while starting forks its agents as
    # it dies, after a first look (the round-4 bench saw 2 of them alive once in 16 Ray runs with one look)
    quiet, deadline = 0, time.monotonic() + 5
    while quiet < 3 and time.monotonic() < deadline:
        found = _carrying(f"{_RAY_OWNER}={owner}")
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        quiet = 0 if found else quiet + 1
        time.sleep(0.1)


def _carrying(entry: str) -> list[int]:
    """Processes other than this one whose environment holds ``entry`` (``NAME=value``; ``NAME=`` for any value),
    read from /proc."""
    name, _, value = entry.partition("=")
    return [pid for pid, held in _values_of(name).items() if not value or held == value]


def _values_of(name: str) -> dict[int, str]:
    """pid -> the value of environment variable ``name``, for every process other than this one that has it (each
    process's environment read once, from /proc)."""
    found, mine, key = {}, os.getpid(), name.encode() + b"="
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != mine:
                with contextlib.suppress(OSError):
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        held = next((e for e in f.read().split(b"\0") if e.startswith(key)), None)
                    if held is not None:
                        found[int(entry)] = held[len(key) :].decode(errors="replace")
    return found


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
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("fork"), initializer=_die_with, initargs=(os.getpid(), initializer)
    )
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


__all__ = ["Terminated", "kill_workers", "process_pool", "ray_session", "sigterm_as_interrupt"]
