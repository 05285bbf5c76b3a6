"""dev's ``DefaultDynamicCPScheduler``: each micro batch gives every sequence its own CP group size.

Followed: megatron/core/datasets/data_schedule.py ``DefaultDynamicCPScheduler`` and data_schedule_utils.py
``next_hdp_group_packing_aware``, ``align_sample_id_groups``, ``dcp_gpus_needed``, ``build_packed_microbatches``
(dev d48bd6be). The alternative, those functions run as written, rebuild per-rank lists and sets for every
candidate (quadratic in the global batch); here a CP group is one contiguous run of ranks with one clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from advisor.packing.online.groups import Groups

CAP_DELTA = 0.05  # data_schedule_utils._DYNAMIC_CP_WORKLOAD_CAP_DELTA
# refusal codes
OK, TOO_LONG, NONE_FITS, PUSH_PAST_END = 0, 1, 2, 3
REASONS = {
    TOO_LONG: "next_hdp_group_packing_aware asserts: a sequence of {value} tokens needs CP size {extra} but only "
    "{ranks} DPxCP ranks are available",
    NONE_FITS: "next_hdp_group_packing_aware asserts: no sequence fits the full DPxCP group ({value} tokens "
    "at the head)",
    PUSH_PAST_END: "next_hdp_group_packing_aware raises IndexError: fill_empty_gpus_once pushes ranks past the "
    "last one while widening a CP group",
}


@njit(cache=True, nogil=True)
def _cp_needed(s, per_rank, min_cp):
    """``dcp_gpus_needed``: the power of two 2**ceil(log2(s / per_rank)), at least 1 and ``min_cp``."""
    p = 1
    while p * per_rank < s:
        p *= 2
    return max(p, min_cp)


@njit(cache=True, nogil=True)
def _next_micro_batch(lens, n, ranks, per_rank, min_cp, assign, gsize, gstart, gexec, gpack):
    """One call of ``next_hdp_group_packing_aware`` on the first ``n`` of ``lens`` (sorted, longest first).

    Groups are kept instead of ranks: a group's members are contiguous (new groups take the lowest free
    ranks, which all sit idle at 0, and widening shifts later groups as a block) and share one clock, so a
    candidate's projected maximum is max(its clock + cost, the largest other clock). Sets ``assign[k]`` to the
    group of sequence k, -1 for a leftover; returns ``(groups, status, detail)``.
    """
    tall = lens[0]
    cap = float(tall) * float(per_rank) * (1.0 + CAP_DELTA)
    cp = _cp_needed(tall, per_rank, min_cp)
    if cp > ranks:
        return 0, TOO_LONG, cp
    gstart[0], gsize[0], gpack[0], gexec[0] = 0, cp, tall / cp, 0.0 + (tall * tall) / cp
    assign[0] = 0
    groups, free_from = 1, cp
    for k in range(1, n):
        s = lens[k]
        top, top_at, second = -1.0, -1, -1.0  # the two largest clocks
        for g in range(groups):
            v = gexec[g]
            if v > top:
                second, top, top_at = top, v, g
            elif v > second:
                second = v
        found, best, best_cp, best_g = False, 0.0, 0, -1
        c = _cp_needed(s, per_rank, min_cp)
        while c <= ranks:
            cost = (s * s) / c
            for g in range(groups):  # join an existing group of this size ("add")
                if gsize[g] != c or gpack[g] + s / c > per_rank:
                    continue
                proj = max(gexec[g] + cost, max(second if g == top_at else top, 0.0))
                if proj <= cap and (not found or proj < best):
                    found, best, best_cp, best_g = True, proj, c, g
            if ranks - free_from >= c:  # open a group on the lowest free ranks ("new")
                proj = max(cost, max(top, 0.0))
                if proj <= cap and (not found or proj < best):
                    found, best, best_cp, best_g = True, proj, c, -1
            c *= 2
        if not found:
            assign[k] = -1
            continue
        if best_g >= 0:
            gpack[best_g] += s / best_cp
            gexec[best_g] += (s * s) / best_cp
            assign[k] = best_g
        else:
            gstart[groups], gsize[groups], gpack[groups] = free_from, best_cp, s / best_cp
            gexec[groups] = 0.0 + (s * s) / best_cp
            assign[k] = groups
            free_from += best_cp
            groups += 1
    while free_from < ranks:  # idle ranks left: widen the narrowest group, else one group of all ranks
        narrow = gsize[0]
        for g in range(groups):
            narrow = min(narrow, gsize[g])
        wider = min(2 * narrow, ranks)
        extra = wider - narrow
        widened = False
        for g in range(groups):  # fill_empty_gpus_once: the first narrowest group that can grow in place
            end = gstart[g] + gsize[g] - 1
            if gsize[g] != narrow or end + 1 > free_from or end + extra >= ranks:
                continue
            if free_from - 1 > end and free_from - 1 + extra >= ranks:
                return groups, PUSH_PAST_END, extra
            for h in range(groups):
                if h != g and gstart[h] > end:
                    gstart[h] += extra
            gsize[g] = wider
            free_from += extra
            widened = True
            break
        if not widened:  # fill_with_full_dpxcp_group: next fit of every sequence of this call, 1/ranks each
            packed, taken = 0.0, 0
            for k in range(n):
                per = lens[k] / ranks
                if packed + per <= per_rank:
                    assign[k] = 0
                    packed += per
                    taken += 1
                else:
                    assign[k] = -1
            if taken == 0:
                return 0, NONE_FITS, 0
            gstart[0], gsize[0] = 0, ranks
            return 1, OK, 0
    return groups, OK, 0


@njit(cache=True, nogil=True)
def _schedule_steps(order_lens, order_ids, n, ranks, per_rank, min_cp):
    """Every step: ``next_hdp_group_packing_aware`` until no sequence is left (``get_groups_and_subsamples``).

    ``order_lens``/``order_ids`` hold each step's lengths and global ids sorted longest first (ties by id).
    """
    steps = order_lens.size // n
    cap_items = steps * n
    mb_count = np.zeros(steps, np.int64)
    g_start = np.empty(cap_items, np.int64)
    g_size = np.empty(cap_items, np.int64)
    g_mb_groups = np.zeros(cap_items + 1, np.int64)  # groups per micro batch, over the run
    item_offsets = np.zeros(cap_items + 1, np.int64)
    items = np.empty(cap_items, np.int64)
    status = np.zeros(steps, np.int64)
    detail = np.zeros((steps, 2), np.int64)
    gsize = np.empty(ranks, np.int64)
    gstart = np.empty(ranks, np.int64)
    gexec = np.empty(ranks, np.float64)
    gpack = np.empty(ranks, np.float64)
    assign = np.empty(n, np.int64)
    count = np.empty(ranks + 1, np.int64)
    rem_len = np.empty(n, np.int64)
    rem_id = np.empty(n, np.int64)
    mbs, groups_done, filled = 0, 0, 0
    for st in range(steps):
        mbs0, groups0, filled0 = mbs, groups_done, filled
        nrem = n
        rem_len[:] = order_lens[st * n : (st + 1) * n]
        rem_id[:] = order_ids[st * n : (st + 1) * n]
        while nrem > 0:
            ng, code, extra = _next_micro_batch(
                rem_len, nrem, ranks, per_rank, min_cp, assign, gsize, gstart, gexec, gpack
            )
            if code != OK:
                status[st] = code
                detail[st, 0], detail[st, 1] = rem_len[0], extra
                mbs, groups_done, filled = mbs0, groups0, filled0  # a refused step keeps nothing
                break
            count[: ng + 1] = 0
            for k in range(nrem):  # counting sort of this micro batch's sequences by group, keeping order
                if assign[k] >= 0:
                    count[assign[k] + 1] += 1
            for g in range(ng):
                count[g + 1] += count[g]
                g_start[groups_done + g] = gstart[g]
                g_size[groups_done + g] = gsize[g]
                item_offsets[groups_done + g + 1] = filled + count[g + 1]
            kept = 0
            for k in range(nrem):
                g = assign[k]
                if g >= 0:
                    items[filled + count[g]] = rem_id[k]
                    count[g] += 1
                else:
                    rem_len[kept], rem_id[kept] = rem_len[k], rem_id[k]
                    kept += 1
            filled += nrem - kept
            groups_done += ng
            g_mb_groups[mbs + 1] = groups_done
            mbs += 1
            nrem = kept
        mb_count[st] = mbs - mbs0
    return (
        mb_count,
        g_mb_groups[: mbs + 1],
        g_start[:groups_done],
        g_size[:groups_done],
        item_offsets[: groups_done + 1],
        items[:filled],
        status,
        detail,
    )


@dataclass(frozen=True, kw_only=True)
class DynamicCPSteps:
    """Every step's micro batches; ``reasons[s]`` is None unless the real scheduler fails on step s."""

    groups: Groups
    reasons: tuple[str | None, ...]
    defects: tuple[str | None, ...]  # steps the real code runs but where some sequence reaches no rank


