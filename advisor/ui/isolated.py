"""Work a visitor's input drives (tokenizing an upload with a tokenizer's chat template) in a child process with
hard limits, so the shared server's own process never runs it.

Alternatives: a thread (cannot be stopped, shares the server's memory and GIL: one template that loops holds every
session), ``multiprocessing`` with fork (unsafe in a multi-threaded server) or a pool (a crashed worker takes its
neighbours' jobs). Here: a fresh ``python -m advisor.ui.isolated FOLDER`` per job. The child sets its own limits
(address space, CPU seconds) before it reads anything, runs one function from a fixed list (never a name taken from
the request), and answers in JSON and ``.npy`` files (never a pickle); the parent follows its progress, kills it at
the wall-clock limit or when the visitor leaves, and reports how it ended in one line.

    >>> Limits().cpu_seconds, Limits().memory_bytes >> 30
    (120, 2)
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.errors import InputError

POLL_SECONDS = 0.1


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one child may use: CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS) and wall-clock seconds."""

    cpu_seconds: int = 120
    memory_bytes: int = 2 << 30
    wall_seconds: float = 180.0


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a child ended: its histogram, or the one-line reason it has none; and the CPU seconds it used."""

    hist: LengthHistogram | None
    error: str | None
    cpu_seconds: float


# ---------------------------------------------------------------------------------------------- the child
def _tokenize(folder: Path, args: dict, progress) -> LengthHistogram:
    from advisor.ui.raw_data import tokenize_upload

    data = (folder / "upload").read_bytes()
    return tokenize_upload(
        data,
        args["name"],
        args["tokenizer"],
        args["fmt"],
        int(args["max_seq_length"]),
        progress=progress,
        env=args.get("env"),
    )


JOBS: dict[str, Callable] = {"tokenize": _tokenize}  # what a child may run: nothing else, whatever the request says


def _save(hist: LengthHistogram, folder: Path) -> None:
    np.save(folder / "lengths.npy", hist.lengths)
    np.save(folder / "counts.npy", hist.counts)
    if hist.order is not None:
        np.save(folder / "order.npy", hist.order)
    if hist.loss_tokens is not None:
        np.save(folder / "loss_tokens.npy", hist.loss_tokens)
    meta = {
        "source": hist.source,
        "notes": list(hist.notes),
        "excluded": [{"reason": e.reason, "count": e.count, "first_at": e.first_at} for e in hist.excluded],
    }
    (folder / "result.json").write_text(json.dumps(meta))


def _load(folder: Path) -> LengthHistogram:
    meta = json.loads((folder / "result.json").read_text())
    order, loss = folder / "order.npy", folder / "loss_tokens.npy"
    return LengthHistogram(
        lengths=np.load(folder / "lengths.npy", allow_pickle=False),
        counts=np.load(folder / "counts.npy", allow_pickle=False),
        source=meta["source"],
        notes=tuple(meta["notes"]),
        excluded=tuple(Exclusion(**e) for e in meta["excluded"]),
        order=np.load(order, allow_pickle=False) if order.exists() else None,
        loss_tokens=np.load(loss, allow_pickle=False) if loss.exists() else None,
    )


def child(folder: Path) -> int:
    """The child's side: limits first, then the one job, its answer or its error written into ``folder``."""
    request = json.loads((folder / "request.json").read_text())
    resource.setrlimit(resource.RLIMIT_CPU, (request["cpu_seconds"], request["cpu_seconds"] + 5))
    resource.setrlimit(resource.RLIMIT_AS, (request["memory_bytes"], request["memory_bytes"]))
    log = open(folder / "progress", "a", buffering=1)

    def progress(what: str, done: float) -> None:
        log.write(f"{min(1.0, max(0.0, float(done))):.4f}\t{' '.join(str(what).split())[:200]}\n")

    try:
        _save(JOBS[request["job"]](folder, request["args"], progress), folder)
        return 0
    except MemoryError:
        message = f"ran out of its {request['memory_bytes'] / 2**30:.0f} GiB of memory on this server"
    except InputError as e:
        message = str(e)
    except (ValueError, RecursionError) as e:
        message = f"could not be read ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    except BaseException as e:  # noqa: BLE001 - a native panic is a BaseException: one line, never a traceback
        message = f"could not be tokenized ({type(e).__name__})"
    (folder / "error.json").write_text(json.dumps({"message": message}))
    return 1


