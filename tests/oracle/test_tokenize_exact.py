"""advisor.data.tokenize against Megatron-Bridge 0.6.2's own dataset classes, record by record.

Every data set here is generated (seeded loops and hypothesis, tests/support/records.py), written as JSONL and read
by Bridge's real ``GPTSFTDataset`` / ``GPTSFTChatDataset`` (tests/support/mb_sft_oracle.py) with Bridge's own
tokenizer wrapper around the fixture tokenizer (tests/support/tokenizer_fixture.py); the advisor reads the same
folder. For each record the advisor's length must equal ``len(input_ids)`` of Bridge's processed example, and a
record Bridge fails on must be a ``RecordProblem`` (-1) at the same index. Without the unpacked wheels those
comparisons skip; the bad-input tests run anyway.
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.data.tokenize.chat import ChatSettings, chat_lengths
from advisor.data.tokenize.sft import PromptCompletion, RecordProblem, SftSettings, sft_lengths, sft_tokens
from advisor.data.tokenize.tokenizer import Tokenizer, load_tokenizer
from advisor.errors import InputError
from tests.support import mb_sft_oracle as oracle
from tests.support.records import SFT_CASES, TOOLS, chat_records, legacy_records, sft_records, text
from tests.support.templates import GENERATION_TEMPLATE, PLAIN_TEMPLATE
from tests.support.tiers import slow_after
from tests.support.tokenizer_fixture import CORPUS, EOS, build_tokenizer

# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {"bos": build_tokenizer(root / "bos"), "plain": build_tokenizer(root / "plain", bos_in_post_processor=False)}


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory) -> Path:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.read_text(encoding="utf-8").splitlines()),
        model_writer=model,
        vocab_size=800,
        hard_vocab_limit=False,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        minloglevel=2,
    )
    path = tmp_path_factory.mktemp("sp") / "tokenizer.model"
    path.write_bytes(model.getvalue())
    return path


@pytest.fixture(scope="module")
def mb():
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    return oracle.modules()


@pytest.fixture(scope="module")
def mb_tok(mb, folders):
    """Bridge's tokenizer for (variant, include_special_tokens), built once each."""
    cache = {}

    def get(variant: str = "bos", include_special_tokens: bool = True, chat_template: str | None = None):
        key = (variant, include_special_tokens, chat_template)
        if key not in cache:
            path = folders[variant] if variant in folders else Path(variant)
            cache[key] = oracle.build_mb_tokenizer(
                path, include_special_tokens=include_special_tokens, chat_template=chat_template
            )
        return cache[key]

    return get


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mb-data")


def assert_same(mb_out: list, ours: tuple[np.ndarray, list[RecordProblem]], what: str) -> None:
    """Record by record: equal lengths, and a RecordProblem exactly where Bridge raised."""
    lengths, problems = ours
    assert len(lengths) == len(mb_out), what
    flagged = {p.index for p in problems}
    assert len(flagged) == len(problems), f"{what}: one problem per record"
    for i, expected in enumerate(mb_out):
        if isinstance(expected, BaseException):
            assert lengths[i] == -1 and i in flagged, (
                f"{what}, record {i}: Bridge raised {type(expected).__name__}: {expected}; advisor gave {lengths[i]}"
            )
        else:
            assert i not in flagged, f"{what}, record {i}: advisor flagged {problems}, Bridge gave {expected}"
            assert lengths[i] == expected, f"{what}, record {i}: advisor {lengths[i]} != Bridge {expected}"


# ---------------------------------------------------------------- generated data


def _mb_kwargs(case: dict, max_seq_length: int, tok) -> dict:
    kwargs = {
        "prompt_template": "{input} {output}",
        "label_key": "output",
        "truncation_field": "input",
        "max_seq_length": max_seq_length,
        **case,
    }
    if kwargs.get("add_sep"):
        kwargs["sep_id"] = tok.eos_id  # the legacy path adds GPTSFTDataset's own sep_id (None unless given)
    return kwargs


# ---------------------------------------------------------------- SFT: prompt templates


