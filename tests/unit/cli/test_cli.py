"""The command line: in a subprocess, as users run it, in the slow tier; in this process (``advisor.cli.main``, what
``python -m advisor`` calls) in the fast tier."""

from __future__ import annotations

import json

import pytest

from tests.support import ROOT, SAMPLE
from tests.support.cli import advisor, in_process


def test_pack_json_is_megatron_bridges_metadata_of_the_packing(capsys):
    """The JSON against the packing computed here: Megatron-Bridge's metadata keys and values, the counts recomputed
    from the histogram file itself; progress on stderr only, so stdout is the JSON alone."""
    import numpy as np

    from advisor.data.ingest import load_lengths
    from advisor.packing.config import PackingConfig
    from advisor.packing.offline import pack

    data = SAMPLE / "squad_v1.1_len384_hist.csv"
    proc = in_process(capsys, "pack", str(data), "--pack-size", "384", "--json", "--algorithm", "first_fit_decreasing")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    hist = load_lengths(data)
    result = pack(hist, PackingConfig(pack_size=384, algorithm="first_fit_decreasing"))
    assert {k: out[k] for k in result.metadata} == result.metadata
    runtime = np.minimum(hist.lengths, 384) - 1  # stored tokens minus the trailing one
    packs = out["num_packs"]
    assert out["num_sequences"] == hist.counts.sum() and packs == result.num_packs
    assert out["packing_factor"] == round(hist.counts.sum() / packs, 2)
    assert out["dataset_max_seqlen"] == runtime.max() and out["num_truncated"] == 0
    assert out["padding_fraction"] == pytest.approx(1 - (runtime * hist.counts).sum() / (packs * 384), rel=1e-12)
    assert proc.stderr.splitlines()[-1].endswith("] done") and "{" not in proc.stderr


@pytest.mark.slow  # the command line in a subprocess
def test_pack_human_summary_and_truncation():
    """The summary counts exactly the samples longer than the pack, and the tokens cut from them (Megatron-Bridge
    keeps the first pack-size tokens of each), recomputed here from the histogram itself."""
    from advisor.data.ingest import load_lengths

    data = SAMPLE / "squad_v1.1_len384_hist.csv"
    proc = advisor("pack", str(data), "--pack-size", "256", "--quiet")
    assert proc.returncode == 0 and proc.stderr == ""
    hist = load_lengths(data)
    over = hist.lengths > 256
    samples, tokens = int(hist.counts[over].sum()), int(((hist.lengths[over] - 256) * hist.counts[over]).sum())
    assert samples > 0 and "packing factor n =" in proc.stdout
    assert f"truncated {samples:,} samples ({tokens:,} tokens)" in proc.stdout, proc.stdout


def test_bad_file_is_one_message_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("length\n5\nfive\n")
    proc = in_process(capsys, "pack", str(bad), "--pack-size", "16")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(f"error: {bad}, line 3: length 'five' is not a number")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # the command line in a subprocess
def test_bad_setting_is_one_message(tmp_path):
    proc = advisor("pack", str(SAMPLE / "squad_v1.1_len384_hist.csv"), "--pack-size", "128", "--max-seq-length", "256")
    assert proc.returncode == 2 and "cannot exceed the pack size" in proc.stderr


def test_lengths_summary_json(capsys):
    proc = in_process(capsys, "lengths", str(SAMPLE / "wikipedia_bert_len512_hist.csv"), "--json", "--quiet")
    out = json.loads(proc.stdout)
    assert out["num_samples"] == 16279552 and out["max"] == 512


@pytest.mark.slow  # the command line in a subprocess
def test_all_samples_of_one_token_do_not_crash(tmp_path):
    ones = tmp_path / "ones.csv"
    ones.write_text("seq_len\n1\n1\n1\n")
    proc = advisor("pack", str(ones), "--pack-size", "8", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_packs"] == 1


@pytest.mark.slow  # the command line in a subprocess
def test_baselines_do_not_count_pack_padding_as_real(tmp_path):
    two = tmp_path / "two.csv"
    two.write_text("5\n9\n")  # runtime 4 and 8; pad_seq_to_mult only pre-pads for packing
    proc = advisor("pack", str(two), "--pack-size", "16", "--pad-seq-to-mult", "16", "--json", "--quiet")
    out = json.loads(proc.stdout)
    assert out["baselines"][0]["efficiency"] == 12 / 32 * 100


def _long_context_plan(tmp_path, **training):
    """The issue's plan: Llama 3.1 8B, 16 H100s, 128k, TP 1, CP 8, on the bundled long-context sample."""
    plan = {
        "model": "llama3.1-8b",
        "parallel": {"gpus": 16, "tp": 1, "cp": 8},
        "training": {"seq_length": 131072, "global_batch_samples": 64, **training},
        "packing": {"mode": "offline", "pack_size": 131072},
        "data": {"lengths": str(SAMPLE / "long_context_hist.csv")},
        "hardware": {"gpu": "H100-80GB"},
    }
    path = tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(plan))
    return str(path)


@pytest.mark.slow  # the command line in a subprocess
def test_export_refuses_a_plan_that_does_not_fit_unless_forced(tmp_path):
    plan = _long_context_plan(tmp_path)
    est = json.loads(advisor("estimate", plan, "--json", "--quiet").stdout)["memory"]
    assert not est["fits"]
    refused = advisor("export", plan, "--format", "overrides", "--quiet")
    gib = f"{est['total_bytes'] / 2**30:.1f} GiB per GPU of {est['capacity_bytes'] / 2**30:.1f} GiB on H100-80GB"
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: plan needs {gib}") and line.endswith("(use --force to export anyway)")
    forced = advisor("export", plan, "--format", "overrides", "--quiet", "--force")
    assert forced.returncode == 0 and "context_parallel_size=8" in forced.stdout
    fits = advisor("export", _long_context_plan(tmp_path, recompute="full"), "--format", "overrides", "--quiet")
    assert fits.returncode == 0, fits.stderr  # the error's own fix, applied: exported without --force
    recommend = json.loads(advisor("recommend", plan, "--json", "--quiet").stdout)
    error = next(f for f in recommend["findings"] if f["id"] == "memory.exceeds")
    assert error["severity"] == "error" and error["fix"] == {"training": {"recompute": "full"}}


