"""advisor/processes.py: what finds the processes a local Ray started (their environment's owner entry), checked
without Ray: a child and its own child carrying an entry are found, others are not, and this process never is."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from advisor import processes


def test_the_processes_carrying_an_owner_entry_are_found_and_only_they():
    entry = f"{processes._RAY_OWNER}=test-{os.getpid()}"
    # a child that starts a grandchild, both inheriting the entry; and a bystander without it
    code = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
        "time.sleep(30)"
    )
    env = {**os.environ, processes._RAY_OWNER: entry.split("=", 1)[1]}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while len(processes._carrying(entry)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = processes._carrying(entry)
        assert child.pid in found and len(found) == 2 and bystander.pid not in found and os.getpid() not in found
        assert processes._carrying(entry + "x") == []  # the whole value, not a prefix of it
    finally:
        for pid in processes._carrying(entry):
            os.kill(pid, 9)
        child.wait()
        bystander.kill()
        bystander.wait()
    deadline = time.monotonic() + 10  # a SIGKILL'd process leaves /proc once the kernel has torn it down, not at once
    while processes._carrying(entry) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes._carrying(entry) == []


def test_ray_processes_of_a_run_killed_outright_are_stopped_and_said_and_a_live_runs_are_not():
    """SIGKILL to a Ray-engine run leaves Ray's two agents running; the next local Ray stops them, with a note."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a run that no longer exists: its pid is free
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    orphan = subprocess.Popen(sleep, env={**os.environ, processes._RAY_OWNER: f"{gone.pid}-abc"})
    alive = subprocess.Popen(sleep, env={**os.environ, processes._RAY_OWNER: f"{os.getpid()}-def"})
    try:
        deadline = time.monotonic() + 20
        while len(processes._carrying(f"{processes._RAY_OWNER}=")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        notes = processes.sweep_orphaned_ray()
        assert f"stopped 1 Ray process(es) left by an interrupted run (pid {gone.pid})" in notes
        assert orphan.wait(timeout=10) == -9 and alive.poll() is None
    finally:
        for p in (orphan, alive):
            p.kill()
            p.wait()
