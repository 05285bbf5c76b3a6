"""Raw uploads tokenized in a child process with hard limits (advisor/ui/isolated.py): results come back whole,
limits end the child with one message, and a visitor who leaves takes the child along."""

from __future__ import annotations

import os
import time

import pytest

from advisor.ui import fair, isolated, raw_data
from advisor.ui import state as ui
from tests.support import SAMPLE

SFT = SAMPLE / "raw" / "sft_sample.jsonl"
ARGS = {"name": "sft_sample.jsonl", "tokenizer": "tiny-bpe", "fmt": "sft", "max_seq_length": 512, "env": ""}


def _children() -> set[int]:
    """Pids of this machine's isolated children (their command line names the module)."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"advisor.ui.isolated" in open(f"/proc/{pid}/cmdline", "rb").read():
                out.add(int(pid))
        except OSError:
            continue
    return out


def test_the_child_returns_what_the_server_would_have_computed():
    seen = []
    outcome = isolated.run("tokenize", ARGS, {"upload": SFT.read_bytes()}, progress=lambda w, f: seen.append(f))
    direct = raw_data.tokenize_upload(SFT.read_bytes(), "sft_sample.jsonl", "tiny-bpe", "sft", 512, env="")
    assert outcome.error is None and outcome.cpu_seconds > 0
    assert outcome.hist.order.tolist() == direct.order.tolist() and outcome.hist.source == direct.source
    assert outcome.hist.excluded == direct.excluded and seen and seen[-1] == 1.0


@pytest.mark.slow  # runs limited child processes to their limit
def test_a_child_over_its_cpu_seconds_is_stopped_with_one_message():
    # 45,000 records: seconds of CPU to tokenize, more than the one second given
    outcome = isolated.run(
        "tokenize",
        ARGS,
        {"upload": SFT.read_bytes() * 150},
        name="sft_sample.jsonl",
        limits=isolated.Limits(cpu_seconds=1, wall_seconds=120),
    )
    assert outcome.hist is None and "used its 1 CPU seconds" in outcome.error
    assert "python -m advisor tokenize --sample" in outcome.error


def test_a_child_over_its_wall_clock_is_killed():
    outcome = isolated.run(
        "tokenize",
        ARGS,
        {"upload": SFT.read_bytes() * 150},
        name="sft_sample.jsonl",
        limits=isolated.Limits(wall_seconds=0.3),
    )
    assert outcome.hist is None and "stopped after 0 s" in outcome.error
    assert not _children()


@pytest.mark.slow  # runs limited child processes to their limit
def test_a_child_without_memory_says_so():
    outcome = isolated.run(
        "tokenize",
        ARGS,
        {"upload": SFT.read_bytes()},
        name="sft_sample.jsonl",
        limits=isolated.Limits(memory_bytes=64 << 20, wall_seconds=60),
    )
    assert outcome.hist is None and outcome.error.startswith(("sft_sample.jsonl", "ran out")), outcome.error


@pytest.mark.slow  # runs limited child processes to their limit
def test_a_visitor_leaving_takes_the_child_along():
    """Streamlit stops a rerun by raising in its thread at the next call to it: here, the progress callback."""

    class Left(Exception):
        pass

    def leave(what, done):
        raise Left

    with pytest.raises(Left):
        isolated.run("tokenize", ARGS, {"upload": SFT.read_bytes() * 50}, progress=leave)
    assert not _children()


def test_a_failed_upload_is_charged_and_keeps_the_session():
    state: dict = {}
    ui.init_state(state)
    before, meter = state["hist"], fair.meter_of(state)
    assert not raw_data.use_raw_upload(state, b'{"input": 1}\n' * 3, "bad.jsonl", "tiny-bpe", "sft", 512, env="")
    assert state["hist"] is before and "bad.jsonl" in state["upload_error"]
    assert meter.spent(time.monotonic(), 600) > 0  # the child's CPU seconds count against the session


@pytest.mark.slow  # runs limited child processes to their limit
def test_a_looping_chat_template_costs_its_visitor_a_message(tmp_path):
    """An operator's tokenizer whose template loops 10^10 times: each record is refused by the template's box in
    the child, the visitor is told why, and the server's session keeps its data."""
    import json
    import shutil

    folder = tmp_path / "loopy"
    shutil.copytree(raw_data.BUNDLED / "tiny-bpe", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}"
        "{% endfor %}<|im_start|>assistant<|im_end|>"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    state: dict = {}
    ui.init_state(state)
    before = state["hist"]
    chat = (SAMPLE / "raw" / "chat_sample.jsonl").read_bytes()
    assert not raw_data.use_raw_upload(state, chat, "chat.jsonl", "loopy", "chat", 4096, env=str(tmp_path))
    assert state["hist"] is before
    assert "the chat template exceeded its limits" in state["upload_error"], state["upload_error"]
    assert "chat.jsonl, line 1" in state["upload_error"] and not _children()
