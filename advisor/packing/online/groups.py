"""Micro batches of a run as flat arrays: step → micro batch → CP group (a run of DP×CP ranks) → sequences.

Every rank of a CP group holds the same sequences, split over ``cp`` ranks; the alternative, one list of sample
ids per rank as Megatron-LM's ``sample_id_groups`` keeps it, repeats each sequence CP times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Groups:
    """CSR arrays over the whole run.

    Step s runs micro batches ``mb_offsets[s]:mb_offsets[s+1]``; micro batch m holds groups
    ``group_offsets[m]:group_offsets[m+1]``; group g covers ranks ``rank_start[g] .. rank_start[g] +
    rank_count[g] - 1`` (each with ``local_cp_size`` = ``cp[g]``) and holds global ids
    ``items[item_offsets[g]:item_offsets[g+1]]`` (positions in its step's global-id order).

    >>> g = Groups.single_step(num_ranks=2, micro_batches=[[(0, 2, 2, [1, 0])]])
    >>> g.rank_lists(0, 0)
    ((1, 0), (1, 0))
    """

    num_ranks: int
    mb_offsets: np.ndarray
    group_offsets: np.ndarray
    rank_start: np.ndarray
    rank_count: np.ndarray
    cp: np.ndarray
    item_offsets: np.ndarray
    items: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.rank_start.size)

    def rank_lists(self, step: int, micro_batch: int) -> tuple[tuple[int, ...], ...]:
        """Global ids each DP×CP rank runs in one micro batch of a step (``sample_id_groups[i][rank]``)."""
        m = int(self.mb_offsets[step]) + micro_batch
        out: list[tuple[int, ...]] = [()] * self.num_ranks
        for g in range(int(self.group_offsets[m]), int(self.group_offsets[m + 1])):
            ids = tuple(int(x) for x in self.items[self.item_offsets[g] : self.item_offsets[g + 1]])
            for r in range(int(self.rank_start[g]), int(self.rank_start[g] + self.rank_count[g])):
                out[r] = ids
        return tuple(out)

    @staticmethod
    def single_step(*, num_ranks: int, micro_batches: list) -> Groups:
        """From ``[[(rank_start, rank_count, cp, ids), ...] per micro batch]``: one step, for small cases."""
        return Groups.from_lists(num_ranks, [micro_batches])

    @staticmethod
    def from_lists(num_ranks: int, steps: list) -> Groups:
        """From nested Python lists, one entry a step (see ``single_step``); an empty list is a refused step."""
        mb_offsets, group_offsets, starts, counts, cps, item_offsets, items = [0], [0], [], [], [], [0], []
        for micro_batches in steps:
            for groups in micro_batches:
                for start, count, cp, ids in groups:
                    starts.append(start)
                    counts.append(count)
                    cps.append(cp)
                    items.extend(ids)
                    item_offsets.append(len(items))
                group_offsets.append(len(starts))
            mb_offsets.append(len(group_offsets) - 1)
        i64 = np.int64
        return Groups(
            num_ranks=num_ranks,
            mb_offsets=np.array(mb_offsets, i64),
            group_offsets=np.array(group_offsets, i64),
            rank_start=np.array(starts, i64),
            rank_count=np.array(counts, i64),
            cp=np.array(cps, i64),
            item_offsets=np.array(item_offsets, i64),
            items=np.array(items, i64),
        )

    def step_slice(self, step: int) -> Groups:
        """One step as a run of its own."""
        m0, m1 = int(self.mb_offsets[step]), int(self.mb_offsets[step + 1])
        g0, g1 = int(self.group_offsets[m0]), int(self.group_offsets[m1])
        i0, i1 = int(self.item_offsets[g0]), int(self.item_offsets[g1])
        return Groups(
            num_ranks=self.num_ranks,
            mb_offsets=np.array([0, m1 - m0], np.int64),
            group_offsets=self.group_offsets[m0 : m1 + 1] - g0,
            rank_start=self.rank_start[g0:g1],
            rank_count=self.rank_count[g0:g1],
            cp=self.cp[g0:g1],
            item_offsets=self.item_offsets[g0 : g1 + 1] - i0,
            items=self.items[i0:i1],
        )

    @staticmethod
    def join(num_ranks: int, runs: list[Groups]) -> Groups:
        """Runs one after the other (their steps in order).

        >>> a = Groups.single_step(num_ranks=1, micro_batches=[[(0, 1, 1, [0, 1])]])
        >>> Groups.join(1, [a, a.step_slice(0)]).rank_lists(1, 0)
        ((0, 1),)
        """

        def chained(name: str) -> np.ndarray:  # CSR offsets: each run's shifted by the totals before it
            shift, out = 0, []
            for run in runs:
                offsets = getattr(run, name)
                out.append(offsets[1:] + shift)
                shift += int(offsets[-1])
            return np.concatenate([np.zeros(1, np.int64)] + out)

        def stacked(name: str) -> np.ndarray:
            return np.concatenate([np.asarray(getattr(run, name), np.int64) for run in runs])

        return Groups(
            num_ranks=num_ranks,
            mb_offsets=chained("mb_offsets"),
            group_offsets=chained("group_offsets"),
            rank_start=stacked("rank_start"),
            rank_count=stacked("rank_count"),
            cp=stacked("cp"),
            item_offsets=chained("item_offsets"),
            items=stacked("items"),
        )
