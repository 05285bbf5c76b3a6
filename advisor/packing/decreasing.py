"""First fit decreasing on a histogram's counts, a run of identical bins at a time: Megatron-Bridge's packs, exactly.

Alternatives: sort the samples and place them one by one in a max tree over bins (what Megatron-Bridge does, and
this module's predecessor: 12M placements, 1.4-2.4 s at 16.3M Wikipedia samples), or place whole runs of bins
that hold the same lengths, as here (~600 runs, under a millisecond; the packs written out in ~0.1 s).

Why runs are exact: first fit decreasing takes every sample of one length before the next shorter one. Identical
items fill the first bin with room for one as far as it goes (``room // v`` of them) before the next bin has a
chance, so consecutive bins with the same contents and room (a run) each take the same number, until the group's
count runs out inside a run: that bin takes the rest and the run splits in at most three. What fits nowhere opens
bins of ``pack_size // v`` each. The bins' order, and each bin's order of lengths, are Megatron-Bridge's
(``first_fit_decreasing`` in data/packing/algorithms.py, 0.6.2; checked in tests/oracle).

>>> r = runs(np.array([0, 2, 1, 1]), 4)
>>> out = np.empty(4, np.int32)
>>> offsets = r.written(out)
>>> [out[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
[[3, 1], [2, 1]]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = ["RUNS_WORK", "Runs", "by_runs", "runs"]

# Each length present rewrites every run, and runs grow with the lengths present: work ~ 2 x lengths^2. Placing
# the samples one by one costs ~n. Runs are taken while lengths^2 <= RUNS_WORK x n (Wikipedia: 508 lengths, 16.3M
# samples); past it (e.g. 65,536 lengths at pack size 65,536 on 196k samples: 10.7 s by runs, 0.014 s by items)
# the samples go through first_fit.py's kernel in decreasing order, which is Megatron-Bridge's definition itself.
RUNS_WORK = 8


@njit(cache=True, nogil=True)
def _grown(a, n):
    out = np.empty(n, a.dtype)
    out[: a.size] = a
    return out


@njit(cache=True, nogil=True)
def _runs(counts, pack_size):
    """Runs of bins in order, as (bins, room, contents), and the contents as a tree of (length, how many, parent):
    a run's bins hold, oldest first, the lengths on the path from the root to its node. Splitting a run shares
    the path its parts had, so nothing is copied."""
    nr = 0
    r_n = np.empty(256, np.int64)
    r_room = np.empty(256, np.int64)
    r_h = np.empty(256, np.int64)
    h_len = np.empty(256, np.int64)
    h_k = np.empty(256, np.int64)
    h_par = np.empty(256, np.int64)
    nh = 0
    for v in range(counts.size - 1, -1, -1):
        c = counts[v]
        if c == 0:
            continue
        if v > pack_size:
            raise ValueError("a length above the pack size")
        need = 3 * nr + 2  # each run splits in at most three, and two runs of new bins
        t_n = np.empty(need, np.int64)
        t_room = np.empty(need, np.int64)
        t_h = np.empty(need, np.int64)
        if nh + need > h_len.size:
            grow = 2 * (nh + need)
            h_len, h_k, h_par = _grown(h_len, grow), _grown(h_k, grow), _grown(h_par, grow)
        nt = 0
        for i in range(nr):
            n, room, h = r_n[i], r_room[i], r_h[i]
            if c == 0 or room < v:  # passed over: no room for one, or nothing left to place
                t_n[nt], t_room[nt], t_h[nt] = n, room, h
                nt += 1
                continue
            # v == 0: a length-0 sample fits the first bin whatever its room, so all of them join it
            k = room // v if v > 0 else c
            full = min(n, c // k)
            if full > 0:
                h_len[nh], h_k[nh], h_par[nh] = v, k, h
                t_n[nt], t_room[nt], t_h[nt] = full, room - k * v, nh
                nt += 1
                nh += 1
                c -= full * k
            rest = n - full
            if rest > 0 and c > 0:  # fewer left than a bin takes: the next bin takes them all
                h_len[nh], h_k[nh], h_par[nh] = v, c, h
                t_n[nt], t_room[nt], t_h[nt] = 1, room - c * v, nh
                nt += 1
                nh += 1
                c = 0
                rest -= 1
            if rest > 0:
                t_n[nt], t_room[nt], t_h[nt] = rest, room, h
                nt += 1
        if c > 0:  # no open bin has room for one: new bins of pack_size // v each (all length-0 ones in one)
            per = pack_size // v if v > 0 else c
            full = c // per
            if full > 0:
                h_len[nh], h_k[nh], h_par[nh] = v, per, -1
                t_n[nt], t_room[nt], t_h[nt] = full, pack_size - per * v, nh
                nt += 1
                nh += 1
            last = c - full * per
            if last > 0:
                h_len[nh], h_k[nh], h_par[nh] = v, last, -1
                t_n[nt], t_room[nt], t_h[nt] = 1, pack_size - last * v, nh
                nt += 1
                nh += 1
        r_n, r_room, r_h, nr = t_n, t_room, t_h, nt
    return r_n[:nr].copy(), r_room[:nr].copy(), r_h[:nr].copy(), h_len[:nh].copy(), h_k[:nh].copy(), h_par[:nh].copy()


@njit(cache=True, nogil=True)
def _written(r_n, r_h, h_len, h_k, h_par, out):
    """The packs in CSR form: each run's contents (its path, oldest first) written once per bin of the run."""
    offsets = np.zeros(r_n.sum() + 1, np.int64)
    path_len = np.empty(64, np.int64)
    path_k = np.empty(64, np.int64)
    b = 0
    pos = 0
    for i in range(r_n.size):
        m = 0
        h = r_h[i]
        while h >= 0:
            if m == path_len.size:
                path_len, path_k = _grown(path_len, 2 * m), _grown(path_k, 2 * m)
            path_len[m], path_k[m] = h_len[h], h_k[h]
            m += 1
            h = h_par[h]
        for _ in range(r_n[i]):
            for j in range(m - 1, -1, -1):
                for _t in range(path_k[j]):
                    out[pos] = path_len[j]
                    pos += 1
            b += 1
            offsets[b] = pos
    return offsets


