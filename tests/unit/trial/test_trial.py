"""The trial job on the CPU: parity, a caught broken mask, reproducibility, measurements, their statistics, the
CLI and the page reporting the same numbers, and two ranks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.data.lengths import LengthHistogram
from advisor.plan import dump_plan, plan_from_dict
from advisor.trial import stats
from advisor.trial.config import TrialConfig, cli_arguments
from advisor.trial.run import ParityError, make_packs, run_trial
from tests.support import ROOT, SAMPLE
from tests.support.apptest import open_page

PLAN = plan_from_dict(
    {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8},
        "training": {"seq_length": 2048, "global_batch_samples": 64},
        "packing": {"pack_size": 2048},
    }
)
SMALL = TrialConfig(steps=3, warmup=1, pack_size=256, packs_per_step=2, micro_batch_size=4)


@pytest.fixture(scope="module")
def skewed() -> LengthHistogram:
    """Mostly short samples and a few long ones: padding to the longest in a micro batch wastes most of it."""
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(40, 200, 900), rng.integers(1500, 2048, 60)])
    return LengthHistogram.from_samples(lengths, source="skewed")


@pytest.fixture(scope="module")
def result(skewed):
    return run_trial(PLAN, skewed, SMALL, progress=lambda m: None)


@pytest.mark.slow  # a real training run
def test_parity_within_bounds(result):
    out = result.to_dict()
    assert out["loss_parity"]["ok"] and out["loss_parity"]["max_abs_diff"] <= 1e-5
    assert out["grad_parity"]["ok"] and out["grad_parity"]["max_rel_diff"] <= 1e-4


@pytest.mark.slow  # a real training run
def test_the_ways_see_the_same_tokens_and_flops_predict_packing_wins_on_a_skewed_distribution(result):
    out = result.to_dict()  # measured speeds are not asserted: this machine is shared
    assert out["predicted_speedup"] > 1
    assert out["packed"]["real_tokens"] == out["padded"]["real_tokens"] == out["block_masked"]["real_tokens"] > 0


@pytest.mark.slow  # a real training run
def test_same_losses_every_way_and_memory_prediction_within_30_percent(result):
    losses = {}
    for row in result.per_step:
        losses.setdefault(row["step"], set()).add(round(row["loss"], 5))
    assert all(len(v) == 1 for v in losses.values())  # the same samples give the same loss packed, padded, masked
    assert 0.7 <= result.memory.ratio <= 1.3


@pytest.mark.slow  # a real training run
def test_statistics_are_those_of_the_repeated_timed_steps(result):
    out = result.to_dict()
    for way in ("packed", "padded", "block_masked"):
        rows = [r for r in result.per_step if r["mode"] == way]
        assert [r["warmup"] for r in rows] == [True] * SMALL.warmup + [False] * SMALL.steps
        timed = [r for r in rows if not r["warmup"]]
        assert out[way]["timed_step_seconds"] == [r["seconds"] for r in timed]  # warm-up steps are not counted
        tps = [r["real_tokens"] / r["seconds"] for r in timed]
        assert min(tps) <= out[way]["tokens_per_second"] <= max(tps)
        assert out[way]["tokens_per_second"] == pytest.approx(float(np.median(tps)))
        assert out[way]["tokens_per_second_min"] == pytest.approx(min(tps))
    low, high = out["speedup_interval"]
    assert low <= out["speedup"] <= high
    assert out["speedup"] == pytest.approx(out["packed"]["tokens_per_second"] / out["padded"]["tokens_per_second"])
    assert any("too few" in w for w in out["noise_warnings"])  # 3 timed steps: no verdict, whatever the timings
    assert "one causal SDPA call per sample" in out["packed_kernel"]


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


@pytest.mark.slow  # a real training run
def test_the_cli_prints_the_numbers_the_page_tables(skewed, tmp_path, capsys):
    """The real command, in process: its text against the Trial page's table of the trial.json it wrote."""
    from advisor.cli import main
    from advisor.ui import trial_view

    lengths = tmp_path / "lengths.csv"
    lengths.write_text(
        "length,count\n" + "".join(f"{v},{c}\n" for v, c in zip(skewed.lengths, skewed.counts, strict=True))
    )
    plan = tmp_path / "plan.yaml"
    plan.write_text(dump_plan(PLAN.changed({"data": {"lengths": str(lengths)}})))
    assert main(["trial", str(plan), *cli_arguments(SMALL), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    text = capsys.readouterr().out
    out = json.loads((tmp_path / "out" / "trial.json").read_text())
    speed, memory = trial_view.results_tables(out)
    for row in speed.to_dict("records"):
        line = next(x for x in text.splitlines() if x.strip().startswith(row["way"] + " "))
        assert _numbers(line) == [
            row["steps"],
            row["median tokens/s"],
            row["min tokens/s"],
            row["max tokens/s"],
            row["IQR tokens/s"],
            row["median step s"],
        ]
    speedup, warnings, note = trial_view.speed_notes(out)
    assert f"speed-up packed/padded (median tokens/s): {speedup}" in text
    assert all(f"warning: {w}" in text for w in warnings) and warnings  # 3 steps: at least "too few"
    assert memory.loc[0, "measured"] == pytest.approx(out["speedup"], abs=5e-4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-3, 1e6), min_size=1, max_size=60))
