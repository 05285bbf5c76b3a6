"""advisor.data.tokenize.chat_tokens and sft_tokens against Megatron-Bridge 0.6.2's datasets, record by record:
the token ids and the loss mask each record reaches offline packing with.

Bridge's ``GPTSFTChatDataset`` (tests/support/mb_sft_oracle.py) builds every record of generated conversations (tools,
ShareGPT, tool calls, records it rejects) and of hypothesis-generated ones whose messages may hold the template's
own markers (then Bridge's turn search or its marker scan decides the mask); the advisor's ids and mask must be
its ``input_ids`` and ``loss_mask``, and a record Bridge raises for must be a problem at the same index. The
shortcut that skips encoding a conversation's prefixes is checked against real encodes.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.data.tokenize.chat import ChatSettings
from advisor.data.tokenize.chat_mask import common_prefix
from advisor.data.tokenize.chat_tokens import _marker_ids, _prefix_tokens, chat_tokens
from advisor.data.tokenize.sft import SftSettings, sft_tokens
from advisor.data.tokenize.template import render_chat
from advisor.data.tokenize.tokenizer import load_tokenizer
from advisor.prepare.rows import build_rows
from tests.support import mb_prepare_oracle
from tests.support import mb_sft_oracle as oracle
from tests.support.records import SFT_CASES, TOOLS, chat_records, sft_records
from tests.support.tokenizer_fixture import CHAT_TEMPLATE, build_tokenizer

MARKERS = [
    "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|begin_of_text|>",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "bos")


@pytest.fixture(scope="module")
def mb_tokenizer(folder):
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    return oracle.build_mb_tokenizer(folder)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("mb-data")


def mb_items(records, mb_tokenizer, work, **kwargs) -> list:
    ds = oracle.mb_dataset(oracle.write_jsonl(records, work), mb_tokenizer, **kwargs)
    out = []
    for i in range(len(ds)):
        try:
            out.append(ds[i])
        except Exception as e:  # noqa: BLE001 - Bridge's failure is the answer for that record
            out.append(e)
    return out


def assert_same_tokens(expected: list, got, what: str, mask_kind: str = "loss_mask"):
    """Record by record: the ids, the dataset's mask (chat), and the packed row Bridge's own
    ``fill_packing_strategy`` makes of the record alone (its mask derivation and roll) equal ``build_rows``'."""
    batch, lengths, problems = got
    flagged = {p.index for p in problems}
    fill = mb_prepare_oracle.modules().algorithms.fill_packing_strategy
    for i, item in enumerate(expected):
        if isinstance(item, BaseException):
            assert lengths[i] == -1 and i in flagged, f"{what} {i}: Bridge raised {item!r}"
            continue
        assert i not in flagged, f"{what} {i}: {problems}"
        ids, mask = batch.record(i)
        assert ids.tolist() == list(map(int, item["input_ids"])), f"{what} {i}: ids"
        if "loss_mask" in item:
            assert mask.tolist() == item["loss_mask"].int().tolist(), f"{what} {i}: mask"
        if ids.size == 0:
            continue
        state = np.random.get_state()  # fill_packing_strategy draws a permutation of one
        packed = fill([[ids.size - 1]], defaultdict(list, {ids.size - 1: [item]}), ids.size - 1, 0)[0]
        np.random.set_state(state)
        row = build_rows(
            batch.ids,
            batch.mask,
            batch.offsets[:-1],
            batch.lengths,
            np.array([i]),
            np.array([ids.size]),
            np.array([0, 1]),
            pad_id=0,
            mask_kind=mask_kind,
        )
        assert row.mask.tolist() == [int(x) for x in packed["loss_mask"]], f"{what} {i}: packed mask"


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@pytest.mark.parametrize(
    "loss_mode",
    ["assistant", pytest.param("last_turn", marks=pytest.mark.slow), pytest.param("full", marks=pytest.mark.slow)],
)
def test_chat_ids_and_masks_match_megatron_bridge(folder, mb_tokenizer, work, loss_mode):
    records = chat_records(seed=31, n=60)
    schemas = json.dumps(TOOLS) if loss_mode == "last_turn" else None
    expected = mb_items(
        records,
        mb_tokenizer,
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
        loss_mode=loss_mode,
        tool_schemas=schemas,
    )
    got = chat_tokens(records, load_tokenizer(folder), ChatSettings(loss_mode=loss_mode, tool_schemas=schemas))
    assert_same_tokens(expected, got, f"chat/{loss_mode}")
    assert sum(isinstance(x, BaseException) for x in expected) >= 3