@pytest.mark.parametrize("variant,include_special", slow_after([("bos", True), ("plain", True), ("bos", False)]))
@pytest.mark.parametrize("case", slow_after(sorted(SFT_CASES), fast=4))
def test_sft_prompt_template_lengths_match_megatron_bridge(mb_tok, folders, work, variant, include_special, case):
    records = sft_records(seed=10 * sorted(SFT_CASES).index(case) + len(variant) + include_special, n=40)
    max_seq_length = random.Random(case).choice([48, 96, 160])
    mb_tokenizer = mb_tok(variant, include_special)
    kwargs = _mb_kwargs(SFT_CASES[case], max_seq_length, mb_tokenizer)
    expected = oracle.mb_lengths(records, mb_tokenizer, work, **kwargs)
    kwargs.pop("sep_id", None)
    tok = load_tokenizer(folders[variant], include_special_tokens=include_special)
    ours = sft_lengths(records, tok, SftSettings(**kwargs))
    assert_same(expected, ours, f"{case}/{variant}/special={include_special}")
    assert any(isinstance(x, int) and x == max_seq_length for x in expected) or case == "is_test", (
        "some records must have been truncated to the limit"
    )


@pytest.mark.slow  # loads transformers' tokenizer classes
def test_model_specific_class_with_use_transformers(mb_tok, tmp_path, work):
    """tokenizer_class Qwen2Tokenizer: transformers 5 rebuilds the pipeline with Qwen's own pre-tokenizer, which
    this byte-level fixture's tokenizer.json does not use; use_transformers encodes with what transformers built."""
    folder = build_tokenizer(tmp_path / "qwen-class", config_extra={"tokenizer_class": "Qwen2Tokenizer"})
    mb_tokenizer = mb_tok(str(folder))
    tok = load_tokenizer(folder, use_transformers=True)
    records = sft_records(seed=21, n=40)
    for case in ("defaults", "three_fields"):
        kwargs = _mb_kwargs(SFT_CASES[case], 96, mb_tokenizer)
        expected = oracle.mb_lengths(records, mb_tokenizer, work, **kwargs)
        assert_same(expected, sft_lengths(records, tok, SftSettings(**kwargs)), f"Qwen2Tokenizer class/{case}")
    chats = chat_records(seed=21, n=30)
    expected = oracle.mb_lengths(chats, mb_tokenizer, work, chat=True, use_hf_tokenizer_chat_template=True)
    assert_same(expected, chat_lengths(chats, load_tokenizer(folder)), "Qwen2Tokenizer class/chat")
    clone = pickle.loads(pickle.dumps(tok))
    np.testing.assert_array_equal(sft_lengths(records, clone)[0], sft_lengths(records, tok)[0])


def test_sft_sentencepiece_lengths_match_megatron_bridge(mb_tok, sp_model, work):
    """A SentencePiece model (not space-sensitive: template pieces lose a leading space)."""
    mb_tokenizer = mb_tok(str(sp_model))
    tok = load_tokenizer(sp_model)
    assert tok.kind == "sentencepiece" and not tok.space_sensitive
    records = sft_records(seed=7, n=60)
    for case in ("defaults", "three_fields", "spaces_in_template", "bos_sep_no_eos_left"):
        kwargs = _mb_kwargs(SFT_CASES[case], 96, mb_tokenizer)
        expected = oracle.mb_lengths(records, mb_tokenizer, work, **kwargs)
        kwargs.pop("sep_id", None)
        assert_same(expected, sft_lengths(records, tok, SftSettings(**kwargs)), f"sentencepiece/{case}")


def test_sft_missing_fields_name_the_keys_and_records(mb_tok, folders, work):
    records = [
        {"input": "Q one", "output": "A one"},
        {"input": "no answer"},
        {"output": "no question"},
        {},
        {"input": "fine", "output": "fine", "extra": 1},
        {"input": None, "output": "x"},
    ]
    expected = oracle.mb_lengths(records, mb_tok(), work, **_mb_kwargs({}, 64, None))
    lengths, problems = sft_lengths(records, load_tokenizer(folders["bos"]), SftSettings(max_seq_length=64))
    assert_same(expected, (lengths, problems), "missing fields")
    assert [isinstance(x, KeyError) for x in expected] == [False, True, True, True, False, False]
    assert problems == [
        RecordProblem(1, "no 'output' field (the prompt template needs input, output)"),
        RecordProblem(2, "no 'input' field (the prompt template needs input, output)"),
        RecordProblem(3, "no 'input', 'output' fields (the prompt template needs input, output)"),
        RecordProblem(5, "'input' is null, not text"),
    ]


