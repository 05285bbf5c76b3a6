"""Plans through the command line only: overrides survive, relative paths work from any folder, bad plans and
options are refused with exit code 2 and the field named. In a subprocess, as users run it, in the slow tier; the
fast tier runs the command line in this process (``advisor.cli.main``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.support import ROOT, SAMPLE
from tests.support.cli import in_process
from tests.support.tiers import slow_after

SQUAD = SAMPLE / "squad_v1.1_len384_hist.csv"


def advisor(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture()
def override_plan(tmp_path):
    """A 16-layer Llama 3.1 8B (the preset has 32) with a relative data path next to the plan."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lengths.csv").write_text(SQUAD.read_text())
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "model": {"preset": "llama3.1-8b", "num_layers": 16},
                "parallel": {"gpus": 8, "tp": 2},
                "training": {"seq_length": 384, "global_batch_samples": 128},
                "data": {"lengths": "data/lengths.csv"},
            }
        )
    )
    return plan


@pytest.mark.slow  # the command line in subprocesses
def test_overrides_survive_export_and_recommend_from_any_folder(override_plan, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    exported = advisor("export", override_plan, "--format", "plan", "--quiet", cwd=elsewhere)
    assert exported.returncode == 0, exported.stderr
    assert yaml.safe_load(exported.stdout)["model"] == {"preset": "llama3.1-8b", "num_layers": 16}
    rec = advisor("recommend", override_plan, "--json", "--quiet", cwd=elsewhere)
    assert rec.returncode == 0, rec.stderr
    out = json.loads(rec.stdout)
    assert out["recommended_plan"]["model"] == {"preset": "llama3.1-8b", "num_layers": 16}
    assert out["plan"]["samples_per_step"] == 128 and out["plan"]["packing_factor"] > 1
    est = advisor("estimate", override_plan, "--json", "--quiet", cwd=elsewhere)
    assert est.returncode == 0, est.stderr


@pytest.mark.slow  # the command line in subprocesses
def test_the_global_batch_fix_is_gone_and_the_export_writes_packs(override_plan):
    out = json.loads(advisor("recommend", override_plan, "--json", "--quiet").stdout)
    gbs = next(f for f in out["findings"] if f["id"] == "packing.global_batch")
    assert gbs["fix"] == {}  # information: the plan counts samples, the export converts
    snippet = advisor("export", override_plan, "--format", "python", "--quiet").stdout
    assert f"cfg.train.global_batch_size = {out['plan']['megatron_bridge_global_batch_size']}" in snippet


BAD_PLANS = {
    "quoted number": ("model: llama3.1-8b\ntraining: {seq_length: '4096x'}\n", "training.seq_length"),
    "string boolean": ("model: llama3.1-8b\nparallel: {gpus: 8, tp: 2, sp: 'false'}\n", "parallel.sp"),
    "maybe": ("model: llama3.1-8b\nparallel: {sp: maybe}\n", "parallel.sp"),
    "groups over heads": ("model: {preset: llama3.1-8b, num_query_groups: 128}\n", "model.num_query_groups"),
    "list for int": ("model: llama3.1-8b\nparallel: {gpus: [8]}\n", "parallel.gpus"),
    "zero gpus": ("model: llama3.1-8b\nparallel: {gpus: 0}\n", "parallel.gpus"),
    "negative tp": ("model: llama3.1-8b\nparallel: {tp: -2}\n", "parallel.tp"),
    "huge gpus": ("model: llama3.1-8b\nparallel: {gpus: 100000000000}\n", "parallel.gpus"),
    "unknown field": ("model: llama3.1-8b\ntraining: {seq_len: 4096}\n", "training.seq_len"),
    "unknown section": ("model: llama3.1-8b\noptimizer: {lr: 1}\n", "optimizer"),
    "unknown preset": ("model: llama9\n", "model"),
    "pack size 1e9": ("model: llama3.1-8b\npacking: {pack_size: 1000000000}\n", "packing.pack_size"),
    "nan memory": (
        "model: llama3.1-8b\nhardware: {gpu: X, memory_gib: .nan, bf16_tflops: 100}\n",
        "hardware.memory_gib",
    ),
    "python tag": ("model: !!python/object:os.system {}\n", "not valid YAML"),
    "not a mapping": ("- 1\n- 2\n", "expected a mapping"),
    "binary": (b"\xff\xfe\x00bad", "not UTF-8"),
    "alias bomb": (
        "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nmodel: llama3.1-8b\n",
        "expands to more than",
    ),
}


@pytest.mark.parametrize("name", slow_after(list(BAD_PLANS)))
def test_bad_plans_exit_2_naming_the_field(tmp_path, capsys, name):
    text, field = BAD_PLANS[name]
    plan = tmp_path / "bad.yaml"
    plan.write_bytes(text if isinstance(text, bytes) else text.encode())
    proc = in_process(capsys, "estimate", plan, "--lengths", SQUAD, "--quiet")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert field in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "option,value",
    slow_after(
        [
            ("--mfu", "0"),
            ("--overhead-gib", "inf"),
            ("--mfu", "-1"),
            ("--mfu", "nan"),
            ("--mfu", "50"),
            ("--mfu", "abc"),
            ("--overhead-gib", "-1000"),
        ]
    ),
)
def test_bad_options_exit_2(capsys, option, value):
    proc = in_process(capsys, "estimate", SAMPLE / "plans" / "llama8b_squad.yaml", option, value, "--quiet")
    assert proc.returncode == 2 and option in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow  # the command line in subprocesses
