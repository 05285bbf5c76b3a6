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
from numba import njit

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


def build_rows(
    ids: np.ndarray,
    mask: np.ndarray,
    starts: np.ndarray,
    stored: np.ndarray,
    slot_record: np.ndarray,
    slot_target: np.ndarray,
    pack_offsets: np.ndarray,
    *,
    pad_id: int | None,
    mask_kind: str,
) -> Rows:
    """The rows of the packs whose slots are ``slot_record`` (record indices into ``starts``/``stored``, the cache's
    spans) with ``slot_target`` stored tokens each; ``pack_offsets`` cuts the slots into packs (from 0).

        >>> ids, mask = np.array([5, 6, 7, 8], np.int32), np.array([0, 1, 1, 1], np.int8)
        >>> r = build_rows(ids, mask, np.array([0, 2]), np.array([2, 2]), np.array([1, 0]), np.array([2, 3]),
        ...                np.array([0, 2]), pad_id=0, mask_kind="loss_mask")
        >>> r.ids.tolist(), r.mask.tolist(), r.seq_start.tolist()
        ([7, 8, 5, 6, 0], [1, 0, 1, 0, 0], [0, 2])
    """
    slot_record = np.ascontiguousarray(slot_record, dtype=np.int64)
    target = np.ascontiguousarray(slot_target, dtype=np.int64)
    if pad_id is None and (stored[slot_record] < target).any():
        raise ValueError("pad_seq_to_mult pads records with the tokenizer's eod (EOS) token, and it has none")
    out_start = np.zeros(slot_record.size + 1, np.int64)
    np.cumsum(target, out=out_start[1:])
    out_ids = np.empty(int(out_start[-1]), np.int64)
    out_mask = np.empty(int(out_start[-1]), np.int8)
    # a memmap is an ndarray subclass: viewed as a plain array for numba, still reading the file's pages
    _gather(
        ids.view(np.ndarray),
        mask.view(np.ndarray),
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(stored, dtype=np.int64),
        slot_record,
        target,
        0 if pad_id is None else pad_id,
        PAD_MASK[mask_kind],
        ROLLED[mask_kind],
        out_ids,
        out_mask,
    )
    pack_offsets = np.asarray(pack_offsets, dtype=np.int64)
    offsets = out_start[pack_offsets]
    seq_start = out_start[:-1] - np.repeat(offsets[:-1], np.diff(pack_offsets))
    return Rows(
        ids=out_ids,
        mask=out_mask,
        offsets=(offsets - offsets[0]).astype(np.int32),
        seq_start=seq_start,
        start_offsets=(pack_offsets - pack_offsets[0]).astype(np.int32),
    )


@njit(cache=True, nogil=True)  # nogil: the next row group is gathered while Arrow encodes this one
def _gather(ids, mask, starts, stored, slot_record, target, pad_id, pad_mask, roll, out_ids, out_mask):
    """Each slot's record copied (its first ``min(stored, target)`` tokens), padded to ``target`` with ``pad_id``
    and ``pad_mask``; with ``roll`` the mask is shifted left by one and the slot's last position is 0
    (``fill_packing_strategy``'s ``x[1:] + [False]``, after ``_pre_pad_data_point``)."""
    o = 0
    for s in range(slot_record.size):
        r = slot_record[s]
        a = starts[r]
        t = target[s]
        c = min(stored[r], t)
        for j in range(c):
            out_ids[o + j] = ids[a + j]
        for j in range(c, t):
            out_ids[o + j] = pad_id
        if roll:
            for j in range(t - 1):
                out_mask[o + j] = mask[a + j + 1] if j + 1 < c else pad_mask
            if t > 0:
                out_mask[o + t - 1] = 0
        else:
            for j in range(c):
                out_mask[o + j] = mask[a + j]
            for j in range(c, t):
                out_mask[o + j] = pad_mask
        o += t