def test_median_lies_within_the_quartiles_and_extremes(values):
    s = stats.spread(values)
    assert s.minimum <= s.q1 <= s.median <= s.q3 <= s.maximum
    assert s.n == len(values) and s.minimum == min(values) and s.maximum == max(values)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(5, 40), ratio=st.floats(1.2, 4.0), base=st.floats(10.0, 1e6), seed=st.integers(0, 2**32 - 1))
def test_a_tight_sample_calls_the_speed_up_without_a_warning(n, ratio, base, seed):
    rng = np.random.default_rng(seed)  # step-to-step jitter of at most 2 %
    padded = base * (1 + rng.uniform(-0.02, 0.02, n))
    packed = ratio * base * (1 + rng.uniform(-0.02, 0.02, n))
    sp = stats.speedup(packed, padded)
    assert sp.point == pytest.approx(ratio, rel=0.05) and sp.low <= sp.point <= sp.high
    assert sp.low > 1.0
    assert stats.noise_warnings(sp, {"packed": stats.spread(packed), "padded": stats.spread(padded)}) == ()


@settings(max_examples=60, deadline=None)
@given(
    fast=st.lists(st.floats(1.0, 1.1), min_size=3, max_size=20),
    slow=st.floats(3.0, 10.0),
    ratio=st.floats(1.0, 3.0),
    data=st.data(),
)
def test_a_noisy_sample_warns(fast, slow, ratio, data):
    """About half the steps are 3-10x slower (another process took the cores): the spread is past any call."""
    k = len(fast)
    slowed = data.draw(st.lists(st.floats(slow, 10.0), min_size=k, max_size=k + 1))
    padded = data.draw(st.permutations([1 / m for m in fast] + [1 / m for m in slowed]))
    packed = [ratio * v for v in data.draw(st.permutations(padded))]
    sp = stats.speedup(packed, padded)
    spreads = {"packed": stats.spread(packed), "padded": stats.spread(padded)}
    warnings = stats.noise_warnings(sp, spreads)
    assert any("steps spread" in w for w in warnings)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1.0, 100.0), min_size=2, max_size=30), st.data())
def test_the_same_speeds_in_another_order_cannot_be_called(padded, data):
    packed = data.draw(st.permutations(padded))  # no way is faster: medians equal, the interval holds 1.0
    sp = stats.speedup(packed, padded)
    assert sp.point == pytest.approx(1.0)
    assert any("contains 1.0" in w for w in stats.noise_warnings(sp, {}))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(1.0, 100.0)), min_size=1, max_size=30), st.floats(1e-3, 1e3))
