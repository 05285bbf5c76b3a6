"""Hostile tokenizer folders and chat templates: each is refused with one message, nothing runs the folder's code,
no template loops or grows without bound, and a Rust panic is an InputError, not a BaseException."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from advisor.data.tokenize import folder as folder_mod
from advisor.data.tokenize import template as tpl
from advisor.data.tokenize.chat import ChatSettings, _encode_lengths, chat_lengths
from advisor.data.tokenize.engine import TokenizeJob, tokenize
from advisor.data.tokenize.template import Budget, TemplateLimit, _budgeted, _running, render_chat
from advisor.data.tokenize.tokenizer import TokenizerPanic, is_panic, load_tokenizer, native
from advisor.errors import InputError
from tests.support.templates import ATTACKS, CHATS, FEATURES_TEMPLATE, GENERATION_TEMPLATE, PLAIN_TEMPLATE, TOOLS, USER
from tests.support.tokenizer_fixture import CHAT_TEMPLATE, build_tokenizer


@pytest.fixture(scope="module")
def tok_folder(tmp_path_factory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "t")


@pytest.fixture(scope="module")
def hf(tok_folder):
    return load_tokenizer(tok_folder).transformers_tokenizer()


def _folder(base: Path, tmp: Path, name: str, **config_changes) -> Path:
    """A copy of the fixture tokenizer with tokenizer_config.json changed."""
    out = tmp / name
    shutil.copytree(base, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.update(config_changes)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


# ------------------------------------------------------------------------------------- byte-identical
@pytest.mark.parametrize(
    "template",
    [CHAT_TEMPLATE, GENERATION_TEMPLATE, PLAIN_TEMPLATE, FEATURES_TEMPLATE],
    ids=["llama3-like", "generation", "plain", "features"],
)
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
def test_boxed_rendering_equals_apply_chat_template(hf, template, tools):
    for chat in CHATS:
        expected = hf.apply_chat_template(chat, tools=tools, chat_template=template, tokenize=False)
        assert render_chat(template, chat, tools=tools, special_tokens=hf.special_tokens_map) == expected


def test_template_errors_are_the_ones_transformers_raises(hf):
    for template in ("{{ raise_exception('no system role') }}", "{{ messages[0].nope.deeper }}", "{% if %}"):
        with pytest.raises(Exception) as theirs:
            hf.apply_chat_template(CHATS[0], chat_template=template, tokenize=False)
        with pytest.raises(Exception) as ours:
            render_chat(template, CHATS[0])
        assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


# --------------------------------------------------------------------------------------------- limits


@pytest.mark.slow  # each runs a template to its limit
@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_template_past_its_limits_is_one_records_problem(tok_folder, name):
    template, fragment = ATTACKS[name]
    records = [{"messages": [USER, {"role": "assistant", "content": "x"}]}] * 2
    lengths, problems = chat_lengths(
        records, load_tokenizer(tok_folder), ChatSettings(chat_template=template, loss_mode="full")
    )
    assert lengths.tolist() == [-1, -1] and [p.index for p in problems] == [0, 1]
    assert problems[0].reason.startswith("the chat template exceeded its limits (")
    assert fragment in problems[0].reason


@pytest.mark.slow  # waits for its deadlines
def test_a_template_out_of_time_record_after_record_is_not_rendered_again(tok_folder):
    template = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{{ messages }}"
    records = [{"messages": [USER]}] * 6
    lengths, problems = chat_lengths(
        records, load_tokenizer(tok_folder), ChatSettings(chat_template=template, loss_mode="full")
    )
    assert lengths.tolist() == [-1] * 6
    assert [p.reason for p in problems[:3]] == [problems[0].reason] * 3
    assert "over 1,000,000 loop iterations" in problems[0].reason
    assert all("not rendered again" in p.reason for p in problems[3:])
    assert {p.reason.split(" (")[0] for p in problems} == {"the chat template exceeded its limits"}


def test_recursion_and_template_errors_stay_ordinary_record_problems(tok_folder):
    tok = load_tokenizer(tok_folder)
    for template, fragment in [
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
        ("{{ raise_exception('no tools here') }}", "no tools here"),
        ("{{ foo.bar }}", "'foo' is undefined"),
    ]:
        _, problems = chat_lengths([{"messages": [USER]}], tok, ChatSettings(chat_template=template, loss_mode="full"))
        assert problems[0].reason.startswith("the chat template failed:") and fragment in problems[0].reason


def test_the_deadline_is_kept_by_the_hooks_off_the_main_thread():
    template = "{% for a in range(1500) %}{% for b in range(1000) %}{% endfor %}{% endfor %}"  # 1.5M steps
    caught = []

    def run():
        try:
            render_chat(template, [USER], seconds=0.05)  # the 1M steps' cap would come later (~0.15 s)
        except TemplateLimit as e:
            caught.append(str(e))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert caught == ["the chat template exceeded its limits (over 0.05 s)"]


@pytest.mark.slow  # waits for its alarms
def test_the_alarm_stops_a_loop_no_hook_sees_on_the_main_thread():
    import signal

    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(TemplateLimit, match=r"over 0\.2 s"), _running(Budget.for_input(0, seconds=0.2)):
        while True:
            pass
    assert signal.getitimer(signal.ITIMER_REAL)[1] != 0.05  # ours is gone (a runner's own timer may be back)
    assert signal.getsignal(signal.SIGALRM) is before
    # renders that end at their deadline, whether a hook or the alarm saw it first, leave no alarm behind
    for seconds in (0.05, 0.1, 0.15, 0.2):
        with pytest.raises(TemplateLimit, match="over"):
            render_chat(
                "{% for a in range(100000) %}{% for b in range(9) %}{% endfor %}{% endfor %}", [USER], seconds=seconds
            )
        assert signal.getsignal(signal.SIGALRM) is before
        assert signal.getitimer(signal.ITIMER_REAL)[1] != 0.05
    time.sleep(0.2)  # a stray repeating alarm would raise here


@pytest.mark.slow  # waits for its alarms
def test_the_alarm_leaves_the_deadline_to_the_hooks_when_they_run():
    """While hooks run, the deadline is raised by one of them, in the render's own flow: an alarm raising at any
    bytecode could land in a generator the unwinding closes (Python then only prints "Exception ignored")."""
    from advisor.data.tokenize.template import _step

    def busy():  # work between hooks, where an alarm raising itself would most often land
        return sum(range(2000))

    for _ in range(5):
        with pytest.raises(TemplateLimit, match=r"over 0\.05 s") as caught, _running(Budget.for_input(0, seconds=0.05)):
            while True:
                busy()
                _step()
        assert caught.traceback[-1].name == "_step"
    # a record's prefix renders: each spends its own budget (deadline far off) under the record's one alarm
    for _ in range(3):
        outer, inner = Budget.for_input(0, seconds=0.05), Budget.for_input(0, seconds=60)
        with pytest.raises(TemplateLimit) as caught, _running(outer), _budgeted(inner):
            while True:
                busy()
                _step()
        assert caught.traceback[-1].name == "_step" and inner.told


def test_a_chat_template_setting_is_text_of_bounded_size():
    with pytest.raises(InputError, match="ChatSettings, chat_template: must be a Jinja template"):
        ChatSettings(chat_template=["{{ x }}"])
    with pytest.raises(InputError, match="ChatSettings, chat_template: a template of 524,289 characters"):
        ChatSettings(chat_template="x" * (tpl.MAX_TEMPLATE_CHARS + 1))


# ------------------------------------------------------------------------------------- named templates
NAMED = [
    {"name": "default", "template": "D{% for m in messages %}{{ m.content }}{% endfor %}"},
    {"name": "tool_use", "template": "T{{ tools|length }}{% for m in messages %}{{ m.content }}{% endfor %}"},
]


def test_named_templates_pick_default_or_tool_use_as_transformers(tok_folder, tmp_path):
    folder = _folder(tok_folder, tmp_path, "named", chat_template=NAMED)
    tok = load_tokenizer(folder)
    assert tok.chat_template == NAMED[0]["template"]
    hf = tok.transformers_tokenizer()
    plain, with_tools = {"messages": [USER]}, {"messages": [USER], "tools": TOOLS}
    lengths, problems = chat_lengths([plain, with_tools], tok, ChatSettings(loss_mode="full"))
    assert problems == []
    texts = [
        hf.apply_chat_template([USER], tokenize=False),
        hf.apply_chat_template([USER], tools=TOOLS, tokenize=False),
    ]
    assert texts[0].startswith("D") and texts[1].startswith("T1")
    assert lengths.tolist() == [len(hf(t, add_special_tokens=False).input_ids) for t in texts]


@pytest.mark.parametrize(
    "value, where, fragment",
    [
        ([{"name": "rag", "template": "R"}], "chat_template", "none is named 'default' (names: rag)"),
        ([{"template": "x"}], "chat_template[0]", 'must be {"name": ..., "template": ...}'),
        ([{"name": ["a"], "template": "x"}], "chat_template[0]", 'must be {"name": ..., "template": ...}'),
        ([{"name": "default", "template": 5}], "chat_template[0].template", "must be a Jinja template"),
        (["x"], "chat_template[0]", 'must be {"name"'),
        (5, "chat_template", "must be a template or a list of named templates"),
        (NAMED + [NAMED[0]], "chat_template[2]", "a second template named 'default'"),
    ],
)
def test_bad_named_templates_are_one_message(tok_folder, tmp_path, value, where, fragment):
    folder = _folder(tok_folder, tmp_path, "bad-named", chat_template=value)
    with pytest.raises(InputError) as e:
        chat_lengths([{"messages": [USER]}], load_tokenizer(folder), ChatSettings(loss_mode="full"))
    assert e.value.where == where and fragment in e.value.what


# -------------------------------------------------------------------------------------- folder checks
@pytest.mark.parametrize(
    "changes, where, fragment",
    [
        ({"split_special_tokens": "yes"}, "split_special_tokens", "must be true or false, not 'yes'"),
        ({"add_bos_token": {"a": 1}}, "add_bos_token", "must be true or false"),
        ({"bos_token": {"content": "<s>", "lstrip": {"x": 1}}}, "bos_token.lstrip", "must be true or false"),
        ({"eos_token": {"content": 7}}, "eos_token.content", "must be the token's text"),
        ({"pad_token": ["a"]}, "pad_token", "must be a token's text or an AddedToken object"),
        (
            {"additional_special_tokens": [f"<t{i}>" for i in range(folder_mod.MAX_SPECIAL_TOKENS + 1)]},
            "additional_special_tokens",
            "special tokens; at most",
        ),
        ({"extra_special_tokens": {"__class__": "<x>"}}, "extra_special_tokens.'__class__'", "names must look like"),
        ({"additional_special_tokens": ["x" * 5000]}, "additional_special_tokens[0]", "a special token of 5,000"),
        (
            {"added_tokens_decoder": {str(i): {"content": f"<a{i}>"} for i in range(folder_mod.MAX_ADDED_TOKENS + 1)}},
            "added_tokens_decoder",
            "added tokens; at most",
        ),
        ({"added_tokens_decoder": {"x": {"content": "<a>"}}}, "added_tokens_decoder.'x'", "keys must be token ids"),
        ({"tokenizer_class": "EvilTokenizer"}, "tokenizer_class", "not a tokenizer class transformers ships"),
        ({"tokenizer_class": "os.system"}, "tokenizer_class", "must be the name of a transformers tokenizer class"),
        ({"trust_remote_code": True}, "trust_remote_code", "must be false or absent"),
        ({"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}, "auto_map", "names Python code"),
        ({"model_max_length": "big"}, "model_max_length", "must be a number"),
        ({"padding_side": 3}, "padding_side", "must be 'left' or 'right'"),
        ({"chat_template": "{{ '" + "x" * tpl.MAX_TEMPLATE_CHARS + "' }}"}, "chat_template", "a template of 524,296"),
    ],
)
def test_bad_config_fields_are_named(tok_folder, tmp_path, changes, where, fragment):
    folder = _folder(tok_folder, tmp_path, "bad", **changes)
    for use_transformers in (False, True):
        with pytest.raises(InputError) as e:
            load_tokenizer(folder, use_transformers=use_transformers)
        assert e.value.source == str(folder / "tokenizer_config.json")
        assert e.value.where == where and fragment in e.value.what


def test_deep_and_huge_files_are_refused_before_parsing(tok_folder, tmp_path, monkeypatch):
    deep = _folder(tok_folder, tmp_path, "deep")
    (deep / "tokenizer_config.json").write_text('{"x": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(InputError, match="tokenizer_config.json: nested too deeply"):
        load_tokenizer(deep)
    (deep / "tokenizer_config.json").write_text("{}")
    (deep / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<s>", "rstrip": "no"}}))
    with pytest.raises(InputError, match=r"special_tokens_map.json, bos_token.rstrip: must be true or false"):
        load_tokenizer(deep)
    (deep / "special_tokens_map.json").unlink()
    monkeypatch.setattr(folder_mod, "MAX_TOKENIZER_JSON_BYTES", 1000)
    with pytest.raises(InputError, match=r"tokenizer.json: [\d,]+ bytes is more than a tokenizer file needs"):
        load_tokenizer(deep)
    monkeypatch.undo()
    (deep / "chat_template.jinja").write_bytes(b"x" * (folder_mod.MAX_TEMPLATE_BYTES + 1))
    with pytest.raises(InputError, match="chat_template.jinja: .* bytes is more than"):
        load_tokenizer(deep)
    (deep / "chat_template.jinja").write_bytes(b"\xff\xfe{{ x }}")
    with pytest.raises(InputError, match="chat_template.jinja: cannot be read as UTF-8 text"):
        load_tokenizer(deep)


EVIL = """
from pathlib import Path
Path({marker!r}).write_text("the folder's code ran")
from transformers import PreTrainedTokenizerFast
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def test_a_planted_module_is_never_imported(tok_folder, tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    auto_map = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", "tokenization_evil.EvilTokenizer"]}
    folder = _folder(tok_folder, tmp_path, "evil", auto_map=auto_map, tokenizer_class="EvilTokenizer")
    (folder / "tokenization_evil.py").write_text(EVIL.format(marker=str(marker)))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": auto_map}))
    data = tmp_path / "data"
    data.mkdir()
    (data / "chat.jsonl").write_text(json.dumps({"messages": [USER, {"role": "assistant", "content": "x"}]}) + "\n")
    (data / "evil.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.chdir(folder)  # even with the folder as the working directory (and so on sys.path for -m runs)
    monkeypatch.syspath_prepend(str(folder))
    for use_transformers in (False, True):
        with pytest.raises(InputError) as e:
            load_tokenizer(folder, use_transformers=use_transformers)
        assert e.value.where == "auto_map" and "never runs a tokenizer folder's code" in e.value.what
    for fmt in ("chat", "sft"):
        with pytest.raises(InputError, match="auto_map"):
            tokenize(TokenizeJob(data=str(data), tokenizer=str(folder), fmt=fmt, on_bad="skip"), workers=1)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["auto_map"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="tokenizer_class: 'EvilTokenizer' is not a tokenizer class transformers"):
        load_tokenizer(folder)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json, auto_map: names tokenizer code"):
        load_tokenizer(folder)
    assert not marker.exists()
    assert "tokenization_evil" not in sys.modules
    # the plant works: importing it is what writes the marker, so the checks above could have failed
    spec = importlib.util.spec_from_file_location("planted_check", folder / "tokenization_evil.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert marker.exists()


# ---------------------------------------------------------------------------------------------- panics
def test_a_rust_panic_while_loading_is_one_input_error(tok_folder, tmp_path):
    folder = _folder(tok_folder, tmp_path, "panics")
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}  # tokenizers panics parsing it
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    for use_transformers in (False, True):
        with pytest.raises(TokenizerPanic) as e:
            load_tokenizer(folder, use_transformers=use_transformers)
        assert isinstance(e.value, InputError) and e.value.source == str(folder / "tokenizer.json")
        assert "the tokenizers library crashed while loading (a Rust panic: Precompiled" in str(e.value)
        assert is_panic(e.value.__context__) and not isinstance(e.value.__context__, Exception)


def _fake_panic() -> type[BaseException]:
    """A BaseException subclass named as pyo3's (``pyo3_runtime.PanicException``), for calls that panic on demand."""
    return type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


def test_native_turns_only_panics_into_input_errors():
    panic = _fake_panic()

    def boom(exc):
        raise exc

    with pytest.raises(
        TokenizerPanic,
        match=r"t.json: the tokenizers library crashed while encoding \(a Rust panic: "
        r"called unwrap\)",
    ):
        native("t.json", "encoding", boom, panic("called unwrap"))
    for exc in (KeyboardInterrupt(), SystemExit(3), ValueError("plain")):
        with pytest.raises(type(exc)):
            native("t.json", "encoding", boom, exc)


def test_a_panic_on_one_rendered_chat_is_that_records_problem(hf):
    panic = _fake_panic()

    class Backend:  # the real encoder, except that it panics on any text holding "BOOM"
        def __init__(self, real):
            self.real = real

        def no_truncation(self):
            pass

        def no_padding(self):
            pass

        def encode_batch_fast(self, texts, **kw):
            if any("BOOM" in t for t in texts):
                raise panic("index out of bounds")
            return self.real.encode_batch_fast(texts, **kw)

        def encode(self, text, **kw):
            if "BOOM" in text:
                raise panic("index out of bounds")
            return self.real.encode(text, **kw)

    class HF:
        backend_tokenizer = Backend(hf.backend_tokenizer)

    counts, panicked = _encode_lengths(HF(), ["hello", "BOOM", "world"], "tok")
    assert counts.tolist()[0] == len(hf.backend_tokenizer.encode("hello", add_special_tokens=False))
    assert counts.tolist()[1] == -1 and counts.tolist()[2] > 0
    assert panicked == [(1, "the tokenizers library crashed while encoding (a Rust panic: index out of bounds)")]


# ------------------------------------------------------------------------------------------ the fuzz bench
def test_the_fuzz_generators_end_in_accepted_or_refused(tmp_path):
    """bench/fuzz_tokenizers.py's inputs, a few of each surface, run in process (no RLIMIT: the bench's children
    have that): every one is accepted or refused with one message, and no planted module ever runs."""
    from bench import fuzz_tokenizers as fuzz

    inputs = fuzz.generate(tmp_path, 12, seed=5)
    assert {s for s, _ in inputs} == set(fuzz.SURFACES) and len(inputs) == 24
    outcomes = {}
    for surface, folder in inputs:
        outcome, detail = fuzz.run_one(folder, str(tmp_path / "data"))
        assert outcome in ("accepted", "refused"), (folder, detail)
        outcomes.setdefault(surface, set()).add(outcome)
    assert not list((tmp_path / fuzz.MARKERS).iterdir())
    assert outcomes["folder"] == {"accepted", "refused"} and "refused" in outcomes["template"]


def test_generation_spans_are_not_mixed_between_threads():
    """The generation tracker lives on the one environment every render shares: a render of the same template on
    another thread must neither add spans to a tracked render nor crash on the tracker switching off (found by an
    independent review: 40 of 40 tracked renders got foreign spans)."""
    from advisor.data.tokenize.template import render_prefixes

    template = "{% for m in messages %}{{ m.role }}: {% generation %}{{ m.content }}{% endgeneration %}\n{% endfor %}"
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}] * 15
    alone: list = []
    render_prefixes(template, messages, [len(messages)], track=alone)
    stop, failures = threading.Event(), []

    def other():
        while not stop.is_set():
            try:
                render_chat(template, messages)
            except Exception as e:  # noqa: BLE001 - what the test looks for
                failures.append(e)

    worker = threading.Thread(target=other)
    worker.start()
    try:
        for _ in range(40):
            spans: list = []
            render_prefixes(template, messages, [len(messages)], track=spans)
            assert spans == alone
    finally:
        stop.set()
        worker.join(30)
    assert failures == [] and len(alone) == 30
