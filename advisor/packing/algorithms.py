"""Bin-packing algorithms over a histogram of runtime lengths, returning packs in CSR form.

Megatron-Bridge's two (first_fit_shuffle, first_fit_decreasing) are reproduced exactly: the same packs, as
multisets, in the same order. Two more greedy ones are here to compare with: best_fit_decreasing, and Krell et
al.'s shortest-pack-first histogram packing. Kernels are compiled with numba: Megatron-Bridge's pure-Python
segment tree takes ~9 s for 1M samples; first fit in a given order is ``first_fit.py``'s. ``packers.PACKERS``
holds these and ``column_generation`` (near-optimal, with a lower bound; its own module) with their traits, keyed
by the plan's ``Algorithm`` names; first_fit_shuffle's order is ``permutation``'s.

Every function takes ``counts`` (``counts[v]`` = samples of runtime length v, v = 0..pack_size) and returns
``(offsets, items)``: pack i holds ``items[offsets[i]:offsets[i+1]]``, in the order the algorithm placed them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from advisor.packing.decreasing import by_runs, runs
from advisor.packing.first_fit import FirstFit, first_fit
from advisor.packing.permutation import shuffled_lengths

# ---------------------------------------------------------------------------------------------- first fit


@njit(cache=True, nogil=True)
def _csr_from_bins(items, bin_of, nbins, out):
    """Group items by bin into ``out``, keeping each bin's insertion order (a stable counting sort); the offsets."""
    offsets = np.zeros(nbins + 1, np.int64)
    for k in range(bin_of.size):
        offsets[bin_of[k] + 1] += 1
    for b in range(nbins):
        offsets[b + 1] += offsets[b]
    pos = offsets[:-1].copy()
    for k in range(items.size):
        b = bin_of[k]
        out[pos[b]] = items[k]
        pos[b] += 1
    return offsets


def _packed_items(n: int, longest: int) -> np.ndarray:
    """An array for n runtime lengths of at most ``longest``: uint16 when they fit (half the memory of a cached
    16M-sample packing's items)."""
    return np.empty(n, np.uint16 if longest < 1 << 16 else np.int32)


def first_fit_decreasing(counts: np.ndarray, pack_size: int, seed: int | None = None):
    """Megatron-Bridge's ``first_fit_decreasing``: longest first, each to the first pack with room.

    >>> offsets, items = first_fit_decreasing(np.array([0, 2, 1, 1]), 4)
    >>> [items[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    [[3, 1], [2, 1]]
    >>> first_fit_decreasing(np.array([0, 1, 0, 0, 0, 1]), 4)[0].tolist()  # a 5 at pack size 4: its own pack
    [0, 1, 2]
    """
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if counts.size and int(counts.min()) < 0:
        raise ValueError(f"counts must be non-negative (length {int(np.argmin(counts))} has {int(counts.min())})")
    if by_runs(counts, pack_size):  # on the counts, a run of identical bins at a time
        out = _packed_items(int(counts.sum()), counts.size - 1)
        return runs(counts, pack_size).written(out), out
    # many distinct lengths, or one above the pack size: the samples one by one, longest first
    items = np.repeat(np.arange(counts.size - 1, -1, -1, dtype=np.int32), counts[::-1])
    return grouped(items, first_fit(items, pack_size))


def first_fit_shuffle(
    counts: np.ndarray,
    pack_size: int,
    seed: int | None = 1234,
    *,
    items: np.ndarray | None = None,
    progress=None,
    pause=None,
):
    """Megatron-Bridge's default ``first_fit_shuffle``: first fit in a seeded random order (``first_fit.py``).
    ``items``: that order already drawn (``offline.pack`` reuses it across pack sizes); ``progress(fraction)`` and
    ``pause()`` are called between chunks of items.

    >>> offsets, items = first_fit_shuffle(np.array([0, 2, 1, 1]), 4, seed=1234)
    >>> int(offsets.size - 1), int(items.sum())
    (2, 7)
    """
    if items is None:
        items = shuffled_lengths(np.ascontiguousarray(counts, dtype=np.int64), seed)
    return grouped(items, first_fit(items, pack_size, progress=progress, pause=pause))


def grouped(items: np.ndarray, fit: FirstFit) -> tuple[np.ndarray, np.ndarray]:
    """The packs of a first fit in CSR form (offsets, items), each pack's items in the order they were placed."""
    packed = _packed_items(items.size, int(items.max()) if items.size else 0)
    return _csr_from_bins(items, fit.bins, fit.count, packed), packed


# ---------------------------------------------------------------------------------------------- best fit