def dynamic_cp(
    lens: np.ndarray,
    *,
    dp: int,
    cp: int,
    max_seqlen_per_dp_cp_rank: int,
    min_cp: int = 1,
    vpp_multiple: int | None = None,
) -> DynamicCPSteps:
    """Schedule ``lens`` (shape ``(steps, GBS)``: padded lengths in global-id order) with dynamic CP.

    >>> r = dynamic_cp(np.array([[6144, 2048]]), dp=1, cp=2, max_seqlen_per_dp_cp_rank=4096)
    >>> r.groups.rank_lists(0, 0)   # test_default_dynamic_cp_scheduler_uses_packing_aware_grouping_by_default
    ((0, 1), (0, 1))
    """
    lens = np.ascontiguousarray(lens, dtype=np.int64)
    steps, n = lens.shape
    ranks = dp * cp
    order = np.argsort(-lens, axis=1, kind="stable")  # sorted(..., key=len, reverse=True) keeps id order on ties
    got = _schedule_steps(
        np.take_along_axis(lens, order, 1).ravel(),
        order.ravel(),
        n,
        ranks,
        np.int64(max_seqlen_per_dp_cp_rank),
        np.int64(min_cp),
    )
    mb_count, group_offsets, g_start, g_size, item_offsets, items, status, detail = got
    reasons = tuple(
        None if code == OK else REASONS[int(code)].format(value=int(d[0]), extra=int(d[1]), ranks=ranks)
        for code, d in zip(status, detail, strict=True)
    )
    groups = Groups(
        num_ranks=ranks,
        mb_offsets=np.concatenate([[0], np.cumsum(mb_count)]).astype(np.int64),
        group_offsets=group_offsets,
        rank_start=g_start,
        rank_count=g_size,
        cp=g_size.copy(),
        item_offsets=item_offsets,
        items=items,
    )
    defects: tuple[str | None, ...] = (None,) * steps
    if vpp_multiple is not None and vpp_multiple > 1:
        groups, reasons, defects = _align_run(groups, reasons, vpp_multiple)
    return DynamicCPSteps(groups=groups, reasons=reasons, defects=defects)


