"""The output files of one split: which packs each holds, and writing them in parallel (a process pool here, Ray
tasks on a cluster), each by ``write_shard`` so both engines write the same bytes.

Alternative: one process writing one file, as Megatron-Bridge does (its whole data set in one ``pa.table``). Here
a split of more than ``rows_per_file`` packs becomes ``training_{S}_{k:05d}.idx.parquet`` files of
``rows_per_file`` packs each (100,000 by default: 200 full row groups of 500);
Bridge's reader takes a glob of them (``_resolve_parquet_paths`` sorts the names). The slot plan (which record in
which slot, stored with how many tokens) is written beside the cache as ``.npy`` and read memory-mapped by each
writer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from advisor.errors import InputError
from advisor.prepare.parquet import ROW_GROUP, write_rows
from advisor.prepare.rows import Rows, build_rows

PLAN_ARRAYS = ("slot_record", "slot_target", "pack_offsets")
REMAP_GROUPS = 16  # row groups read through one mapping of the cache


@dataclass(frozen=True, kw_only=True)
class ShardSpec:
    """One output file: packs ``[first, last)`` of the plan in ``plan_dir``, tokens from the cache ``cache_dir``."""

    path: str
    first: int
    last: int
    plan_dir: str
    cache_dir: str
    pad_id: int | None
    mask_kind: str


def file_names(split: str, pack_size: int, packs: int, rows_per_file: int) -> list[tuple[str, int, int]]:
    """(name, first pack, last pack) of each file: one ``{split}_{S}.idx.parquet`` (Bridge's name) when the packs
    fit in ``rows_per_file``, else numbered shards.

        >>> file_names("training", 64, 1200, 500)
        [('training_64_00000.idx.parquet', 0, 500), ('training_64_00001.idx.parquet', 500, 1000), \
('training_64_00002.idx.parquet', 1000, 1200)]
    """
    if packs <= rows_per_file:
        return [(f"{split}_{pack_size}.idx.parquet", 0, packs)]
    return [(f"{split}_{pack_size}_{k:05d}.idx.parquet", a, min(a + rows_per_file, packs))
            for k, a in enumerate(range(0, packs, rows_per_file))]


def save_plan(plan_dir: str, slot_record: np.ndarray, slot_target: np.ndarray, pack_offsets: np.ndarray) -> None:
    os.makedirs(plan_dir, exist_ok=True)
    for name, array in zip(PLAN_ARRAYS, (slot_record, slot_target, pack_offsets), strict=True):
        np.save(os.path.join(plan_dir, f"{name}.npy"), np.asarray(array, np.int64), allow_pickle=False)


def _groups(spec: ShardSpec) -> Iterator[Rows]:
    plan = {n: np.load(os.path.join(spec.plan_dir, f"{n}.npy"), mmap_mode="r") for n in PLAN_ARRAYS}
    offsets = np.load(os.path.join(spec.cache_dir, "offsets.npy"))
    starts, stored = offsets[:-1], np.diff(offsets)
    pack_offsets = plan["pack_offsets"]
    ids = mask = None
    for k, a in enumerate(range(spec.first, spec.last, ROW_GROUP)):
        if k % REMAP_GROUPS == 0:
            # mapped afresh every few row groups: the pages the gathers touched leave this process, so its memory
            # stays bounded by those row groups, not by the cache's size
            ids = np.load(os.path.join(spec.cache_dir, "ids.npy"), mmap_mode="r")
            mask = np.load(os.path.join(spec.cache_dir, "mask.npy"), mmap_mode="r")
        b = min(a + ROW_GROUP, spec.last)
        s0, s1 = int(pack_offsets[a]), int(pack_offsets[b])
        yield build_rows(ids, mask, starts, stored, np.asarray(plan["slot_record"][s0:s1]),
                         np.asarray(plan["slot_target"][s0:s1]), np.asarray(pack_offsets[a:b + 1]) - s0,
                         pad_id=spec.pad_id, mask_kind=spec.mask_kind)


def write_shard(spec: ShardSpec) -> int:
    """Write one output file; returns its rows."""
    return write_rows(spec.path, _groups(spec))


def write_local(specs: list[ShardSpec], workers: int, progress: Callable[[int, int], None]) -> None:
    """The files by a process pool (one file per task), or in this process when there is one file or worker."""
    if workers <= 1 or len(specs) <= 1:
        for i, spec in enumerate(specs):
            write_shard(spec)
            progress(i + 1, len(specs))
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(specs)), mp_context=get_context("fork")) as pool:
        try:
            for i, _ in enumerate(pool.map(write_shard, specs)):
                progress(i + 1, len(specs))
        except BrokenProcessPool:
            raise InputError("prepare", None, "a writer process died (out of memory?): try fewer --workers") from None


def write_ray(specs: list[ShardSpec], progress: Callable[[int, int], None]) -> None:
    """The files as Ray tasks (Ray already started by the caller); the staging folder must be on storage every
    node sees (a shared file system) when the cluster has more than this machine."""
    import ray

    task = ray.remote(write_shard)
    pending = [task.remote(spec) for spec in specs]
    done = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)
        done += len(ready)
        progress(done, len(specs))