@pytest.mark.parametrize(
    "option, value",
    [
        ("--wall-seconds", "-1"),
        ("--wall-seconds", "nan"),
        ("--wall-seconds", "0"),
        ("--memory-gib", "0.001"),
        ("--memory-gib", "inf"),
    ],
)
def test_trial_limits_out_of_range_are_one_message_and_exit_2(capsys, option, value):
    """Round 4: --wall-seconds -1, nan and 0 and --memory-gib 0.001 were accepted (a trial stopped at once or
    never). Each is refused by the parser, naming the option."""
    from advisor.cli import main

    plan = str(ROOT / "sample_data" / "plans" / "llama8b_squad.yaml")
    with pytest.raises(SystemExit) as e:
        main(["trial", plan, option, value])
    assert e.value.code == 2 and option in capsys.readouterr().err


def test_workers_past_the_cores_run_as_many_as_the_cores_and_say_so():
    import os

    from advisor.cli.arguments import local_workers

    cores = os.cpu_count() or 1
    assert local_workers(4096, "local") == (
        cores,
        f"--workers 4096: this machine has {cores} cores; {cores} worker processes run",
    )
    assert local_workers(4096, "ray") == (4096, None)  # a cluster's workers are its own


TOKENIZE_SFT = ["tokenize", SAMPLE / "raw" / "sft_sample.jsonl", "--tokenizer", SAMPLE / "tokenizers" / "tiny-bpe"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ([*TOKENIZE_SFT, "--pack-size", "512"], "--pack-size"),
        ([*TOKENIZE_SFT, "--bootstraps", "50"], "--bootstraps"),
        ([*TOKENIZE_SFT, "--seed", "99"], "--seed"),
        (["export", SAMPLE / "plans" / "llama8b_squad.yaml", "--vary", "gpu", "--format", "python"], "--vary"),
    ],
)
def test_an_option_that_would_do_nothing_is_refused_not_ignored(capsys, args, option):
    """docs/cli.md: no option is silently ignored. These were: --pack-size and --bootstraps without --sample,
    --vary without --recommended."""
    run = in_process(capsys, *args, "--quiet")
    assert run.returncode == 2 and run.stderr.startswith(f"error: {option}"), run.stderr
    assert run.stdout == ""


def test_a_fractional_count_is_called_samples_and_a_scheduled_layout_names_its_packing(tmp_path, capsys):
    hist = tmp_path / "hist.csv"
    hist.write_text("length,count\n100,2\n200,1.5\n")
    bad = in_process(capsys, "lengths", hist, "--quiet")
    assert bad.returncode == 2 and "is not a whole number of samples" in bad.stderr, bad.stderr
    plan = tmp_path / "online.yaml"
    plan.write_text(
        "version: 2\nmodel: llama3.1-8b\nparallel: {gpus: 8, cp: 2}\n"
        "training: {task: llm-sft, seq_length: 16384, global_batch_size: 64}\n"
        f"packing: {{mode: online}}\ndata: {{lengths: {SAMPLE / 'chat_like_hist.csv'}}}\n"
    )
    run = in_process(capsys, "recommend", plan, "--quiet")
    assert run.returncode == 0, run.stderr
    layouts = [line for line in run.stdout.splitlines() if " TP " in line and " DP " in line]
    assert layouts and all("packing online seq 16384" in line and "None" not in line for line in layouts), layouts


def test_an_exported_plan_carries_the_lengths_it_was_read_with(capsys):
    """export --lengths X: the plan written out (and the plan a trial script embeds) points at X, whose figures
    the export has, not at the plan file's own data."""
    import yaml

    chat = SAMPLE / "chat_like_hist.csv"
    args = ("export", SAMPLE / "plans" / "llama8b_squad.yaml", "--lengths", chat, "--quiet")
    plan = yaml.safe_load(in_process(capsys, *args, "--format", "plan").stdout)
    assert plan["data"]["lengths"] == str(chat.resolve()) and plan["data"]["column"] is None
    script = in_process(capsys, *args, "--format", "torchrun").stdout
    assert f"lengths: {chat.resolve()}" in script


def test_a_lengths_folder_given_relative_is_carried_absolute(tmp_path, capsys, monkeypatch):
    """A folder of packed Parquet shards given as a relative --lengths (review: it was written as given, so the
    exported plan read it from the plan's own folder and failed)."""
    import yaml

    packed = tmp_path / "packed"
    made = in_process(
        capsys,
        "prepare",
        SAMPLE / "raw" / "chat_sample.jsonl",
        "--tokenizer",
        SAMPLE / "tokenizers" / "tiny-bpe",
        "--format",
        "chat",
        "--pack-size",
        "1024",
        "-o",
        packed,
        "--quiet",
    )
    assert made.returncode == 0, made.stderr
    plan_file = SAMPLE / "plans" / "llama8b_squad.yaml"
    monkeypatch.chdir(tmp_path)
    from advisor.cli import main

    assert main(["export", str(plan_file), "--lengths", "packed", "--format", "plan", "--quiet"]) == 0
    plan = yaml.safe_load(capsys.readouterr().out)
    assert plan["data"]["lengths"] == str(packed.resolve())