def test_bad_output_paths_and_versions_exit_2(tmp_path):
    plan = SAMPLE / "plans" / "llama8b_squad.yaml"
    for target in (tmp_path, tmp_path / "missing" / "l.csv"):
        proc = advisor("export", plan, "--lengths-csv", target, "--quiet")
        assert proc.returncode == 2 and "--lengths-csv" in proc.stderr and "Traceback" not in proc.stderr
    proc = advisor("export", plan, "--megatron-bridge-version", "0.6.2'); import os; os.system('id')#")
    assert proc.returncode == 2 and "MAJOR.MINOR" in proc.stderr


def test_schema_command_prints_the_bundled_schema(capsys):
    proc = in_process(capsys, "schema")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == json.loads((SAMPLE / "plans" / "plan.schema.json").read_text())


@pytest.mark.slow  # the command line in subprocesses
def test_review_findings_stay_fixed(tmp_path):
    """Each line here was a finding of an independent review of the plan and the exports."""
    plan = SAMPLE / "plans" / "llama8b_squad.yaml"
    existing = tmp_path / "in.csv"
    existing.write_text("length\n5\n")
    proc = advisor("export", plan, "--format", "megatron-lm", "--lengths-csv", existing, "--quiet")
    assert proc.returncode == 2 and "exists" in proc.stderr and existing.read_text() == "length\n5\n"
    assert advisor("export", plan, "--megatron-bridge-version", "\u0660.\u0666.\u0662").returncode == 2
    assert advisor("estimate", plan, "--mfu", "5e-324").returncode == 2
    dup = tmp_path / "dup.yaml"
    dup.write_text("model: llama3.1-8b\nparallel: {gpus: 8, gpus: 16}\n")
    proc = advisor("estimate", dup, "--lengths", SQUAD, "--quiet")
    assert proc.returncode == 2 and "appears twice" in proc.stderr
    odd = tmp_path / "odd.yaml"
    odd.write_text(
        "model: {hidden_size: 4097, num_layers: 2, num_attention_heads: 32, ffn_hidden_size: 8192, vocab_size: 1000}\n"
    )
    assert "not divisible by num_attention_heads" in advisor("estimate", odd, "--lengths", SQUAD).stderr
    moe = tmp_path / "moe.yaml"
    moe.write_text("model: qwen3-30b-a3b\nparallel: {gpus: 8, ep: 8, etp: 4}\n")
    assert "ep*etp*pp = 32" in advisor("estimate", moe, "--lengths", SQUAD).stderr
    for args in (["--micro-batch-size", "0"], ["--max-file-mb", "inf"], ["--pack-size", "99999999999"]):
        proc = (
            advisor("pack", SQUAD, "--pack-size", "512", *args)
            if args[0] != "--pack-size"
            else advisor("pack", SQUAD, *args)
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow  # the command line in subprocesses
def test_megatron_lm_export_is_accepted_by_megatron_core(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "model": {"preset": "llama3.1-8b", "num_layers": 16},
                "parallel": {"gpus": 8},
                "training": {"seq_length": 384, "global_batch_samples": 100},
            }
        )
    )
    text = advisor("export", plan, "--format", "megatron-lm", "--lengths", SQUAD, "--quiet").stdout
    assert "--global-batch-size 96" in text and "rounded to 96" in text  # a multiple of micro batch x DP 8
    assert "--num-layers 16" in text and "--group-query-attention" in text
    snippet = advisor("export", plan, "--format", "python", "--lengths", SQUAD, "--quiet").stdout
    assert "cfg.model.num_layers = 16" in snippet