_DATASETS: dict = {}


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.tuples(
            st.sampled_from(["system", "user", "assistant", "assistant", "tool"]),
            st.lists(st.sampled_from(MARKERS + ["hi", " there", "\n", "x y", ""]), max_size=4),
        ),
        min_size=1,
        max_size=6,
    ),
    loss_mode=st.sampled_from(["assistant", "last_turn"]),
)
def test_markers_inside_messages_match_megatron_bridge(folder, mb_tokenizer, work, turns, loss_mode):
    """Messages that hold the template's own markers: Bridge's turn search, then its scan when that fails and no
    message holds a marker (else the record fails)."""
    key = ("chat", loss_mode)
    if key not in _DATASETS:
        path = oracle.write_jsonl(chat_records(seed=1, n=1), work)
        _DATASETS[key] = oracle.mb_dataset(
            path, mb_tokenizer, chat=True, use_hf_tokenizer_chat_template=True, loss_mode=loss_mode
        )
    record = {"messages": [{"role": r, "content": "".join(parts)} for r, parts in turns]}
    try:
        expected = [_DATASETS[key]._process_example(copy.deepcopy(record))]
    except Exception as e:  # noqa: BLE001
        expected = [e]
    got = chat_tokens([record], load_tokenizer(folder), ChatSettings(loss_mode=loss_mode))
    assert_same_tokens(expected, got, f"markers/{loss_mode}")


def test_prefix_shortcut_equals_real_encodes(folder):
    """A prefix rendering ending at a marker encodes to the whole rendering's tokens up to that marker."""
    tok = load_tokenizer(folder)
    hf = tok.transformers_tokenizer()
    backend = hf.backend_tokenizer
    markers = _marker_ids(backend)
    assert markers is not None and "<|eot_id|>" in markers
    checked = 0
    for rec in chat_records(seed=8, n=80):
        turns = rec.get("messages") or rec.get("conversation")
        if not isinstance(turns, list) or not turns:
            continue
        try:
            whole = render_chat(hf.chat_template, turns, tools=rec.get("tools"), special_tokens=hf.special_tokens_map)
        except Exception:  # noqa: BLE001 - a record the template refuses has no prefixes to check
            continue
        whole_ids = np.array(backend.encode(whole, add_special_tokens=False).ids)
        for m in range(1, len(turns)):
            try:
                prefix = render_chat(
                    hf.chat_template, turns[:m], tools=rec.get("tools"), special_tokens=hf.special_tokens_map
                )
            except Exception:  # noqa: BLE001
                continue
            n = _prefix_tokens(prefix, whole, whole_ids, markers)
            real = np.array(backend.encode(prefix, add_special_tokens=False).ids)
            if n is not None:
                assert n == real.size == common_prefix(real, whole_ids), (m, prefix[-40:])
                checked += 1
    assert checked > 50


def test_tokenizers_whose_added_tokens_are_not_markers_encode_every_prefix(tmp_path):
    folder = build_tokenizer(tmp_path / "odd", config_extra={"additional_special_tokens": ["[SEP]x"]})
    assert _marker_ids(load_tokenizer(folder).transformers_tokenizer().backend_tokenizer) is None


@pytest.mark.parametrize(
    "case",
    [
        "defaults",
        "three_fields",
        "virtual_generate_right",
        "spaces_in_template",
        "label_truncated_too",
        "is_test",
        "escaped_no_field_left",
    ],
)
def test_sft_ids_and_masks_match_megatron_bridge(folder, mb_tokenizer, work, case):
    """GPTSFTDataset's input_ids, and the mask offline packing derives from its answer_start_idx."""
    records = sft_records(seed=41, n=40)
    kwargs = {
        "prompt_template": "{input} {output}",
        "label_key": "output",
        "truncation_field": "input",
        "max_seq_length": 96,
        **SFT_CASES[case],
    }
    expected = mb_items(records, mb_tokenizer, work, **kwargs)
    got = sft_tokens(records, load_tokenizer(folder), SftSettings(**kwargs))
    assert_same_tokens(expected, got, f"sft/{case}", mask_kind="answer_start")
    assert got[0].truncated.any()


