"""The trial as a background job for the dashboard: start it, follow its log, cancel it, read its results.

The job is a separate process group (``start_new_session``), so it never blocks the page and keeps running when
the user switches pages; its folder holds the plan, the lengths, the log and, at the end, ``trial.json``.

A visitor must not be able to take the server down, so a job has a budget: one job at a time per server
(``JobBusy`` otherwise), steps, pack size and scale capped (``TRIAL_LIMITS``), a wall-clock limit, and a heartbeat:
the page touches ``heartbeat`` while it follows the job, and the job stops itself when nobody has for
``HEARTBEAT_SECONDS`` (the session was closed). ``collect`` reads the results and removes the folder.

The job runs ``python -m advisor trial`` with every setting of its ``TrialConfig`` on the command line
(``config.cli_arguments``) and the plan's full length histogram, so it measures exactly what the same command
typed by hand measures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict

from advisor.data.lengths import LengthHistogram
from advisor.plan import Plan, dump_plan
from advisor.trial.config import DEFAULT, TrialConfig, cli_arguments
from advisor.trial.report import check_result

ROOT = Path(__file__).resolve().parents[2]


class TrialLimits(TypedDict):
    steps: int
    warmup: int
    pack_size: int
    scales: tuple[str, ...]
    packs_per_step: int
    micro_batch_size: int
    threads: int
    parameters: int


TRIAL_LIMITS: TrialLimits = {
    "steps": 50,
    "warmup": 10,
    "pack_size": 8192,
    "scales": ("small", "medium"),
    "packs_per_step": 16,
    "micro_batch_size": 16,
    "threads": 4,
    "parameters": 150_000_000,
}
# the Trial page polls every second and every page run touches it: a job unheard of for this long lost its visitor
HEARTBEAT_SECONDS = 90.0
MEMORY_GIB = 2.0  # a trial's own memory on the shared server (its --memory-gib): past it, one message, not the server
WALL_SECONDS = 900.0  # a CPU trial of the largest allowed size takes a few minutes
MAX_RESULT_BYTES = 8 << 20


class JobBusy(RuntimeError):
    """Another trial is running on this server."""


_LOCK = threading.Lock()
_RUNNING: list[TrialJob] = []  # at most one: the server's job


@dataclass(frozen=True, kw_only=True)
class TrialJob:
    pid: int
    folder: str

    @property
    def log(self) -> Path:
        return Path(self.folder) / "trial.log"

    @property
    def results(self) -> Path:
        return Path(self.folder) / "trial.json"

    @property
    def heartbeat(self) -> Path:
        return Path(self.folder) / "heartbeat"


def check_request(cfg: TrialConfig, plan: Plan | None = None) -> None:
    """Refuse a trial over the server's budget, with what is allowed."""
    lim = TRIAL_LIMITS
    if (
        not 1 <= cfg.steps <= lim["steps"]
        or not 1 <= cfg.warmup <= lim["warmup"]
        or not 64 <= cfg.pack_size <= lim["pack_size"]
        or cfg.scale not in lim["scales"]
        or not 1 <= cfg.packs_per_step <= lim["packs_per_step"]
        or not 1 <= cfg.micro_batch_size <= lim["micro_batch_size"]
        or cfg.break_mask
        or not 1 <= (cfg.threads or 1) <= lim["threads"]
    ):
        raise ValueError(
            f"a dashboard trial takes 1-{lim['steps']} steps, 1-{lim['warmup']} warm-up steps, pack size "
            f"64-{lim['pack_size']}, at most {lim['packs_per_step']} packs per step, micro batches of at "
            f"most {lim['micro_batch_size']}, at most {lim['threads']} threads and scale "
            f"{' or '.join(lim['scales'])}; run larger trials from the command line on a GPU node"
        )
    scale = cfg.scale
    if plan is not None:
        params = trial_parameters(plan, scale)
        if params > lim["parameters"]:
            raise ValueError(
                f"this plan's {scale} trial model has {params / 1e6:,.0f}M parameters; a dashboard trial "
                f"takes at most {lim['parameters'] / 1e6:,.0f}M: choose small, or run it on a GPU node"
            )


def trial_parameters(plan: Plan, scale: str) -> int:
    """Parameters of the trial's model for this plan, counted by the estimator's own ``count_parameters`` on the
    trial's model (``trial_plan``), without building it."""
    from advisor.model.parameters import count_parameters
    from advisor.trial.run import model_config, trial_plan  # torch is imported only when a trial is checked

    return int(count_parameters(trial_plan(plan, model_config(plan, scale)).model).total)


def start_trial(plan: Plan, hist: LengthHistogram, config: TrialConfig = DEFAULT, **changes) -> TrialJob:
    """Start the server's one trial job (``JobBusy`` if one is running, ``ValueError`` over the budget).

    ``changes`` override fields of ``config`` (``steps=5, pack_size=256``); the rest are the CLI's defaults.
    """
    cfg = replace(config, **changes)
    check_request(cfg, plan)
    with _LOCK:
        _reap_stale_folders()
        _RUNNING[:] = [j for j in _RUNNING if _alive(j.pid)]
        if _RUNNING:
            raise JobBusy("another trial is running on this server; wait for it or cancel it")
        job = _start(plan, hist, cfg)
        _RUNNING.append(job)
        return job


