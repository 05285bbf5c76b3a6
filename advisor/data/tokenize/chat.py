"""Token lengths of chat records, exactly as Megatron-Bridge 0.6.2's ``GPTSFTChatDataset`` builds them.

Alternatives: the tokenizer's own Jinja chat template (``use_hf_tokenizer_chat_template=True``, via transformers)
or Bridge's legacy ``<extra_id_*>`` format (``False``: ShareGPT ``conversations`` plus a ``system`` field).

With the chat template a sample is the whole rendered conversation, encoded without special tokens
(``tokenize_chat_example`` in megatron/bridge/data/conversation_processing.py, ``apply_chat_template(...,
tokenize=True)`` in transformers): nothing is truncated when the example is built (``_chat_preprocess`` in
megatron/bridge/data/datasets/utils.py; only ``collate_fn`` cuts to ``max_seq_length``); offline packing then
skips samples longer than the pack, or cuts them when it pads to a multiple (megatron/bridge/data/packing/offline.py).

    >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
    >>> tok = load_tokenizer(_example_folder())
    >>> legacy = ChatSettings(use_hf_tokenizer_chat_template=False)
    >>> rec = {"system": "", "conversations": [{"from": "User", "value": "x"}, {"from": "Assistant", "value": "y"}]}
    >>> chat_lengths([rec, {"system": ""}], tok, legacy)[1]
    [RecordProblem(index=1, reason="no 'conversations' field (the legacy chat format needs conversations and system)")]
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from advisor.data.tokenize.sft import RecordProblem
from advisor.data.tokenize.template import (
    MAX_TEMPLATE_CHARS,
    STRIKES,
    TemplateLimit,
    render_chat,
    render_prefixes,
    select_template,
)
from advisor.data.tokenize.tokenizer import ENCODE_CHUNK, Tokenizer, TokenizerPanic, _first_line, native
from advisor.errors import InputError, excerpt

SETTINGS = "ChatSettings"
CONVERSATION_KEYS = ("messages", "conversation", "conversations")  # normalize_chat_conversation's order
ROLE_ALIASES = {"human": "user", "gpt": "assistant"}  # conversation_processing._LEGACY_CHAT_ROLE_ALIASES
GENERATION_REGEX = re.compile(r"\{%-?\s+generation\s+-?%\}")  # datasets/utils.py: HF assistant masks
# infer_assistant_mask_boundary_config (conversation_processing.py): the turn markers Bridge can find the
# assistant's tokens by, when a template has no {% generation %} block (ChatML, Kimi, Gemma 4, Gemma, Llama 3,
# gpt-oss Harmony)
KNOWN_MARKERS = (
    ("<|im_start|>assistant", "<|im_end|>"),
    ("<|im_assistant|>", "<|im_user|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>"),
    ("<|turn>model", "<turn|>"),
    ("<start_of_turn>model", "<end_of_turn>"),
    ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    ("<|start|>", "<|channel|>", "<|message|>"),
)
LEGACY_SPECIAL_TOKENS = {  # GPTSFTDataset.__init__'s default special_tokens
    "system_turn_start": "<extra_id_0>",
    "turn_start": "<extra_id_1>",
    "label_start": "<extra_id_2>",
    "end_of_turn": "\n",
    "end_of_name": "\n",
}
PREFIX_STR = "\x00"  # datasets/utils.py: prepended to measure a piece without the tokenizer's leading extras
TYPES = ("TEXT_TO_VALUE", "VALUE_TO_TEXT")  # datasets/utils.py TYPE_INSTRUCTION (both instructions empty)
# per template, in this process: records in a row it ran out of time or steps on. A template that needs seconds
# per record to be refused would otherwise cost hours on a big data set; past STRIKES it is refused at once
_STRIKES: dict[str, int] = {}


@dataclass(frozen=True, kw_only=True)
class ChatSettings:
    """The ``GPTSFTChatDataset`` options that change a sample's length, or whether it can be built at all.

    ``use_hf_tokenizer_chat_template`` defaults to True, as ``ChatSFTPreprocessingConfig`` and Hugging Face
    sources set it (the class itself defaults to the legacy format). ``loss_mode`` does not change lengths but
    decides whether Bridge can build the loss mask: with ``"assistant"`` or ``"last_turn"`` a template needs a
    ``{% generation %}`` block or turn markers Bridge knows, and then every conversation needs an assistant turn.
    ``tool_schemas`` (a JSON string, a list or a dict) are the data set's tools, used where a record has no
    non-empty ``tools`` of its own. ``chat_template`` replaces the tokenizer's, as Megatron's
    ``TokenizerConfig.chat_template`` does. ``special_tokens`` are the legacy format's markers.

        >>> ChatSettings(loss_mode="turns")
        Traceback (most recent call last):
        ...
        advisor.errors.InputError: ChatSettings, loss_mode: must be 'assistant', 'last_turn' or 'full', not 'turns'
    """

    use_hf_tokenizer_chat_template: bool = True
    loss_mode: Literal["assistant", "last_turn", "full"] = "assistant"
    tool_schemas: str | list | dict | None = None
    chat_template: str | None = None
    special_tokens: Mapping[str, str] | None = None

    def __post_init__(self):
        if self.loss_mode not in ("assistant", "last_turn", "full"):
            raise InputError(
                SETTINGS, "loss_mode", f"must be 'assistant', 'last_turn' or 'full', not {excerpt(self.loss_mode)}"
            )
        if self.chat_template is not None:
            if not isinstance(self.chat_template, str):
                raise InputError(
                    SETTINGS, "chat_template", f"must be a Jinja template (text), not {excerpt(self.chat_template)}"
                )
            if len(self.chat_template) > MAX_TEMPLATE_CHARS:
                raise InputError(
                    SETTINGS,
                    "chat_template",
                    f"a template of {len(self.chat_template):,} characters (at most {MAX_TEMPLATE_CHARS:,})",
                )
        if self.tool_schemas is not None:
            self.tools()
        if self.special_tokens is not None:
            missing = sorted(set(LEGACY_SPECIAL_TOKENS) - set(self.special_tokens))
            if missing:
                raise InputError(SETTINGS, "special_tokens", f"missing {', '.join(missing)}")

    def tools(self):
        """``tool_schemas`` as ``GPTSFTChatDataset.__init__`` keeps them (a JSON string is parsed)."""
        if isinstance(self.tool_schemas, str):
            try:
                return json.loads(self.tool_schemas)
            except json.JSONDecodeError as e:
                raise InputError(SETTINGS, "tool_schemas", f"not valid JSON: {e}") from e
        return self.tool_schemas


def chat_lengths(
    records: Sequence[dict], tok: Tokenizer, settings: ChatSettings | None = None
) -> tuple[np.ndarray, list[RecordProblem]]:
    """One ``len(input_ids)`` per conversation as Megatron-Bridge 0.6.2 computes it, -1 where it cannot build one.

    With the chat template, each record is rendered by ``transformers`` (a template that raises gives a
    ``RecordProblem`` with its message) and all renderings are then encoded together by the Rust tokenizer.
    Raises ``InputError`` when no record could be built: no chat template, or an assistant-only loss mask
    Bridge cannot derive from the template.

        >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
        >>> tok = load_tokenizer(_example_folder())  # template: "{role}: {content}\\n" per message
        >>> chat = {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "world"}]}
        >>> chat_lengths([chat], tok, ChatSettings(loss_mode="full"))[0].tolist()  # user : Hello assistant : world
        [6]
    """
    s = settings if settings is not None else ChatSettings()
    if s.use_hf_tokenizer_chat_template:
        return _template_lengths(records, tok, s)
    return _legacy_lengths(records, tok, s)


def chat_template_of(tok: Tokenizer, s: ChatSettings):
    """(transformers tokenizer, its own template: text, named templates {name: text} or None, the template a
    record without tools renders with), or one message when there is none to render with."""
    hf = tok.transformers_tokenizer()
    own = hf.chat_template
    if s.chat_template is None and not own:
        raise InputError(
            str(tok.path),
            None,
            "has no chat template (tokenizer_config.json's chat_template or "
            "chat_template.jinja); give one in ChatSettings.chat_template",
        )
    try:
        return hf, own, select_template(own, s.chat_template, None)
    except ValueError as e:
        raise InputError(str(tok.path), "chat_template", str(e)) from None


def _template_lengths(
    records: Sequence[dict], tok: Tokenizer, s: ChatSettings
) -> tuple[np.ndarray, list[RecordProblem]]:
    hf, own, template = chat_template_of(tok, s)
    needs_assistant = _needs_assistant(template if isinstance(template, str) else None, s.loss_mode, tok)
    schemas = s.tools()
    special_tokens = hf.special_tokens_map
    lengths = np.full(len(records), -1, dtype=np.int64)
    problems: list[RecordProblem] = []
    texts: list[str] = []
    good: list[int] = []
    for i, rec in enumerate(records):
        conversation = normalize_conversation(rec)
        if isinstance(conversation, str):
            problems.append(RecordProblem(i, conversation))
            continue
        # tokenize_chat_example: a record's own tools, else the data set's tool_schemas
        tools = rec.get("tools")
        if not tools and schemas is not None:
            tools = schemas
        # rendered as hf.apply_chat_template(conversation, tools=tools, chat_template=s.chat_template,
        # tokenize=False) renders it, in a box: a template may loop or grow without end (template.py)
        source = select_template(own, s.chat_template, tools)
        text = render_boxed(source, conversation, tools, special_tokens)
        if isinstance(text, RecordProblem):
            problems.append(RecordProblem(i, text.reason))
            continue
        if needs_assistant and not any(turn.get("role") == "assistant" for turn in conversation):
            problems.append(
                RecordProblem(
                    i,
                    f"no assistant turn: Megatron-Bridge cannot build the {s.loss_mode!r} "
                    "loss mask (use loss_mode='full' to train on every token)",
                )
            )
            continue
        texts.append(text)
        good.append(i)
    counts, panicked = _encode_lengths(hf, texts, str(tok.path))
    lengths[good] = counts
    for j, why in panicked:
        lengths[good[j]] = -1
        problems.append(RecordProblem(good[j], why))
    problems.sort(key=lambda p: p.index)
    return lengths, problems


@overload
def render_boxed(
    source: str,
    conversation: list[dict],
    tools,
    special_tokens: dict,
    prefixes: None = None,
    track: list | None = None,
    keep: list | None = None,
    emptied_last: tuple | None = None,
) -> str | RecordProblem: ...


@overload
def render_boxed(
    source: str,
    conversation: list[dict],
    tools,
    special_tokens: dict,
    prefixes: list[int],
    track: list | None = None,
    keep: list | None = None,
    emptied_last: tuple | None = None,
) -> dict[int, str] | RecordProblem: ...


def render_boxed(
    source: str,
    conversation: list[dict],
    tools,
    special_tokens: dict,
    prefixes: list[int] | None = None,
    track: list | None = None,
    keep: list | None = None,
    emptied_last: tuple | None = None,
) -> str | dict[int, str] | RecordProblem:
    """The conversation rendered as ``hf.apply_chat_template(conversation, tools=tools, tokenize=False)`` renders
    it, in a box (a template may loop or grow without end: template.py), or the problem (index -1) that stops it.
    With ``prefixes``, the renders of ``conversation[:m]`` for each m instead ({m: text}), and with ``track`` the
    whole conversation's ``{% generation %}`` spans, ``keep`` and ``emptied_last`` as there (``render_prefixes``).
    A template that ran out of time or
    steps on STRIKES records in a row is not rendered again in this process."""
    if _STRIKES.get(source, 0) >= STRIKES:  # it ran out of time on record after record: seconds each
        return RecordProblem(
            -1,
            f"the chat template exceeded its limits (out of time or steps on {STRIKES} records "
            "in a row before this one; not rendered again)",
        )

    def render():
        if prefixes is None:
            return render_chat(source, conversation, tools=tools, special_tokens=special_tokens)
        if track is not None:
            track.clear()  # a render run again after a stall starts its spans afresh
        if keep is not None:
            keep.clear()
        return render_prefixes(
            source,
            conversation,
            prefixes,
            tools=tools,
            special_tokens=special_tokens,
            track=track,
            keep=keep,
            emptied_last=emptied_last,
        )

    try:
        try:
            text = render()
        except TemplateLimit as e:
            if not e.costly:
                raise
            # the deadline is wall-clock time: a busy machine or a garbage collection can stall a render of
            # microseconds past it (seen once in 400k renders with five processes on two cores); a template that
            # is really slow runs out again
            text = render()
        _STRIKES.pop(source, None)
        return text
    except TemplateLimit as e:
        if len(_STRIKES) > 64:
            _STRIKES.clear()  # a process sees a few templates; never let the tally itself grow
        _STRIKES[source] = _STRIKES.get(source, 0) + 1 if e.costly else 0
        return RecordProblem(-1, str(e))
    except Exception as e:  # a template may raise anything (raise_exception, TypeError, ...): one record's problem
        return RecordProblem(-1, f"the chat template failed: {_first_line(e)}")


def _needs_assistant(template: str | None, loss_mode: str, tok: Tokenizer) -> bool:
    """Whether each conversation needs an assistant turn for Bridge's loss mask (``build_assistant_loss_mask``);
    raises when no conversation can get one."""
    if loss_mode == "full" or (template is not None and GENERATION_REGEX.search(template)):
        return False  # full loss needs no mask; a generation block always yields one (maybe all zeros)
    if template is not None and any(all(m in template for m in markers) for markers in KNOWN_MARKERS):
        return True
    raise InputError(
        str(tok.path),
        None,
        f"Megatron-Bridge 0.6.2 cannot build the {loss_mode!r} loss mask with this "
        "chat template: it has no {% generation %} block and none of the turn markers Bridge knows "
        "(ChatML, Llama 3, Gemma, Kimi, gpt-oss); use loss_mode='full' or such a template",
    )


def normalize_conversation(rec) -> list[dict] | str:
    """``normalize_chat_conversation`` (conversation_processing.py): OpenAI-style messages, or why not.

    ``messages``, then ``conversation``, then ShareGPT ``conversations``; a ``from``/``value`` turn becomes
    ``role`` (lower-cased, human → user, gpt → assistant) / ``content``; a top-level ``system`` goes first when
    no turn is a system turn.

        >>> normalize_conversation({"system": "Be brief.", "conversations": [{"from": "human", "value": "Hi"}]})
        [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    if not isinstance(rec, dict):
        return f"not a JSON object but {type(rec).__name__}"
    key = next((k for k in CONVERSATION_KEYS if rec.get(k) is not None), None)
    if key is None:
        return "no 'messages', 'conversation' or 'conversations' field"
    turns = rec[key]
    if not isinstance(turns, list):
        return f"{key!r} must be a list of messages, not {excerpt(turns)}"
    out: list[dict] = []
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return f"{key}[{j}] is not an object: {excerpt(turn)}"
        if "role" in turn and "content" in turn:
            out.append(dict(turn))
        elif "from" in turn and "value" in turn:
            role = str(turn["from"]).lower()
            out.append({"role": ROLE_ALIASES.get(role, role), "content": turn["value"]})
        else:
            keys = ", ".join(map(str, turn)) or "none"
            return f"{key}[{j}] has neither 'role' and 'content' nor 'from' and 'value' (keys: {keys})"
    if rec.get("system") and not any(t.get("role") == "system" for t in out):
        out.insert(0, {"role": "system", "content": rec["system"]})
    return out


def _encode_lengths(hf, texts: list[str], source: str) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Token counts of rendered conversations, with the Rust tokenizer transformers itself encodes with
    (``apply_chat_template`` calls the tokenizer with ``add_special_tokens=False``, no truncation or padding).
    A batch the Rust library panics on is encoded again text by text: each text it panics on is one record's
    problem (index in ``texts``, why), the others keep their counts."""
    backend = hf.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    out = np.empty(len(texts), dtype=np.int64)
    panicked: list[tuple[int, str]] = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = texts[start : start + ENCODE_CHUNK]
        try:
            encodings = native(source, "encoding", backend.encode_batch_fast, chunk, add_special_tokens=False)
            out[start : start + len(chunk)] = [len(e) for e in encodings]
            continue
        except TokenizerPanic:
            pass
        for j, text in enumerate(chunk, start):
            try:
                out[j] = len(native(source, "encoding", backend.encode, text, add_special_tokens=False))
            except TokenizerPanic as e:
                out[j] = -1
                panicked.append((j, e.what))
    return out, panicked


def _legacy_lengths(records: Sequence[dict], tok: Tokenizer, s: ChatSettings) -> tuple[np.ndarray, list[RecordProblem]]:
    """``_preprocess`` (datasets/utils.py): one string per conversation, encoded as ``_tokenize`` does.

    The header ``<extra_id_0>System\\n{system}\\n``, then per turn ``<extra_id_1>{from}\\n{value}\\n`` (with the
    label for typed conversations), and a final ``<extra_id_1>`` when the last speaker is not masked. Bridge
    asserts the loss mask is not empty; that check is reproduced for untyped conversations from the pieces'
    token counts (``_mask_targets``).
    """
    tokens = dict(s.special_tokens or LEGACY_SPECIAL_TOKENS)
    built, problems = legacy_conversations(records, tokens)
    # every piece of every conversation in one batch: the whole text, its header, each turn and speaker name
    texts = [PREFIX_STR, PREFIX_STR + tokens["turn_start"]]
    for _, header, conversation, turns, speakers, _, _ in built:
        texts += [conversation, header] + [PREFIX_STR + t for t in turns]
        texts += [PREFIX_STR + tokens["turn_start"] + sp + tokens["end_of_name"] for sp in speakers]
    counts = tok.mb_lengths(texts).tolist()
    prefix, turn_start_tokens = counts[0], counts[1] - counts[0]
    lengths = np.full(len(records), -1, dtype=np.int64)
    at = 2
    for i, _, _, turns, speakers, mask_role, gtype in built:
        n = len(turns)
        total, header_len = counts[at], counts[at + 1]
        turn_lens = [c - prefix for c in counts[at + 2 : at + 2 + n]]
        name_lens = [c - prefix for c in counts[at + 2 + n : at + 2 + 2 * n]]
        at += 2 + 2 * n
        if gtype is None and not _loss_left(
            total, header_len, turn_lens, name_lens, speakers, mask_role, turn_start_tokens
        ):
            problems.append(
                RecordProblem(
                    i, f"every token is masked (mask {mask_role!r}): Megatron-Bridge asserts 'loss_mask is empty'"
                )
            )
            continue
        lengths[i] = total
    problems.sort(key=lambda p: p.index)
    return lengths, problems


def legacy_conversations(
    records: Sequence[dict], tokens: Mapping[str, str]
) -> tuple[list[tuple[int, str, str, list[str], list[str], str, str | None]], list[RecordProblem]]:
    """(index, header, whole text, turn texts, speakers, mask role, type) of each record Bridge can build, and a
    problem for each other (``_legacy_conversation``): what the lengths and the tokens both start from."""
    built, problems = [], []
    for i, rec in enumerate(records):
        item = _legacy_conversation(rec, tokens)
        if isinstance(item, str):
            problems.append(RecordProblem(i, item))
        else:
            built.append((i, *item))
    return built, problems


def _legacy_conversation(
    rec, tokens: Mapping[str, str]
) -> tuple[str, str, list[str], list[str], str, str | None] | str:
    """``_get_header_conversation_type_mask_role`` and ``_add_speaker_and_signal``: (header, whole text, turn
    texts, speakers, mask role, type), or why Bridge fails on the record."""
    if not isinstance(rec, dict):
        return f"not a JSON object but {type(rec).__name__}"
    missing = [k for k in ("conversations", "system") if k not in rec]
    if missing:
        noun = "field" if len(missing) == 1 else "fields"
        return f"no {', '.join(map(repr, missing))} {noun} (the legacy chat format needs conversations and system)"
    gtype = rec.get("type")
    if gtype is not None and gtype not in TYPES:
        return f"'type' must be one of {', '.join(TYPES)} or absent, not {excerpt(gtype)}"
    source = rec["conversations"]
    if not isinstance(source, list) or not all(isinstance(t, dict) for t in source):
        return "'conversations' must be a list of objects"
    for j, turn in enumerate(source):
        lacking = [k for k in ("from", "value") if k not in turn]
        if lacking:
            return f"conversations[{j}] has no {' or '.join(map(repr, lacking))}"
        if not isinstance(turn["from"], str) or not isinstance(turn["value"], str):
            return f"conversations[{j}]: 'from' and 'value' must be text"
        label = turn.get("label") if gtype is not None else None
        if label is not None and not isinstance(label, str):
            return f"conversations[{j}]: 'label' must be text"
    system = rec["system"]  # formatted into the header as it is, whatever its type
    mask_role = rec.get("mask", "User")
    if not isinstance(mask_role, str):
        return f"'mask' is {excerpt(mask_role)}, not text"
    start, eot, name_end = tokens["turn_start"], tokens["end_of_turn"], tokens["end_of_name"]
    header = f"{tokens['system_turn_start']}System{name_end}{system}{eot}"
    conversation, turns, speakers = header, [], []
    for j, turn in enumerate(source):
        speaker, value = turn["from"], turn["value"]
        label = ""
        if gtype is not None and turn.get("label") is not None:
            label = tokens["label_start"] + turn["label"] + name_end  # _response_value_formater
        if gtype == "TEXT_TO_VALUE":
            text = start + speaker + name_end + value + eot + label
        else:
            text = start + speaker + name_end + label + value + eot
        conversation += text
        if speaker not in mask_role and j == len(source) - 1:  # a substring test, as Bridge writes it
            conversation += start
        turns.append(text)
        speakers.append(speaker)
    for role in mask_role.split(","):
        if role not in speakers:
            return f"mask role {role!r} is not a speaker in the conversation (Megatron-Bridge asserts it is)"
    return header, conversation, turns, speakers, mask_role, gtype


def _loss_left(
    total: int,
    header_len: int,
    turn_lens: list[int],
    name_lens: list[int],
    speakers: list[str],
    mask_role: str,
    turn_start_tokens: int,
) -> bool:
    """Whether ``_mask_targets`` leaves any token unmasked in an untyped conversation, from token counts."""
    masked = np.zeros(total, dtype=bool)
    masked[:header_len] = True
    cur = header_len
    for j, (length, name, speaker) in enumerate(zip(turn_lens, name_lens, speakers, strict=True)):
        if cur >= total:
            break
        if j == 0:
            masked[cur : cur + length] = True
        elif speaker in mask_role and j > 1:
            masked[cur + turn_start_tokens : cur + length] = True
        elif speaker in mask_role:
            masked[cur : cur + length] = True
        else:
            masked[cur : cur + name] = True
        cur += length
    return not masked.all()