# ---------------------------------------------------------------------------------------------- VPP alignment
class _Refused(Exception):
    """The real code raises (or never returns) here: the step is refused with this reason."""


def _align_run(groups: Groups, reasons, multiple: int):
    """``align_sample_id_groups`` on every step whose micro-batch count is not a multiple (plain Python: VPP
    runs only); the other steps keep their arrays."""
    runs, new_reasons = [], list(reasons)
    defects: list = []
    for st in range(groups.mb_offsets.size - 1):
        nmb = int(groups.mb_offsets[st + 1] - groups.mb_offsets[st])
        if new_reasons[st] is not None or nmb % multiple == 0:
            runs.append(groups.step_slice(st))
            defects.append(None)
            continue
        mbs = [list(groups.rank_lists(st, m)) for m in range(nmb)]
        try:
            mbs = align_micro_batches(mbs, multiple)
            converted = [_rank_lists_to_groups(mb, groups.num_ranks) for mb in mbs]
            defects.append(_unreached(mbs, groups.num_ranks))
        except _Refused as e:
            new_reasons[st], converted = str(e), []
            defects.append(None)
        runs.append(Groups.from_lists(groups.num_ranks, [converted]))
    return Groups.join(groups.num_ranks, runs), tuple(new_reasons), tuple(defects)


def _unreached(mbs: list, num_ranks: int) -> str | None:
    """Sequences only on rank lists past the last rank (a widened list grew): sent nowhere, never trained."""
    listed = {i for mb in mbs for ids in mb for i in ids}
    lost = sorted(listed - {i for mb in mbs for ids in mb[:num_ranks] for i in ids})
    if not lost:
        return None
    return (
        f"align_sample_id_groups leaves {len(lost)} sequence(s) (global ids {lost[:5]}) only on rank lists "
        f"past the last of {num_ranks} ranks: no rank trains them"
    )