@njit(cache=True, nogil=True)
def _best_fit_decreasing_hist(counts, pack_size, max_bins, out):
    """Longest first, each item to the open bin with the least room that still fits it (ties: latest bin).

    Bins are kept in buckets by remaining room (a linked stack per room value); a max-tree over room values
    marks the non-empty buckets so the smallest room >= v is found in O(log pack_size).
    """
    P = pack_size
    size = 1
    while size < P + 1:
        size *= 2
    present = np.zeros(2 * size, np.int32)  # leaf r: 1 if some bin has exactly r room left
    head = np.full(P + 1, -1, np.int32)
    nxt = np.empty(max_bins, np.int32)
    room = np.empty(max_bins, np.int32)
    n_items = counts.sum()
    bin_of_item = np.empty(n_items, np.int32)
    items = np.empty(n_items, np.int32)
    nbins = 0
    k = 0
    for v in range(counts.size - 1, -1, -1):
        for _ in range(counts[v]):
            # smallest r >= v with a bin: descend to the leftmost marked leaf in [v, P]
            b = -1
            r = _first_marked_at_least(present, size, v)
            if r >= 0:
                b = head[r]
                head[r] = nxt[b]
                if head[r] == -1:
                    _set_mark(present, size, r, 0)
            if b == -1:
                b = nbins
                nbins += 1
                room[b] = P
            room[b] -= v
            r2 = room[b]
            nxt[b] = head[r2]
            head[r2] = b
            _set_mark(present, size, r2, 1)
            items[k] = v
            bin_of_item[k] = b
            k += 1
    return _csr_from_bins(items, bin_of_item, nbins, out), out


@njit(cache=True, nogil=True)
def _set_mark(tree, size, leaf, value):
    i = leaf + size
    tree[i] = value
    i //= 2
    while i >= 1:
        tree[i] = tree[2 * i] | tree[2 * i + 1]
        i //= 2


@njit(cache=True, nogil=True)
def _first_marked_at_least(tree, size, lo):
    """Leftmost marked leaf with index >= lo, or -1."""
    i = lo + size
    if tree[i]:
        return lo
    # climb until a right sibling subtree has a mark, then descend into it
    while i > 1:
        if i % 2 == 0 and tree[i + 1]:
            i += 1
            while i < size:
                i = 2 * i if tree[2 * i] else 2 * i + 1
            return i - size
        i //= 2
    return -1


def best_fit_decreasing(counts: np.ndarray, pack_size: int, seed: int | None = None):
    """Longest first, each to the pack it fills most tightly.

    >>> offsets, items = best_fit_decreasing(np.array([0, 1, 2, 1]), 4)
    >>> [items[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    [[3, 1], [2, 2]]
    """
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    return _best_fit_decreasing_hist(
        counts, pack_size, max(1, int(counts.sum())), _packed_items(int(counts.sum()), counts.size - 1)
    )


# ---------------------------------------------------------------------------------------------- shortest pack first


def shortest_pack_first(
    counts: np.ndarray, pack_size: int, seed: int | None = None, max_sequences_per_pack: int | None = None
):
    """Krell et al. 2021, shortest-pack-first histogram packing (SPFHP), on the histogram itself.

    Lengths are taken longest first; all samples of a length go, as a group, into the open pack *with the most room*
    that fits them (the "shortest pack"), splitting the group when that pack strategy has fewer copies; what fits
    nowhere opens new packs. Packs are tracked as (strategy, copies) by remaining room, so the work is O(size^2)
    whatever the number of samples. Followed: graphcore/examples packedBERT ``pack_using_spfhp``.

    >>> offsets, items = shortest_pack_first(np.array([0, 2, 0, 2]), 4)
    >>> sorted(sorted(items[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:]))
    [[1, 3], [1, 3]]
    """
    counts = np.asarray(counts, dtype=np.int64)
    P = pack_size
    open_by_room: dict[int, list[tuple[int, tuple[int, ...]]]] = {}  # room left -> [(copies, lengths)]
    done: list[tuple[int, tuple[int, ...]]] = []

    def add(room: int, copies: int, pack: tuple[int, ...]) -> None:
        if room == 0 or (max_sequences_per_pack and len(pack) >= max_sequences_per_pack):
            done.append((copies, pack))
        else:
            open_by_room.setdefault(room, []).append((copies, pack))

    for length in range(min(P, counts.size - 1), 0, -1):
        left = int(counts[length])
        while left > 0:
            fitting = [r for r in open_by_room if r >= length and open_by_room[r]]
            if not fitting:
                add(P - length, left, (length,))
                break
            room = max(fitting)  # the shortest pack: most room left
            copies, pack = open_by_room[room].pop()
            if not open_by_room[room]:
                del open_by_room[room]
            take = min(copies, left)
            if copies > take:
                open_by_room.setdefault(room, []).append((copies - take, pack))
            add(room - length, take, pack + (length,))
            left -= take
    strategies = done + [s for group in open_by_room.values() for s in group]
    if strategies:
        sizes_arr = np.concatenate([np.full(c, len(p), np.int64) for c, p in strategies])
        items_arr = np.concatenate([np.tile(np.array(p, np.int32), c) for c, p in strategies])
    else:
        sizes_arr, items_arr = np.zeros(0, np.int64), np.zeros(0, np.int32)
    if counts.size and counts[0]:  # length-0 samples join the first pack
        if sizes_arr.size == 0:
            sizes_arr, items_arr = np.array([0], np.int64), np.zeros(0, np.int32)
        items_arr = np.concatenate(
            [items_arr[: sizes_arr[0]], np.zeros(int(counts[0]), np.int32), items_arr[sizes_arr[0] :]]
        )
        sizes_arr[0] += counts[0]
    return np.concatenate([[0], np.cumsum(sizes_arr)]), items_arr