def test_the_speed_up_does_not_depend_on_the_unit(pairs, c):
    x, y = [p[0] for p in pairs], [p[1] for p in pairs]
    a, b = stats.speedup(x, y), stats.speedup([c * v for v in x], [c * v for v in y])
    assert (b.point, b.low, b.high) == pytest.approx((a.point, a.low, a.high), rel=1e-9)


def test_statistics_refuse_what_is_not_a_timing():
    with pytest.raises(ValueError, match="no timed steps"):
        stats.spread([])
    with pytest.raises(ValueError, match="finite and above 0"):
        stats.speedup([1.0, float("nan")], [1.0, 1.0])
    with pytest.raises(ValueError, match="pairs steps"):
        stats.speedup([1.0, 2.0], [1.0])


@pytest.mark.slow  # writes and reads 16.3M samples
def test_the_job_runs_the_command_line_with_the_same_settings_and_the_exact_histogram(tmp_path):
    from advisor.cli import build_parser
    from advisor.data.ingest import load_lengths
    from advisor.trial.config import from_cli
    from advisor.trial.jobs import write_lengths

    cfg = TrialConfig(
        steps=7,
        warmup=3,
        device="cpu",
        scale="medium",
        seed=11,
        pack_size=320,
        packs_per_step=3,
        micro_batch_size=5,
        threads=1,
    )
    assert from_cli(build_parser().parse_args(["trial", "plan.yaml", *cli_arguments(cfg)])) == cfg
    assert from_cli(build_parser().parse_args(["trial", "plan.yaml"])) == TrialConfig()  # one set of defaults
    big = LengthHistogram.from_samples(np.repeat([3, 500, 70_001], [16_000_000, 300_001, 1]), source="big")
    write_lengths(big, tmp_path / "l.csv")  # 16.3M samples: written exactly, not rescaled to 200k
    back = load_lengths(tmp_path / "l.csv")
    assert back.lengths.tolist() == big.lengths.tolist() and back.counts.tolist() == big.counts.tolist()


@pytest.mark.slow  # a real training run
def test_an_older_trial_json_is_refused_with_one_message(result):
    from advisor.trial.jobs import read_results

    out = result.to_dict()
    assert read_results(json.dumps(out).encode(), "trial.json")["speedup"] == out["speedup"]
    old = {k: v for k, v in out.items() if k != "format"}
    with pytest.raises(ValueError, match="older advisor .* rerun the trial"):
        read_results(json.dumps(old).encode(), "old.json")
    bad = json.loads(json.dumps(out))
    bad["padded"]["timed_step_seconds"] = [1.0, -2.0, 1.0]
    with pytest.raises(ValueError, match="padded.timed_step_seconds"):
        read_results(json.dumps(bad).encode(), "bad.json")