def _rank_lists_to_groups(mb: list, num_ranks: int) -> list:
    """Runs of equal rank lists as (start, count, local_cp_size, ids); local_cp_size counts every list holding
    the rank's first id, as ``build_packed_microbatches`` does (lists past the last rank included)."""
    out, r = [], 0
    while r < num_ranks:
        if not mb[r]:
            raise _Refused("build_packed_microbatches raises IndexError: a rank has no sequence")
        end = r + 1
        while end < num_ranks and mb[end] == mb[r]:
            end += 1
        first = mb[r][0]
        out.append((r, end - r, sum(1 for ids in mb if first in ids), list(mb[r])))
        r = end
    return out


def align_micro_batches(mbs: list, multiple: int) -> list:
    """Split tail micro batches until their count is a multiple of ``multiple`` (``align_sample_id_groups``).

    A micro batch is a list of per-rank tuples of ids. Walking back from the last, one whose CP groups are not
    all one splits at the first group boundary at or past half the ranks: the ranks from there on become the
    micro batch in place, the ranks before it a new one at the end, each widened back to every rank.

    >>> align_micro_batches([[(0,), (0,), (1,), (2,)]], 2)
    [[(1,), (1,), (2,), (2,)], [(0,), (0,), (0,), (0,)]]
    """
    remainder = (-len(mbs)) % multiple
    i, misses = len(mbs) - 1, 0
    while remainder > 0:
        if i < 0:
            if misses >= len(mbs):
                raise _Refused("align_sample_id_groups asserts: no tail microbatch has enough ids to split")
            i = len(mbs) - 1
        tail, head = _split(mbs[i])
        if tail is not None:
            mbs[i] = tail
            mbs.append(head)
            remainder -= 1
            misses = 0
        else:
            misses += 1
        i -= 1
    return mbs


def _runs(mb: list) -> list[int]:
    """Boundaries of the CP groups of a micro batch: ranks holding the first id of the rank at a boundary."""
    bounds, prev = [0], 0
    while bounds[-1] != len(mb):
        start = bounds[-1]
        if not mb[start]:
            raise _Refused("align_sample_id_groups raises IndexError: an empty rank list inside a micro batch")
        first, size = mb[start][0], 0
        while start + size < len(mb) and first in mb[start + size]:
            size += 1
        if prev and size > prev:
            raise _Refused(f"align_sample_id_groups asserts: CP size is not decreasing (prev={prev}, cur={size})")
        bounds.append(start + size)
        prev = size
    return bounds


def _split(mb: list):
    """``split_group``: (tail part, head part), each widened to all ranks, or (None, None) for one CP group."""
    width = len(mb)
    bounds = _runs(mb)
    if len(bounds) == 2:
        return None, None
    cut = next(b for b in bounds if b >= width // 2)
    head = mb[:cut] + [()] * (width - cut)
    tail = mb[cut:] + [()] * cut
    head = _widen(head)
    return _widen(tail), head


def _widen(mb: list) -> list:
    """``fill_empty_by_expanding_cp``: double CP groups into the empty tail until the last rank has work."""
    while not mb[-1]:
        before = list(mb)
        _widen_once(mb)
        if mb == before:
            raise _Refused(
                "align_sample_id_groups never returns: fill_empty_by_expanding_cp cannot widen any CP "
                f"group into the {sum(1 for x in mb if not x)} idle rank(s) of {len(mb)}"
            )
    return mb


def _widen_once(mb: list) -> None:
    """``fill_empty`` (in place): scanning CP groups from the right, double the group to the right of the first
    wider one, shifting what follows into the idle tail; with none wider, double the first group if it fits.
    Python slice assignment is kept as the original uses it, lengths and all: a doubled group wider than the idle
    tail lengthens the list past the rank count."""
    idle = sum(1 for x in mb if not x)
    i, prev = len(mb) - 1 - idle, 0
    while i >= 0:
        first, size = mb[i][0], 0
        while first in mb[i] and i >= 0:  # mb[-1] (idle) stops the walk at i == -1
            size += 1
            i -= 1
        if prev and size > prev:
            start = i + 1 + size  # the narrower group just to the right
            end = prev - idle if prev - idle < 0 else None
            mb[start + 2 * prev : end] = mb[start + prev : -idle]
            mb[start + prev : start + 2 * prev] = mb[start : start + prev]
            return
        if size <= idle and i == -1:
            end = size - idle if size - idle < 0 else None
            mb[2 * size : end] = mb[size:-idle]
            mb[size : 2 * size] = mb[0:size]
            return
        prev = size
