"""The dashboard's raw-data path: an upload tokenized with a server-side tokenizer chosen by name, within budget."""

from __future__ import annotations

import json
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advisor.data.tokenize.chat import ChatSettings, chat_lengths
from advisor.data.tokenize.tokenizer import load_tokenizer
from advisor.ui import raw_data
from advisor.ui import state as ui
from tests.support import SAMPLE

CHAT = SAMPLE / "raw" / "chat_sample.jsonl"


def _state():
    state: dict = {}
    ui.init_state(state)
    return state


@pytest.mark.slow  # tokenized in a child process
def test_a_chat_upload_becomes_the_data_in_file_order():
    state = _state()
    assert raw_data.use_raw_upload(state, CHAT.read_bytes(), "chat_sample.jsonl", "tiny-bpe", "chat", 4096, env="")
    records = [json.loads(line) for line in CHAT.read_text().splitlines()]
    expected, _ = chat_lengths(records, load_tokenizer(raw_data.tokenizer_choices("")["tiny-bpe"]), ChatSettings())
    hist = state["hist"]
    assert hist.order.tolist() == expected.tolist() and hist.num_samples == 300
    assert state["data_name"] == "chat_sample.jsonl (tiny-bpe, chat)"
    assert state["plan"].data.format == "chat"  # offline packing then skips, not cuts, chats longer than the pack
    # the masks crossed the child's process boundary: the loss weighting counts the assistant turns only
    assert hist.loss_tokens is not None and 0.5 < hist.loss_fraction < 0.9


def test_an_upload_past_the_mask_budget_says_its_loss_mask_was_not_read(monkeypatch):
    monkeypatch.setattr(raw_data, "MAX_MASKED_RECORDS", 10)
    hist = raw_data._tokenized(
        CHAT.read_bytes(), ".jsonl", "c.jsonl", str(raw_data.tokenizer_choices("")["tiny-bpe"]), "chat", 4096, None
    )
    assert hist.loss_tokens is None and any("loss mask not read: 300 records, over the 10" in n for n in hist.notes)


@pytest.mark.slow  # tokenized in a child process
def test_left_out_records_are_named_by_the_upload_not_the_server_file():
    state = _state()
    data = CHAT.read_bytes() + b'{"messages": [{"role": "narrator", "content": "once"}]}\n'
    assert raw_data.use_raw_upload(state, data, "mine.jsonl", "tiny-bpe", "chat", 4096, env="")
    (e,) = state["hist"].excluded
    assert e.count == 1 and e.first_at == "mine.jsonl, line 301"


def test_parquet_uploads_and_operator_folders(tmp_path):
    records = [json.loads(line) for line in (SAMPLE / "raw" / "sft_sample.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "sft.parquet")
    operator = tmp_path / "tokenizers"
    operator.mkdir()
    (operator / "ours").symlink_to(raw_data.BUNDLED / "tiny-bpe")
    assert set(raw_data.tokenizer_choices(str(operator))) == {"tiny-bpe", "ours"}
    state = _state()
    assert raw_data.use_raw_upload(
        state, (tmp_path / "sft.parquet").read_bytes(), "sft.parquet", "ours", "sft", 512, env=str(operator)
    )
    assert state["hist"].num_samples == 300 and state["hist"].lengths.max() <= 512
    assert state["plan"].data.format == "sft"


@pytest.mark.slow  # tokenized in a child process
def test_hostile_uploads_keep_the_data_and_say_why(tmp_path):
    state = _state()
    before = state["hist"]
    cases = [
        (b"{}", "notes.txt", "tiny-bpe", "must be .jsonl or .parquet"),
        (CHAT.read_bytes(), "x.jsonl", "/etc", "is not one of the server's tokenizers"),
        (CHAT.read_bytes(), "x.jsonl", "../../tiny-bpe", "is not one of the server's tokenizers"),
        (b"PAR1" + b"\x00" * 40 + b"PAR1", "bad.parquet", "tiny-bpe", "is not a readable Parquet file"),
        (b"\n\n", "empty.jsonl", "tiny-bpe", "holds no records"),
        (b'{"messages": 3}\n' * 5, "odd.jsonl", "tiny-bpe", "no record could be tokenized"),
    ]
    for data, name, tok, message in cases:
        assert not raw_data.use_raw_upload(state, data, name, tok, "chat", 4096, env="")
        assert message in state["upload_error"], (name, state["upload_error"])
        assert state["hist"] is before
    bomb = pa.table({"input": pa.array(["x" * 200_000] * 5_000).dictionary_encode(), "output": ["y"] * 5_000})
    path = tmp_path / "bomb.parquet"
    pq.write_table(bomb, path)  # ~1 GB of text in a file of a few kB
    assert path.stat().st_size < 300_000
    assert not raw_data.use_raw_upload(state, path.read_bytes(), "bomb.parquet", "tiny-bpe", "sft", 4096, env="")
    assert "decodes to over 256 MB of values" in state["upload_error"] and state["hist"] is before
    long_line = json.dumps({"input": "x " * 3_000_000, "output": "y"}).encode() + b"\n"
    assert not raw_data.use_raw_upload(state, long_line * 2, "long.jsonl", "tiny-bpe", "sft", 4096, env="")
    assert "over the 4 MB a record may have here" in state["upload_error"]
    assert "advisor-raw-" not in state["upload_error"] and "/tmp" not in state["upload_error"]
    big = b'{"input": "a", "output": "b"}\n' * (raw_data.MAX_RAW_RECORDS + 1)
    assert not raw_data.use_raw_upload(state, big, "big.jsonl", "tiny-bpe", "sft", 4096, env="")
    assert "over the dashboard's 200,000" in state["upload_error"]


@pytest.mark.slow  # tokenized in a child process
@pytest.mark.parametrize("choice", ["sft, prompt-completion", "chat, legacy <extra_id_*>"])
def test_prompt_completion_and_legacy_chat_uploads(choice):
    """The upload's other two formats: Megatron-Bridge's prompt-completion preprocessing and its legacy chat
    format, tokenized as the engine tokenizes them with those settings, their masks read, the plan's format
    the base one."""
    from advisor.data.tokenize.engine import TokenizeJob, tokenize
    from tests.support.records import legacy_records

    if choice.startswith("sft"):
        records = [
            {"prompt": f"Question {k}: what is {k} plus {k}?", "completion": f"It is {2 * k}."} for k in range(40)
        ]
    else:
        records = [r for r in legacy_records(seed=4, n=40)[:40]]
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    state = _state()
    assert raw_data.use_raw_upload(state, data, "mine.jsonl", "tiny-bpe", choice, 4096, env=""), state.get(
        "upload_error"
    )
    tokenizer = str(raw_data.tokenizer_choices("")["tiny-bpe"])
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/d.jsonl"
        open(path, "wb").write(data)
        expected = tokenize(
            TokenizeJob(
                data=path,
                tokenizer=tokenizer,
                fmt=raw_data.FORMATS[choice],
                settings=raw_data.settings_of(choice, 4096),
                on_bad="skip",
                loss_tokens=True,
            ),
            workers=1,
        )
    hist = state["hist"]
    assert hist.order.tolist() == expected.lengths.tolist() and hist.num_samples >= 25
    assert hist.loss_tokens is not None and 0.0 < hist.loss_fraction < 1.0
    assert state["plan"].data.format == raw_data.FORMATS[choice]
