"""Which record goes into which pack slot: Megatron-Bridge 0.6.2's ``fill_packing_strategy``, random stream and all.

Followed: megatron/bridge/data/packing/offline.py ``prepare_gpt_sft_packed_data`` and algorithms.py
``create_hist``, ``create_packing_strategy``, ``fill_packing_strategy``. Bridge seeds numpy's global generator
(``np.random.seed(seed)``), packs (``first_fit_shuffle`` draws one ``shuffle`` of every runtime length), then for
each length 0..pack_size that has records draws ``np.random.permutation(count)``, orders that length's records
(data-set order, as ``create_hist`` collected them) by it, and fills the packs' slots of that length by
``.pop()``, i.e. from the end of the permuted list. The same draws come from a ``RandomState(seed)`` here, so the
caller's global generator is never touched. The alternative, a Python loop of ``pop`` over dicts of lists as
Bridge does, takes seconds per 100k records; here one stable sort assigns every slot.

The advisor's own packers (``best_fit_decreasing``, ``shortest_pack_first``, ``column_generation``) draw no
shuffle; their slots are filled by the same per-length permutations, so the result is reproducible too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.packing.offline import PackingResult


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """Each record's runtime length as ``create_hist`` counts it and its stored length once packed.

    ``runtime``: ``len(input_ids) - 1`` after the pre-padding of ``tokenize_dataset`` (``pad_seq_to_mult > 1``),
    -1 for a record ``create_hist`` leaves out (longer than ``max_seq_length``; also a record of no tokens, which
    Bridge's ``counts[seq_len]`` silently drops). ``target``: the stored length it is packed with, ``runtime + 1``
    (padded with the eod token, or cut). ``cut``: records the pre-padding shortened.
    """

    runtime: np.ndarray  # int64, one per record
    target: np.ndarray  # int64, one per record (0 where left out)
    cut: np.ndarray  # bool, one per record

    @property
    def kept(self) -> np.ndarray:
        return self.runtime >= 0


def runtime_of(stored: np.ndarray, max_seq_length: int, multiple: int) -> Runtime:
    """Runtime lengths of records of ``stored`` tokens (offline.py ``tokenize_dataset`` and ``create_hist``).

    With ``multiple`` m > 1 every record is padded (or cut) to ``min(cap, ceil(runtime / m) * m) + 1`` stored
    tokens, ``cap = (max_seq_length // m) * m``, so none is left out; with m = 1 records past ``max_seq_length``
    are (a chat record is never cut by its dataset).

        >>> r = runtime_of(np.array([5, 9, 20, 0]), 16, 4)
        >>> r.runtime.tolist(), r.target.tolist(), r.cut.tolist()
        ([4, 8, 16, 0], [5, 9, 17, 1], [False, False, True, False])
        >>> runtime_of(np.array([5, 18, 0]), 16, 1).runtime.tolist()
        [4, -1, -1]
    """
    stored = np.asarray(stored, dtype=np.int64)
    if multiple > 1:
        cap = (max_seq_length // multiple) * multiple
        runtime = np.minimum(cap, -(-np.maximum(stored - 1, 0) // multiple) * multiple)
        target = runtime + 1
        return Runtime(runtime=runtime, target=target, cut=stored > target)
    runtime = stored - 1
    runtime[(runtime > max_seq_length) | (runtime < 0)] = -1
    return Runtime(runtime=runtime, target=np.where(runtime >= 0, stored, 0), cut=np.zeros(stored.size, bool))


def assign_slots(runtime: np.ndarray, packing: PackingResult, seed: int, shuffle_drawn: bool) -> np.ndarray:
    """The record (index into ``runtime``) in every slot of ``packing.items``, in pack order.

    ``shuffle_drawn``: the packer drew ``first_fit_shuffle``'s shuffle from the same stream first.

        >>> from advisor.packing.config import PackingConfig
        >>> from advisor.packing.offline import pack
        >>> from advisor.data.lengths import LengthHistogram
        >>> runtime = np.array([3, 1, 3, 2])
        >>> res = pack(LengthHistogram.from_samples(runtime + 1), PackingConfig(pack_size=4,
        ...            algorithm="first_fit_decreasing"))
        >>> res.packs(), assign_slots(runtime, res, 1234, False).tolist()
        ([[3, 1], [3], [2]], [2, 1, 0, 3])
    """
    items = packing.items
    rs = np.random.RandomState(seed)
    if shuffle_drawn:
        rs.permutation(int(items.size))  # first_fit_shuffle's np.random.shuffle of every length: same draws
    kept = np.flatnonzero(runtime >= 0)
    # create_hist's sequences[v]: the records of runtime length v in data-set order (a stable sort keeps it)
    by_length = kept[np.argsort(runtime[kept], kind="stable")]
    counts = np.bincount(runtime[kept], minlength=int(packing.config.pack_size) + 1)
    slot_counts = np.bincount(items, minlength=counts.size)
    if not np.array_equal(slot_counts[: counts.size], counts) or slot_counts.size != counts.size:
        raise RuntimeError("the packs do not hold exactly the records' lengths")  # a bug, not bad input
    slots_by_length = np.argsort(items, kind="stable")  # slots of length v in pack order
    out = np.empty(items.size, np.int64)
    start = 0
    for v in np.flatnonzero(counts):  # fill_packing_strategy: for seq_len in range(pack_size + 1)
        c = int(counts[v])
        perm = rs.permutation(c)
        # .pop() takes the permuted list from its end: the k-th slot of length v gets perm[c - 1 - k]
        out[slots_by_length[start : start + c]] = by_length[start : start + c][perm[::-1]]
        start += c
    return out