def test_sft_settings_refused_like_megatron_bridge(mb_tok, work):
    path = oracle.write_jsonl([{"input": "a", "output": "b"}], work)
    for bad in (
        dict(prompt_template="{output} {input}"),
        dict(truncation_field="question"),
        dict(prompt_template="{input} {answer}"),
    ):
        with pytest.raises(AssertionError):
            oracle.mb_dataset(path, mb_tok(), **_mb_kwargs(bad, 64, None))
        with pytest.raises(InputError, match="SftSettings"):
            SftSettings(**bad)


@pytest.mark.slow  # long fuzzing
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60), min_size=2, max_size=2),
    st.sampled_from(sorted(SFT_CASES)),
)
def test_sft_any_text_matches_megatron_bridge(mb_tok, folders, work, pair, case):
    """Arbitrary Unicode (control characters, lone spaces, emoji) through Bridge's own _process_example."""
    mb_tokenizer = mb_tok("bos")
    kwargs = _mb_kwargs(SFT_CASES[case], 24, mb_tokenizer)
    dataset = _cached_dataset(work, mb_tokenizer, case, kwargs)
    keys = sorted({"input", "output", "context", "question", "answer", "a", "b"})
    record = {k: pair[i % 2] for i, k in enumerate(keys)}
    try:
        expected = [len(dataset._process_example(copy.deepcopy(record))["input_ids"])]
    except Exception as e:  # noqa: BLE001
        expected = [e]
    kwargs.pop("sep_id", None)
    assert_same(expected, sft_lengths([record], load_tokenizer(folders["bos"]), SftSettings(**kwargs)), case)


_DATASETS: dict = {}


def _cached_dataset(work: Path, mb_tokenizer, case: str, kwargs: dict):
    if case not in _DATASETS:
        path = oracle.write_jsonl([{"input": "a", "output": "b"}], work)
        _DATASETS[case] = oracle.mb_dataset(path, mb_tokenizer, **kwargs)
    return _DATASETS[case]


# ---------------------------------------------------------------- SFT: prompt-completion preprocessing


PC_CASES = {
    "defaults": (dict(), dict()),
    "columns_bos_sep_left": (
        dict(
            prompt_column="input",
            completion_column="output",
            separator=" ",
            add_bos=True,
            add_sep=True,
            truncation_method="left",
            prompt_template="Question: {prompt}\nAnswer:",
        ),
        dict(),
    ),
    "newline_keep_spaces": (
        dict(separator="\n", strip_whitespace=False),
        dict(tokens_to_generate=10, virtual_tokens=2),
    ),
    "no_eos_right_generate": (
        dict(add_eos=False, prompt_column="question", completion_column="answer"),
        dict(tokens_to_generate=30),
    ),
    "is_test": (dict(prompt_column="input", completion_column="output"), dict(is_test=True)),
}


