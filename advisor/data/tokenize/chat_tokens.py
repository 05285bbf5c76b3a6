"""Chat records' token ids and loss masks, exactly as Megatron-Bridge 0.6.2's ``GPTSFTChatDataset`` builds them
with the tokenizer's chat template (``_chat_preprocess`` in megatron/bridge/data/datasets/utils.py, which calls
``tokenize_chat_example`` in megatron/bridge/data/conversation_processing.py).

Alternative: ``chat.chat_lengths``, the same rendering and encoding keeping only counts (what ``tokenize`` needs).
Here the ids are kept and the loss mask is built as Bridge builds it (``chat_mask``): for assistant-only and
last-turn loss, Bridge renders the conversation up to and through each assistant turn and compares the token
prefixes with the whole rendering. Those prefix renders are done here too (a template may render a message
differently when it is last); encoding them is skipped when a prefix is the whole text's start and ends with
a marker token such as ``<|eot_id|>``: added tokens split the text before the model sees it, so the prefix's
tokens are then the whole text's tokens up to that marker (``_prefix_tokens``; tested against real encodes).

A template with ``{% generation %}`` blocks gives Hugging Face's assistant mask (its spans tracked while the
conversation renders, mapped to tokens through the encoding's offsets), which Bridge takes alone, or with the turn
markers' end tokens where it also knows the template's markers (``_assistant_mask``).

The legacy ``<extra_id_*>`` format is ``chat_legacy``'s. Refused: assistant or last-turn loss with a set of named
templates (Bridge reads no template from one: every record would fail).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.data.tokenize.chat import (
    GENERATION_REGEX,
    ChatSettings,
    chat_template_of,
    normalize_conversation,
    render_boxed,
)
from advisor.data.tokenize.chat_mask import (
    ASSISTANT,
    apply_loss_mode,
    boundaries,
    common_prefix,
    contains_markers,
    mask_from_scan,
    mask_from_turns,
    skipped_token_ids,
)
from advisor.data.tokenize.sequences import TokenBatch
from advisor.data.tokenize.sft import RecordProblem
from advisor.data.tokenize.template import select_template
from advisor.data.tokenize.tokenizer import ENCODE_CHUNK, Tokenizer, TokenizerPanic, native
from advisor.errors import InputError


def chat_tokens(
    records: Sequence[dict], tok: Tokenizer, settings: ChatSettings | None = None
) -> tuple[TokenBatch, np.ndarray, list[RecordProblem]]:
    """Each conversation's ``input_ids`` and loss mask (mask kind ``loss_mask``, see ``sequences``), its length
    (-1 where Bridge cannot build it) and the problems, as ``chat_lengths`` reports them.

        >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
        >>> tok = load_tokenizer(_example_folder())  # template: "{role}: {content}\\n" per message
        >>> chat = {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "world"}]}
        >>> batch, lengths, _ = chat_tokens([chat], tok, ChatSettings(loss_mode="full"))
        >>> lengths.tolist(), batch.mask.tolist()
        ([6], [1, 1, 1, 1, 1, 1])
    """
    s = settings if settings is not None else ChatSettings()
    if not s.use_hf_tokenizer_chat_template:
        from advisor.data.tokenize.chat_legacy import legacy_tokens

        return legacy_tokens(records, tok, s)
    hf, own, template = chat_template_of(tok, s)
    backend = hf.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    source_name = str(tok.path)

    def encode(text: str) -> list[int]:  # tokenize_text_without_special_tokens
        return native(source_name, "encoding", backend.encode, text, add_special_tokens=False).ids

    bounds = None
    named = s.chat_template is None and not isinstance(own, str)
    # a template with {% generation %} blocks: Bridge asks transformers for its assistant mask in every loss mode
    # (a template it reads: a string, _get_chat_template), so the spans are tracked, and their failures are its
    track = not named and GENERATION_REGEX.search(template) is not None
    if s.loss_mode != "full":
        if named:
            # Bridge reads a template only where chat_template is a string (_get_chat_template): with a named set
            # it finds neither generation blocks nor markers, and every record fails
            raise InputError(
                source_name,
                None,
                f"Megatron-Bridge 0.6.2 cannot build the {s.loss_mode!r} loss mask "
                "with a set of named chat templates (it reads neither generation blocks nor turn "
                "markers from one, so every record would fail): pass one template, or use loss_mode "
                "'full'",
            )
        bounds = boundaries(template, encode)
        if bounds is None and not track:
            raise InputError(
                source_name,
                None,
                f"Megatron-Bridge 0.6.2 cannot build the {s.loss_mode!r} loss mask "
                "with this chat template: it has no {% generation %} block and none of the turn markers "
                "Bridge knows (ChatML, Llama 3, Gemma, Kimi, gpt-oss); use loss_mode='full' or such a "
                "template",
            )
    skipped = skipped_token_ids(hf)
    markers = _marker_ids(backend)
    schemas = s.tools()
    special_tokens = hf.special_tokens_map

    problems: list[RecordProblem] = []
    work: list[_Record] = []
    for i, rec in enumerate(records):
        conversation = normalize_conversation(rec)
        if isinstance(conversation, str):
            problems.append(RecordProblem(i, conversation))
            continue
        tools = rec.get("tools")  # tokenize_chat_example: a record's own tools, else the data set's
        if not tools and schemas is not None:
            tools = schemas
        chosen = select_template(own, s.chat_template, tools)
        r = _Record(i, conversation, tools)
        # with a mask to build, the conversation's first parts are rendered too, in one call (inputs prepared once):
        # for the turn markers' spans; without markers, for last-turn loss only the last turn's start
        # (_infer_final_assistant_start renders the conversation before it, and nothing else)
        if bounds is not None:
            wanted = r.prefixes()
        elif track and s.loss_mode == "last_turn" and r.turns and r.turns[-1] > 0:
            wanted = [r.turns[-1]]
        else:
            wanted = []
        r.generation = [] if track else None
        kept: list = []  # the inputs as prepared for the template, reused by the probe below
        texts = render_boxed(
            chosen,
            conversation,
            tools,
            special_tokens,
            prefixes=[*wanted, len(conversation)],
            track=r.generation,
            keep=kept,
        )
        if isinstance(texts, RecordProblem):
            problems.append(RecordProblem(i, texts.reason))
            continue
        r.text = texts.pop(len(conversation))
        r.prefix_texts = texts
        if conversation[-1].get("role") == ASSISTANT:
            why = _terminal_probe(
                chosen, conversation, tools, special_tokens, track, backend, source_name, kept[0] if kept else None
            )
            if why is not None:
                problems.append(RecordProblem(i, why))
                continue
        work.append(r)

    def generation_mask(j: int, encoding) -> None:
        work[j].hf = _generation_mask(encoding, work[j].generation or [], len(encoding.ids))

    full_ids, panicked = _encode(
        backend, [r.text for r in work], source_name, on_encoding=generation_mask if track else None
    )
    for j, why in panicked:
        problems.append(RecordProblem(work[j].index, why))
    encoded = [(r, ids) for r, ids in zip(work, full_ids, strict=True) if ids is not None]
    for r, ids in encoded:
        r.ids = ids
    work = [r for r, _ in encoded]
    if any(r.prefix_texts for r in work):
        failed = _prefix_lengths(work, markers, backend, source_name)
        problems.extend(RecordProblem(i, why) for i, why in failed.items())
        work = [r for r in work if r.index not in failed]

    lengths = np.full(len(records), -1, dtype=np.int64)
    ids_out: list[np.ndarray] = []
    mask_out: list[np.ndarray] = []
    for r in work:
        ids, generated = r.ids, r.hf
        if isinstance(generated, str):  # transformers fails mapping the generation spans: so does Bridge, any mode
            problems.append(RecordProblem(r.index, generated))
            continue
        if s.loss_mode == "full":
            mask = apply_loss_mode(np.zeros(ids.size, np.int8), ids, "full", None, skipped)
        else:
            assistant = _assistant_mask(r, ids, generated, bounds, encode)
            if assistant is None:
                problems.append(RecordProblem(r.index, _no_mask_reason(r.conversation, s.loss_mode)))
                continue
            mask = apply_loss_mode(assistant, ids, s.loss_mode, r.last_turn_start, skipped)
        lengths[r.index] = ids.size
        ids_out.append(ids.astype(np.int32))
        mask_out.append(mask)
    problems.sort(key=lambda p: p.index)
    return TokenBatch.built(ids_out, mask_out, lengths, np.zeros(len(records), bool)), lengths, problems


class _Record:
    """One conversation on its way: its renders, then the prefix lengths its loss mask needs."""

    def __init__(self, index: int, conversation: list[dict], tools):
        self.index, self.conversation, self.tools = index, conversation, tools
        self.text = ""  # the whole conversation rendered
        self.prefix_texts: dict[int, str] = {}  # messages rendered -> text (the whole conversation excluded)
        self.prefix_len: dict[int, int] = {}  # messages rendered -> common token prefix with the whole rendering
        self.turns: list[int] = [k for k, t in enumerate(conversation) if t.get("role") == ASSISTANT]
        self.last_turn_start: int | None = None
        self.ids = np.zeros(0, np.int64)  # the whole rendering's token ids, once encoded
        self.generation: list[tuple[int, int]] | None = None  # {% generation %} spans (characters), when tracked
        self.hf: np.ndarray | str | None = None  # Hugging Face's assistant mask from them, or why there is none

    def prefixes(self) -> list[int]:
        """How many messages to render for the loss mask: the conversation before and through each assistant turn
        (``_assistant_mask_from_conversation_turns``; the last turn's "before" is also
        ``_infer_final_assistant_start``'s)."""
        n = len(self.conversation)
        return sorted({k for k in self.turns if k > 0} | {k + 1 for k in self.turns if k + 1 < n})

    def spans(self, size: int) -> list[tuple[int, int]]:
        """(before, through) per assistant turn: common prefix lengths with the whole rendering."""
        n = len(self.conversation)
        return [(self.prefix_len[k] if k > 0 else 0, self.prefix_len[k + 1] if k + 1 < n else size) for k in self.turns]


def _assistant_mask(r: _Record, ids: np.ndarray, hf: np.ndarray | None, bounds, encode) -> np.ndarray | None:
    """``tokenize_chat_example``'s mask before its loss mode: with a generation mask (``hf``) and no turn markers
    Bridge knows, that mask; else ``build_assistant_loss_mask``: the turns first, the scan when they fail and no
    message carries a marker of its own; a generation mask with some loss keeps its spans and gains the turns' end
    markers, one without any gives way to the markers' mask if that has some. Also sets the last turn's start
    (``_infer_final_assistant_start``) where its prefix was rendered."""
    if r.turns:
        last = r.turns[-1]
        if last == 0 or last in r.prefix_len:
            r.last_turn_start = 0 if last == 0 else min(r.prefix_len[last], ids.size)
    if hf is not None and bounds is None:
        return hf

    def safe() -> bool:  # _conversation_contains_boundary_tokens is False
        payloads = [{k: v for k, v in turn.items() if k != "role"} for turn in r.conversation]
        payloads.append({"tools": r.tools} if r.tools is not None else {})
        return not contains_markers(payloads, encode, bounds)

    roles = [str(t.get("role")) for t in r.conversation]  # only which are ASSISTANT counts: str() keeps that
    if hf is not None and hf.any():  # build_assistant_loss_mask: boundary tokens added to the generation mask
        ends = mask_from_turns(ids, r.spans(ids.size), bounds, include_content=False)
        if ends is None and safe():
            ends = mask_from_scan(ids, bounds, roles, include_content=False)
        return hf if ends is None else np.maximum(hf, ends)
    # Bridge would next try the turns again through its own tokenizer wrapper, which renders the same ids
    mask = mask_from_turns(ids, r.spans(ids.size), bounds)
    if mask is None and safe():
        mask = mask_from_scan(ids, bounds, roles)
    if hf is not None:  # a generation mask without loss stays unless the markers found some
        return mask if mask is not None and mask.any() else hf
    return mask


def _terminal_probe(
    template: str,
    conversation: list[dict],
    tools,
    special_tokens: dict,
    track: bool,
    backend,
    source: str,
    prepared: tuple | None = None,
) -> str | None:
    """Why Bridge fails a record ending with an assistant turn where the whole render does not, or None.

    ``_chat_preprocess`` asks ``tokenize_chat_example`` for the final reply's start, which renders (and tokenizes)
    the conversation once more with that reply emptied (``_infer_terminal_assistant_content_start``). Nothing of
    that render is packed, but a template that fails on an empty reply, or a generation block left empty at the
    very start (transformers then asks for character -1), fails the record there."""
    empty = [*conversation[:-1], {**conversation[-1], "content": ""}]
    spans: list[tuple[int, int]] | None = [] if track else None
    # the whole conversation's prepared inputs with the last message prepared anew: the same inputs, half the work
    out = render_boxed(
        template, empty, tools, special_tokens, prefixes=[len(empty)], track=spans, emptied_last=prepared
    )
    if isinstance(out, RecordProblem):
        return (
            f"{out.reason} (with its last reply emptied, as Megatron-Bridge renders it to find where the reply starts)"
        )
    if spans and any(b == 0 for _, b in spans):
        encoding = native(source, "encoding", backend.encode, out[len(empty)], add_special_tokens=False)
        why = _generation_mask(encoding, spans, len(encoding.ids))
        if isinstance(why, str):
            return f"{why}, with its last reply emptied (as Megatron-Bridge renders it to find where the reply starts)"
    return None


def _generation_mask(encoding, spans: list[tuple[int, int]], size: int) -> np.ndarray | str:
    """Hugging Face's ``assistant_masks`` (``apply_chat_template(return_assistant_tokens_mask=True)`` in
    transformers/tokenization_utils_base.py): each generation span's tokens, from the token of its first
    character to that of its last (to the end where there is none), stopping at a span whose start has no token;
    or why transformers fails (an empty span at the very start asks for character -1)."""
    mask = np.zeros(size, np.int8)
    for a, b in spans:
        try:
            start = encoding.char_to_token(a)
            end = encoding.char_to_token(b - 1)
        except (OverflowError, ValueError, TypeError) as e:
            return f"the chat template's {{% generation %}} block cannot be mapped to tokens ({type(e).__name__})"
        if start is None:
            break
        mask[start : (end + 1 if end else size)] = 1
    return mask


def _no_mask_reason(conversation: list[dict], loss_mode: str) -> str:
    if not any(t.get("role") == ASSISTANT for t in conversation):
        return (
            f"no assistant turn: Megatron-Bridge cannot build the {loss_mode!r} loss mask (use loss_mode='full' "
            "to train on every token)"
        )
    return (
        "Megatron-Bridge cannot find the assistant turns' markers in the tokens (AssistantMaskBoundaryConfig did "
        "not match any loss-contributing spans)"
    )


def _marker_ids(backend) -> dict[str, int] | None:
    """The added tokens by their text, when every one is a marker such as ``<|eot_id|>``: ``<`` first, ``>`` last,
    neither inside, matched as written (not normalized, not single-word, special tokens not split). Then a
    marker's occurrence in a text is always that token, whatever follows, so a text cut just after one encodes
    to the whole text's tokens up to it. Otherwise None (every prefix is encoded)."""
    if getattr(backend, "encode_special_tokens", False):
        return None
    out: dict[str, int] = {}
    for token_id, added in backend.get_added_tokens_decoder().items():
        c = added.content
        inner = c[1:-1]
        if len(c) < 2 or c[0] != "<" or c[-1] != ">" or "<" in inner or ">" in inner or added.single_word:
            return None
        if added.normalized and backend.normalizer is not None:
            return None
        out[c] = token_id
    return out


def _prefix_tokens(prefix: str, whole: str, whole_ids: np.ndarray, markers: dict[str, int] | None) -> int | None:
    """How many of the whole text's tokens a prefix of it encodes to, without encoding it, or None when that
    cannot be known this way (see ``_marker_ids``).

        >>> _prefix_tokens("a<x>b<x>", "a<x>b<x>c", np.array([7, 1, 8, 1, 9]), {"<x>": 1})
        4
        >>> _prefix_tokens("a<x>b", "a<x>b<x>c", np.array([7, 1, 8, 1, 9]), {"<x>": 1}) is None
        True
    """
    if markers is None or not prefix.endswith(">") or not whole.startswith(prefix):
        return None
    marker = prefix[prefix.rfind("<") :]
    token_id = markers.get(marker)
    if token_id is None:
        return None
    hits = np.flatnonzero(whole_ids == token_id)
    count = prefix.count(marker)
    return int(hits[count - 1]) + 1 if 0 < count <= hits.size else None


def _prefix_lengths(work: list[_Record], markers, backend, source: str) -> dict[int, str]:
    """Fill each record's ``prefix_len``: by ``_prefix_tokens`` where it can, else by encoding the prefixes (one
    batch for all records) and comparing with the whole text's ids. Returns the records (by index) whose prefix
    the Rust library panicked on, with why."""
    todo: list[tuple[_Record, int]] = []
    for r in work:
        for m, text in r.prefix_texts.items():
            n = _prefix_tokens(text, r.text, r.ids, markers)
            if n is None:
                todo.append((r, m))
            else:
                r.prefix_len[m] = n
    encoded, panicked = _encode(backend, [r.prefix_texts[m] for r, m in todo], source)
    failed = {todo[j][0].index: why for j, why in panicked}
    for (r, m), ids in zip(todo, encoded, strict=True):
        if ids is not None:
            r.prefix_len[m] = common_prefix(ids, r.ids)
    return failed


def _encode(
    backend, texts: list[str], source: str, on_encoding=None
) -> tuple[list[np.ndarray | None], list[tuple[int, str]]]:
    """Token ids of rendered texts, without special tokens (as ``apply_chat_template(tokenize=True)``); a batch the
    Rust library panics on is encoded again text by text, and each text it panics on is None with its reason.
    ``on_encoding(j, encoding)``: each text's encoding with its offsets, as it is made (only then are offsets
    computed, and encodings are never all held)."""
    out: list[np.ndarray | None] = []
    panicked: list[tuple[int, str]] = []
    batch = backend.encode_batch_fast if on_encoding is None else backend.encode_batch
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = texts[start : start + ENCODE_CHUNK]
        try:
            encodings = native(source, "encoding", batch, chunk, add_special_tokens=False)
            for j, e in enumerate(encodings, start):
                out.append(np.asarray(e.ids, dtype=np.int64))
                if on_encoding is not None:
                    on_encoding(j, e)
            continue
        except TokenizerPanic:
            pass
        for j, text in enumerate(chunk, start):
            try:
                e = native(source, "encoding", backend.encode, text, add_special_tokens=False)
            except TokenizerPanic as err:
                out.append(None)
                panicked.append((j, err.what))
                continue
            out.append(np.asarray(e.ids, dtype=np.int64))
            if on_encoding is not None:
                on_encoding(j, e)
    return out, panicked