# ---------------------------------------------------------------- {% generation %} blocks: Hugging Face's mask
GENERATION_TEMPLATES = {
    # the fixture's Llama-3-style template, the assistant's text and end marker in generation blocks: Bridge also
    # knows its turn markers, so it takes Hugging Face's mask with the turns' end markers added
    "llama3": CHAT_TEMPLATE.replace(
        "{{- message['content'] | trim + '<|eot_id|>' }}",
        "{%- if message['role'] == 'assistant' %}{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}"
        "{% endgeneration %}{%- else %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endif %}",
    ),
    # markers Bridge does not know: Hugging Face's mask alone (the last turn found through a prefix render)
    "plain": "{%- for message in messages %}{%- if message['role'] == 'assistant' %}{{- 'Assistant: ' }}"
    "{% generation %}{{- message['content'] }}{% endgeneration %}{{- '\\n' }}{%- else %}"
    "{{- message['role'] + ': ' + message['content'] + '\\n' }}{%- endif %}{%- endfor %}",
}


@pytest.fixture(scope="module")
def generation_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    return {name: build_tokenizer(root / name, chat_template=t) for name, t in GENERATION_TEMPLATES.items()}


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@pytest.mark.parametrize("loss_mode", ["assistant", "last_turn", pytest.param("full", marks=pytest.mark.slow)])
@pytest.mark.parametrize("template", sorted(GENERATION_TEMPLATES))
def test_generation_blocks_give_megatron_bridges_masks(generation_folders, work, template, loss_mode):
    """A template with ``{% generation %}`` blocks: the ids and the loss mask of every record as Bridge's
    ``GPTSFTChatDataset`` builds them (Hugging Face's ``return_assistant_tokens_mask`` through transformers,
    alone or with Bridge's turn markers), including records it rejects and ones with no assistant turn."""
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    folder = generation_folders[template]
    records = chat_records(seed=7 + len(template), n=40)
    records += [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]},
        {"messages": [{"role": "user", "content": "only a question"}]},
    ]
    expected = mb_items(
        records,
        oracle.build_mb_tokenizer(folder),
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
        loss_mode=loss_mode,
    )
    got = chat_tokens(records, load_tokenizer(folder), ChatSettings(loss_mode=loss_mode))
    assert_same_tokens(expected, got, f"generation/{template}/{loss_mode}")
    built = [x for x in expected if not isinstance(x, BaseException)]
    assert len(built) >= 25 and any(x["loss_mask"].any() for x in built)


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.tuples(
            st.sampled_from(["system", "user", "assistant", "assistant"]),
            st.lists(st.sampled_from(MARKERS + ["hi", " there", "\n", "x y", ""]), max_size=4),
        ),
        min_size=1,
        max_size=5,
    ),
    loss_mode=st.sampled_from(["assistant", "last_turn"]),
)
def test_generation_blocks_with_markers_inside_messages(generation_folders, work, turns, loss_mode):
    """The generation template Bridge also knows the markers of, with messages holding those markers: whether
    Bridge adds the turns' end markers, falls back to them, or keeps the generation mask."""
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    key = ("generation", loss_mode)
    if key not in _DATASETS:
        path = oracle.write_jsonl(chat_records(seed=1, n=1), work)
        _DATASETS[key] = oracle.mb_dataset(
            path,
            oracle.build_mb_tokenizer(generation_folders["llama3"]),
            chat=True,
            use_hf_tokenizer_chat_template=True,
            loss_mode=loss_mode,
        )
    record = {"messages": [{"role": r, "content": "".join(parts)} for r, parts in turns]}
    try:
        expected = [_DATASETS[key]._process_example(copy.deepcopy(record))]
    except Exception as e:  # noqa: BLE001
        expected = [e]
    got = chat_tokens([record], load_tokenizer(generation_folders["llama3"]), ChatSettings(loss_mode=loss_mode))
    assert_same_tokens(expected, got, f"generation markers/{loss_mode}")


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
def test_named_template_sets_are_refused_where_bridge_fails_every_record(tmp_path, work):
    """Under assistant-only loss, Bridge reads no template from a named set (``_get_chat_template`` takes strings
    only): it finds neither generation blocks nor markers and fails every record. The advisor says so once."""
    from advisor.errors import InputError

    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    named = [{"name": "default", "template": CHAT_TEMPLATE}, {"name": "tool_use", "template": CHAT_TEMPLATE}]
    folder = build_tokenizer(tmp_path / "named", chat_template=named)
    records = chat_records(seed=3, n=8)
    expected = mb_items(
        records,
        oracle.build_mb_tokenizer(folder),
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
        loss_mode="assistant",
    )
    assert all(isinstance(x, BaseException) for x in expected)
    with pytest.raises(InputError, match="set of named chat templates"):
        chat_tokens(records, load_tokenizer(folder), ChatSettings(loss_mode="assistant"))
    batch, lengths, problems = chat_tokens(records, load_tokenizer(folder), ChatSettings(loss_mode="full"))
    assert (lengths > 0).sum() >= 5  # full loss needs no mask: those records are built


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@pytest.mark.parametrize("variant", ["bos", pytest.param("plain", marks=pytest.mark.slow)])
def test_legacy_chat_ids_and_masks_match_megatron_bridge(tmp_path_factory, work, variant):
    """The legacy ``<extra_id_*>`` format (``use_hf_tokenizer_chat_template=False``): ids and loss masks record by
    record as Bridge's ``_preprocess`` and ``_mask_targets`` build them, typed conversations (labels) and masked
    speakers included, and the records Bridge fails on."""
    from tests.support.records import legacy_records

    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    folder = build_tokenizer(tmp_path_factory.mktemp("legacy") / variant, bos_in_post_processor=variant == "bos")
    records = legacy_records(seed=5, n=60)
    rng = np.random.default_rng(5)
    for rec in records[:20]:  # TEXT_TO_VALUE too: labels after the response
        if isinstance(rec.get("conversations"), list) and "type" not in rec and rng.random() < 0.4:
            rec["type"] = "TEXT_TO_VALUE"
            for t in rec["conversations"]:
                t["label"] = f"toxicity:{rng.integers(0, 9)}"
    expected = mb_items(
        records, oracle.build_mb_tokenizer(folder), work, chat=True, use_hf_tokenizer_chat_template=False
    )
    got = chat_tokens(records, load_tokenizer(folder), ChatSettings(use_hf_tokenizer_chat_template=False))
    assert_same_tokens(expected, got, f"legacy/{variant}")
    built = [x for x in expected if not isinstance(x, BaseException)]
    assert len(built) >= 40 and sum(isinstance(x, BaseException) for x in expected) >= 4


