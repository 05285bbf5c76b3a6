"""Legacy ``<extra_id_*>`` chat records' token ids and loss masks, as Megatron-Bridge 0.6.2's ``GPTSFTChatDataset``
builds them without the tokenizer's chat template (``_preprocess`` and ``_mask_targets`` in
megatron/bridge/data/datasets/utils.py).

Alternatives: ``chat.chat_lengths`` counts the same records' tokens without the masks; ``chat_tokens`` builds
records rendered by the tokenizer's own chat template.

A record is one string, ``<extra_id_0>System\\n{system}\\n`` then ``<extra_id_1>{from}\\n{value}\\n`` per turn
(``chat.legacy_conversations``), encoded as Bridge's ``_tokenize`` encodes. Its loss mask leaves out the header,
the first turn, the masked speakers' turns (all but their first turn-start tokens, which end the turn before) and
every speaker's name; typed conversations (``VALUE_TO_TEXT``, ``TEXT_TO_VALUE``) also leave out their labels or
their responses. Every piece is measured as Bridge measures it: encoded after ``PREFIX_STR`` and cut past that
prefix's own tokens.

    >>> from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
    >>> from advisor.data.tokenize.chat import ChatSettings
    >>> rec = {"system": "", "conversations": [{"from": "User", "value": "x"}, {"from": "Assistant", "value": "y"}]}
    >>> batch, lengths, problems = legacy_tokens([rec], load_tokenizer(_example_folder()),
    ...                                          ChatSettings(use_hf_tokenizer_chat_template=False))
    >>> int(lengths[0]) == batch.ids.size, int(batch.mask.sum()) > 0, problems
    (True, True, [])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from advisor.data.tokenize.chat import LEGACY_SPECIAL_TOKENS, PREFIX_STR, ChatSettings, legacy_conversations
from advisor.data.tokenize.sequences import TokenBatch
from advisor.data.tokenize.sft import RecordProblem
from advisor.data.tokenize.tokenizer import Tokenizer


def legacy_tokens(
    records: Sequence[dict], tok: Tokenizer, s: ChatSettings
) -> tuple[TokenBatch, np.ndarray, list[RecordProblem]]:
    """Each record's ``input_ids`` and ``loss_mask`` (mask kind ``loss_mask``: packing rolls it by one), its
    length (-1 where Bridge fails on it) and the problems, all pieces of all records encoded in one batch."""
    tokens = dict(s.special_tokens or LEGACY_SPECIAL_TOKENS)
    start, name_end = tokens["turn_start"], tokens["end_of_name"]
    built, problems = legacy_conversations(records, tokens)
    # GPTSFTChatDataset._build_samples_mapping's token runs, then per record: the whole text, its header, each
    # turn and each speaker's name, every one after PREFIX_STR but the first two
    texts = [PREFIX_STR, PREFIX_STR + tokens["label_start"], PREFIX_STR + name_end, PREFIX_STR + start]
    for _, header, conversation, turns, speakers, _, _ in built:
        texts += [conversation, header] + [PREFIX_STR + t for t in turns]
        texts += [PREFIX_STR + start + sp + name_end for sp in speakers]
    flat, offsets = tok.mb_ids(texts)

    def ids(k: int) -> np.ndarray:
        return flat[offsets[k] : offsets[k + 1]]

    prefix = ids(0).size
    label_start = ids(1)[prefix:]  # id2[len(id1):]
    name_end_ids = ids(2)[prefix:]
    turn_start_tokens = ids(3).size - prefix
    ids_out, mask_out = [], []
    lengths = np.full(len(records), -1, dtype=np.int64)
    at = 4
    for i, _, _, turns, speakers, mask_role, gtype in built:
        n = len(turns)
        whole, header_len = ids(at), ids(at + 1).size
        pieces = [ids(at + 2 + j)[prefix:] for j in range(n)]
        names = [ids(at + 2 + n + j).size - prefix for j in range(n)]
        at += 2 + 2 * n
        masked = _masked(
            whole.size,
            header_len,
            pieces,
            names,
            speakers,
            mask_role,
            gtype,
            label_start,
            name_end_ids,
            turn_start_tokens,
        )
        if isinstance(masked, str):
            problems.append(RecordProblem(i, masked))
            continue
        if masked.all():
            problems.append(
                RecordProblem(
                    i, f"every token is masked (mask {mask_role!r}): Megatron-Bridge asserts 'loss_mask is empty'"
                )
            )
            continue
        ids_out.append(whole.astype(np.int32))
        mask_out.append((~masked).astype(np.int8))
        lengths[i] = whole.size
    problems.sort(key=lambda p: p.index)
    return TokenBatch.built(ids_out, mask_out, lengths, np.zeros(len(records), bool)), lengths, problems


def _find(sub: np.ndarray, seq: np.ndarray) -> int:
    """``_identify_start_index_of_subsequence``: the first index of ``sub`` in ``seq``, or -1 (an empty ``sub``
    is found at 0).

        >>> _find(np.array([1, 3]), np.array([2, 3, 1, 3])), _find(np.array([3, 2]), np.array([2, 3, 1, 3]))
        (2, -1)
    """
    m = sub.size
    for k in range(seq.size - m + 1):
        if np.array_equal(seq[k : k + m], sub):
            return k
    return -1


def _masked(
    total: int,
    header_len: int,
    pieces: list[np.ndarray],
    names: list[int],
    speakers: list[str],
    mask_role: str,
    gtype: str | None,
    label_start: np.ndarray,
    name_end_ids: np.ndarray,
    turn_start_tokens: int,
) -> np.ndarray | str:
    """``_mask_targets``: which of the record's tokens carry no loss, or why Bridge fails (its assertion)."""
    masked = np.zeros(total, dtype=bool)
    masked[:header_len] = True  # "not going to train on the header"
    cur = header_len
    for j, (s_id, skip, speaker) in enumerate(zip(pieces, names, speakers, strict=True)):
        length = s_id.size
        location = _find(label_start, s_id)
        if location >= 0:
            if gtype == "VALUE_TO_TEXT":
                if skip != location:
                    return "the label does not follow the speaker's name (Megatron-Bridge asserts it does)"
                newline = _find(name_end_ids, s_id[skip:])
                if newline < 0:  # the whole turn is a partial label: masked, and Bridge does not move on
                    masked[cur : cur + length] = True
                    continue
                skip += newline + name_end_ids.size
            elif gtype == "TEXT_TO_VALUE":
                skip = location + label_start.size
        if cur >= total:
            break
        if j == 0 and gtype in ("VALUE_TO_TEXT", None):
            masked[cur : cur + length] = True  # the first turn is context
        elif speaker in mask_role and j == 1 and gtype == "TEXT_TO_VALUE":
            masked[cur + turn_start_tokens : cur + length] = True
        elif speaker in mask_role and j > 1:  # its turn-start tokens end the turn before: they stay
            masked[cur + turn_start_tokens : cur + length] = True
        elif speaker in mask_role:
            masked[cur : cur + length] = True
        else:  # the name (and the label, or the response and the label start) carries no loss
            masked[cur : cur + skip] = True
        cur += length
    return masked
