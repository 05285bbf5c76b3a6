"""``DpBalancedScheduler``: next-fit packs in global-id order, their count raised to a multiple of DP.

Followed: megatron/core/datasets/data_schedule.py ``DpBalancedScheduler.get_groups_and_subsamples`` at main
d98e8a64 and dev d48bd6be (dev adds ``max_num_seqs`` and asserts ``i >= 0`` where main asserts ``i > 0``).
The alternative, running that class step by step, is the oracle the tests and bench/bench_schedule.py compare with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from advisor.packing.online.groups import Groups


@njit(cache=True, nogil=True)
def _schedule_steps(lens, n, cap, max_num_seqs, multiple, main_assert, dp, cp):
    """Every step's packs: next fit, then the trailing packs split until the count is a multiple.

    ``lens`` holds the steps' padded lengths back to back, ``n`` a step. Returns ``(packs_per_step,
    pack_offsets, items, rank_start, refused, need, spare)``: pack k (in step order) holds positions
    ``items[pack_offsets[k]:pack_offsets[k+1]]`` of its step and runs on ranks ``rank_start[k]`` .. + CP - 1; a
    refused step emits no packs, and ``need``/``spare`` say why.
    """
    steps = lens.size // n
    per_step = n + multiple + 1  # next fit makes at most n + 1 packs (an empty first), splits add < multiple
    packs_per_step = np.zeros(steps, np.int64)
    rank_start = np.empty(steps * per_step, np.int64)
    pack_offsets = np.empty(steps * per_step + 1, np.int64)
    pack_offsets[0] = 0
    items = np.empty(steps * n, np.int64)
    refused = np.zeros(steps, np.bool_)
    need_out = np.empty(steps, np.int64)
    spare_out = np.zeros(steps, np.int64)
    bounds = np.empty(n + 2, np.int64)
    packs, filled = 0, 0
    for st in range(steps):
        base = st * n
        # next fit (get_groups_and_subsamples' first loop): a sequence that does not fit closes the pack, even an
        # empty one (a first sequence longer than the capacity leaves an empty pack 0)
        m, start, total, count = 0, 0, 0, 0
        for i in range(n):
            s = lens[base + i]
            if total + s <= cap and (max_num_seqs == 0 or count < max_num_seqs):
                total += s
                count += 1
            else:
                bounds[m] = start
                m += 1
                start, total, count = i, s, 1
        bounds[m] = start  # n >= 1: the last pack holds at least one sequence
        m += 1
        bounds[m] = n
        # raise the pack count to a multiple: pop the last sequence of the last pack with more than one into a
        # pack of its own, walking back; main asserts i > 0 (pack 0 is never split), dev i >= 0
        need = (multiple - m % multiple) % multiple
        need_out[st] = need
        left, stop, kept, ok = need, m, 0, True  # packs from `stop` on were split; `stop` keeps `kept`
        j = m - 1
        while left > 0:
            if (main_assert and j <= 0) or j < 0:
                ok = False
                break
            size = bounds[j + 1] - bounds[j]
            k = min(left, max(0, size - 1))
            left -= k
            stop, kept = j, size - k
            if left > 0:
                j -= 1
        if not ok:
            refused[st] = True
            for q in range(1 if main_assert else 0, m):
                spare_out[st] += max(0, bounds[q + 1] - bounds[q] - 1)
            continue
        first, d, rank = packs, 0, 0  # d: DP rank of the next pack (pack i*DP + d runs on DP rank d's CP ranks)
        for q in range(m):
            hi = bounds[q + 1] if q < stop else bounds[q] + (kept if q == stop else min(1, bounds[q + 1] - bounds[q]))
            for i in range(bounds[q], hi):
                items[filled] = i
                filled += 1
            rank_start[packs] = rank
            packs += 1
            pack_offsets[packs] = filled
            d += 1
            rank += cp
            if d == dp:
                d, rank = 0, 0
        for q in range(m - 1, stop - 1, -1):  # the popped sequences, one a pack, in the order they were popped
            low = bounds[q] + (kept if q == stop else min(1, bounds[q + 1] - bounds[q]))
            for i in range(bounds[q + 1] - 1, low - 1, -1):
                items[filled] = i
                filled += 1
                rank_start[packs] = rank
                packs += 1
                pack_offsets[packs] = filled
                d += 1
                rank += cp
                if d == dp:
                    d, rank = 0, 0
        packs_per_step[st] = packs - first
    return (packs_per_step, pack_offsets[: packs + 1], items[:filled], rank_start[:packs], refused, need_out, spare_out)


@dataclass(frozen=True, kw_only=True)
class DpBalancedSteps:
    """Every step's micro batches; ``refused`` steps (the real scheduler's assertion fails) have none."""

    groups: Groups
    refused: np.ndarray
    need: np.ndarray  # packs the split had to add, per step
    spare: np.ndarray  # sequences the split could move (pack 0 excluded on main), per step


def dp_balanced(
    lens: np.ndarray,
    *,
    cap: int,
    dp: int,
    cp: int,
    vpp_multiple: int | None,
    commit: str,
    max_num_seqs: int | None = None,
) -> DpBalancedSteps:
    """Schedule ``lens`` (shape ``(steps, GBS)``: padded lengths in global-id order), all steps at once.

    ``cap`` is ``max_seqlen_per_dp_cp_rank * CP``; the pack count becomes a multiple of DP (times the VPP
    micro-batch group). Micro batch i of DP rank d runs pack ``i*DP + d`` on all CP ranks of d (ranks d*CP ..
    d*CP + CP - 1: the loop at the end of get_groups_and_subsamples).

    >>> r = dp_balanced(np.array([[3, 3, 3, 1]]), cap=6, dp=4, cp=1, vpp_multiple=None, commit="dev")
    >>> r.groups.rank_lists(0, 0)
    ((0,), (2,), (3,), (1,))
    >>> bool(dp_balanced(np.array([[3, 3, 3, 1]]), cap=6, dp=4, cp=1, vpp_multiple=None, commit="main").refused[0])
    True
    """
    lens = np.ascontiguousarray(lens, dtype=np.int64)
    steps, n = lens.shape
    multiple = dp * (vpp_multiple or 1)
    got = _schedule_steps(
        lens.ravel(),
        n,
        np.int64(cap),
        np.int64(max_num_seqs or 0),
        np.int64(multiple),
        commit == "main",
        np.int64(dp),
        np.int64(cp),
    )
    per_step, pack_offsets, items, rank_start, refused, need, spare = got
    widths = np.broadcast_to(np.int64(cp), rank_start.shape)  # every pack spans the CP ranks of its DP rank
    groups = Groups(
        num_ranks=dp * cp,
        mb_offsets=np.concatenate([[0], np.cumsum(per_step // dp)]),
        group_offsets=np.arange(0, rank_start.size + 1, dp, dtype=np.int64),
        rank_start=rank_start,
        rank_count=widths,
        cp=widths,
        item_offsets=pack_offsets,
        items=items,
    )
    return DpBalancedSteps(groups=groups, refused=refused, need=need, spare=spare)
