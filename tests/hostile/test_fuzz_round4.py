"""bench/fuzz_round4.py's generators, tamperings and judges on a few cases, in process (the bench runs ~1,400 in
children): every surface and kind is generated, a seed replays its runs, every plan field with bounds is reached,
each tampering is refused by the advisor, and the judges see a silent accept, a write elsewhere and an orphan."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from tests.support import ROOT

spec = importlib.util.spec_from_file_location("fuzz_round4", ROOT / "bench" / "fuzz_round4.py")
fuzz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fuzz)


def test_generators_cover_every_surface_kind_and_replay_from_a_seed():
    counts = {"prepare -o": 400, "cache": 400, "read back": 300, "interrupt": 60, "dashboard": None}
    tasks = fuzz.generate(counts, seed=11)
    assert {s for s, _ in tasks} == set(counts)
    assert {t["kind"] for s, t in tasks if s == "prepare -o"} == set(fuzz.PREPARE_OUT_KINDS)
    assert {t["op"] for s, t in tasks if s == "read back"} == set(fuzz.READ_BACK_OPS)
    assert {t["op"] for s, t in tasks if s == "cache"} == {
        "meta",
        "meta_delete",
        "meta_raw",
        "values",
        "truncate",
        "extend",
        "replace",
    }
    assert {(t["command"], t["signal"]) for s, t in tasks if s == "interrupt"} == {
        (c, sig) for c in ("prepare", "tokenize") for sig in ("INT", "TERM", "KILL")
    }
    assert fuzz.generate(counts, seed=11) == tasks


def test_every_bounded_plan_field_is_fuzzed_at_its_bounds_and_past_them():
    from advisor.plan import schema

    bounds = fuzz.schema_bounds()
    fields = {f for f, _ in bounds}
    assert {
        "training.global_batch_size",
        "training.global_batch_samples",
        "parallel.gpus",
        "packing.pack_size",
        "training.seq_length",
        "parallel.cp",
        "training.lora_rank",
        "packing.mode",
    } <= fields
    gbs = schema.TrainingSpec.model_fields["global_batch_size"].metadata
    high = next(m.le for m in gbs if hasattr(m, "le"))
    assert {v for f, v in bounds if f == "training.global_batch_size"} >= {1, 0, high, high + 1}
    assert ("packing.mode", "none-of-these") in bounds  # a choice field: each choice and one that is none


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    return fuzz.make_templates(tmp_path_factory.mktemp("templates"))


@pytest.mark.parametrize("op", [op for op in fuzz.READ_BACK_OPS if op not in ("none", "extra_file")])
def test_each_read_back_tampering_is_refused_with_one_message(templates, tmp_path, op):
    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(templates, work / templates.name)
    task = {"op": op, "argv": ["export", "plan.json", "--quiet", "--format", "overrides"], "must_refuse": True}
    outcome, detail = fuzz.run_task("read back", task, work)
    assert outcome == "refused", detail


def test_the_judges_see_a_silent_accept_and_a_write_elsewhere(templates, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(templates, work / templates.name)
    untouched = {
        "op": "none",
        "argv": ["export", "plan.json", "--quiet", "--format", "overrides"],
        "must_refuse": True,
    }  # a clean folder marked as one to refuse: its acceptance is "silent"
    assert fuzz.run_task("read back", untouched, work)[0] == "silent"
    written = tmp_path / "written"
    written.mkdir()
    before = fuzz.base.snapshot(written)
    (written / "x").write_text("y")
    assert fuzz.base.changed_elsewhere(before, fuzz.base.snapshot(written), None, False)
    prepared = work / templates.name / "prepared"
    assert fuzz.check_written(prepared) is None
    fuzz.tamper_prepared(prepared, "meta_fewer_samples")
    assert "max_samples_per_bin 1" in fuzz.check_written(prepared)


def test_the_orphan_count_sees_a_tagged_process_left_alive(tmp_path):
    tag = f"FUZZ_ROUND4_TEST_{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, tag: "1"})
    try:
        deadline = time.time() + 10
        while child.pid not in fuzz._tagged(tag) and time.time() < deadline:
            time.sleep(0.05)
        assert child.pid in fuzz._tagged(tag)
    finally:
        child.kill()
        child.wait()
    assert child.pid not in fuzz._tagged(tag)


def test_a_dashboard_case_runs_and_a_refused_link_is_one_message():
    ok = fuzz.run_dashboard(
        {"field": "training.global_batch_size", "value": 1 << 24, "page": "pages/3_Recommendations.py"}
    )
    assert ok == ("ok", "")
    refused = fuzz.run_dashboard({"field": "parallel.gpus", "value": (1 << 17) + 1, "page": "pages/5_Tour.py"})
    assert refused[0] == "refused" and "parallel.gpus" in refused[1]


def test_cache_tamperings_apply(templates, tmp_path):
    rng = random.Random(3)
    for _ in range(30):
        task = fuzz.gen_cache(rng)
        cache = tmp_path / f"c{_}"
        shutil.copytree(templates / "prepared" / ".tokens" / "training", cache)
        before = {p.name: _state(p) for p in cache.iterdir()}
        fuzz.tamper_cache(cache, task)
        after = {name: _state(cache / name) for name in before}
        # a meta field may be set to the value it had, a value to one it held, a field dropped that was null
        assert after != before or task["op"] in ("meta", "meta_delete", "values"), json.dumps(task)


def _state(path) -> tuple:
    """A cache entry's kind, size and first kilobyte, without reading a sparse giant whole."""
    if not os.path.lexists(path):
        return ("missing",)
    if path.is_symlink() or not path.is_file():
        return ("other", os.lstat(path).st_mode)
    with open(path, "rb") as f:
        return ("file", path.stat().st_size, f.read(1024))
