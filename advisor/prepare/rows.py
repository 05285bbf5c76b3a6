"""Packed rows from the token cache: ``input_ids``, ``loss_mask`` and ``seq_start_id`` of a run of packs, as flat
Arrow-ready arrays.

Followed: megatron/bridge/data/packing/offline.py ``_pre_pad_data_point`` (a record padded with the eod token,
its mask with 0 — or cut — to its target length) and algorithms.py ``fill_packing_strategy`` (a pack is its
records back to back; a chat mask is rolled by one, ``x[1:] + [False]``; an SFT mask is ``idx >=
answer_start_idx - 1`` over the padded record, so padding positions count there; ``seq_start_id`` is where each
record starts). The alternative, Bridge's Python lists per pack, costs ~60 bytes per token; here one gather
per run of packs (a row group) reads the slots' tokens from the memory-mapped cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.data.tokenize.sequences import PAD_MASK, ROLLED


@dataclass(frozen=True, kw_only=True)
class Rows:
    """Packs ``[first, first + n)``: values back to back, ``offsets`` (n + 1) per row for ids and mask,
    ``start_offsets`` (n + 1) for ``seq_start_id``."""

    ids: np.ndarray  # int64, as Bridge's writer stores input_ids
    mask: np.ndarray  # int8
    offsets: np.ndarray  # int32
    seq_start: np.ndarray  # int64
    start_offsets: np.ndarray  # int32


def build_rows(ids: np.ndarray, mask: np.ndarray, starts: np.ndarray, stored: np.ndarray, slot_record: np.ndarray,
               slot_target: np.ndarray, pack_offsets: np.ndarray, *, pad_id: int | None, mask_kind: str) -> Rows:
    """The rows of the packs whose slots are ``slot_record`` (record indices into ``starts``/``stored``, the cache's
    spans) with ``slot_target`` stored tokens each; ``pack_offsets`` cuts the slots into packs (from 0).

        >>> ids, mask = np.array([5, 6, 7, 8], np.int32), np.array([0, 1, 1, 1], np.int8)
        >>> r = build_rows(ids, mask, np.array([0, 2]), np.array([2, 2]), np.array([1, 0]), np.array([2, 3]),
        ...                np.array([0, 2]), pad_id=0, mask_kind="loss_mask")
        >>> r.ids.tolist(), r.mask.tolist(), r.seq_start.tolist()
        ([7, 8, 5, 6, 0], [1, 0, 1, 0, 0], [0, 2])
    """
    n_slots = slot_record.size
    target = slot_target.astype(np.int64)
    copy = np.minimum(stored[slot_record], target)
    if (copy < target).any() and pad_id is None:
        raise ValueError("pad_seq_to_mult pads records with the tokenizer's eod (EOS) token, and it has none")
    total = int(target.sum())
    out_start = np.zeros(n_slots + 1, np.int64)
    np.cumsum(target, out=out_start[1:])
    slot_of = np.repeat(np.arange(n_slots), target)
    pos = np.arange(total, dtype=np.int64) - out_start[:-1][slot_of]
    real = pos < copy[slot_of]
    src = starts[slot_record][slot_of] + pos
    out_ids = np.full(total, pad_id if pad_id is not None else 0, np.int64)
    out_ids[real] = ids[src[real]]
    padded = np.full(total, PAD_MASK[mask_kind], np.int8)
    padded[real] = mask[src[real]]
    if ROLLED[mask_kind]:  # loss_mask = [x[1:] + [False] for x in loss_mask]: shift left, each record's last is 0
        padded[:-1] = padded[1:]
        padded[out_start[1:] - 1] = 0
    pack_of_slot_end = pack_offsets.astype(np.int64)
    offsets = out_start[pack_of_slot_end].astype(np.int32)
    seq_start = out_start[:-1] - out_start[np.repeat(pack_of_slot_end[:-1], np.diff(pack_of_slot_end))]
    return Rows(ids=out_ids, mask=padded, offsets=offsets - offsets[0], seq_start=seq_start,
                start_offsets=(pack_of_slot_end - pack_of_slot_end[0]).astype(np.int32))
