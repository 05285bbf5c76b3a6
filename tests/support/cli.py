"""The command line two ways: ``advisor`` runs ``python -m advisor ...`` in a child process from the repository root,
as users run it; ``in_process`` runs the same arguments through ``advisor.cli.main`` (what ``python -m advisor``
calls) in this process. Both give a ``CompletedProcess``: exit code, stdout, stderr.

A child costs seconds on a shared machine (a Python started, the advisor imported), so tests that call ``advisor``
are in the slow tier (``@pytest.mark.slow``); the fast tier runs the command line through ``in_process``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

from tests.support import ROOT


def advisor(*args, timeout: float | None = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def in_process(capsys, *args) -> subprocess.CompletedProcess:
    """``advisor(*args)`` without the child: ``main`` run from the repository root, its output read from ``capsys``;
    argparse's refusals (``SystemExit``) give their exit code as a child's would."""
    from advisor.cli import main

    argv = [str(a) for a in args]
    capsys.readouterr()  # what the test printed before is not this run's
    with contextlib.chdir(ROOT):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["advisor", *argv], code, out, err)