EMPTY_RAISES = (
    "{% for m in messages %}{% if m.role == 'assistant' and not m.content %}{{ raise_exception('empty') }}"
    "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)
GENERATION_FIRST = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
    "{% endgeneration %}{% else %}{{ m.role }}: {{ m.content }}{% endif %}\n{% endfor %}"
)
TWO_RAISES = "{% if messages|length == 2 %}{{ raise_exception('two') }}{% endif %}" + GENERATION_TEMPLATES["plain"]


@pytest.mark.filterwarnings("ignore:.*:UserWarning")
@pytest.mark.parametrize(
    "template, loss_mode",
    [(EMPTY_RAISES, "full"), (GENERATION_FIRST, "assistant"), (GENERATION_FIRST, "full"), (TWO_RAISES, "last_turn")],
)
def test_the_renders_bridge_makes_beyond_the_mask_fail_the_same_records(tmp_path, work, template, loss_mode):
    """Bridge renders each conversation ending with a reply once more with that reply emptied (to find where it
    starts), and for last-turn loss without markers only the conversation before the last reply: a template that
    fails there fails the record, in every loss mode (found by an independent review)."""
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    folder = build_tokenizer(tmp_path / "t", chat_template=template)
    records = [
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"}]},
        {"messages": [{"role": "assistant", "content": "x"}]},
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
                {"role": "assistant", "content": "d"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "more"},
            ]
        },
    ]
    expected = mb_items(
        records,
        oracle.build_mb_tokenizer(folder),
        work,
        chat=True,
        use_hf_tokenizer_chat_template=True,
        loss_mode=loss_mode,
    )
    got = chat_tokens(records, load_tokenizer(folder), ChatSettings(loss_mode=loss_mode))
    assert_same_tokens(expected, got, f"{loss_mode}")
    assert any(isinstance(x, BaseException) for x in expected) or template == TWO_RAISES
