"""Token ids and loss masks of whole records, back to back in flat arrays: what ``prepare`` packs.

Alternative: Megatron-Bridge's own form, a numpy array of one dict per record holding Python lists (or torch
tensors) of ids and mask values, about 30-60 bytes of objects per token; a million chats are then tens of GB. Here
every record's tokens sit in one int32 array and its mask in one int8 array, cut by int64 offsets (5 bytes a
token), so shards travel between processes as three buffers and the token cache is three ``.npy`` files.

The mask is Megatron-Bridge's per-record loss mask as the dataset hands it to offline packing, before packing's
own changes (``fill_packing_strategy`` in megatron/bridge/data/packing/algorithms.py), which differ by format:

- ``answer_start`` (SFT prompt templates: the example has no ``loss_mask``): packing derives
  ``idx >= answer_start_idx - 1`` over the stored tokens and does not shift it; positions added by
  ``pad_seq_to_mult`` therefore count (their index is past the answer start);
- ``loss_mask`` (chat, and SFT with prompt-completion preprocessing): the dataset's own mask, which packing rolls
  by one (``x[1:] + [False]``) to align it with the labels; padding positions are 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

MaskKind = Literal["answer_start", "loss_mask"]
PAD_MASK: dict[str, int] = {"answer_start": 1, "loss_mask": 0}  # the mask value of a pre-padding position
ROLLED: dict[str, bool] = {"answer_start": False, "loss_mask": True}  # does fill_packing_strategy shift it
MASK_KIND: dict[str, MaskKind] = {"sft": "answer_start", "chat": "loss_mask"}  # each data format's mask


def mask_kind(fmt: str, settings: object = None) -> MaskKind:
    """The mask a format's records carry: SFT with prompt-completion preprocessing hands packing its own
    ``loss_mask`` (``GPTSFTDataset._process_example``), which packing rolls as a chat mask.

        >>> mask_kind("sft"), mask_kind("chat")
        ('answer_start', 'loss_mask')
    """
    if fmt == "sft" and getattr(settings, "prompt_completion", None) is not None:
        return "loss_mask"
    return MASK_KIND[fmt]


@dataclass(frozen=True, kw_only=True)
class TokenBatch:
    """Records' ids (int32) and masks (int8) back to back; record i is ``ids[offsets[i]:offsets[i+1]]``. A record
    that could not be built has an empty span (its length elsewhere is -1). ``truncated`` marks records the
    dataset cut to ``max_seq_length`` (SFT).

        >>> b = TokenBatch.of([[5, 6, 7], [], [8]], [[0, 1, 1], [], [1]], [False, False, True])
        >>> b.offsets.tolist(), b.record(0)[0].tolist(), int(b.truncated.sum())
        ([0, 3, 3, 4], [5, 6, 7], 1)
    """

    ids: np.ndarray
    mask: np.ndarray
    offsets: np.ndarray
    truncated: np.ndarray

    @property
    def records(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def record(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.ids[a:b], self.mask[a:b]

    @staticmethod
    def of(ids: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], truncated: Sequence[bool]) -> TokenBatch:
        """From per-record lists (small batches: tests, one shard's records)."""
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat_ids = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(offsets[-1]))
        flat_mask = np.fromiter((int(t) for x in masks for t in x), dtype=np.int8, count=int(offsets[-1]))
        return TokenBatch(ids=flat_ids, mask=flat_mask, offsets=offsets, truncated=np.asarray(truncated, dtype=bool))

    @staticmethod
    def built(
        ids: Sequence[np.ndarray], masks: Sequence[np.ndarray], lengths: np.ndarray, truncated: np.ndarray
    ) -> TokenBatch:
        """From the records built, in order (their ids and masks as arrays), and every record's length (-1 where one
        was not built: an empty span).

            >>> b = TokenBatch.built([np.array([5, 6]), np.array([8])], [np.array([0, 1]), np.array([1])],
            ...                      np.array([2, -1, 1]), np.zeros(3, bool))
            >>> b.offsets.tolist(), b.record(2)[0].tolist()
            ([0, 2, 2, 3], [8])
        """
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(np.maximum(lengths, 0), out=offsets[1:])
        return TokenBatch(
            ids=np.concatenate(ids).astype(np.int32, copy=False) if ids else np.zeros(0, np.int32),
            mask=np.concatenate(masks).astype(np.int8, copy=False) if masks else np.zeros(0, np.int8),
            offsets=offsets,
            truncated=np.asarray(truncated, dtype=bool),
        )

    @staticmethod
    def empty(records: int = 0) -> TokenBatch:
        return TokenBatch(
            ids=np.zeros(0, np.int32),
            mask=np.zeros(0, np.int8),
            offsets=np.zeros(records + 1, np.int64),
            truncated=np.zeros(records, bool),
        )

    @staticmethod
    def concat(batches: Sequence[TokenBatch]) -> TokenBatch:
        """Batches one after another (the records of a shard's read batches).

        >>> a, b = TokenBatch.of([[1]], [[1]], [False]), TokenBatch.of([[2, 3]], [[0, 1]], [True])
        >>> TokenBatch.concat([a, b]).offsets.tolist()
        [0, 1, 3]
        """
        if not batches:
            return TokenBatch.empty()
        sizes = np.array([b.ids.size for b in batches], dtype=np.int64)
        shift = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        offsets = np.concatenate([[0]] + [b.offsets[1:] + s for b, s in zip(batches, shift, strict=True)])
        return TokenBatch(
            ids=np.concatenate([b.ids for b in batches]),
            mask=np.concatenate([b.mask for b in batches]),
            offsets=offsets.astype(np.int64),
            truncated=np.concatenate([b.truncated for b in batches]),
        )
