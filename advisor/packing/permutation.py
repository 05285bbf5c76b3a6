"""The seeded order Megatron-Bridge's ``first_fit_shuffle`` packs in, and small caches of its permutations.

Drawing the swaps of 16M samples takes 0.7 s and depends only on the count and the seed, so a new pack size (new
runtime lengths, same count) or a new GPU (same micro batches) reuses them instead of drawing them again. A
histogram's shuffled order is kept too, as indices into its distinct lengths (``shuffled_codes``): a new pack size
then reads its items from a table of a few hundred entries instead of gathering 16M lengths at random.
"""

from __future__ import annotations

import numpy as np

from advisor import caches

__all__ = ["MAX_CACHED", "permutation", "shuffled_codes", "shuffled_lengths"]

MAX_CACHED = 4  # permutations kept: an int32 one of 16M samples is 64 MB, so at most 256 MB
# (n, seed) -> permutation; locked, as dashboard sessions pack in threads of one process
_PERMUTATIONS = caches.bounded("shuffle permutations", size=MAX_CACHED, arrays=lambda perm: [perm])
# (histogram, seed) -> its samples' length indices in the shuffled order (uint16: 32 MB at 16M samples)
_CODES = caches.bounded("shuffled length codes", size=MAX_CACHED, arrays=lambda codes: [codes], by_histogram=True)


def shuffled_lengths(counts: np.ndarray, seed: int | None) -> np.ndarray:
    """The order Megatron-Bridge's ``first_fit_shuffle`` packs in.

    It lists lengths in ascending order from the histogram, then calls ``np.random.shuffle`` on that list after
    ``np.random.seed(seed)`` (offline.py). numpy's legacy shuffle draws the same swaps for a list and a 1-D
    array, so shuffling the array with a ``RandomState(seed)`` gives the same permutation without touching the
    caller's global RNG state.

    >>> shuffled_lengths(np.array([0, 2, 1, 1]), 5678).tolist()  # np.random.seed(5678); shuffle([1, 1, 2, 3])
    [1, 3, 2, 1]
    """
    items = np.repeat(np.arange(counts.size, dtype=np.int32), counts)
    return items[permutation(items.size, seed)]


def permutation(n: int, seed: int | None) -> np.ndarray:
    """The positions ``np.random.RandomState(seed).shuffle`` moves n items to (``permutation(n)`` makes the same
    swaps on ``arange(n)``), read-only: the array is shared by every caller with the same n and seed.

    >>> p = permutation(6, 1234)
    >>> p.tolist() == np.random.RandomState(1234).permutation(6).tolist(), p is permutation(6, 1234)
    (True, True)
    """
    if seed is None:  # numpy seeds itself from the OS: a fresh draw each time, nothing to reuse
        return np.random.RandomState(None).permutation(n)
    return _PERMUTATIONS.get((n, seed), lambda: _drawn(n, seed))


def _drawn(n: int, seed: int) -> np.ndarray:
    # the swaps permutation(n) makes on an int64 arange, made on an int32 one (half the memory to swap through):
    # the same permutation, drawn outside the cache's lock
    perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    np.random.RandomState(seed).shuffle(perm)
    perm.setflags(write=False)  # shared by every caller: nobody may shuffle it in place
    return perm


def shuffled_codes(hist, seed: int | None) -> np.ndarray:
    """``first_fit_shuffle``'s order of a histogram's samples as indices into ``hist.lengths`` (read-only, cached per
    histogram and seed). Megatron-Bridge shuffles its lengths sorted ascending; a sample's runtime length (after
    truncation and padding to a multiple) never decreases with its length, so the same indices give the order of
    every pack size: ``runtime[codes]``, where ``runtime`` maps each distinct length to its runtime length.

    >>> from advisor.data.lengths import LengthHistogram
    >>> h = LengthHistogram.from_samples([2, 3, 3, 4])
    >>> (h.lengths[shuffled_codes(h, 5678)] - 1).tolist() == shuffled_lengths(np.array([0, 1, 2, 1]), 5678).tolist()
    True
    """
    if seed is None:
        return _codes(hist, None)
    return _CODES.get(hist, seed, lambda: _codes(hist, seed))


def _codes(hist, seed: int | None) -> np.ndarray:
    dtype = np.uint16 if hist.lengths.size <= 1 << 16 else np.int32
    codes = np.repeat(np.arange(hist.lengths.size, dtype=dtype), hist.counts)
    # shuffled in place: the legacy shuffle makes the same swaps whatever the dtype, so this is
    # codes[RandomState(seed).permutation(n)] without the 128 MB permutation (0.7 s at 16M instead of 1.1)
    np.random.RandomState(seed).shuffle(codes)
    codes.setflags(write=False)
    return codes
