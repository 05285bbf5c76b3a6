"""The trial as a background job for the dashboard: start it, follow its log, cancel it, read its results.

The job is a separate process group (``start_new_session``), so it never blocks the page and keeps running when
the user switches pages; its folder holds the plan, the lengths, the log and, at the end, ``trial.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from advisor.data.lengths import LengthHistogram
from advisor.plan import Plan, dump_plan

ROOT = Path(__file__).resolve().parents[2]


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


def start_trial(plan: Plan, hist: LengthHistogram, *, steps: int = 3, pack_size: int = 512,
                scale: str = "small", device: str = "auto") -> TrialJob:
    folder = Path(tempfile.mkdtemp(prefix="advisor-trial-"))
    lengths = folder / "lengths.csv"
    lengths.write_text("length,count\n" + "".join(f"{v},{c}\n" for v, c in zip(hist.lengths, hist.counts,
                                                                                   strict=True)))
    trial_plan = plan.changed({"data": {"lengths": str(lengths), "column": None}})
    (folder / "plan.yaml").write_text(dump_plan(trial_plan))
    log = open(folder / "trial.log", "w")  # noqa: SIM115 - the child writes to it after we return
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "trial", str(folder / "plan.yaml"), "--steps",
                             str(steps), "--pack-size", str(pack_size), "--model-scale", scale, "--device", device,
                             "--out", str(folder)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
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
    """``state`` (running, done, failed), the log's last lines, and the results once written."""
    running = _alive(job.pid)
    lines = job.log.read_text().splitlines() if job.log.exists() else []
    result = json.loads(job.results.read_text()) if job.results.exists() else None
    state = "running" if running else ("done" if result is not None else "failed")
    return {"state": state, "log": "\n".join(lines[-12:]), "result": result}


def cancel(job: TrialJob) -> None:
    try:
        os.killpg(job.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def read_results(data: bytes, name: str) -> dict:
    """A ``trial.json`` from a run elsewhere (a GPU node), checked for the keys the page shows."""
    try:
        result = json.loads(data)
    except ValueError as e:
        raise ValueError(f"{name}: not a trial JSON ({e})") from None
    missing = [k for k in ("device", "packed", "padded", "memory", "loss_parity", "grad_parity") if k not in result]
    if missing:
        raise ValueError(f"{name}: not a trial result, missing {', '.join(missing)}")
    return result
