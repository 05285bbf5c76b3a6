"""Online packing as a user meets it: the schedule command, plans in online mode, their exports, the comparison
with offline packing and the dashboard page. The scheduler itself is checked against Megatron-LM's own code in
tests/oracle/test_online_schedule.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from advisor.advice.compare import compare_packing
from advisor.model.estimate import estimate
from advisor.model.flops import flops_coefficients
from advisor.packing.online.from_plan import dataset_order, online_config, schedule_of
from advisor.plan import plan_from_dict
from tests.support import ROOT, SAMPLE
from tests.support.apptest import open_page
from tests.support.cli import advisor, in_process
from tests.support.tiers import slow_after

CHAT = SAMPLE / "chat_like_hist.csv"


def _plan(**over):
    raw = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 8, "cp": 2},
        "training": {"seq_length": 16384, "global_batch_samples": 64},
        "packing": {"mode": "online"},
    }
    for section, fields in over.items():
        raw[section] = {**raw.get(section, {}), **fields}
    return plan_from_dict(raw)


@pytest.mark.slow  # the command line in subprocesses
def test_schedule_json_lists_every_global_batch(tmp_path):
    lengths = tmp_path / "lengths.csv"
    rng = np.random.default_rng(0)
    values = rng.integers(50, 3000, 400)
    lengths.write_text("length\n" + "\n".join(map(str, values)) + "\n")
    proc = advisor(
        "schedule", lengths, "--seq-length", 4096, "--dp", 4, "--cp", 2, "--global-batch-size", 32, "--json", "--quiet"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["order"] == "file order" and len(out["global_batches"]) == 400 // 32
    for k, step in enumerate(out["global_batches"]):
        assert step["refused"] is None
        assert len(step["groups"]) == step["num_micro_batches"]
        # every sample of the step runs once: on the CP ranks of one DP rank's pack in one micro batch
        firsts = [i for mb in step["groups"] for dp in range(4) for i in mb[2 * dp]]
        assert sorted(firsts) == list(range(32 * k, 32 * (k + 1)))
        assert all(mb[2 * d] == mb[2 * d + 1] for mb in step["groups"] for d in range(4))  # a CP pair shares a pack
        # the FLOPs sums are over the padded lengths (multiples of 2 x CP) the scheduler packs
        padded = -(-values[32 * k : 32 * (k + 1)] // 4) * 4
        assert step["seqlen_sum"] == padded.sum() and step["seqlen_squared_sum"] == (padded**2).sum()
    s = out["summary"]
    assert s["micro_batches_min"] <= s["micro_batches_mean"] <= s["micro_batches_max"] and s["straggler_factor"] >= 1


@pytest.mark.slow  # the command line in subprocesses
def test_main_refuses_what_dev_accepts_and_the_json_says_why(tmp_path):
    lengths = tmp_path / "short.csv"  # 8 short samples a step: they fit one pack, fewer than DP 4 packs
    lengths.write_text("length\n" + "\n".join(["100"] * 64) + "\n")
    runs = {}
    for branch in ("main", "dev"):
        proc = advisor(
            "schedule",
            lengths,
            "--megatron-lm",
            branch,
            "--seq-length",
            4096,
            "--dp",
            4,
            "--cp",
            1,
            "--global-batch-size",
            8,
            "--json",
            "--quiet",
            "--dataset",
            "custom",
        )
        assert proc.returncode == 0, proc.stderr
        runs[branch] = json.loads(proc.stdout)
    assert all(step["refused"] and "i > 0" in step["refused"] for step in runs["main"]["global_batches"])
    assert runs["main"]["summary"]["refused_steps"] == 8
    assert all(step["refused"] is None and step["num_micro_batches"] == 1 for step in runs["dev"]["global_batches"])


@pytest.mark.parametrize(
    "args, message",
    slow_after(
        [
            (["--megatron-lm", "main", "--scheduler", "default_dynamic_cp"], "is not a scheduler of Megatron-LM main"),
            (["--global-batch-size", "30"], "is not a multiple of micro_batch_size x dp"),
            (["--dp", "0"], "must be from 1"),
            (  # Megatron-LM's validate_args refuses it: exit 2 (printed as an "error:" line and exit 0 before)
                ["--max-seqlen-per-dp-cp-rank", "3"],
                "Megatron-LM dev refuses these settings: packing buffer 2 x 3 = 6 tokens is below seq_length 4,096",
            ),
        ]
    ),
)
def test_bad_schedule_options_exit_2_with_one_message(capsys, args, message):
    base = {"--seq-length": "4096", "--dp": "4", "--cp": "2", "--global-batch-size": "32"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [x for kv in base.items() for x in kv if kv[0] not in args[::2]] + args
    proc = in_process(capsys, "schedule", CHAT, *flat, "--quiet")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow  # the command line in subprocesses
def test_a_lengths_file_keeps_its_order_and_a_histogram_gets_the_exports_shuffle(tmp_path, chat):
    listed = tmp_path / "listed.csv"
    listed.write_text("length\n" + "\n".join(["4000"] * 16 + ["100"] * 16) + "\n")
    proc = advisor(
        "schedule", listed, "--seq-length", 4096, "--dp", 2, "--cp", 1, "--global-batch-size", 16, "--json", "--quiet"
    )
    steps = json.loads(proc.stdout)["global_batches"]
    assert steps[0]["seqlen_sum"] == 16 * 4000 and steps[1]["seqlen_sum"] == 16 * 100  # file order, not shuffled
    plan = _plan()
    order = dataset_order(chat, plan.packing_seed)
    assert sorted(order.tolist()) == chat.samples().tolist()
    exported = tmp_path / "mock.csv"
    from advisor.advice.exports import mock_lengths_csv

    exported.write_text(mock_lengths_csv(chat, plan.packing_seed))
    proc = advisor(
        "schedule",
        exported,
        "--seq-length",
        16384,
        "--dp",
        4,
        "--cp",
        2,
        "--global-batch-size",
        64,
        "--json",
        "--quiet",
    )
    from_file = json.loads(proc.stdout)["summary"]
    simulated = schedule_of(plan, chat).summary  # what the plan's estimate used: the file Megatron-LM will read
    assert from_file["micro_batches_mean"] == simulated.micro_batches_mean
    assert from_file["straggler_factor"] == pytest.approx(simulated.straggler_factor)


def test_online_plan_estimate_uses_the_schedule_and_megatron_lm_flops(chat):
    plan = _plan()
    est = estimate(plan, chat)
    run = est.online
    assert run is not None and run.config == online_config(plan)
    coef = flops_coefficients(plan.model, plan.parallel.tp)
    mlm = np.mean([coef(a, b) for a, b in zip(run.seqlen_sum, run.seqlen_squared_sum, strict=True)])
    assert est.flops.model_per_step == pytest.approx(mlm)  # training.py's formula with the scheduler's sums
    assert est.time.straggler_factor > 1.05  # dp_balanced deals packs in order: it balances counts, not work
    assert est.time.steps_per_epoch == pytest.approx(run.summary.steps)
    assert est.to_dict()["online"]["micro_batches_mean"] == run.summary.micro_batches_mean


@pytest.mark.slow  # the command line in subprocesses
def test_online_exports(tmp_path, chat):
    plan = _plan(packing={"max_seqlen_per_dp_cp_rank": 12000})
    path = tmp_path / "online.yaml"
    data = plan.to_dict()
    data["data"] = {"lengths": str(CHAT)}
    path.write_text(yaml.safe_dump(data))
    refused = advisor("export", path, "--format", "megatron-lm", "--quiet")  # 16k on TP 1, CP 1: over 80 GB
    assert refused.returncode == 2 and "use --force to export anyway" in refused.stderr
    args = advisor("export", path, "--format", "megatron-lm", "--quiet", "--force")  # the flags are what is tested
    assert args.returncode == 0, args.stderr
    for flag in (
        "--sequence-packing-scheduler dp_balanced",
        "--max-seqlen-per-dp-cp-rank 12000",
        "--calculate-per-token-loss",
        "--sft",
        '--data-path "${DATA_PATH:?',
        "--global-batch-size 64",
    ):
        assert flag in args.stdout
    assert "--mock-data" not in args.stdout  # the user's data unless mock lengths are asked for
    python = advisor("export", path, "--format", "python", "--quiet", "--force")
    assert python.returncode == 2 and "export --format megatron-lm" in python.stderr
    data["packing"]["megatron_lm"] = "main"
    path.write_text(yaml.safe_dump(data))
    main = advisor("export", path, "--format", "megatron-lm", "--quiet", "--force")
    assert main.returncode == 2 and "has no --sequence-packing-scheduler" in main.stderr
    findings = json.loads(advisor("recommend", path, "--json", "--quiet").stdout)["findings"]
    assert any(f["id"] == "online.main_not_wired" and f["fix"] == {"packing": {"megatron_lm": "dev"}} for f in findings)


def test_online_plans_are_checked_as_megatron_lm_checks_them():
    with pytest.raises(Exception, match="default_dynamic_cp exists on Megatron-LM dev only"):
        _plan(packing={"megatron_lm": "main", "scheduler": "default_dynamic_cp"})
    with pytest.raises(Exception, match="below training.seq_length 16384"):
        _plan(packing={"max_seqlen_per_dp_cp_rank": 4096})  # x CP 2 = 8192 < 16384
    with pytest.raises(Exception, match="training.task must be llm-sft"):
        _plan(training={"task": "vlm-sft", "micro_batch_size": 2})


def test_the_comparison_names_a_winner_and_why(chat):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "cp": 2},
            "training": {"seq_length": 16384, "global_batch_samples": 128, "peft": "lora"},
        }
    )
    c = compare_packing(plan, chat)
    ways = [r["way"] for r in c.rows()]
    assert ways == [
        "offline (Megatron-Bridge)",
        "in-batch (Megatron-Bridge 0.7)",
        "global-batch dp_balanced (Megatron-Bridge 0.7)",
        "global-batch dynamic CP (Megatron-Bridge 0.7)",
        "online dp_balanced (Megatron-LM dev)",
        "online dynamic CP (Megatron-LM dev)",
    ]
    # among Megatron-Bridge's ways (the plan's framework) that fit: within 2 % of the fastest per sample
    mb = [r for r in c.rows() if r["framework"] == "Megatron-Bridge" and not r["refusal"] and r["fits"]]
    fastest = min(r["sample_seconds"] for r in mb)
    chosen = next(r for r in mb if r["way"] == c.recommended)
    assert chosen["sample_seconds"] <= fastest * 1.02 and c.why.endswith(".") and c.why.count(". ") == 0
    rows = {r["way"]: r for r in c.rows()}
    offline, online = rows["offline (Megatron-Bridge)"], rows["online dp_balanced (Megatron-LM dev)"]
    assert online["straggler"] > offline["straggler"]  # packs dealt in arrival order against shuffled packs


@pytest.mark.slow  # AppTest
def test_the_online_page_draws_and_sets_the_plan():
    at = open_page("pages/6_Online_packing.py")
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 3
    chooser = next(s for s in at.selectbox if s.label == "Put in the plan")
    chooser.set_value(next(o for o in chooser.options if o.startswith("online dp_balanced"))).run()
    next(b for b in at.button if b.label.startswith("Use online dp_balanced")).click().run()
    assert at.session_state["plan"].packing.mode == "online"
    assert at.session_state["plan"].packing.scheduler == "dp_balanced"
    at.selectbox[0].set_value("main").run()  # main refuses nothing on the sample, but the simulation still runs
    assert not at.exception


def test_use_applies_exactly_the_run_the_comparison_recommends_with_the_same_samples_a_step():
    """Round 4 of issue 34: the page recommended dynamic CP and its button applied dp_balanced, and a plan
    counting packs would have kept the number as samples."""
    from advisor.advice.compare import compare_packing
    from advisor.data.ingest import load_lengths

    hist = load_lengths(ROOT / "sample_data" / "chat_like_hist.csv").scale_model(5_000)
    plan = plan_from_dict(
        {
            "version": 2,
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "cp": 2},
            "training": {"seq_length": 8192, "global_batch_size": 16},
        }
    )  # 16 packs
    comparison = compare_packing(plan, hist)
    n = comparison.run("offline (Megatron-Bridge)").estimate.packing.packing_factor
    for run in comparison.runs:
        used = plan.changed(comparison.use(run.label))
        assert used.packing == run.plan.packing and used.packing_mode == run.plan.packing_mode
        if used.packing_mode == "online":
            assert abs(used.requested_samples - 16 * n) <= used.dp  # the same samples, in Megatron-LM's unit
            assert used.packing.scheduler == run.plan.packing.scheduler
    assert (
        plan.changed(comparison.use(comparison.recommended)).packing
        == comparison.run(comparison.recommended).plan.packing
    )


@pytest.mark.parametrize("mode", ["online", "global-batch"])
def test_the_plans_micro_batches_per_rank_are_the_schedules(tmp_path, capsys, mode):
    """One figure: the summary's micro batches per DP rank are the scheduler's mean, the count the step time uses;
    samples / (micro_batch_size x DP) said 16 a rank beside a schedule of 2."""
    plan = _plan(parallel={"gpus": 32, "tp": 2, "pp": 2}, packing={"mode": mode})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**plan.to_dict(), "data": {"lengths": str(CHAT)}}))
    proc = in_process(capsys, "estimate", path, "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    mean = out["online"]["micro_batches_mean"]
    assert out["plan"]["micro_batches_per_step"] == pytest.approx(mean, abs=0.005)
    assert mean < plan.micro_batches_per_step()  # the samples' count is not the schedule's here
    text = in_process(capsys, "estimate", path, "--quiet").stdout
    assert f"{mean:.2f} micro batches per DP rank (mean)" in text


@pytest.mark.parametrize(
    ("mode", "extra", "micro"),
    [
        ("global-batch", {}, 1),
        ("global-batch", {"max_seqlen_per_dp_cp_rank": 16384}, 1),  # 0.7 needs micro batch 1
        ("online", {}, 1),
        ("online", {"max_seqlen_per_dp_cp_rank": 16384}, 2),  # the online twin took neither (review)
        ("in-batch", {}, 2),  # in-batch packs a micro batch's samples: Megatron-Bridge needs >= 2
    ],
)
def test_the_plans_own_way_in_the_comparison_is_the_plans_estimate(chat, mode, extra, micro):
    """The comparison keeps the plan's own batch for the plan's own way (it rounded every way to offline's whole
    packs: 48 samples beside the plan's 64, its step 0.53 s beside the estimate's 0.735 s), runs it with the plan's
    own micro batch and cap, and says which way differs and why."""
    plan = _plan(
        parallel={"gpus": 16, "tp": 2, "cp": 2},
        packing={"mode": mode, **extra},
        training={"micro_batch_size": micro},
    )
    if mode != "online":  # the releases global-batch packing (and GPT SFT in-batch packing) need
        plan = plan.changed({"versions": {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"}})
    own = estimate(plan, chat)
    c = compare_packing(plan, chat)
    row = next(r for r in c.runs if r.kind == mode)
    if mode == "global-batch" and not extra:  # the plan as set is refused, as Megatron-Bridge 0.7 refuses it
        assert row.estimate is None and "needs model.max_seqlen_per_dp_cp_rank set" in row.refusal
        return
    assert row.samples_per_step == pytest.approx(plan.requested_samples)
    assert row.estimate.time.step_seconds == pytest.approx(own.time.step_seconds, rel=1e-9)
    offline = next(r for r in c.runs if r.kind == "offline")
    if round(offline.samples_per_step) != plan.requested_samples:
        assert f"offline (Megatron-Bridge) {round(offline.samples_per_step):,}: whole packs" in c.basis
