"""The fuzz benches' watchdog: one child process running a batch of inputs under a wall-clock limit, its progress
lines read back afterwards. Each bench charges a hang or a crash to the input its child was on; this is only how
the child is started, timed out and read (bench/fuzz_inputs.py, fuzz_raw.py and fuzz_tokenizers.py share it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a bench child: one BLAS thread (batches run side by side) and the repository on the path."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


@dataclass(frozen=True)
class Ended:
    """How a child ended: its progress lines (JSON, one a line), stderr, exit code, and whether it was killed."""

    lines: list
    err: str
    returncode: int
    hung: bool
    seconds: float

    def detail(self) -> str:
        """Why the input the child was on never finished, for the report."""
        why = f"{self.seconds:.0f} s timeout" if self.hung else f"child died (exit {self.returncode})"
        return f"{why}: {self.err[-300:]}"


def run_watched(argv: list[str], *, env: dict, cwd: Path, out_file: Path, seconds: float) -> Ended:
    """Run ``argv`` in its own process group, killed (group and all) after ``seconds``; its lines from ``out_file``."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _, err = proc.communicate(timeout=seconds)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        hung = True
    lines = [json.loads(x) for x in out_file.read_text().splitlines()] if out_file.exists() else []
    return Ended(lines=lines, err=err.decode(errors="replace"), returncode=proc.returncode, hung=hung, seconds=seconds)