# ---------------------------------------------------------------------------------------------- the parent
def run(
    job: str, args: dict, files: dict[str, bytes], *, limits: Limits = Limits(), progress=None, name: str = "the upload"
) -> Outcome:
    """Run ``job`` (a key of JOBS) on ``args`` and ``files`` (written into the child's folder) in a child process;
    ``progress(what, fraction)`` hears the child's reports. The child is killed when the wall clock runs out, and
    when this thread is interrupted (a Streamlit rerun or a visitor leaving raises in it)."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}")
    folder = Path(tempfile.mkdtemp(prefix="advisor-job-"))
    try:
        for file, data in files.items():
            (folder / file).write_bytes(data)
        (folder / "request.json").write_text(
            json.dumps(
                {"job": job, "args": args, "cpu_seconds": limits.cpu_seconds, "memory_bytes": limits.memory_bytes}
            )
        )
        (folder / "progress").touch()
        return _follow(folder, limits, progress, name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _follow(folder: Path, limits: Limits, progress, name: str) -> Outcome:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "TOKENIZERS_PARALLELISM": "false",
        "RAYON_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        # pyarrow's default pool reserves ~1 GiB of address space up front, which RLIMIT_AS would count
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_ARENA_MAX": "2",
    }
    with open(folder / "stderr", "wb") as stderr:  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(
            [sys.executable, "-m", "advisor.ui.isolated", str(folder)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    start, seen, status, usage = time.monotonic(), 0, None, None
    try:
        while status is None:
            pid, status_, usage_ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, usage = status_, usage_
                break
            seen = _report(folder, seen, progress)
            if time.monotonic() - start > limits.wall_seconds:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                return Outcome(
                    hist=None,
                    cpu_seconds=cpu,
                    error=f"{name}: stopped after {limits.wall_seconds:.0f} s, "
                    "this server's limit; use python -m advisor tokenize --sample N on your own machine",
                )
            time.sleep(POLL_SECONDS)
    finally:
        if status is None:  # interrupted (the visitor left): the child goes too
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
        proc.returncode = 0  # reaped above: Popen must not wait for it again
    _report(folder, seen, progress)
    assert usage is not None  # the loop ends only once wait4 reported the child, with its usage
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = (
            f"used its {limits.cpu_seconds} CPU seconds"
            if sig in (signal.SIGXCPU, signal.SIGKILL) and cpu >= limits.cpu_seconds - 1
            else f"was stopped by signal {signal.Signals(sig).name}"
        )
        return Outcome(
            hist=None,
            cpu_seconds=cpu,
            error=f"{name}: tokenizing it {why} on this server; use "
            "python -m advisor tokenize --sample N on your own machine",
        )
    if (folder / "error.json").exists():
        return Outcome(hist=None, cpu_seconds=cpu, error=json.loads((folder / "error.json").read_text())["message"])
    if os.WEXITSTATUS(status) != 0 or not (folder / "result.json").exists():
        return Outcome(
            hist=None,
            cpu_seconds=cpu,
            error=f"{name}: could not be tokenized (the worker exited with status {os.WEXITSTATUS(status)})",
        )
    return Outcome(hist=_load(folder), error=None, cpu_seconds=cpu)


def _report(folder: Path, seen: int, progress) -> int:
    """Pass the child's new progress lines on; the count of bytes read so far."""
    if progress is None:
        return seen
    with open(folder / "progress", "rb") as f:
        f.seek(seen)
        text = f.read()
    complete = text[: text.rfind(b"\n") + 1]
    lines = complete.decode("utf-8", "replace").splitlines()
    if lines:
        done, _, what = lines[-1].partition("\t")
        progress(what, float(done))
    return seen + len(complete)


if __name__ == "__main__":
    sys.exit(child(Path(sys.argv[1])))