def write_lengths(hist: LengthHistogram, path: Path) -> None:
    """The exact histogram as a length,count CSV (its size is the number of distinct lengths, not of samples).

    Exact because the trial draws its samples from these counts: rescaling them (as the job did past 200k
    samples) made the job draw other samples than the command line on the same data.
    """
    path.write_text(
        "length,count\n" + "".join(f"{v},{c}\n" for v, c in zip(hist.lengths, hist.counts, strict=True) if c > 0)
    )


def _start(plan: Plan, hist: LengthHistogram, cfg: TrialConfig) -> TrialJob:
    folder = Path(tempfile.mkdtemp(prefix="advisor-trial-"))
    lengths = folder / "lengths.csv"
    write_lengths(hist, lengths)
    (folder / "heartbeat").touch()
    trial_plan = plan.changed({"data": {"lengths": str(lengths), "column": None}})
    (folder / "plan.yaml").write_text(dump_plan(trial_plan))
    log = open(folder / "trial.log", "w")  # noqa: SIM115 - the child writes to it after we return
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "advisor",
            "trial",
            str(folder / "plan.yaml"),
            *cli_arguments(cfg),
            # --force: the job's own temporary folder already holds its plan, lengths and log
            "--out",
            str(folder),
            "--force",
            "--heartbeat",
            str(folder / "heartbeat"),
            "--heartbeat-seconds",
            str(HEARTBEAT_SECONDS),
            "--wall-seconds",
            str(WALL_SECONDS),
            "--memory-gib",
            str(MEMORY_GIB),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return TrialJob(pid=proc.pid, folder=str(folder))


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our finished child
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def poll(job: TrialJob) -> dict:
    """``state`` (running, done, failed), the log's last lines, and the results once written. Polling is the
    page's heartbeat: while a page polls, the job keeps running."""
    running = _alive(job.pid)
    if running:
        touch(job)
    lines = _tail(job.log)
    result = None
    if not running and job.results.exists():
        try:
            result = read_results(job.results.read_bytes(), "trial.json")
        except ValueError:
            result = None
    state = "running" if running else ("done" if result is not None else "failed")
    return {"state": state, "log": "\n".join(lines[-12:]), "result": result}


def _tail(log: Path, keep: int = 12) -> list[str]:
    """The log's last lines as a visitor may see them: no traceback frames, no server paths."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, log.stat().st_size - 16384))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    hidden = (str(ROOT), sys.prefix, sys.base_prefix, tempfile.gettempdir())
    out = []
    for line in lines:
        if line.startswith(("Traceback", "  File ", "    ")) or set(line.strip()) <= set("^~ "):
            continue
        for prefix in hidden:
            line = line.replace(prefix, "…")
        out.append(line)
    return out[-keep:]


def _reap_stale_folders() -> None:
    """Remove trial folders nobody collected (their page was closed), once no process can still write them."""
    for folder in Path(tempfile.gettempdir()).glob("advisor-trial-*"):
        try:
            if time.time() - folder.stat().st_mtime > 2 * WALL_SECONDS:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass


def touch(job: TrialJob) -> None:
    """Keep a session's job alive while its visitor is on any page (each page run touches the heartbeat)."""
    try:
        os.utime(job.heartbeat)
    except OSError:
        pass


def cancel(job: TrialJob) -> None:
    try:
        os.killpg(job.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def collect(job: TrialJob) -> dict | None:
    """The finished job's results (or None), its folder removed; a running job is cancelled first."""
    if _alive(job.pid):
        cancel(job)
        deadline = time.time() + 10
        while _alive(job.pid) and time.time() < deadline:
            time.sleep(0.1)
    result = None
    if job.results.exists():
        try:
            result = read_results(job.results.read_bytes(), "trial.json")
        except ValueError:
            result = None
    shutil.rmtree(job.folder, ignore_errors=True)
    return result


def read_results(data: bytes, name: str) -> dict:
    """A ``trial.json`` from a run elsewhere (a GPU node), checked for the keys the page shows."""
    name = name[:80]
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(f"{name}: {len(data):,} bytes is not a trial result (at most {MAX_RESULT_BYTES:,})")
    try:
        result = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{name}: not a trial JSON ({str(e)[:120]})") from None
    if not isinstance(result, dict):
        raise ValueError(f"{name}: not a trial result (a JSON {type(result).__name__})")
    missing = [
        k
        for k in ("device", "packed", "padded", "block_masked", "memory", "loss_parity", "grad_parity")
        if k not in result
    ]
    if missing:
        raise ValueError(f"{name}: not a trial result, missing {', '.join(missing)}")
    check_result(result, name)  # an older format, or timed steps the report cannot use: one message
    return result


def start_watchdog(heartbeat: str | None, heartbeat_seconds: float, wall_seconds: float | None) -> None:
    """In the trial process: exit (code 4) when the page stopped following it or the wall-clock budget is spent.

    A daemon thread, so a trial that ends normally is not held up; ``os._exit`` because the main thread may be
    deep in a PyTorch kernel that a Python exception would not interrupt.
    """
    start = time.time()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            now = time.time()
            if wall_seconds is not None and now - start > wall_seconds:
                print(f"[trial] stopped: over its {wall_seconds:.0f} s budget", file=sys.stderr, flush=True)
                os._exit(4)
            if heartbeat is not None:
                try:
                    idle = now - os.stat(heartbeat).st_mtime
                except OSError:
                    idle = float("inf")
                if idle > heartbeat_seconds:
                    print("[trial] stopped: the page that started it is gone", file=sys.stderr, flush=True)
                    os._exit(4)

    threading.Thread(target=watch, daemon=True, name="trial-watchdog").start()