@dataclass(frozen=True, kw_only=True, eq=False)  # eq=False: arrays have no single truth
class Runs:
    """First fit decreasing's bins as runs: ``bins[i]`` consecutive bins with ``room[i]`` left, each holding the
    lengths of ``contents(i)`` (length, how many), oldest first. ``node``, ``length``, ``count``, ``parent``: the
    contents as a tree (``_runs``)."""

    bins: np.ndarray
    room: np.ndarray
    node: np.ndarray
    length: np.ndarray
    count: np.ndarray
    parent: np.ndarray

    def contents(self, i: int) -> list[tuple[int, int]]:
        path = []
        h = int(self.node[i])
        while h >= 0:
            path.append((int(self.length[h]), int(self.count[h])))
            h = int(self.parent[h])
        return path[::-1]

    def written(self, out: np.ndarray) -> np.ndarray:
        """The packs into ``out`` (one entry per sample), and their offsets."""
        return _written(self.bins, self.node, self.length, self.count, self.parent, out)


def runs(counts: np.ndarray, pack_size: int) -> Runs:
    """
    >>> r = runs(np.array([0, 3, 0, 2]), 4)  # lengths 3, 3, 1, 1, 1 into packs of 4
    >>> r.bins.tolist(), r.room.tolist(), [r.contents(i) for i in range(r.bins.size)]
    ([2, 1], [0, 3], [[(3, 1), (1, 1)], [(1, 1)]])
    """
    bins, room, node, length, count, parent = _runs(np.ascontiguousarray(counts, dtype=np.int64), pack_size)
    return Runs(bins=bins, room=room, node=node, length=length, count=count, parent=parent)


def by_runs(counts: np.ndarray, pack_size: int) -> bool:
    """Whether runs are the cheaper way (``RUNS_WORK``) and can pack these counts: no length above the pack size
    (Megatron-Bridge packs one into a bin of negative room, which only placing the samples one by one reproduces).

    >>> by_runs(np.array([0, 5, 5]), 4), by_runs(np.array([0, 1, 0, 0, 0, 1]), 4)
    (True, False)
    """
    present = np.flatnonzero(counts)
    return present.size**2 <= RUNS_WORK * int(counts.sum()) and (present.size == 0 or int(present[-1]) <= pack_size)
