"""Work per DP×CP rank: tokens and attention work (Σs²) each rank runs, and the straggler wait they imply.

A sequence of s tokens on a CP group of c ranks costs each of them s/c tokens and s²/c attention work (the
scheduler's own model, data_schedule_utils ``workload``); the alternative, a measured step time, needs a GPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from advisor.packing.online.groups import Groups


@njit(cache=True, nogil=True)
def _loads(mb_offsets, group_offsets, rank_start, rank_count, cp, item_offsets, items, seqlens, ranks):
    steps = mb_offsets.size - 1
    tokens = np.empty(rank_start.size)
    work = np.empty(rank_start.size)
    rank_tokens = np.zeros((steps, ranks))
    rank_work = np.zeros((steps, ranks))
    for st in range(steps):
        for m in range(mb_offsets[st], mb_offsets[st + 1]):
            for g in range(group_offsets[m], group_offsets[m + 1]):
                t, w = 0.0, 0.0
                for k in range(item_offsets[g], item_offsets[g + 1]):
                    s = float(seqlens[st, items[k]])
                    t += s
                    w += s * s
                tokens[g], work[g] = t, w
                t, w = t / cp[g], w / cp[g]
                for r in range(rank_start[g], rank_start[g] + rank_count[g]):
                    rank_tokens[st, r] += t
                    rank_work[st, r] += w
    return tokens, work, rank_tokens, rank_work


def loads(groups: Groups, seqlens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: tokens and attention work of its whole sequences; per step and rank: the totals each rank
    runs over the step's micro batches (its groups' sums over their CP size). ``seqlens`` is ``(steps, GBS)`` in
    global-id order. Float sums are exact: a group's Σs² stays far below 2**53.

    >>> g = Groups.single_step(num_ranks=2, micro_batches=[[(0, 2, 2, [0])], [(0, 1, 1, [1]), (1, 1, 1, [2])]])
    >>> tok, work, rank_tok, rank_work = loads(g, np.array([[4, 3, 5]]))
    >>> tok.tolist(), work.tolist(), rank_tok.tolist(), rank_work.tolist()
    ([4.0, 3.0, 5.0], [16.0, 9.0, 25.0], [[5.0, 7.0]], [[17.0, 33.0]])
    """

    def i64(a):
        return np.asarray(a, dtype=np.int64)  # no copy (a broadcast width array stays a view)

    return _loads(
        i64(groups.mb_offsets),
        i64(groups.group_offsets),
        i64(groups.rank_start),
        i64(groups.rank_count),
        i64(groups.cp),
        i64(groups.item_offsets),
        i64(groups.items),
        i64(seqlens),
        groups.num_ranks,
    )


def _spread(index_rows: np.ndarray, rows: int, groups: Groups, values: np.ndarray) -> np.ndarray:
    """Sum ``values / cp`` of each group onto its ranks, one row per entry of ``index_rows``: (rows, ranks)."""
    width = groups.num_ranks + 1
    share = values / groups.cp
    flat = np.bincount(index_rows * width + groups.rank_start, weights=share, minlength=rows * width)
    flat -= np.bincount(
        index_rows * width + groups.rank_start + groups.rank_count, weights=share, minlength=rows * width
    )
    return np.cumsum(flat.reshape(rows, width), axis=1)[:, :-1]


def per_micro_batch(groups: Groups, values: np.ndarray, step: int) -> np.ndarray:
    """One step's per-rank quantity for each of its micro batches: ``(micro batches, ranks)``."""
    sub = groups.step_slice(step)
    g0 = int(groups.group_offsets[groups.mb_offsets[step]])
    mb_of_group = np.repeat(np.arange(sub.mb_offsets[1], dtype=np.int64), np.diff(sub.group_offsets))
    return _spread(mb_of_group, int(sub.mb_offsets[1]), sub, values[g0 : g0 + sub.num_groups])


def straggler(rank_work: np.ndarray) -> np.ndarray:
    """Slowest rank's work over the mean, per row (1.0 for an idle row): the step waits for the slowest.

    >>> straggler(np.array([[2.0, 4.0, 6.0], [0.0, 0.0, 0.0]])).tolist()
    [1.5, 1.0]
    """
    mean = rank_work.mean(axis=1)
    out = np.ones(rank_work.shape[0])
    busy = mean > 0
    out[busy] = rank_work[busy].max(axis=1) / mean[busy]
    return out
