"""The packers: one record each, with the traits callers decide on (the same packs as Megatron-Bridge's algorithm of
that name, whether the seed matters, whether a solver runs, whether a time budget returns the best so far), read by
``offline.pack``, ``prepare``, the trial, the dashboard's sweep and packing ahead. Adding a packer is one record here
and its name in ``advisor.vocabulary.Algorithm`` (checked at import).

The alternative, ``if algorithm == "column_generation"`` wherever a caller must treat a packer differently, had six
such name checks in five modules.

>>> [p.name for p in PACKERS.values() if p.exact_to_megatron_bridge]
['first_fit_shuffle', 'first_fit_decreasing']
>>> PACKERS["column_generation"].stand_in, PACKERS["first_fit_shuffle"].seeded
('first_fit_decreasing', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import numpy as np

from advisor.packing.algorithms import best_fit_decreasing, first_fit_decreasing, first_fit_shuffle, shortest_pack_first
from advisor.packing.column_generation import column_generation
from advisor.vocabulary import MEGATRON_BRIDGE_ALGORITHMS, Algorithm

Packer = Callable[..., tuple[np.ndarray, np.ndarray]]  # (counts, pack_size, seed) -> (offsets, items)


@dataclass(frozen=True, kw_only=True)
class PackerSpec:
    name: Algorithm
    run: Packer
    exact_to_megatron_bridge: bool  # the same packs, in the same order, as Megatron-Bridge's algorithm of this name
    seeded: bool  # the seed changes the packs (a shuffled order); the others are deterministic in the lengths
    solver: bool  # runs an LP solver: seconds, not milliseconds, and a lower bound on packs
    anytime: bool  # under a time budget it returns its best so far, never worse than the greedy packing it starts from
    # packs item by item in its seeded order, with progress and pause, its figures read off the packing itself and
    # the order kept across pack sizes (offline.pack's path for Megatron-Bridge's default on millions of samples)
    streamed: bool = False
    stand_in: Algorithm | None = None  # packs instead where a solver's seconds are out of place (trial, packing ahead)
    on_sweep: bool = True  # a curve on the Packing page's pack-size sweep
    source: str


PACKERS: dict[Algorithm, PackerSpec] = {
    s.name: s
    for s in (
        PackerSpec(
            name="first_fit_shuffle",
            run=first_fit_shuffle,
            exact_to_megatron_bridge=True,
            seeded=True,
            solver=False,
            anytime=False,
            streamed=True,
            source="Megatron-Bridge 0.6.2 data/packing/algorithms.py first_fit_shuffle (its default)",
        ),
        PackerSpec(
            name="first_fit_decreasing",
            run=first_fit_decreasing,
            exact_to_megatron_bridge=True,
            seeded=False,
            solver=False,
            anytime=False,
            source="Megatron-Bridge 0.6.2 data/packing/algorithms.py first_fit_decreasing",
        ),
        PackerSpec(
            name="best_fit_decreasing",
            run=best_fit_decreasing,
            exact_to_megatron_bridge=False,
            seeded=False,
            solver=False,
            anytime=False,
            source="the classic best fit decreasing (Johnson 1974), on the histogram",
        ),
        PackerSpec(
            name="shortest_pack_first",
            run=shortest_pack_first,
            exact_to_megatron_bridge=False,
            seeded=False,
            solver=False,
            anytime=False,
            on_sweep=False,  # its curve lies on best fit decreasing's at these sizes: four curves read worse than three
            source="Krell et al. 2021, graphcore/examples packedBERT pack_using_spfhp",
        ),
        PackerSpec(
            name="column_generation",
            run=column_generation,
            exact_to_megatron_bridge=False,
            seeded=False,
            solver=True,
            anytime=True,
            stand_in="first_fit_decreasing",
            on_sweep=False,  # an LP per size: seconds each
            source="Gilmore-Gomory column generation (HiGHS), rounded, first fit decreasing as the incumbent",
        ),
    )
}


def _check_vocabulary() -> None:
    """Refuse to import when the records and the plan's ``Algorithm`` disagree: a plan could then name an
    algorithm nothing packs with, or a packer exist that no plan can choose. Not an ``assert``: ``python -O``
    would skip it."""
    names = set(get_args(Algorithm))
    exact = {p.name for p in PACKERS.values() if p.exact_to_megatron_bridge}
    problems = [
        f"{what} {sorted(found)}"
        for what, found in (
            ("no packer for", names - set(PACKERS)),
            ("packers no plan can name:", set(PACKERS) - names),
            (
                "exact to Megatron-Bridge but not in MEGATRON_BRIDGE_ALGORITHMS:",
                exact ^ set(MEGATRON_BRIDGE_ALGORITHMS),
            ),
            ("stand-ins that are not packers:", {p.stand_in for p in PACKERS.values()} - names - {None}),
        )
        if found
    ]
    if problems:
        raise RuntimeError("advisor/packing/packers.py and advisor.vocabulary.Algorithm differ: " + "; ".join(problems))


_check_vocabulary()
SWEEP_ALGORITHMS: tuple[Algorithm, ...] = tuple(p.name for p in PACKERS.values() if p.on_sweep)