def pc_records(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        rec = {k: text(rng, 100) for k in ("prompt", "completion", "input", "output", "question", "answer")}
        roll = rng.random()
        if roll < 0.05:
            rec["messages"] = [{"role": "user", "content": "hi"}]
        elif roll < 0.12:
            del rec[rng.choice(["prompt", "completion", "input", "output", "question", "answer"])]
        elif roll < 0.15:
            rec["answer"] = None
        elif roll < 0.2:
            rec.update(prompt="", completion="", question="", answer="", input="", output="")
        records.append(rec)
    return records


@pytest.mark.parametrize("case", slow_after(sorted(PC_CASES), fast=2))
def test_prompt_completion_lengths_match_megatron_bridge(mb, mb_tok, folders, work, case):
    pc_kwargs, dataset_kwargs = PC_CASES[case]
    records = pc_records(seed=len(case), n=60)
    max_seq_length = 80
    config = mb.sft_processing.PromptCompletionSFTPreprocessingConfig(**pc_kwargs)
    expected = oracle.mb_lengths(
        records, mb_tok(), work, prompt_completion_config=config, max_seq_length=max_seq_length, **dataset_kwargs
    )
    settings_ = SftSettings(
        prompt_completion=PromptCompletion(**pc_kwargs), max_seq_length=max_seq_length, **dataset_kwargs
    )
    assert_same(expected, sft_lengths(records, load_tokenizer(folders["bos"]), settings_), case)
    assert sum(isinstance(x, BaseException) for x in expected) >= 2, "bad rows must be among the records"


@pytest.mark.parametrize("loss_mode", ["completion", "full"])
@pytest.mark.parametrize("case", slow_after(sorted(PC_CASES), fast=2))
def test_prompt_completion_ids_and_masks_match_megatron_bridge(mb, mb_tok, folders, work, case, loss_mode):
    """What ``prepare`` packs from prompt-completion records: each record's ``input_ids`` and ``loss_mask`` as
    Bridge's ``GPTSFTDataset`` hands them to packing, record by record, with pad-like added tokens (which Bridge
    masks, ``extract_skipped_token_ids``) inside some prompts and completions."""
    pc_kwargs, dataset_kwargs = PC_CASES[case]
    records = pc_records(seed=len(case) + 7, n=60)
    for rec in records[::4]:
        for key in ("prompt", "completion", "input", "output", "question", "answer"):
            if isinstance(rec.get(key), str):
                rec[key] += " <|start_header_id|> x"
    config = mb.sft_processing.PromptCompletionSFTPreprocessingConfig(**pc_kwargs, loss_mode=loss_mode)
    theirs = oracle.mb_dataset(
        oracle.write_jsonl(records, work),
        mb_tok(),
        prompt_completion_config=config,
        max_seq_length=80,
        **dataset_kwargs,
    )
    settings_ = SftSettings(
        prompt_completion=PromptCompletion(**pc_kwargs, loss_mode=loss_mode), max_seq_length=80, **dataset_kwargs
    )
    batch, lengths, problems = sft_tokens(records, load_tokenizer(folders["bos"]), settings_)
    flagged, built, skipped_seen = {p.index for p in problems}, 0, False
    for i in range(len(records)):
        try:
            item = theirs[i]
        except Exception:  # noqa: BLE001 - Bridge refusing the record is the answer
            assert lengths[i] == -1 and i in flagged, i
            continue
        a, b = batch.offsets[i], batch.offsets[i + 1]
        assert batch.ids[a:b].tolist() == list(item["input_ids"]), i
        mask = [int(x) for x in item["loss_mask"]]
        assert batch.mask[a:b].tolist() == mask, i
        built += 1
        skipped_seen |= any(m == 0 for m in mask[item["answer_start_idx"] :])
    assert built >= 40 and len(flagged) == len(records) - built
    assert skipped_seen, "a pad-like token masked inside a completion must be among the records"


# ---------------------------------------------------------------- chat: the tokenizer's chat template


@pytest.mark.parametrize("loss_mode", slow_after(["assistant", "last_turn", "full"]))
def test_chat_template_lengths_match_megatron_bridge(mb_tok, folders, work, loss_mode):
    records = chat_records(seed=11, n=80)
    expected = oracle.mb_lengths(
        records, mb_tok(), work, chat=True, use_hf_tokenizer_chat_template=True, loss_mode=loss_mode, max_seq_length=64
    )
    ours = chat_lengths(records, load_tokenizer(folders["bos"]), ChatSettings(loss_mode=loss_mode))
    assert_same(expected, ours, f"chat/{loss_mode}")
    assert max(x for x in expected if isinstance(x, int)) > 64, "no truncation in the example: collate_fn cuts"


@pytest.mark.slow  # more chat templates through Megatron-Bridge
def test_chat_tool_schemas_of_the_data_set(mb_tok, folders, work):
    """Dataset-level tool_schemas (a JSON string, as offline packing passes them) fill in for records without."""
    records = chat_records(seed=5, n=40)
    schemas = json.dumps(TOOLS)
    expected = oracle.mb_lengths(
        records, mb_tok(), work, chat=True, use_hf_tokenizer_chat_template=True, tool_schemas=schemas
    )
    ours = chat_lengths(records, load_tokenizer(folders["bos"]), ChatSettings(tool_schemas=schemas))
    assert_same(expected, ours, "tool_schemas")


@pytest.mark.slow  # more chat templates through Megatron-Bridge
@pytest.mark.filterwarnings("ignore:.*:UserWarning")  # Bridge warns of conversations with nothing to learn
def test_chat_template_override(mb_tok, folders, work):
    """TokenizerConfig.chat_template replaces the tokenizer's; a {% generation %} block needs no assistant turn."""
    records = chat_records(seed=3, n=40)
    expected = oracle.mb_lengths(
        records,
        mb_tok("plain", chat_template=GENERATION_TEMPLATE),
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
    )
    ours = chat_lengths(records, load_tokenizer(folders["plain"]), ChatSettings(chat_template=GENERATION_TEMPLATE))
    assert_same(expected, ours, "generation template")
    lone_user = records.index({"messages": [{"role": "user", "content": "no answer"}]})
    assert isinstance(expected[lone_user], int), "a generation block gives a mask even without an assistant turn"


def test_chat_template_without_mask_markers(mb_tok, folders, work):
    """No {% generation %} block and no turn markers Bridge knows: every record fails unless the loss is full."""
    records = chat_records(seed=4, n=12)
    tok = load_tokenizer(folders["bos"])
    expected = oracle.mb_lengths(
        records, mb_tok("bos", chat_template=PLAIN_TEMPLATE), work, chat=True, use_hf_tokenizer_chat_template=True
    )
    assert all(isinstance(x, BaseException) for x in expected)
    with pytest.raises(InputError, match="cannot build the 'assistant' loss mask"):
        chat_lengths(records, tok, ChatSettings(chat_template=PLAIN_TEMPLATE))
    expected = oracle.mb_lengths(
        records,
        mb_tok("bos", chat_template=PLAIN_TEMPLATE),
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
        loss_mode="full",
    )
    assert_same(
        expected,
        chat_lengths(records, tok, ChatSettings(chat_template=PLAIN_TEMPLATE, loss_mode="full")),
        "plain template, full loss",
    )


def test_chat_template_that_raises_is_a_record_problem(mb_tok, folders, work):
    records = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
        {"messages": [{"role": "narrator", "content": "once"}, {"role": "assistant", "content": "yo"}]},
    ]
    expected = oracle.mb_lengths(records, mb_tok(), work, chat=True, use_hf_tokenizer_chat_template=True)
    lengths, problems = chat_lengths(records, load_tokenizer(folders["bos"]))
    assert_same(expected, (lengths, problems), "raising template")
    assert "Unknown role narrator" in str(expected[1])
    assert problems == [
        RecordProblem(1, "the chat template failed: Unknown role narrator: use system (first), user, assistant, tool")
    ]


