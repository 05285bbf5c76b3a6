"""A conversation's loss mask over its token ids, exactly as Megatron-Bridge 0.6.2 builds it for a chat template
without a ``{% generation %}`` block (megatron/bridge/data/conversation_processing.py).

Alternatives: Hugging Face's ``return_assistant_tokens_mask`` (needs a ``{% generation %}`` block, which few
templates have, and is not built here: ``chat_tokens`` refuses such templates for assistant-only loss), or a
heuristic scan for turn markers. Megatron-Bridge uses the markers it knows for the template
(``infer_assistant_mask_boundary_config``): first per assistant turn, located through renders of the
conversation's prefixes (``_assistant_mask_from_conversation_turns``), and when that fails, by scanning the ids
for the markers alone (``_assistant_mask_from_boundary_config``), only when no message carries a marker itself
(``_conversation_contains_boundary_tokens``). ``loss_mode`` then keeps every assistant token, those of the last
assistant turn, or all tokens (``apply_chat_loss_mode``), and the tokenizer's padding-like special tokens never
count (``extract_skipped_token_ids`` in megatron/bridge/data/token_utils.py).

Everything here works on token id arrays; rendering and encoding are ``chat_tokens``' job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# conversation_processing.infer_assistant_mask_boundary_config's candidates, in its order: the markers that must
# all be in the template, the assistant turn's start and end text, the end's fallbacks, the other roles' starts
_ROLES = ("system", "developer", "user", "tool")
CANDIDATES: tuple[tuple[tuple[str, ...], str, str, tuple[str, ...], dict[str, str]], ...] = (
    (
        ("<|im_start|>assistant", "<|im_end|>"),
        "<|im_start|>assistant\n",
        "<|im_end|>\n",
        ("<|im_end|>",),
        {role: f"<|im_start|>{role}\n" for role in _ROLES},
    ),
    (
        ("<|im_assistant|>", "<|im_user|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>"),
        "<|im_assistant|>assistant<|im_middle|>",
        "<|im_end|>",
        (),
        {"system": "<|im_system|>system<|im_middle|>", "user": "<|im_user|>user<|im_middle|>"},
    ),
    (("<|turn>model", "<turn|>"), "<|turn>model\n", "<turn|>", (), {}),
    (("<start_of_turn>model", "<end_of_turn>"), "<start_of_turn>model\n", "<end_of_turn>", (), {}),
    (
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        (),
        {role: f"<|start_header_id|>{role}<|end_header_id|>\n\n" for role in _ROLES},
    ),
    (
        ("<|start|>", "<|channel|>", "<|message|>"),
        "<|start|>assistant",
        "<|return|>",
        ("<|end|>", "<|call|>"),
        {role: f"<|start|>{role}" for role in _ROLES},
    ),
)
# token_utils.PAD_TOKENS: added tokens by these names never carry loss
PAD_TOKENS = frozenset(
    {
        "<|im_start|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
        "<|image_pad|>",
        "<|video_pad|>",
        "<|AUDIO|>",
        "<|audio_bos|>",
        "<|audio_eos|>",
        "<image>",
        "<pad>",
        "<|begin_of_text|>",
        "<|finetune_right_pad_id|>",
        "<|step_id|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|python_tag|>",
        "<|image|>",
        "<image_soft_token>",
        "<audio_soft_token>",
        "<start_of_audio>",
        "<start_of_image>",
        "<end_of_audio>",
        "<end_of_image>",
    }
)
ASSISTANT = "assistant"


def skipped_token_ids(hf) -> np.ndarray:
    """The added tokens that never carry loss (``extract_skipped_token_ids`` in megatron/bridge/data/token_utils.py:
    those of transformers' ``added_tokens_decoder`` named in ``PAD_TOKENS``), sorted."""
    return np.array(sorted({i for i, t in hf.added_tokens_decoder.items() if str(t) in PAD_TOKENS}), np.int64)


@dataclass(frozen=True)
class Boundaries:
    """``AssistantMaskBoundaryConfig`` as ``infer_assistant_mask_boundary_config`` builds it: each role's start
    tokens, one end sequence for every role and its fallbacks; loss on the assistant, its end tokens included,
    no trimming."""

    starts: dict[str, tuple[int, ...]]
    end: tuple[int, ...]
    end_variants: tuple[tuple[int, ...], ...]

    def sequences(self) -> list[tuple[int, ...]]:
        """Every marker sequence (what ``_conversation_contains_boundary_tokens`` looks for in the messages)."""
        return [*self.starts.values(), *([self.end] * len(self.starts)), *self.end_variants]


def boundaries(template: str | None, encode: Callable[[str], list[int]]) -> Boundaries | None:
    """The boundaries Megatron-Bridge infers from the template text, or None. ``encode`` is
    ``tokenizer.encode(text, add_special_tokens=False)``."""
    if not isinstance(template, str) or not template:
        return None
    for required, start, end, fallbacks, others in CANDIDATES:
        if not all(marker in template for marker in required):
            continue
        start_ids, end_ids = encode(start), encode(end)
        variants = tuple(tuple(v) for v in (encode(f) for f in fallbacks) if v)
        if start_ids and end_ids:
            starts = {ASSISTANT: tuple(start_ids)}
            starts.update({role: tuple(ids) for role, marker in others.items() if (ids := encode(marker))})
            return Boundaries(starts=starts, end=tuple(end_ids), end_variants=variants)
    return None


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """``_common_token_prefix_length``: how many leading ids two sequences share.

    >>> common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4, 5])), common_prefix(np.array([1]), np.array([1, 2]))
    (2, 1)
    """
    n = min(a.size, b.size)
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def find_span(ids: np.ndarray, pattern: Sequence[int], start: int = 0) -> tuple[int, int]:
    """``find_token_span``: the first ``[start, end)`` at or after ``start`` where ``pattern`` occurs, or (-1, -1).

    >>> find_span(np.array([5, 1, 2, 1, 2]), [1, 2], 2)
    (3, 5)
    """
    m = len(pattern)
    if m == 0 or start >= ids.size or ids.size - start < m:
        return -1, -1
    window = ids[start:]
    hits = np.flatnonzero(window[: window.size - m + 1] == pattern[0])
    for h in hits:
        if m == 1 or np.array_equal(window[h : h + m], pattern):
            return start + int(h), start + int(h) + m
    return -1, -1


def _ends(ids: np.ndarray, patterns: list[tuple[int, ...]], search: int, limit: int) -> list[tuple[int, int, int]]:
    """Every (end_start, priority, after_end) of the end patterns in ``[search, limit)``, as both Bridge scans
    collect them (the next search starts one past each hit)."""
    found = []
    for priority, pattern in enumerate(patterns):
        if not pattern:
            continue
        at = search
        while at < limit:
            s, e = find_span(ids, pattern, at)
            if s < 0 or e > limit:
                break
            found.append((s, priority, e))
            at = s + 1
    return found


def mask_from_turns(
    ids: np.ndarray, turns: Sequence[tuple[int, int]], b: Boundaries, include_content: bool = True
) -> np.ndarray | None:
    """``_assistant_mask_from_conversation_turns``: for each assistant turn, ``(before, through)`` are the
    common-prefix lengths of the renders of the conversation before and through that turn with the whole
    render; the turn's start marker is the first after ``before`` and its end the last end marker before
    ``through``. None where Bridge gives up (then the scan may be tried). ``include_content=False``: the end
    markers only (what Bridge adds to a ``{% generation %}`` mask)."""
    if not turns:
        return None
    start_tokens = b.starts.get(ASSISTANT)
    patterns = [b.end, *b.end_variants]
    mask = np.zeros(ids.size, np.int8)
    for before, through in turns:
        if not start_tokens or not any(patterns):
            return None
        if before >= through:
            return None
        role_start, content_start = find_span(ids, start_tokens, before)
        if role_start < 0 or content_start > through:
            return None
        ends = [(s, -p, e) for s, p, e in _ends(ids, patterns, content_start, through)]
        if not ends:
            return None
        content_end, _, after_end = max(ends)
        if include_content:
            mask[content_start:content_end] = 1
        mask[content_end:after_end] = 1  # include_end_tokens_for_roles=("assistant",): learn to stop
    return mask


def mask_from_scan(
    ids: np.ndarray, b: Boundaries, roles: Sequence[str] | None, include_content: bool = True
) -> np.ndarray | None:
    """``_assistant_mask_from_boundary_config``: every role's start markers in the ids; each assistant span runs
    to the first end marker before the next start marker. None when the assistant markers found do not match
    the conversation's assistant turns one to one, or when no assistant span ends. ``include_content=False``:
    the end markers only."""
    markers: list[tuple[int, str, int]] = []
    for role, tokens in b.starts.items():
        at = 0
        while at < ids.size:
            s, e = find_span(ids, tokens, at)
            if s < 0:
                break
            markers.append((s, role, len(tokens)))
            at = e
    if not markers:
        return None
    markers.sort(key=lambda m: (m[0], -m[2]))
    deduped: list[tuple[int, str, int]] = []
    for m in markers:
        if deduped and m[0] == deduped[-1][0]:
            continue
        deduped.append(m)
    if roles is not None:
        if [r for _, r, _ in deduped if r == ASSISTANT] != [r for r in roles if r == ASSISTANT]:
            return None
    mask = np.zeros(ids.size, np.int8)
    found = False
    for k, (start, role, length) in enumerate(deduped):
        if role != ASSISTANT:
            continue
        content_start = start + length
        next_start = deduped[k + 1][0] if k + 1 < len(deduped) else ids.size
        ends = _ends(ids, [b.end, *b.end_variants], content_start, next_start)
        if not ends:
            continue
        if roles is not None and len({s for s, _, _ in ends}) != 1:
            return None
        end_start, _, after_end = min(ends)
        found = True
        if include_content and content_start < end_start:
            mask[content_start:end_start] = 1
        mask[end_start:after_end] = 1
    return mask if found else None


def contains_markers(value, encode: Callable[[str], list[int]], b: Boundaries) -> bool:
    """``_conversation_contains_boundary_tokens`` for JSON values (what records hold): does any text in the
    messages (roles aside) or the tools encode to a marker sequence?"""
    sequences = [s for s in b.sequences() if s]
    if isinstance(value, str):
        ids = np.asarray(encode(value), dtype=np.int64)
        return any(find_span(ids, s)[0] >= 0 for s in sequences)
    if isinstance(value, dict):
        return any(contains_markers(v, encode, b) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_markers(v, encode, b) for v in value)
    return False


def apply_loss_mode(
    mask: np.ndarray, ids: np.ndarray, loss_mode: str, last_turn_start: int | None, skipped: np.ndarray
) -> np.ndarray:
    """``tokenize_chat_example``'s end: ``last_turn`` keeps the assistant tokens from the last assistant turn's
    first masked token on (found through the prefix render, else the last masked span), then
    ``apply_chat_loss_mode`` and the skipped tokens.

        >>> apply_loss_mode(np.array([0, 1, 1, 0, 1, 1], np.int8), np.arange(6), "last_turn", 3, np.array([5]))
        array([0, 0, 0, 0, 1, 0], dtype=int8)
    """
    out = mask.astype(bool)
    if loss_mode == "full":
        out = np.ones(ids.size, bool)
    elif loss_mode == "last_turn":
        positions = np.arange(out.size)
        starts = np.flatnonzero(out & ~np.concatenate([[False], out[:-1]]))
        if last_turn_start is not None:
            after = np.flatnonzero(out & (positions >= last_turn_start))
            if after.size:
                last_turn_start = int(after[0])
            elif out.any():  # no truncation here: Bridge keeps the final visible assistant span
                last_turn_start = int(starts[-1])
        else:
            last_turn_start = int(starts[-1]) if starts.size else None
        if last_turn_start is not None:
            out &= positions >= last_turn_start
    for token in skipped.tolist():  # a handful of special tokens: a comparison each beats np.isin's set-up
        out &= ids != token
    return out.astype(np.int8)
