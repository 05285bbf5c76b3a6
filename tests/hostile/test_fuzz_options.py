"""bench/fuzz_options.py's generators and judges on a small count, in process (the bench runs thousands in
children): every generated command parses or is refused by argparse, and the sandbox judge catches a write
elsewhere."""

from __future__ import annotations

import importlib.util
import random

import pytest

from tests.support import ROOT

spec = importlib.util.spec_from_file_location("fuzz_options", ROOT / "bench" / "fuzz_options.py")
fuzz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fuzz)


def test_generators_cover_every_surface_and_output_kind():
    tasks = fuzz.generate({k: 40 for k in fuzz.COUNTS}, seed=5)
    assert {s for s, _ in tasks} == set(fuzz.COUNTS)
    kinds = {t["kind"] for s, t in tasks if "kind" in t}
    assert {"symlink_file", "dev_null", "input", "hard_link", "traversal", "existing"} <= kinds
    assert fuzz.generate({k: 40 for k in fuzz.COUNTS}, seed=5) == tasks  # a seed replays the same runs


@pytest.mark.parametrize("seed", range(3))
def test_small_runs_end_ok_or_refused_and_never_write_elsewhere(seed, tmp_path, monkeypatch):
    """Schedule and export-path runs in this process (tokenize and trial need their heavy engines: the bench)."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(seed)
    for _ in range(8):
        task = fuzz.gen_schedule(rng)
        if "--json" in task["argv"]:
            continue  # its output is large by design; the bench's children drop it
        assert fuzz.run_task("schedule", task, tmp_path)[0] in ("ok", "refused"), task
    for _ in range(6):
        task = fuzz.gen_path_task("export --lengths-csv", rng)
        outcome = fuzz.run_task("export --lengths-csv", task, tmp_path)
        assert outcome[0] in ("ok", "refused"), (task, outcome)


def test_the_judge_sees_a_write_through_a_link(tmp_path):
    box = fuzz.make_sandbox(tmp_path)
    before = fuzz.snapshot(tmp_path)
    (tmp_path / "outside" / "victim.txt").write_bytes(b"changed\n")  # what following link.csv would do
    after = fuzz.snapshot(tmp_path)
    assert fuzz.changed_elsewhere(before, after, str(box / "link.csv"), False) == [
        str(tmp_path / "outside" / "victim.txt")
    ]
    assert fuzz.changed_elsewhere(before, before, None, False) == []