@pytest.mark.slow  # the command line in subprocesses
def test_second_review_findings_stay_fixed(tmp_path):
    """Each line was a finding of the second independent review."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from advisor.analysis import analyze
    from advisor.data.lengths import LengthHistogram
    from advisor.plan import PlanError, plan_from_dict

    with pytest.raises(PlanError, match="pad_seq_to_mult 65536 is larger than the longest sequence"):
        plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 384}, "packing": {"pad_seq_to_mult": 65536}})
    ones = LengthHistogram.from_samples([1] * 50)  # runtime length 0 everywhere
    est = analyze(plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 384}}), ones).estimate
    assert est.flops.attention_ratio == 1.0
    ones_file = tmp_path / "ones.csv"
    ones_file.write_text("length\n" + "1\n" * 50)
    proc = advisor("estimate", SAMPLE / "plans" / "llama8b_squad.yaml", "--lengths", ones_file, "--quiet")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.integers(1, 5000), min_size=1, max_size=300),
        st.lists(st.integers(1, 10**6), min_size=1, max_size=300),
        st.integers(50, 5000),
    )
    def quantiles_kept(lengths, counts, target):
        n = min(len(lengths), len(counts))
        hist = LengthHistogram.from_pairs(lengths[:n], counts[:n])
        model = hist.scale_model(target)
        if model is hist:
            return
        ratio = target / hist.num_samples
        full = np.cumsum(hist.counts) * ratio
        cdf = dict(zip(model.lengths.tolist(), np.cumsum(model.counts).tolist(), strict=True))
        for length, want in zip(hist.lengths.tolist(), full.tolist(), strict=True):
            got = max((v for k, v in cdf.items() if k <= length), default=0)
            assert abs(got - want) <= 1.5, (length, got, want)  # every quantile within a sample (+ the kept max)
        assert model.max_length == hist.max_length

    quantiles_kept()


def _seventy_b(tmp_path, versions: dict) -> str:
    plan = {
        "version": 2,
        "model": "llama3.1-70b",
        "parallel": {"gpus": 64, "tp": 4, "pp": 4, "cp": 2, "sp": True},
        "training": {"seq_length": 16384, "global_batch_size": 64, "recompute": "full"},
        "data": {"lengths": str(SAMPLE / "sft_like_hist.csv")},
        "versions": versions,
    }
    path = tmp_path / f"plan_{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(plan))
    return str(path)


def test_recommend_names_the_traps_of_the_versions_a_plan_runs_and_every_output_says_them(tmp_path, capsys):
    old = in_process(
        capsys,
        "recommend",
        _seventy_b(tmp_path, {"megatron_bridge": "0.3.1", "transformer_engine": "2.16"}),
        "--quiet",
        "--json",
    )
    new = in_process(capsys, "recommend", _seventy_b(tmp_path, {}), "--quiet", "--json")
    ids = lambda proc: {f["id"] for f in json.loads(proc.stdout)["findings"] if f.get("outcome")}  # noqa: E731
    assert old.returncode == new.returncode == 0
    assert ids(old) == {"trap.mb-2952", "trap.te-3331"} and ids(new) == set()
    text = in_process(capsys, "estimate", _seventy_b(tmp_path, {"megatron_bridge": "0.3.1"}), "--quiet")
    assert "versions: Megatron-Bridge 0.3.1, Megatron-Core 0.19.2, Transformer Engine 2.20.2" in text.stdout
    assert "Megatron-Bridge: MODEL_TFLOP/s/GPU (rank 0)" in text.stdout


def test_an_export_for_another_megatron_bridge_release_says_so_and_writes_it_into_the_plan(tmp_path, capsys):
    proc = in_process(
        capsys, "export", _seventy_b(tmp_path, {}), "--format", "plan", "--megatron-bridge-version", "0.7.1", "--force"
    )
    assert proc.returncode == 0 and "megatron_bridge: 0.7.1" in proc.stdout
    assert "--megatron-bridge-version 0.7.1: the plan's versions.megatron_bridge 0.6.2 replaced" in proc.stderr
