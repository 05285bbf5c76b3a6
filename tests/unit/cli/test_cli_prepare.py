"""``python -m advisor prepare``: the command over advisor.prepare, its summary, its JSON and its refusals.

Run in this process through ``advisor.cli.main`` (what ``python -m advisor`` calls), with the bundled raw samples
and ``tiny-bpe``; one run in a subprocess, as users run it, is in the slow tier.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from advisor.cli import main
from advisor.cli.parser import build_parser
from advisor.prepare.run import PrepareOptions, prepare
from tests.support import ROOT
from tests.support.tokenizer_fixture import build_tokenizer

RAW = ROOT / "sample_data" / "raw"
TOKENIZER = str(ROOT / "sample_data" / "tokenizers" / "tiny-bpe")
CHAT = str(RAW / "chat_sample.jsonl")
SFT = str(RAW / "sft_sample.jsonl")


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_prepare_writes_the_folder_and_says_what_it_did(capsys, tmp_path):
    out = tmp_path / "packed"
    code, text, _ = cli(
        capsys,
        "prepare",
        CHAT,
        "--tokenizer",
        TOKENIZER,
        "--format",
        "chat",
        "--pack-size",
        1024,
        "--validation",
        CHAT,
        "--workers",
        1,
        "--quiet",
        "-o",
        out,
    )
    assert code == 0
    assert sorted(os.listdir(out)) == [
        ".tokens",
        "1024_metadata.jsonl",
        "training_1024.idx.parquet",
        "validation_1024.idx.parquet",
    ]
    rows = pq.read_table(out / "training_1024.idx.parquet").num_rows
    assert (
        "training: 300 records read, 285 packed, 15 skipped (longer than max_seq_length), 0 truncated -> "
        f"{rows:,} packs" in text
    )
    assert "efficiency" in text and "n = " in text and "s in all" in text
    assert f"packed_train_data_path='{out}/training_1024.idx.parquet'" in text


def test_json_and_the_api_agree_and_a_repack_needs_no_tokenizer(capsys, tmp_path):
    code, text, _ = cli(
        capsys,
        "prepare",
        SFT,
        "--tokenizer",
        TOKENIZER,
        "--pack-size",
        512,
        "--seed",
        7,
        "--algorithm",
        "first_fit_decreasing",
        "--workers",
        1,
        "--json",
        "--quiet",
        "-o",
        tmp_path / "a",
    )
    assert code == 0
    data = json.loads(text)
    api = prepare(
        str(tmp_path / "b"),
        PrepareOptions(pack_size=512, seed=7, algorithm="first_fit_decreasing", workers=1),
        train=_sft_job(),
    )
    assert data["metadata"] == [api.splits[0].metadata]
    assert data["splits"][0]["records_read"] == 300 and data["splits"][0]["truncated"] == api.splits[0].truncated
    assert data["packed_sequence_specs"]["packed_train_data_path"] == str(tmp_path / "a" / "training_512.idx.parquet")
    code, text, _ = cli(
        capsys,
        "prepare",
        "--from-cache",
        tmp_path / "a",
        "--pack-size",
        1024,
        "--max-seq-length",
        512,
        "--algorithm",
        "column_generation",
        "--json",
        "--quiet",
        "-o",
        tmp_path / "c",
    )
    again = json.loads(text)
    assert code == 0 and again["tokenize_seconds"] == 0 and again["from_cache"] == str(tmp_path / "a")
    assert again["splits"][0]["packs"] <= data["splits"][0]["packs"] // 2 + 1


def _sft_job():
    from advisor.data.tokenize.engine import TokenizeJob
    from advisor.data.tokenize.sft import SftSettings

    return TokenizeJob(data=SFT, tokenizer=TOKENIZER, fmt="sft", settings=SftSettings())


def test_refusals_are_one_line_and_exit_2(capsys, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    generation = build_tokenizer(
        tmp_path / "gen",
        chat_template=(
            "{% for m in messages %}{{ m['role'] }}: {% generation %}{{ m['content'] }}{% endgeneration %}\n"
            "{% endfor %}"
        ),
    )
    cases = [
        (("prepare", "--pack-size", 64, "-o", tmp_path / "o"), "give DATA and --tokenizer"),
        (
            ("prepare", SFT, "--tokenizer", TOKENIZER, "--pack-size", 64, "-o", tmp_path / "full"),
            "-o " + str(tmp_path / "full") + ": is a folder that is not empty; pass --force",
        ),
        (
            ("prepare", SFT, "--from-cache", tmp_path / "full", "--pack-size", 64, "-o", tmp_path / "o"),
            "give it without DATA, --tokenizer and --validation",
        ),
        (
            ("prepare", "--from-cache", tmp_path / "full", "--pack-size", 64, "-o", tmp_path / "o"),
            "holds no token cache",
        ),
        (
            ("prepare", SFT, "--tokenizer", TOKENIZER, "--pack-size", 64, "--add-sep", "-o", tmp_path / "o"),
            "add_sep puts None",
        ),
        (
            (
                "prepare",
                SFT,
                "--tokenizer",
                TOKENIZER,
                "--pack-size",
                64,
                "--max-seq-length",
                128,
                "-o",
                tmp_path / "o",
            ),
            "cannot exceed the pack size",
        ),
        (
            (
                "prepare",
                CHAT,
                "--tokenizer",
                TOKENIZER,
                "--format",
                "chat",
                "--legacy-chat",
                "--loss-mode",
                "full",
                "--pack-size",
                64,
                "-o",
                tmp_path / "o",
            ),
            "not an option of the legacy chat format",
        ),
        (
            ("prepare", SFT, "--tokenizer", TOKENIZER, "--legacy-chat", "--pack-size", 64, "-o", tmp_path / "o"),
            "--legacy-chat: a chat option",
        ),
    ]
    for args, message in cases:
        code, _, err = cli(capsys, *args, "--quiet")
        assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, (args, err)
    assert not (tmp_path / "o").exists() and os.listdir(tmp_path / "full") == ["x"]
    # a template whose {% generation %} blocks give the mask: built now (tests/oracle/test_chat_tokens.py checks
    # the masks)
    code, _, err = cli(
        capsys,
        "prepare",
        CHAT,
        "--tokenizer",
        generation,
        "--format",
        "chat",
        "--pack-size",
        1024,
        "--workers",
        1,
        "--quiet",
        "-o",
        tmp_path / "gen-out",
    )
    assert code == 0, err
    mask = pq.read_table(tmp_path / "gen-out" / "training_1024.idx.parquet").column("loss_mask").to_pylist()
    assert 0 < sum(map(sum, mask)) < sum(map(len, mask))
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


def test_prepare_takes_tokenize_and_pack_options():
    """One option set each: the raw-data options are tokenize's, the packing options pack's."""

    def options(command):
        parser = build_parser(command)
        sub = next(a for a in parser._actions if a.dest == "command").choices[command]
        return {s for a in sub._actions for s in a.option_strings}

    prepare_opts = options("prepare")
    assert (
        options("tokenize")
        - {
            "--max-seq-length",
            "--sample",
            "--seed",
            "--pack-size",
            "--bootstraps",
            "--histogram-output",
            "--loss-tokens",
        }
    ) <= prepare_opts  # prepare keeps masks
    assert {"--pack-size", "--algorithm", "--seed", "--pad-seq-to-mult", "--max-seq-length"} <= prepare_opts
    assert {"--validation", "--from-cache", "--rows-per-file"} <= prepare_opts


@pytest.mark.slow  # the command line in a subprocess
def test_prepare_as_users_run_it(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "prepare",
            SFT,
            "--tokenizer",
            TOKENIZER,
            "--pack-size",
            "256",
            "--pad-seq-to-mult",
            "4",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "232 truncated" in proc.stdout and "pad_seq_to_mult 4" in proc.stdout
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "prepare",
            SFT,
            "--tokenizer",
            TOKENIZER,
            "--pack-size",
            "256",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert again.returncode == 2 and "pass --force" in again.stderr


def test_prompt_completion_from_the_command_line_is_the_apis_and_bad_combinations_exit_2(capsys, tmp_path):
    """``--prompt-completion`` writes what the API writes for Megatron-Bridge's prompt-completion preprocessing
    (tests/oracle/test_prepare_exact.py checks that against Bridge's own preparation), and each option out of place is
    one message with exit code 2."""
    from advisor.data.tokenize.engine import TokenizeJob
    from advisor.data.tokenize.sft import PromptCompletion, SftSettings

    code, text, _ = cli(
        capsys,
        "prepare",
        SFT,
        "--tokenizer",
        TOKENIZER,
        "--prompt-completion",
        "--prompt-column",
        "input",
        "--completion-column",
        "output",
        "--separator",
        " ",
        "--loss-mode",
        "full",
        "--pack-size",
        256,
        "--workers",
        1,
        "--json",
        "--quiet",
        "-o",
        tmp_path / "cli",
    )
    assert code == 0, text
    pc = PromptCompletion(prompt_column="input", completion_column="output", separator=" ", loss_mode="full")
    job = TokenizeJob(data=SFT, tokenizer=TOKENIZER, fmt="sft", settings=SftSettings(prompt_completion=pc))
    prepare(str(tmp_path / "api"), PrepareOptions(pack_size=256, workers=1), train=job)
    for name in ("training_256.idx.parquet", "256_metadata.jsonl"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "api" / name).read_bytes()
    mask = pq.read_table(tmp_path / "cli" / "training_256.idx.parquet").column("loss_mask").to_pylist()
    assert sum(map(sum, mask)) > 0.9 * sum(map(len, mask))  # full: every token but the pack ends carries loss
    bad = [
        (["--prompt-column", "q"], "--prompt-column"),  # without --prompt-completion
        (["--prompt-completion", "--format", "chat"], "--format sft"),
        (["--prompt-completion", "--label-key", "x"], "--label-key"),
        (["--prompt-completion", "--loss-mode", "assistant"], "--loss-mode"),
        (["--prompt-completion", "--prompt-template", "Q: {question}"], "prompt_template"),
        (["--format", "chat", "--loss-mode", "completion"], "--loss-mode"),
        (["--loss-mode", "full"], "--loss-mode"),  # a chat option on prompt-template SFT
        (["--format", "chat", "--add-eos"], "--add-eos"),  # an SFT option on chat
        (["--tool-schemas", "[]"], "--tool-schemas"),
        (["--prompt-completion", "--legacy-chat"], "--legacy-chat"),
    ]
    for k, (extra, named) in enumerate(bad):
        code, out, err = cli(
            capsys,
            "prepare",
            SFT,
            "--tokenizer",
            TOKENIZER,
            *extra,
            "--pack-size",
            256,
            "--quiet",
            "-o",
            tmp_path / f"bad{k}",
        )
        assert code == 2 and named in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not (tmp_path / f"bad{k}").exists()
    # a re-pack uses the cache's own settings: a dataset option with it would be silently ignored, so it is refused
    for extra, named in (
        (["--prompt-completion", "--loss-mode", "completion"], "--loss-mode"),
        (["--separator", " "], "--separator"),
        (["--format", "chat"], "--format"),
    ):
        code, out, err = cli(
            capsys,
            "prepare",
            "--from-cache",
            tmp_path / "cli",
            *extra,
            "--pack-size",
            512,
            "--quiet",
            "-o",
            tmp_path / "repack",
        )
        assert code == 2 and named in err and "--from-cache" in err, (extra, err)
        assert not (tmp_path / "repack").exists()
    # the cache's own format, said again, is fine; the other one is refused (round 4: --format sft ran on chat)
    code, _, _ = cli(
        capsys,
        "prepare",
        "--from-cache",
        tmp_path / "cli",
        "--format",
        "sft",
        "--pack-size",
        256,
        "--quiet",
        "-o",
        tmp_path / "same",
    )
    assert code == 0
    chat = tmp_path / "chat"
    assert (
        cli(
            capsys,
            "prepare",
            CHAT,
            "--tokenizer",
            TOKENIZER,
            "--format",
            "chat",
            "--pack-size",
            1024,
            "--quiet",
            "--workers",
            1,
            "-o",
            chat,
        )[0]
        == 0
    )
    code, _, err = cli(
        capsys,
        "prepare",
        "--from-cache",
        chat,
        "--format",
        "sft",
        "--pack-size",
        2048,
        "--quiet",
        "-o",
        tmp_path / "wrong",
    )
    assert code == 2 and "--format: sft: the token cache of" in err and "holds chat records" in err
    assert not (tmp_path / "wrong").exists()


# ------------------------------------------------------------------------------------------ interrupted runs


def _processes_holding(marker: str | bytes, part: str = "cmdline", among: list[int] | None = None) -> list[int]:
    """Pids of the processes (all, or ``among``) whose ``/proc/PID/{part}`` holds ``marker``: by command line, a
    run's own output folder finds the run and the workers it forked (they share it); by environment, a tag finds a
    run and every process it started, Ray's too."""
    needle = marker.encode() if isinstance(marker, str) else marker
    found = []
    for pid in among if among is not None else [int(e) for e in os.listdir("/proc") if e.isdigit()]:
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                if needle in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def _processes_naming(marker: str) -> list[int]:
    return _processes_holding(marker)


def _big_sft(folder) -> str:
    folder.mkdir()
    lines = open(SFT).read()
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        (folder / name).write_text(lines * 40)
    return str(folder)


def _wait_for(condition, seconds: float = 60.0) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_an_interrupted_prepare_leaves_no_process_and_no_folder(tmp_path, sig):
    """SIGTERM: one line, exit 143, the staging folder removed, the workers killed. SIGKILL: the workers die with
    their parent (PR_SET_PDEATHSIG), and the staging folder it could not remove is removed by the next run."""
    import signal

    data = _big_sft(tmp_path / "data")
    out = str(tmp_path / f"out-{sig}")
    cmd = [
        sys.executable,
        "-m",
        "advisor",
        "prepare",
        data,
        "--tokenizer",
        TOKENIZER,
        "--pack-size",
        "2048",
        "--workers",
        "2",
        "--quiet",
        "-o",
        out,
    ]
    run = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # what a person would see first: the workers at work (the run and two forked workers)
    assert _wait_for(lambda: len(_processes_naming(out)) >= 3), "the workers never started"
    run.send_signal(getattr(signal, sig))
    _, err = run.communicate(timeout=60)
    assert _wait_for(lambda: not _processes_naming(out), 20), f"orphans: {_processes_naming(out)}"
    if sig == "SIGTERM":
        assert run.returncode == 143 and err.strip().splitlines() == [
            "error: terminated: stopped; nothing was left half-written"
        ]
        assert sorted(os.listdir(tmp_path)) == ["data"]
    else:
        assert run.returncode == -9
        left = [n for n in os.listdir(tmp_path) if n != "data"]
        assert len(left) == 1 and left[0].endswith(".partial")
        again = subprocess.run([*cmd[:4], SFT, *cmd[5:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert sorted(os.listdir(tmp_path)) == ["data", f"out-{sig}"]
        assert f"note: removed {left[0]}, left by an interrupted run" in again.stdout


def _tagged(tag: str) -> list[int]:
    return _processes_holding(tag, "environ")


def _ray_named(pids: list[int], name: bytes) -> bool:
    return bool(_processes_holding(name, among=pids))


@pytest.mark.slow  # Ray in local mode
@pytest.mark.parametrize("moment", ["while Ray starts", "while Ray tokenizes"])
def test_a_sigterm_to_a_ray_run_stops_it_with_one_line_and_nothing_left(tmp_path, moment):
    """Round 4, a Ray job cancelled: ray.init installs its own SIGTERM handler (sys.exit(15)), so a SIGTERM ended a
    Ray run with exit 15, no message, and Ray's dashboard and runtime-env agents alive for good. Now: exit 143, the
    advisor's one line last, and no process the run started left (advisor/processes.py ray_session)."""
    import signal

    data = _big_sft(tmp_path / "data")
    tag = f"ADVISOR_RAY_TEST_{os.getpid()}_{moment.split()[-1]}"
    cmd = [
        sys.executable,
        "-m",
        "advisor",
        "tokenize",
        data,
        "--tokenizer",
        TOKENIZER,
        "--engine",
        "ray",
        "--workers",
        "2",
        "--quiet",
        "-o",
        str(tmp_path / "l.csv"),
    ]
    run = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, tag: "1", "RAY_DISABLE_USAGE_STATS": "1"},
    )
    try:
        seen = b"raylet" if moment == "while Ray starts" else b"MapWorker"
        assert _wait_for(lambda: _ray_named(_tagged(tag), seen), 120), f"{seen!r} never started"
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
        assert _wait_for(lambda: not _tagged(tag), 30), f"left running: {_tagged(tag)}"
    finally:
        for pid in _tagged(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    lines = err.strip().splitlines()
    assert run.returncode == 143 and lines[-1] == "error: terminated: stopped; nothing was left half-written", err
    assert "Traceback" not in err and not (tmp_path / "l.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["data", "tok", "."])
def test_force_on_an_input_or_the_working_folder_is_refused_with_everything_kept(tmp_path, target):
    """Round 4's data loss, as users typed it: ``prepare data --tokenizer tok -o data --force`` (and tok, and .)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text(open(SFT).read())
    import shutil

    shutil.copytree(TOKENIZER, tmp_path / "tok")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "prepare",
            "data",
            "--tokenizer",
            "tok",
            "--pack-size",
            "2048",
            "-o",
            target,
            "--force",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert f"-o {target}: " in run.stderr and ("input" in run.stderr or "working folder" in run.stderr)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
