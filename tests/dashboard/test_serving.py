"""The dashboard started as the README says listens on loopback only and shows no error details."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request

import pytest

from tests.support import ROOT


def _listeners(port: int) -> set[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp and tcp6, what `ss -ltn` reads)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(address if len(address) == width else "?")
    return found


@pytest.mark.slow
def test_readme_start_command_binds_loopback_only():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the README's command is `streamlit run app.py`; only the port is given here (config.toml sets the rest)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("streamlit did not start")
        listeners = _listeners(port)
        assert listeners == {"0100007F"}, listeners  # 127.0.0.1, and no 0.0.0.0 or :: socket
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=20)


def test_config_hides_error_details_and_binds_loopback():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["client"]["showErrorDetails"] == "none"
    assert config["server"]["enableXsrfProtection"] is True
