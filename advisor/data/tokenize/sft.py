"""Token lengths of prompt/answer SFT records, exactly as Megatron-Bridge 0.6.2's ``GPTSFTDataset`` builds them.

Alternatives: a prompt template (``prompt_template``, Bridge's default for local JSONL) or prompt-completion
preprocessing (``prompt_completion=PromptCompletion(...)``); chat records are counted in ``tokenize.chat``.

Each length is ``len(input_ids)`` of the example ``GPTSFTDataset._process_example`` returns, after its own
truncation to ``max_seq_length`` (megatron/bridge/data/datasets/gpt_sft.py). Offline packing then counts
``len(input_ids) - 1`` tokens per sample (``create_hist`` in megatron/bridge/data/packing/algorithms.py: input and
label are each one shorter) and skips or cuts samples longer than the pack; those steps are not done here.

    >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
    >>> tok = load_tokenizer(_example_folder())  # its post-processor puts <s> before every encoded text
    >>> lengths, problems = sft_lengths([{"input": "Hello", "output": "world"}, {"input": "x"}], tok)
    >>> lengths.tolist()  # <s> Hello | <s> world | eos
    [5, -1]
    >>> problems
    [RecordProblem(index=1, reason="no 'output' field (the prompt template needs input, output)")]
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from advisor.data.tokenize.chat_mask import skipped_token_ids
from advisor.data.tokenize.sequences import TokenBatch
from advisor.data.tokenize.tokenizer import Tokenizer
from advisor.errors import InputError, excerpt

SETTINGS = "SftSettings"
CONVERSATION_KEYS = ("messages", "conversation", "conversations")  # sft_processing._CONVERSATION_KEYS


@dataclass(frozen=True)
class RecordProblem:
    """A record Megatron-Bridge cannot process (its length is -1), and why, naming the key(s) at fault."""

    index: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class PromptCompletion:
    """Megatron-Bridge 0.6.2's ``PromptCompletionSFTPreprocessingConfig`` (megatron/bridge/data/sft_processing.py),
    with its defaults; ``loss_mode`` changes the loss mask only. ``prompt_template`` may hold only ``{prompt}``.

        >>> PromptCompletion(prompt_column="question", completion_column="answer", separator=" ").prompt_template
        '{prompt}'
    """

    prompt_column: str = "prompt"
    completion_column: str = "completion"
    prompt_template: str = "{prompt}"
    separator: str = ""
    strip_whitespace: bool = True
    add_bos: bool = False
    add_sep: bool = False
    add_eos: bool = True
    truncation_method: Literal["left", "right"] = "right"
    loss_mode: Literal["completion", "full"] = "completion"  # the mask only (prepare): the prompt masked, or not

    def __post_init__(self):
        # PromptCompletionSFTPreprocessingConfig.validate
        where = "prompt_completion"
        for name in ("prompt_column", "completion_column"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InputError(SETTINGS, f"{where}.{name}", f"must be a non-empty string, not {excerpt(value)}")
        if self.prompt_column == self.completion_column:
            raise InputError(SETTINGS, where, "prompt_column and completion_column must be different")
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.prompt_template) if f is not None]
            self.prompt_template.format(prompt="")
        except (AttributeError, IndexError, KeyError, ValueError):
            fields = None
        if not fields or any(f != "prompt" for f in fields):
            raise InputError(
                SETTINGS,
                f"{where}.prompt_template",
                f"must contain {{prompt}} and no other placeholder: {excerpt(self.prompt_template)}",
            )
        if not isinstance(self.separator, str):
            raise InputError(SETTINGS, f"{where}.separator", f"must be a string, not {excerpt(self.separator)}")
        if self.truncation_method not in ("left", "right"):
            raise InputError(
                SETTINGS,
                f"{where}.truncation_method",
                f"must be 'left' or 'right', not {excerpt(self.truncation_method)}",
            )
        if self.loss_mode not in ("completion", "full"):
            raise InputError(
                SETTINGS, f"{where}.loss_mode", f"must be 'completion' or 'full', not {excerpt(self.loss_mode)}"
            )


@dataclass(frozen=True, kw_only=True)
class SftSettings:
    """The ``GPTSFTDataset`` options that change a sample's length, with Megatron-Bridge 0.6.2's defaults.

    The prompt-template defaults are those ``build_gpt_sft_split`` (megatron/bridge/data/builders/gpt_sft.py)
    passes for local JSONL data: ``"{input} {output}"``, label ``output``, truncation of ``input``, EOS only
    (``GPTSFTDataset``'s own signature has no usable template: ``None``, ``"answer"``, ``"text"``).
    ``max_seq_length`` is ``GPTSFTDataset``'s 1024; the builder passes ``seq_length``, or the pack size when it
    builds the samples to pack (plus one when it pads to a multiple, ``pad_seq_to_mult > 1``).
    ``truncation_field`` may name several fields, comma-separated. ``is_test`` (offline packing sets it) lets a
    record lack its label. ``prompt_completion`` switches to the prompt-completion path: then only it,
    ``max_seq_length``, ``virtual_tokens``, ``tokens_to_generate`` and ``is_test`` count.

        >>> SftSettings(prompt_template="Q: {question} A: {answer}", label_key="answer")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        advisor.errors.InputError: SftSettings, truncation_field: 'input' is not a field of the prompt template ...
        >>> SftSettings(prompt_template="{output} {input}")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        advisor.errors.InputError: SftSettings, prompt_template: '{output}' (the label_key) must come last, ...
    """

    prompt_template: str = "{input} {output}"
    label_key: str = "output"
    truncation_field: str | None = "input"
    add_bos: bool = False
    add_eos: bool = True
    add_sep: bool = False
    max_seq_length: int = 1024
    truncation_method: Literal["left", "right"] = "right"
    virtual_tokens: int = 0
    tokens_to_generate: int = 0
    is_test: bool = False
    prompt_completion: PromptCompletion | None = None

    def __post_init__(self):
        for name in ("max_seq_length", "virtual_tokens", "tokens_to_generate"):
            value = getattr(self, name)
            low = 1 if name == "max_seq_length" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(SETTINGS, name, f"must be a whole number of at least {low}, not {excerpt(value)}")
        if self.truncation_method not in ("left", "right"):
            raise InputError(
                SETTINGS, "truncation_method", f"must be 'left' or 'right', not {excerpt(self.truncation_method)}"
            )
        if self.prompt_completion is None:
            _Template.of(self)  # the checks GPTSFTDataset makes when it is built
        elif (
            self.virtual_tokens
            + self.prompt_completion.add_bos
            + self.prompt_completion.add_sep
            + self.prompt_completion.add_eos
            > self.max_seq_length
        ):
            raise InputError(SETTINGS, "max_seq_length", "too short for the requested special tokens")


@dataclass(frozen=True)
class _Template:
    """A prompt template as ``GPTSFTDataset._maybe_validate_prompt_template`` prepares it."""

    text: str
    keys: tuple[str, ...]
    truncation_fields: tuple[str, ...]

    @classmethod
    def of(cls, s: SftSettings) -> _Template:
        if not isinstance(s.prompt_template, str) or not s.prompt_template:
            raise InputError(
                SETTINGS, "prompt_template", f"must be a non-empty string, not {excerpt(s.prompt_template)}"
            )
        try:  # "When providing things like newlines in the prompt template via the CLI, they are escaped."
            text = s.prompt_template.encode("utf-8").decode("unicode_escape")
        except UnicodeDecodeError as e:
            raise InputError(
                SETTINGS,
                "prompt_template",
                f"Megatron-Bridge cannot unescape it ({e.reason}): {excerpt(s.prompt_template)}",
            ) from e
        keys = re.findall(r"{(.*?)}", text)
        label = f"{{{s.label_key}}}"
        if text[-len(label) :] != label:
            raise InputError(
                SETTINGS,
                "prompt_template",
                f"{label!r} (the label_key) must come last, as Megatron-Bridge requires: {excerpt(s.prompt_template)}",
            )
        fields = s.truncation_field.split(",") if s.truncation_field is not None else []
        if fields and keys[0] == "input" and fields[0] == "context":  # "Legacy checkpoints": context means input
            fields[0] = "input"
        unknown = sorted(set(fields) - set(keys))
        if unknown:
            verb = "is not a field" if len(unknown) == 1 else "are not fields"
            raise InputError(
                SETTINGS,
                "truncation_field",
                f"{', '.join(map(repr, unknown))} {verb} of the prompt template ({', '.join(dict.fromkeys(keys))})",
            )
        return cls(text, tuple(keys), tuple(fields))

    def parts(self, space_sensitive: bool) -> list[tuple[str, str | None, str]]:
        """``GPTSFTDataset._separate_template``, values left out: (leading spaces, field or None, literal text)."""
        split = [p for p in re.split("( *?{.+?})", self.text) if len(p) > 0]
        if not space_sensitive:  # a tokenizer that is not space-sensitive drops one leading space
            split = [p[1:] if p[0] == " " else p for p in split]
        placeholders = {f"{{{k}}}": k for k in self.keys}
        out = []
        for p in split:
            bare = p.lstrip(" ")
            key = placeholders.get(bare)
            out.append((" " * (len(p) - len(bare)), key, p if key is None else ""))
        return out


def sft_lengths(
    records: Sequence[dict], tok: Tokenizer, settings: SftSettings | None = None
) -> tuple[np.ndarray, list[RecordProblem]]:
    """One ``len(input_ids)`` per record as Megatron-Bridge 0.6.2 computes it, -1 where it cannot process one.

    All the pieces of all records are encoded together (``Tokenizer.mb_lengths``); truncation needs only counts.

        >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
        >>> tok = load_tokenizer(_example_folder())
        >>> sft_lengths([{"input": "x y x y x", "output": "Hello"}], tok, SftSettings(max_seq_length=4))[0].tolist()
        [4]
    """
    s = settings if settings is not None else SftSettings()
    if s.prompt_completion is not None:
        return _prompt_completion_lengths(records, tok, s, s.prompt_completion)
    return _template_lengths(records, tok, s)


def _template_lengths(
    records: Sequence[dict], tok: Tokenizer, s: SftSettings
) -> tuple[np.ndarray, list[RecordProblem]]:
    template = _Template.of(s)
    parts = template.parts(tok.space_sensitive)
    literals = sorted({lit for _, key, lit in parts if key is None})
    literal_len = dict(zip(literals, tok.mb_lengths(literals).tolist(), strict=True))
    lengths, problems, pieces, good = _template_records(records, template, parts, s)
    counts = iter(tok.mb_lengths(pieces).tolist())
    keys = [key if key is not None else "<template>" for _, key, _ in parts]
    for i in good:
        lens = [next(counts) if key is not None else literal_len[lit] for _, key, lit in parts]
        try:
            lengths[i] = _truncated_total(lens, keys, template.truncation_fields, s)
        except IndexError:
            problems.append(
                RecordProblem(
                    i,
                    "Megatron-Bridge fails (IndexError in _multiple_truncation): a "
                    "truncation field appears more than once in the prompt template",
                )
            )
    problems.sort(key=lambda p: p.index)
    return lengths, problems


def _template_records(
    records: Sequence[dict], template: _Template, parts: list, s: SftSettings
) -> tuple[np.ndarray, list[RecordProblem], list[str], list[int]]:
    """The value pieces (leading spaces kept) of every record the template can fill, in order; lengths -1 and a
    problem for each other record."""
    needed = list(dict.fromkeys(template.keys))
    lengths = np.full(len(records), -1, dtype=np.int64)
    problems: list[RecordProblem] = []
    pieces: list[str] = []
    good: list[int] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            problems.append(RecordProblem(i, f"not a JSON object but {type(rec).__name__}"))
            continue
        # GPTSFTDataset._process_example: example[c].strip(" ") for every template key (KeyError when missing,
        # except the label with is_test, which counts as empty)
        missing = [k for k in needed if k not in rec and not (s.is_test and k == s.label_key)]
        if missing:
            noun = "field" if len(missing) == 1 else "fields"
            problems.append(
                RecordProblem(
                    i, f"no {', '.join(map(repr, missing))} {noun} (the prompt template needs {', '.join(needed)})"
                )
            )
            continue
        wrong = [k for k in needed if k in rec and not isinstance(rec[k], str)]
        if wrong:
            problems.append(RecordProblem(i, "; ".join(f"{k!r} is {_kind(rec[k])}, not text" for k in wrong)))
            continue
        values = {k: rec[k].strip(" ") if k in rec else "" for k in needed}
        pieces.extend(left + values[key] for left, key, _ in parts if key is not None)
        good.append(i)
    return lengths, problems, pieces, good


def _truncated_total(lens: list[int], keys: list[str], fields: tuple[str, ...], s: SftSettings) -> int:
    """``GPTSFTDataset._multiple_truncation`` then ``_process_example``'s additions, on token counts: the total.

    >>> _truncated_total([10, 3, 5], ["input", "<template>", "output"], ("input",), SftSettings(max_seq_length=12))
    12
    """
    _cut(lens, keys, fields, s)
    return s.virtual_tokens + s.add_bos + sum(lens[:-1]) + s.add_sep + lens[-1] + s.add_eos


def _cut(lens: list[int], keys: list[str], fields: tuple[str, ...], s: SftSettings) -> bool:
    """``GPTSFTDataset._multiple_truncation`` on token counts: ``lens`` (one per template piece) is cut in place;
    returns whether anything was cut.

    The label is the last piece. Over ``max_seq_length``, the excess is shared out between the truncation
    fields (any remainder to the first ones); whatever they cannot give is then cut from the pieces in order,
    first to last for "left", last (the label) to first for "right", which also reserves
    ``min(label, tokens_to_generate)``. Then BOS, virtual tokens and SEP go before the answer, EOS after.

        >>> lens = [10, 3, 5]
        >>> _cut(lens, ["input", "<template>", "output"], ("input",), SftSettings(max_seq_length=12)), lens
        (True, [3, 3, 5])
    """
    label0 = lens[-1]
    total = s.virtual_tokens + sum(lens[:-1]) + max(label0, s.tokens_to_generate) + s.add_bos + s.add_sep + s.add_eos
    if total <= s.max_seq_length:
        return False
    excess = total - s.max_seq_length
    n = len(fields)
    if n > 0:
        shares = [excess // n + (1 if j < excess % n else 0) for j in range(n)[::-1]]
        for j, key in enumerate(keys):
            if key in fields:
                cut = min(shares.pop(), lens[j])  # IndexError when a field repeats, as in Megatron-Bridge
                excess -= cut
                lens[j] -= cut
    if excess > 0:
        if s.truncation_method == "left":
            order = range(len(lens))
        else:
            order = range(len(lens) - 1, -1, -1)
            excess += min(label0, s.tokens_to_generate)
        for j in order:
            if lens[j] >= excess:
                lens[j] -= excess
                break
            excess -= lens[j]
            lens[j] = 0
    return True


def sft_tokens(
    records: Sequence[dict], tok: Tokenizer, settings: SftSettings | None = None
) -> tuple[TokenBatch, np.ndarray, list[RecordProblem]]:
    """Each record's ``input_ids`` as ``GPTSFTDataset._process_example`` builds them, with the mask offline packing
    derives from ``answer_start_idx`` (mask kind ``answer_start``: ``idx >= answer_start_idx - 1``, see
    ``sequences``), and the lengths (-1 where a record cannot be built, as in ``sft_lengths``).

    The pieces are ``sft_lengths``' pieces with their ids kept: each cut piece keeps its first tokens ("right")
    or its last ("left", ``GPTSFTDataset._truncation``); then BOS, virtual tokens (EOS ids: ``_process_example``
    puts them before the context first and BOS before them after), the context, the answer and EOS.

        >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
        >>> tok = load_tokenizer(_example_folder())
        >>> batch, lengths, _ = sft_tokens([{"input": "Hello", "output": "world"}], tok)
        >>> batch.ids.tolist(), batch.mask.tolist(), lengths.tolist()  # <s> Hello | <s> world | eos
        ([0, 3, 0, 4, 1], [0, 1, 1, 1, 1], [5])
    """
    s = settings if settings is not None else SftSettings()
    if s.prompt_completion is not None:
        return _prompt_completion_tokens(records, tok, s, s.prompt_completion)
    if s.add_sep:
        # build_gpt_sft_split passes no sep_id, so GPTSFTDataset's is None: Bridge would put None into input_ids
        raise InputError(
            SETTINGS,
            "add_sep",
            "Megatron-Bridge 0.6.2's builder gives GPTSFTDataset no sep_id, so "
            "add_sep puts None into every sample; leave it off",
        )
    eos = tok.special_id("eos")
    bos = tok.special_id("bos")
    if (s.add_eos or s.virtual_tokens) and eos is None:
        raise InputError(str(tok.path), None, "the tokenizer has no EOS token, which add_eos (and virtual tokens) need")
    if s.add_bos and bos is None:
        raise InputError(str(tok.path), None, "the tokenizer has no BOS token, which add_bos needs")
    template = _Template.of(s)
    parts = template.parts(tok.space_sensitive)
    literals = sorted({lit for _, key, lit in parts if key is None})
    lit_flat, lit_off = tok.mb_ids(literals)
    literal_ids = {lit: lit_flat[lit_off[j] : lit_off[j + 1]] for j, lit in enumerate(literals)}
    lengths, problems, pieces, good = _template_records(records, template, parts, s)
    flat, offsets = tok.mb_ids(pieces)
    keys = [key if key is not None else "<template>" for _, key, _ in parts]
    per_record = sum(1 for _, key, _ in parts if key is not None)
    head = ([bos] if s.add_bos else []) + [eos] * s.virtual_tokens  # BOS goes before the virtual tokens
    tail = [eos] if s.add_eos else []
    ids_out: list[np.ndarray] = []
    mask_out: list[np.ndarray] = []
    truncated = np.zeros(len(records), dtype=bool)
    for n, i in enumerate(good):
        at = n * per_record
        piece_ids = []
        for _, key, lit in parts:
            if key is None:
                piece_ids.append(literal_ids[lit])
            else:
                piece_ids.append(flat[offsets[at] : offsets[at + 1]])
                at += 1
        lens = [p.size for p in piece_ids]
        try:
            truncated[i] = _cut(lens, keys, template.truncation_fields, s)
        except IndexError:
            problems.append(
                RecordProblem(
                    i,
                    "Megatron-Bridge fails (IndexError in _multiple_truncation): a "
                    "truncation field appears more than once in the prompt template",
                )
            )
            continue
        kept = [
            p if k == p.size else (p[p.size - k :] if s.truncation_method == "left" else p[:k]) if k else p[:0]
            for p, k in zip(piece_ids, lens, strict=True)
        ]
        context = np.concatenate([np.asarray(head, np.int32)] + kept[:-1]).astype(np.int32, copy=False)
        ids = np.concatenate([context, kept[-1], np.asarray(tail, np.int32)]).astype(np.int32, copy=False)
        # fill_packing_strategy: idx >= answer_start_idx - 1, answer_start_idx = len(context_ids)
        mask = (np.arange(ids.size) >= context.size - 1).astype(np.int8)
        ids_out.append(ids)
        mask_out.append(mask)
        lengths[i] = ids.size
    problems.sort(key=lambda p: p.index)
    return TokenBatch.built(ids_out, mask_out, lengths, truncated), lengths, problems


def _prompt_completion_lengths(
    records: Sequence[dict], tok: Tokenizer, s: SftSettings, pc: PromptCompletion
) -> tuple[np.ndarray, list[RecordProblem]]:
    """``tokenize_prompt_completion_example`` (megatron/bridge/data/sft_processing.py), on token counts: prompt
    and completion encoded without special tokens, BOS + virtual tokens + prompt + SEP, then completion + EOS."""
    _check_prompt_completion_tokenizer(tok, pc)
    texts, good, problems = _prompt_completion_texts(records, tok, s, pc)
    lengths = np.full(len(records), -1, dtype=np.int64)
    counts = tok.lengths(texts, special=False).tolist()
    special = _special_count(s, pc)
    for n, i in enumerate(good):
        p, c = _prompt_completion_cut(counts[2 * n], counts[2 * n + 1], s, pc)
        total = special + p + c
        if total < 2:
            problems.append(RecordProblem(i, _too_short(total)))
        else:
            lengths[i] = total
    problems.sort(key=lambda q: q.index)
    return lengths, problems


def _prompt_completion_tokens(
    records: Sequence[dict], tok: Tokenizer, s: SftSettings, pc: PromptCompletion
) -> tuple[TokenBatch, np.ndarray, list[RecordProblem]]:
    """``tokenize_prompt_completion_example`` with the ids kept: ``[BOS] + virtual tokens (EOS ids) + prompt +
    [SEP]`` as the context, ``completion + [EOS]`` as the target, cut as ``_prompt_completion_lengths`` counts
    (a cut prompt or completion keeps its first tokens with ``right``, its last with ``left``). Its loss mask is
    the example's own ``loss_mask`` (mask kind ``loss_mask``, which packing rolls by one): 0 over the context and
    1 over the target with ``loss_mode`` ``completion``, 1 everywhere with ``full``; the tokenizer's pad-like added
    tokens 0 either way (``extract_skipped_token_ids``)."""
    _check_prompt_completion_tokenizer(tok, pc)
    bos = tok.special_id("bos") if pc.add_bos else None
    sep = tok.special_id("sep") if pc.add_sep else None
    eos = tok.special_id("eos")
    if (pc.add_eos or s.virtual_tokens) and eos is None:
        raise InputError(str(tok.path), None, "the tokenizer has no EOS token, which add_eos (and virtual tokens) need")
    skipped = skipped_token_ids(tok.transformers_tokenizer())
    texts, good, problems = _prompt_completion_texts(records, tok, s, pc)
    flat, offsets = tok.ids(texts, special=False)
    head = np.asarray(([bos] if bos is not None else []) + [eos] * s.virtual_tokens, np.int32)
    sep_ids = np.asarray([sep] if sep is not None else [], np.int32)
    tail = np.asarray([eos] if pc.add_eos else [], np.int32)
    ids_out: list[np.ndarray] = []
    mask_out: list[np.ndarray] = []
    lengths = np.full(len(records), -1, dtype=np.int64)
    truncated = np.zeros(len(records), dtype=bool)
    for n, i in enumerate(good):
        prompt = flat[offsets[2 * n] : offsets[2 * n + 1]]
        completion = flat[offsets[2 * n + 1] : offsets[2 * n + 2]]
        p, c = _prompt_completion_cut(prompt.size, completion.size, s, pc)
        cut = p < prompt.size or c < completion.size
        prompt = prompt[prompt.size - p :] if pc.truncation_method == "left" else prompt[:p]
        completion = completion[completion.size - c :] if pc.truncation_method == "left" else completion[:c]
        context = np.concatenate([head, prompt, sep_ids])
        ids = np.concatenate([context, completion, tail]).astype(np.int32, copy=False)
        if ids.size < 2:
            problems.append(RecordProblem(i, _too_short(int(ids.size))))
            continue
        mask = (np.arange(ids.size) >= (context.size if pc.loss_mode == "completion" else 0)).astype(np.int8)
        if skipped.size:
            mask[np.isin(ids, skipped)] = 0
        ids_out.append(ids)
        mask_out.append(mask)
        lengths[i] = ids.size
        truncated[i] = cut  # counted for the records built only
    problems.sort(key=lambda q: q.index)
    return TokenBatch.built(ids_out, mask_out, lengths, truncated), lengths, problems


def _check_prompt_completion_tokenizer(tok: Tokenizer, pc: PromptCompletion) -> None:
    if tok.kind != "huggingface":
        raise InputError(
            str(tok.path),
            None,
            "Megatron-Bridge 0.6.2's prompt-completion preprocessing cannot "
            "encode with a SentencePiece model (it calls encode(text, add_special_tokens=False))",
        )
    for flag, present, token in (
        (pc.add_bos, tok.has_bos, "BOS"),
        (pc.add_sep, tok.has_sep, "SEP"),
        (pc.add_eos, tok.has_eos, "EOS"),
    ):
        if flag and not present:
            raise InputError(
                str(tok.path),
                None,
                f"prompt-completion preprocessing requested {token}, but the tokenizer has no {token} token",
            )


def _prompt_completion_texts(
    records: Sequence[dict], tok: Tokenizer, s: SftSettings, pc: PromptCompletion
) -> tuple[list[str], list[int], list[RecordProblem]]:
    """Two texts per record Bridge can build (the rendered prompt, then the separator and the completion), those
    records' indices, and a problem for each other record."""
    separator = pc.separator
    if separator.startswith(" ") and not tok.space_sensitive:
        separator = separator[1:]  # the split-template rule: a space-insensitive tokenizer drops one space
    problems: list[RecordProblem] = []
    texts: list[str] = []
    good: list[int] = []
    for i, rec in enumerate(records):
        pair = _prompt_completion_pair(rec, pc, s.is_test)
        if isinstance(pair, str):
            problems.append(RecordProblem(i, pair))
            continue
        prompt, completion = pair
        if pc.strip_whitespace:
            prompt, completion = prompt.strip(" "), completion.strip(" ")
        texts += [pc.prompt_template.format(prompt=prompt), separator + completion]
        good.append(i)
    return texts, good, problems


def _special_count(s: SftSettings, pc: PromptCompletion) -> int:
    return s.virtual_tokens + pc.add_bos + pc.add_sep + pc.add_eos


def _prompt_completion_cut(p: int, c: int, s: SftSettings, pc: PromptCompletion) -> tuple[int, int]:
    """The prompt's and the completion's tokens kept under ``max_seq_length``: the prompt gives first, then the
    completion, keeping Bridge's generation reserve (``tokens_to_generate``) when it is cut from the right.

        >>> pc = PromptCompletion(); s = SftSettings(prompt_completion=pc, max_seq_length=10)
        >>> [_prompt_completion_cut(p, c, s, pc) for p, c in ((6, 3), (12, 3), (2, 20))]
        [(6, 3), (6, 3), (0, 9)]
    """
    overflow = p + max(c, s.tokens_to_generate) - (s.max_seq_length - _special_count(s, pc))
    if overflow > 0:
        cut = min(p, overflow)
        p -= cut
        overflow -= cut
    if overflow > 0:
        if pc.truncation_method == "right":
            overflow += min(c, s.tokens_to_generate)  # the generation reserve, as GPTSFTDataset keeps it
        c = max(0, c - overflow)
    return p, c


def _too_short(total: int) -> str:
    return f"only {total} token(s): Megatron-Bridge needs at least two for next-token loss"


def _prompt_completion_pair(rec, pc: PromptCompletion, is_test: bool) -> tuple[str, str] | str:
    """``normalize_sft_example`` for prompt-completion rows: the two texts, or why there are none."""
    if not isinstance(rec, dict):
        return f"not a JSON object but {type(rec).__name__}"
    row = dict(rec)
    if is_test and pc.prompt_column in row and pc.completion_column not in row:
        row[pc.completion_column] = ""  # allow_missing_completion
    canonical = None
    if "prompt" in row and "completion" in row:
        canonical = row["prompt"], row["completion"]
        if not all(isinstance(v, str) for v in canonical):
            return "'prompt' and 'completion' must both be text (Megatron-Bridge reads them whenever both exist)"
    if any(row.get(k) is not None for k in CONVERSATION_KEYS):
        return (
            f"a conversation ({', '.join(repr(k) for k in CONVERSATION_KEYS if row.get(k) is not None)}): "
            "prompt-completion preprocessing needs paired text columns"
        )
    if pc.prompt_column in row and pc.completion_column in row:
        pair = row[pc.prompt_column], row[pc.completion_column]
    elif canonical is not None:
        pair = canonical
    else:
        missing = [k for k in (pc.prompt_column, pc.completion_column) if k not in row]
        noun = "field" if len(missing) == 1 else "fields"
        return (
            f"no {', '.join(map(repr, missing))} {noun} (prompt-completion preprocessing needs "
            f"{pc.prompt_column}, {pc.completion_column})"
        )
    wrong = [k for k, v in zip((pc.prompt_column, pc.completion_column), pair, strict=True) if not isinstance(v, str)]
    if wrong:
        return "; ".join(f"{k!r} is {_kind(row[k] if k in row else None)}, not text" for k in wrong)
    return pair


def _kind(value) -> str:
    return {
        type(None): "null",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