@pytest.mark.parametrize(
    "algorithm", ["first_fit_shuffle", "first_fit_decreasing", "best_fit_decreasing", "shortest_pack_first"]
)
def test_make_packs_packs_every_sample_once_with_the_plans_algorithm(algorithm):
    from advisor.packing.packers import PACKERS

    lengths = np.random.default_rng(1).integers(2, 200, 300)
    packs = make_packs(lengths, 256, algorithm, 5)
    assert sorted(i for p in packs for i in p) == list(range(300))
    assert all(sum(lengths[i] for i in p) <= 256 for p in packs)
    offsets, items = PACKERS[algorithm].run(np.bincount(lengths, minlength=257), 256, 5)
    assert [sorted(lengths[i] for i in p) for p in packs] == [
        sorted(items[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]


@pytest.mark.slow  # a real training run
def test_a_broken_mask_is_caught(skewed):
    with pytest.raises(ParityError, match="let samples see each other"):
        run_trial(
            PLAN,
            skewed,
            TrialConfig(steps=1, pack_size=256, packs_per_step=1, break_mask=True),
            progress=lambda m: None,
        )


@pytest.mark.slow  # a real training run
def test_two_runs_with_the_same_seed_give_the_same_losses(skewed, result):
    again = run_trial(PLAN, skewed, SMALL, progress=lambda m: None)
    assert [r["loss"] for r in again.per_step] == [r["loss"] for r in result.per_step]


@pytest.mark.slow
def test_cli_json_and_out_folder(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "trial",
            str(SAMPLE / "plans" / "llama8b_squad.yaml"),
            "--steps",
            "1",
            "--pack-size",
            "256",
            "--json",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    for key in ("device", "steps", "speedup"):
        assert key in out
    assert out["packed"]["tokens_per_second"] > 0 and out["padded"]["tokens_per_second"] > 0
    assert out["loss_parity"]["max_abs_diff"] <= 1e-5 and out["grad_parity"]["max_rel_diff"] <= 1e-4
    assert out["memory"]["measured_bytes"] > 0 and out["memory"]["predicted_bytes"] > 0
    assert "[trial] packed" in proc.stderr  # progress per step
    assert json.loads((tmp_path / "trial.json").read_text())["steps"] == 1
    assert (tmp_path / "steps.csv").read_text().startswith("mode,step,warmup,seconds,loss")


@pytest.mark.slow
def test_two_ranks_with_torchrun_and_gloo():
    import socket

    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            "-m",
            "advisor",
            "trial",
            str(SAMPLE / "plans" / "llama8b_squad.yaml"),
            "--steps",
            "1",
            "--pack-size",
            "256",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
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


@pytest.mark.slow  # a real training run and AppTest
def test_trial_page_shows_an_uploaded_result_and_refuses_a_bad_one(result):

    at = open_page("pages/4_Trial.py", timeout=120)
    assert not at.exception
    at.file_uploader(key="trial_upload").set_value(
        ("trial.json", json.dumps(result.to_dict()).encode(), "application/json")
    ).run()
    assert not at.exception and len(at.dataframe) == 3  # speed, measured against predicted, loss at step 0
    loss = at.dataframe[2].value
    assert list(loss["setting"]) == ["calculate_per_token_loss=False (the plan)", "calculate_per_token_loss=True"]
    assert loss["within 1 %"].all()
    assert any("too few to call the speed" in w.value for w in at.warning)  # 3 timed steps: the page says so
    assert any("one causal SDPA call per sample" in i.value for i in at.info)
    at.file_uploader(key="trial_upload").set_value(("x.json", b'{"device": "cpu"}', "application/json")).run()
    assert at.error and "not a trial result, missing packed" in at.error[0].value
    old = {k: v for k, v in result.to_dict().items() if k != "format"}
    at.file_uploader(key="trial_upload").set_value(("old.json", json.dumps(old).encode(), "application/json")).run()
    assert any("older advisor" in e.value for e in at.error)


@pytest.mark.slow  # a real training run
def test_a_trial_over_its_memory_says_so_in_one_line():
    """The dashboard gives each trial --memory-gib 2: past it the trial stops with one message, exit 2."""
    from tests.support import ROOT

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "trial",
            "sample_data/plans/llama8b_squad.yaml",
            "--model-scale",
            "medium",
            "--pack-size",
            "8192",
            "--packs-per-step",
            "16",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--memory-gib",
            "1",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: the trial ran out of its 1 GiB (--memory-gib): a smaller "
        "--pack-size, --packs-per-step, --micro-batch-size or --model-scale "
        "fits"
    ]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA: the trial would run")
def test_a_cuda_trial_without_cuda_is_one_message(capsys):
    """--device cuda where torch sees no CUDA: one message naming the option and the torch build, exit code 2 (was a
    traceback from torch.cuda.set_device, exit code 1)."""
    from tests.support.cli import in_process

    run = in_process(capsys, "trial", SAMPLE / "plans" / "llama8b_squad.yaml", "--device", "cuda", "--quiet")
    assert run.returncode == 2, run.stderr
    assert "--device cuda" in run.stderr and "sees no CUDA device" in run.stderr
    assert "Traceback" not in run.stderr