@pytest.mark.slow  # long fuzzing
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["system", "user", "assistant", "tool"]),
            st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_chat_any_text_matches_megatron_bridge(mb_tok, folders, work, turns):
    dataset = _cached_chat_dataset(work, mb_tok())
    record = {"messages": [{"role": r, "content": c} for r, c in turns]}
    try:
        expected = [len(dataset._process_example(copy.deepcopy(record))["input_ids"])]
    except Exception as e:  # noqa: BLE001
        expected = [e]
    assert_same(expected, chat_lengths([record], load_tokenizer(folders["bos"])), "hypothesis chat")


def _cached_chat_dataset(work: Path, mb_tokenizer):
    if "chat" not in _DATASETS:
        path = oracle.write_jsonl(chat_records(seed=1, n=1), work)
        _DATASETS["chat"] = oracle.mb_dataset(path, mb_tokenizer, chat=True, use_hf_tokenizer_chat_template=True)
    return _DATASETS["chat"]


# ---------------------------------------------------------------- chat: the legacy <extra_id_*> format


@pytest.mark.parametrize("variant", slow_after(["bos", "plain"]))
def test_legacy_chat_lengths_match_megatron_bridge(mb_tok, folders, work, variant):
    records = legacy_records(seed=2, n=60)
    expected = oracle.mb_lengths(records, mb_tok(variant), work, chat=True, use_hf_tokenizer_chat_template=False)
    ours = chat_lengths(records, load_tokenizer(folders[variant]), ChatSettings(use_hf_tokenizer_chat_template=False))
    assert_same(expected, ours, f"legacy chat/{variant}")


