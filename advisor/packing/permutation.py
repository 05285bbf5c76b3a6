"""The seeded order Megatron-Bridge's ``first_fit_shuffle`` packs in, and small caches of its permutations.

Drawing the swaps of 16M samples takes 0.7 s and depends only on the count and the seed, so a new pack size (new
runtime lengths, same count) or a new GPU (same micro batches) reuses them instead of drawing them again. A
histogram's shuffled order is kept too, as indices into its distinct lengths (``shuffled_codes``): a new pack size
then reads its items from a table of a few hundred entries instead of gathering 16M lengths at random.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from advisor import caches

__all__ = ["MAX_CACHED", "legacy_shuffle", "permutation", "shuffled_codes", "shuffled_lengths"]

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
    legacy_shuffle(perm, seed)
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
    legacy_shuffle(codes, seed)
    codes.setflags(write=False)
    return codes


def legacy_shuffle(x: np.ndarray, seed: int | None) -> None:
    """``np.random.RandomState(seed).shuffle(x)`` for a 1-D array, in place, the same swaps in ~0.26 s instead of
    ~0.75 at 16M items. numpy's legacy shuffle (mtrand.pyx ``_shuffle_raw``) swaps x[i] with x[j] for i from the
    end down to 1, j drawn by ``random_interval(i)``: 32-bit MT19937 outputs masked to i's bit length until one is
    at most i. Done here with the same generator started from ``RandomState(seed)``'s own state (so its seeding
    rules hold), the draws made a block ahead of the swaps: the swaps' random reads then overlap instead of
    waiting on the generator. Past 2^32 items numpy draws 64 bits: its own shuffle is used.

    >>> a, b = np.arange(1000, dtype=np.uint16), np.arange(1000, dtype=np.uint16)
    >>> np.random.RandomState(5678).shuffle(a); legacy_shuffle(b, 5678); bool((a == b).all())
    True
    """
    state = np.random.RandomState(seed)
    if x.size >= 1 << 32 or x.ndim != 1:
        state.shuffle(x)
        return
    mt = state.get_state(legacy=False)["state"]  # the legacy tuple's key and pos, by name
    _shuffled(x, mt["key"].astype(np.uint32), int(mt["pos"]))


@njit(cache=True, nogil=True)
def _twist(mt):
    """MT19937's next 624 words of state (the reference generator's ``genrand_int32`` refill)."""
    upper, lower, matrix = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
    for i in range(624):  # split where the indices wrap, not taken modulo 624 (a division a word)
        y = (mt[i] & upper) | (mt[i + 1 if i < 623 else 0] & lower)
        mt[i] = mt[i + 397 if i < 227 else i - 227] ^ (y >> np.uint32(1)) ^ (matrix * (y & np.uint32(1)))


@njit(cache=True, nogil=True)
def _shuffled(x, mt, pos):
    block = 1024
    js = np.empty(block, np.int64)
    i = x.size - 1
    while i > 0:
        m = min(block, i)
        for k in range(m):  # the draws of the next block of swaps
            top = np.uint32(i - k)
            mask = top
            for shift in (1, 2, 4, 8, 16):
                mask |= mask >> np.uint32(shift)
            while True:
                if pos == 624:
                    _twist(mt)
                    pos = 0
                y = mt[pos]
                pos += 1
                y ^= y >> np.uint32(11)  # MT19937's tempering
                y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
                y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
                y ^= y >> np.uint32(18)
                if y & mask <= top:
                    js[k] = y & mask
                    break
        for k in range(m):
            a, b = i - k, js[k]
            x[a], x[b] = x[b], x[a]
        i -= m
