"""Near-optimal packing by Gilmore-Gomory column generation (HiGHS's LP, knapsack pricing in numba), then
rounding; its LP optimum is a lower bound on the packs of any algorithm. The alternative is the greedy kernels
in ``algorithms``: much faster (this runs up to ``time_limit``, 30 s), but with no bound to compare against.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from advisor.packing.algorithms import first_fit_decreasing  # the incumbent, and what packs the remainder

__all__ = ["column_generation"]


@njit(cache=True, nogil=True)
def _price_pattern(duals, lengths, pack_size):
    """Unbounded knapsack: the pack of most total dual value (Gilmore-Gomory pricing), O(pack_size * types)."""
    best = np.zeros(pack_size + 1)
    last = np.full(pack_size + 1, -1, np.int64)
    for t in range(duals.size):
        w, val = lengths[t], duals[t]
        if val <= 0:
            continue
        for c in range(w, pack_size + 1):
            if best[c - w] + val > best[c] + 1e-12:
                best[c] = best[c - w] + val
                last[c] = t
    c = np.argmax(best)
    value = best[c]
    pattern = np.zeros(duals.size, np.int64)
    while c > 0 and last[c] >= 0:
        t = last[c]
        pattern[t] += 1
        c -= lengths[t]
    return value, pattern


def column_generation(
    counts: np.ndarray,
    pack_size: int,
    seed: int | None = None,
    *,
    time_limit: float = 30.0,
    progress=None,
    stats: dict | None = None,
):
    """Near-optimal packing of a histogram: Gilmore-Gomory column generation, then rounding.

    Solves the LP relaxation of bin packing over pack patterns (HiGHS, warm-started; patterns priced by a
    knapsack over the duals), packs floor(x) copies of each pattern, and first-fit-decreases what is left. The
    LP optimum is a lower bound on packs for *any* algorithm, tighter than L2: on SQuAD@384 it proves no
    packing beats 99.00 % (L2 suggests 99.85 %). Stops early once Farley's bound shows the LP cannot improve
    the rounded bound. ``stats`` (if given) receives ``lp_bound``, ``iterations``, ``budget_cut`` (the time limit
    stopped the search before the LP was solved) and ``greedy_packs``.

    Anytime: first fit decreasing's packing is the incumbent, and what the search returns is never more packs
    (a budget cut once left the LP's rounding 631 packs where first fit decreasing gives 630).

    >>> offsets, items = column_generation(np.array([0, 0, 3, 2, 0]), 4)   # 2,2,2,3,3 into packs of 4
    >>> sorted(sorted(items[a:b].tolist()) for a, b in zip(offsets[:-1], offsets[1:]))
    [[2], [2, 2], [3], [3]]
    """
    import highspy  # here, not at the top: only this algorithm needs the solver, so only it pays the import

    counts = np.ascontiguousarray(counts, dtype=np.int64)
    lengths = np.nonzero(counts)[0]
    lengths = lengths[lengths > 0]
    if lengths.size == 0:
        return first_fit_decreasing(counts, pack_size)
    demand = counts[lengths].astype(np.float64)
    n = lengths.size
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    h.addRows(n, demand, np.full(n, inf), 0, np.array([0], np.int32), np.array([], np.int32), np.array([], float))
    patterns: list[tuple[np.ndarray, np.ndarray]] = []

    def add(idx, mult):
        h.addCol(1.0, 0.0, inf, idx.size, idx.astype(np.int32), mult.astype(np.float64))
        patterns.append((idx, mult))

    for t, v in enumerate(lengths):  # start from packs of one length each
        add(np.array([t]), np.array([min(pack_size // v, counts[v])]))
    start, iterations, bound = time.perf_counter(), 0, 0.0
    while True:
        h.run()
        z = h.getInfo().objective_function_value
        duals = np.abs(np.asarray(h.getSolution().row_dual))  # >= rows of a minimisation: duals >= 0
        value, pattern = _price_pattern(duals, lengths.astype(np.int64), pack_size)
        iterations += 1
        bound = max(bound, z / max(value, 1.0))  # Farley: the LP optimum is at least z / max pattern value
        if value <= 1 + 1e-9 or np.ceil(bound - 1e-9) >= np.ceil(z - 1e-9) or time.perf_counter() - start > time_limit:
            break
        if progress is not None and iterations % 50 == 0:
            progress("column generation", min(0.99, bound / z))
        idx = np.nonzero(pattern)[0]
        add(idx, pattern[idx])
    budget_cut = value > 1 + 1e-9 and np.ceil(bound - 1e-9) < np.ceil(z - 1e-9)
    if value <= 1 + 1e-9:
        bound = z
    x = np.floor(np.asarray(h.getSolution().col_value) + 1e-9).astype(np.int64)
    greedy = first_fit_decreasing(counts, pack_size)  # the incumbent the result must not be worse than
    if stats is not None:
        stats.update(
            lp_bound=float(bound), iterations=iterations, budget_cut=bool(budget_cut), greedy_packs=greedy[0].size - 1
        )
    avail = counts.copy()
    pack_lists: list[np.ndarray] = []
    pack_sizes: list[np.ndarray] = []
    for p in np.nonzero(x)[0]:
        idx, mult = patterns[p]
        # a covering LP may over-produce a length; take only whole copies that the samples left can fill, and
        # leave the rest to first fit decreasing below
        copies = int(min(x[p], (avail[lengths[idx]] // mult).min()))
        if copies == 0:
            continue
        avail[lengths[idx]] -= copies * mult
        one = np.repeat(lengths[idx][::-1], mult[::-1]).astype(np.int32)
        pack_lists.append(np.tile(one, copies))
        pack_sizes.append(np.full(copies, one.size, np.int64))
    zeros = avail[0]
    avail[0] = 0
    rest_offsets, rest_items = first_fit_decreasing(avail, pack_size)
    sizes = np.concatenate(pack_sizes + [np.diff(rest_offsets)])
    items = np.concatenate(pack_lists + [rest_items]) if pack_lists else rest_items
    if zeros:  # length-0 samples join the first pack, as first fit would put them
        items = np.concatenate([items[: sizes[0]], np.zeros(zeros, np.int32), items[sizes[0] :]])
        sizes[0] += zeros
    if sizes.size > greedy[0].size - 1:
        return greedy
    return np.concatenate([[0], np.cumsum(sizes)]), items
