"""The output files of one split: which packs each holds, and writing them in parallel (a process pool here, a Ray
Data pipeline on a cluster), each by ``write_shard`` so both engines write the same bytes.

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
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from advisor.data.prepared import split_file
from advisor.errors import InputError
from advisor.prepare.parquet import ROW_GROUP, write_rows
from advisor.prepare.rows import Rows, build_rows
from advisor.processes import process_pool

PLAN_ARRAYS = ("slot_record", "slot_target", "pack_offsets")


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
    vocab_size: int = -1  # ids must be below it (-1: unknown, a cache written before it was recorded)
    origin: str = ""  # the cache folder messages name (the one re-packed from, not its copy in the staging folder)


def file_names(split: str, pack_size: int, packs: int, rows_per_file: int) -> list[tuple[str, int, int]]:
    """(name, first pack, last pack) of each file: one ``{split}_{S}.idx.parquet`` (Bridge's name) when the packs
    fit in ``rows_per_file``, else numbered shards.

        >>> file_names("training", 64, 1200, 500)
        [('training_64_00000.idx.parquet', 0, 500), ('training_64_00001.idx.parquet', 500, 1000), \
('training_64_00002.idx.parquet', 1000, 1200)]
    """
    if packs <= rows_per_file:
        return [(split_file(split, pack_size), 0, packs)]
    return [
        (split_file(split, pack_size, shard=k), a, min(a + rows_per_file, packs))
        for k, a in enumerate(range(0, packs, rows_per_file))
    ]


def save_plan(plan_dir: str, slot_record: np.ndarray, slot_target: np.ndarray, pack_offsets: np.ndarray) -> None:
    os.makedirs(plan_dir, exist_ok=True)
    for name, array in zip(PLAN_ARRAYS, (slot_record, slot_target, pack_offsets), strict=True):
        np.save(os.path.join(plan_dir, f"{name}.npy"), np.asarray(array, np.int64), allow_pickle=False)


class CacheReader:
    """Reads records' tokens from the cache's ``ids.npy`` and ``mask.npy`` with ``pread``, into small arrays.

    Not a memory map: reading a record through one maps the 64 KiB around each page it touches (the kernel's
    fault-around), and records taken in pack order are spread over the whole cache, so a writer's resident memory
    grew to the cache's size (2.3 GB at 1M chat records). Read explicitly, pages stay in the page cache, shared
    and reclaimable, and a writer holds one row group's tokens.
    """

    def __init__(self, cache_dir: str):
        self.files = {}
        for name, dtype in (("ids", np.int32), ("mask", np.int8)):
            f = open(os.path.join(cache_dir, f"{name}.npy"), "rb")  # noqa: SIM115 - closed by close()
            version = np.lib.format.read_magic(f)
            header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(
                version
            )
            if header is None:
                raise ValueError(f"{name}.npy: .npy format {version} is not one prepare writes")
            shape, _, stored = header(f)
            if stored != np.dtype(dtype) or len(shape) != 1:
                raise ValueError(f"{name}.npy holds {stored}, not {np.dtype(dtype)}")  # cache.open_cache checks
            self.files[name] = (f, f.tell(), np.dtype(dtype))

    def read(self, starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tokens ``[starts[i], starts[i] + counts[i])`` of each record, back to back: (ids, mask, where each
        record begins in them)."""
        local = np.zeros(starts.size + 1, np.int64)
        np.cumsum(counts, out=local[1:])
        out = []
        for f, base, dtype in self.files.values():
            buf = np.empty(int(local[-1]), dtype)
            view = buf.data.cast("B")
            fd, size = f.fileno(), dtype.itemsize
            for a, n, at in zip(starts.tolist(), counts.tolist(), local[:-1].tolist(), strict=True):
                if n:
                    got = os.preadv(fd, [view[at * size : (at + n) * size]], base + a * size)
                    if got != n * size:
                        raise ValueError("the token cache is shorter than its offsets say")
            out.append(buf)
        return out[0], out[1], local[:-1]

    def close(self) -> None:
        for f, _, _ in self.files.values():
            f.close()


def _groups(spec: ShardSpec) -> Iterator[Rows]:
    plan = {n: np.load(os.path.join(spec.plan_dir, f"{n}.npy"), mmap_mode="r") for n in PLAN_ARRAYS}
    offsets = np.load(os.path.join(spec.cache_dir, "offsets.npy"))
    starts, stored = offsets[:-1], np.diff(offsets)
    pack_offsets = plan["pack_offsets"]
    reader = CacheReader(spec.cache_dir)
    try:
        for a in range(spec.first, spec.last, ROW_GROUP):
            b = min(a + ROW_GROUP, spec.last)
            s0, s1 = int(pack_offsets[a]), int(pack_offsets[b])
            records = np.asarray(plan["slot_record"][s0:s1])
            target = np.asarray(plan["slot_target"][s0:s1])
            # each slot's record read alone (a record is in one slot), only the tokens it keeps
            ids, mask, local = reader.read(starts[records], np.minimum(stored[records], target))
            _check_tokens(spec, ids, mask)
            yield build_rows(
                ids,
                mask,
                local,
                stored[records],
                np.arange(records.size),
                target,
                np.asarray(pack_offsets[a : b + 1]) - s0,
                pad_id=spec.pad_id,
                mask_kind=spec.mask_kind,
            )
    finally:
        reader.close()


def _check_tokens(spec: ShardSpec, ids: np.ndarray, mask: np.ndarray) -> None:
    """Token ids within the tokenizer's vocabulary and loss masks of 0 and 1, checked as the rows are built: a cache
    edited or crafted since prepare wrote it would otherwise put ids of -3 or masks of 7 into the Parquet
    Megatron-Bridge trains on, which it reads without a check (an embedding lookup out of range, a loss weighted 7)."""
    if ids.size and (int(ids.min()) < 0 or (spec.vocab_size > 0 and int(ids.max()) >= spec.vocab_size)):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        allowed = f"[0, {spec.vocab_size:,})" if spec.vocab_size > 0 else "0 and up"
        raise InputError(
            os.path.join(spec.origin or spec.cache_dir, "ids.npy"),
            None,
            f"holds the token id "
            f"{bad:,}, outside the tokenizer's ids, {allowed}: not what prepare wrote; prepare the data "
            "again",
        )
    if mask.size and ((mask != 0) & (mask != 1)).any():
        bad = int(mask[(mask != 0) & (mask != 1)][0])
        raise InputError(
            os.path.join(spec.origin or spec.cache_dir, "mask.npy"),
            None,
            f"holds the loss mask value {bad}, not 0 or 1: not what prepare wrote; prepare the data again",
        )


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
    with process_pool(min(workers, len(specs))) as pool:
        try:
            for i, _ in enumerate(pool.map(write_shard, specs)):
                progress(i + 1, len(specs))
        except BrokenProcessPool:
            raise InputError("prepare", None, "a writer process died (out of memory?): try fewer --workers") from None


def _write_rows(batch: dict) -> dict:
    """A Ray Data ``map_batches`` step: write the files whose specs the batch holds (as dicts) on this worker."""
    rows = []
    for i in range(len(batch["path"])):
        spec = {k: v[i].item() if isinstance(v[i], np.generic) else v[i] for k, v in batch.items()}
        spec["pad_id"] = None if spec["pad_id"] < 0 else spec["pad_id"]  # a column holds no None: -1 stands for it
        rows.append(write_shard(ShardSpec(**spec)))
    return {"path": batch["path"], "rows": np.array(rows, np.int64)}


def write_ray(specs: list[ShardSpec], progress: Callable[[int, int], None], workers: int | None = None) -> None:
    """The files as a Ray Data pipeline (Ray already started by the caller): ``from_items(specs)`` ->
    ``map_batches(write_shard)``, one file per batch, on as many workers as files or cores. The staging folder must
    be on storage every node sees (a shared file system) when the cluster has more than this machine."""
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    items = [
        {
            "path": sp.path,
            "first": sp.first,
            "last": sp.last,
            "plan_dir": sp.plan_dir,
            "cache_dir": sp.cache_dir,
            "pad_id": -1 if sp.pad_id is None else sp.pad_id,
            "mask_kind": sp.mask_kind,
        }
        for sp in specs
    ]
    cores = int(ray.cluster_resources().get("CPU", 1))
    written = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map_batches(
        _write_rows, batch_size=1, batch_format="numpy", concurrency=max(1, min(workers or cores, len(items)))
    )
    done = 0
    for batch in written.iter_batches(batch_size=1, batch_format="numpy"):
        done += len(batch["path"])
        progress(done, len(specs))
    if done != len(specs):
        raise RuntimeError(f"Ray Data wrote {done} of {len(specs)} files")  # a bug, not bad input
