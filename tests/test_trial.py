"""The trial job on the CPU: parity, a caught broken mask, reproducibility, measurements, and two ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from advisor.data.lengths import LengthHistogram
from advisor.plan import plan_from_dict
from advisor.trial.run import ParityError, TrialConfig, run_trial
from tests.conftest import ROOT, SAMPLE, open_page

PLAN = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8},
                       "training": {"seq_length": 2048, "global_batch_size": 64}, "packing": {"pack_size": 2048}})
SMALL = TrialConfig(steps=2, pack_size=256, packs_per_step=2, micro_batch_size=4)


@pytest.fixture(scope="module")
def skewed() -> LengthHistogram:
    """Mostly short samples and a few long ones: padding to the longest in a micro batch wastes most of it."""
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(40, 200, 900), rng.integers(1500, 2048, 60)])
    return LengthHistogram.from_samples(lengths, source="skewed")


@pytest.fixture(scope="module")
def result(skewed):
    return run_trial(PLAN, skewed, SMALL, progress=lambda m: None)


def test_parity_within_bounds(result):
    assert result.loss_parity["ok"] and result.loss_parity["max_abs_diff"] <= 1e-5
    assert result.grad_parity["ok"] and result.grad_parity["max_rel_diff"] <= 1e-4


def test_packed_beats_padded_on_a_skewed_distribution(result):
    out = result.to_dict()
    assert out["packed"]["tokens_per_second"] > out["padded"]["tokens_per_second"]
    assert out["predicted_speedup"] > 1
    assert out["packed"]["real_tokens"] == out["padded"]["real_tokens"] == out["block_masked"]["real_tokens"]


def test_same_losses_every_way_and_memory_prediction_within_30_percent(result):
    losses = {}
    for row in result.per_step:
        losses.setdefault(row["step"], set()).add(round(row["loss"], 5))
    assert all(len(v) == 1 for v in losses.values())  # the same samples give the same loss packed, padded, masked
    assert 0.7 <= result.memory["ratio_measured_over_predicted"] <= 1.3


def test_a_broken_mask_is_caught(skewed):
    with pytest.raises(ParityError, match="let samples see each other"):
        run_trial(PLAN, skewed, TrialConfig(steps=1, pack_size=256, packs_per_step=1, break_mask=True),
                  progress=lambda m: None)


def test_two_runs_with_the_same_seed_give_the_same_losses(skewed, result):
    again = run_trial(PLAN, skewed, SMALL, progress=lambda m: None)
    assert [r["loss"] for r in again.per_step] == [r["loss"] for r in result.per_step]


@pytest.mark.slow
def test_cli_json_and_out_folder(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "advisor", "trial", str(SAMPLE / "plans" / "llama8b_squad.yaml"),
                           "--steps", "1", "--pack-size", "256", "--json", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    for key in ("device", "steps", "speedup"):
        assert key in out
    assert out["packed"]["tokens_per_second"] > 0 and out["padded"]["tokens_per_second"] > 0
    assert out["loss_parity"]["max_abs_diff"] <= 1e-5 and out["grad_parity"]["max_rel_diff"] <= 1e-4
    assert out["memory"]["measured_bytes"] > 0 and out["memory"]["predicted_bytes"] > 0
    assert "[trial] packed" in proc.stderr  # progress per step
    assert json.loads((tmp_path / "trial.json").read_text())["steps"] == 1
    assert (tmp_path / "steps.csv").read_text().startswith("mode,step,seconds,loss")


@pytest.mark.slow
def test_two_ranks_with_torchrun_and_gloo():
    import socket

    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                           "127.0.0.1", "--master-port", port, "-m", "advisor", "trial",
                           str(SAMPLE / "plans" / "llama8b_squad.yaml"),
                           "--steps", "1", "--pack-size", "256", "--json", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    d = out["distributed"]
    assert d["world_size"] == 2 and d["backend"] == "gloo"
    assert len(d["per_rank_attention_work"]) == 2 and len(d["per_rank_allreduce_wait_seconds"]) == 2
    assert d["predicted_straggler_factor"] >= 1 and d["measured_work_straggler"] >= 1


@pytest.mark.slow
def test_background_job_runs_and_can_be_cancelled(skewed, tmp_path):
    import time

    from advisor.trial import jobs as trial_jobs
    from advisor.ui import state as dashboard
    from advisor.ui import trial_view

    plan = dashboard.default_plan()
    job = trial_jobs.start_trial(plan, skewed, steps=1, pack_size=128)
    deadline = time.time() + 300
    while (status := trial_jobs.poll(job))["state"] == "running" and time.time() < deadline:
        time.sleep(1)
    assert status["state"] == "done", status["log"]
    speed, memory = trial_view.results_tables(status["result"])
    assert list(speed["way"]) == ["packed", "padded", "block_masked"]
    assert memory["measured / predicted"].notna().all()
    assert trial_jobs.collect(job) is not None and not Path(job.folder).exists()  # results read, folder removed
    slow = trial_jobs.start_trial(plan, skewed, steps=50, pack_size=512)
    with pytest.raises(trial_jobs.JobBusy):  # one trial per server
        trial_jobs.start_trial(plan, skewed, steps=1, pack_size=128)
    trial_jobs.cancel(slow)
    time.sleep(2)
    assert trial_jobs.poll(slow)["state"] == "failed"
    trial_jobs.collect(slow)
    with pytest.raises(ValueError, match="a dashboard trial takes"):
        trial_jobs.start_trial(plan, skewed, steps=10_000, pack_size=128)


@pytest.mark.slow
def test_a_trial_nobody_follows_stops_itself(skewed, monkeypatch):
    import time

    from advisor.trial import jobs as trial_jobs
    from advisor.ui import state as dashboard

    monkeypatch.setattr(trial_jobs, "HEARTBEAT_SECONDS", 3.0)
    job = trial_jobs.start_trial(dashboard.default_plan(), skewed, steps=50, pack_size=512)
    deadline = time.time() + 60  # nobody polls: the heartbeat goes stale and the job exits on its own
    while trial_jobs._alive(job.pid) and time.time() < deadline:
        time.sleep(0.5)
    assert not trial_jobs._alive(job.pid)
    assert "the page that started it is gone" in job.log.read_text()
    trial_jobs.collect(job)


def test_trial_page_shows_an_uploaded_result_and_refuses_a_bad_one(result):

    at = open_page("pages/4_Trial.py", timeout=120)
    assert not at.exception
    at.file_uploader(key="trial_upload").set_value(("trial.json", json.dumps(result.to_dict()).encode(),
                                                    "application/json")).run()
    assert not at.exception and len(at.dataframe) == 2
    at.file_uploader(key="trial_upload").set_value(("x.json", b'{"device": "cpu"}', "application/json")).run()
    assert at.error and "not a trial result, missing packed" in at.error[0].value