# ---------------------------------------------------------------- bad inputs (no Megatron-Bridge needed)


def test_hub_name_is_refused_with_how_to_get_a_local_copy():
    with pytest.raises(InputError) as e:
        load_tokenizer("meta-llama/Llama-3.1-8B")
    assert "Hugging Face Hub name" in str(e.value)
    assert "huggingface-cli download NAME --local-dir DIR" in str(e.value)
    with pytest.raises(InputError, match="not a local file or folder; pass a local folder"):
        load_tokenizer("./no/such/tokenizer")


@pytest.mark.parametrize("missing", ["tokenizer.json", "tokenizer_config.json"])
def test_folder_missing_a_file_names_it(folders, tmp_path, missing):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if name != missing:
            (tmp_path / name).write_bytes((folders["bos"] / name).read_bytes())
    with pytest.raises(InputError) as e:
        load_tokenizer(tmp_path)
    assert e.value.source == str(tmp_path / missing)
    assert "missing" in str(e.value)


@pytest.mark.parametrize(
    "broken,content,message",
    [
        ("tokenizer.json", b'{"model": {"type": "BPE"', "the tokenizers library cannot read it"),
        ("tokenizer.json", b"\x00\xff", "the tokenizers library cannot read it"),
        ("tokenizer_config.json", b"{bos_token: <s>}", "not valid JSON"),
        ("tokenizer_config.json", b'["a list"]', "must hold a JSON object"),
    ],
)
def test_broken_file_is_named(folders, tmp_path, broken, content, message):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes(content if name == broken else (folders["bos"] / name).read_bytes())
    with pytest.raises(InputError, match=message) as e:
        load_tokenizer(tmp_path)
    assert e.value.source == str(tmp_path / broken)


def test_broken_sentencepiece_model_is_named(tmp_path):
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(InputError, match="sentencepiece cannot read it") as e:
        load_tokenizer(bad)
    assert e.value.source == str(bad)


def test_no_chat_template_and_sentencepiece_chat_are_refused(tmp_path, sp_model):
    folder = build_tokenizer(tmp_path / "no-template", chat_template=None)
    record = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    with pytest.raises(InputError, match="has no chat template"):
        chat_lengths(record, load_tokenizer(folder))
    with pytest.raises(InputError, match="need a Hugging Face tokenizer folder"):
        chat_lengths(record, load_tokenizer(sp_model))
    with pytest.raises(InputError, match="cannot encode with a SentencePiece model"):
        sft_lengths(
            [{"prompt": "a", "completion": "b"}],
            load_tokenizer(sp_model),
            SftSettings(prompt_completion=PromptCompletion()),
        )


def test_tokenizer_pickles_with_its_encoder(folders, sp_model):
    records = sft_records(seed=1, n=20)
    for path in (folders["bos"], sp_model):
        tok = load_tokenizer(path)
        clone = pickle.loads(pickle.dumps(tok))
        assert isinstance(clone, Tokenizer) and clone.space_sensitive == tok.space_sensitive
        np.testing.assert_array_equal(sft_lengths(records, clone)[0], sft_lengths(records, tok)[0])
    tok = load_tokenizer(folders["bos"])
    chat = chat_records(seed=1, n=5)
    first = chat_lengths(chat, tok)[0]
    clone = pickle.loads(pickle.dumps(tok))  # the transformers tokenizer is left behind and loaded again
    assert clone._hf is None
    np.testing.assert_array_equal(chat_lengths(chat, clone)[0], first)


def test_settings_are_checked_when_made():
    with pytest.raises(InputError, match="max_seq_length"):
        SftSettings(max_seq_length=0)
    with pytest.raises(InputError, match="truncation_method"):
        SftSettings(truncation_method="middle")
    with pytest.raises(InputError, match=r"prompt_completion.prompt_template"):
        PromptCompletion(prompt_template="{prompt} {extra}")
    with pytest.raises(InputError, match="tool_schemas: not valid JSON"):
        ChatSettings(tool_schemas="[{")
    assert EOS == "<|end_of_text|>"
