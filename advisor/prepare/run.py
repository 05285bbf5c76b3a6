"""``prepare``: raw SFT or chat data in, the packed data set Megatron-Bridge trains on out.

Followed: megatron/bridge/data/builders/gpt_sft.py (``GPTSFTDatasetBuilder.prepare_packed_data``: training, then
validation, each by offline.py ``prepare_gpt_sft_packed_data`` with the same seed, metadata appended in that
order). The alternative is letting Megatron-Bridge prepare it on rank 0 at the start of training: one Python
process tokenizing ~100-200 records/s and packing in pure Python (1M records: hours, and NCCL timeouts on the
other ranks meanwhile), again for every pack size. Here: the tokenizer engine's workers (a process pool or Ray
tasks) tokenize shards and write their tokens; the driver packs the gathered lengths (``advisor.packing``, the
same packs as Bridge for its algorithms, or fewer with the advisor's), assigns records to slots with Bridge's
random stream (``fill``), and workers write the Parquet files (``shards``). Everything goes into a staging folder
that takes OUT's name at the end; the tokens stay in ``OUT/.tokens`` (``cache``) for ``--from-cache``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from advisor.data.lengths import LengthHistogram
from advisor.data.prepared import metadata_file, written_by_prepare
from advisor.data.tokenize.engine import ENGINES, TokenizeJob, job_settings, job_tokenizer, tokenize
from advisor.data.tokenize.records import data_files_and_notes
from advisor.data.tokenize.sequences import mask_kind
from advisor.errors import InputError
from advisor.packing.config import MB_DEFAULT_SEED, PackingConfig
from advisor.packing.offline import PackingResult, pack
from advisor.packing.packers import PACKERS
from advisor.prepare import cache as token_cache
from advisor.prepare.fill import assign_slots, runtime_of
from advisor.prepare.metadata import metadata_text
from advisor.prepare.shards import ShardSpec, file_names, save_plan, write_local, write_ray
from advisor.safe_write import discard_folder, publish_folder, staging_folder, sweep_stale, write_text
from advisor.vocabulary import MB_DEFAULT_ALGORITHM, Algorithm

SPLITS = ("training", "validation")
ROWS_PER_FILE = 100_000  # packs per Parquet file before the split is sharded (200 row groups)
Progress = Callable[[str, float], None]


@dataclass(frozen=True, kw_only=True)
class PrepareOptions:
    """How to pack (Megatron-Bridge's ``PackedSequenceSpecs`` and dataset seed, its defaults) and where to run.

    ``max_seq_length``: the dataset's (``max_single_sequence_length or seq_length``), default the pack size.
    ``rows_per_file``: packs per file before a split is written as numbered shards (a multiple of the 500-row row
    groups keeps every file's row groups full).
    """

    pack_size: int
    algorithm: Algorithm = MB_DEFAULT_ALGORITHM
    seed: int = MB_DEFAULT_SEED
    pad_seq_to_mult: int = 1
    max_seq_length: int | None = None
    rows_per_file: int = ROWS_PER_FILE
    engine: str = "local"
    workers: int | None = None
    address: str | None = None
    force: bool = False

    def packing(self) -> PackingConfig:
        try:  # overlong="skip": prepare decides per record (fill.runtime_of); the histogram holds runtime + 1
            return PackingConfig(
                pack_size=self.pack_size,
                algorithm=self.algorithm,
                seed=self.seed,
                pad_seq_to_mult=self.pad_seq_to_mult,
                max_seq_length=self.max_seq_length,
                overlong="skip",
            )
        except ValueError as e:
            raise InputError("prepare", None, str(e)) from None

    @property
    def stored_max(self) -> int:
        """The dataset's max_seq_length as ``tokenize_dataset`` builds it: one more when padding to a multiple
        (labels are the shifted input)."""
        cfg = self.packing()
        return cfg.effective_max_seq_length + (1 if cfg.multiple > 1 else 0)


@dataclass(frozen=True, kw_only=True)
class SplitResult:
    """One split as written: records read, left out and cut, and its packs."""

    split: str
    source: str
    records_read: int
    tokenized: int  # records the tokenizer built (the others are in ``excluded``)
    skipped: int  # longer than max_seq_length (chat; Bridge's create_hist leaves them out)
    truncated: int  # cut by the dataset (SFT) or by the padding to a multiple
    packed: int
    packs: int
    metadata: dict
    efficiency: float  # % unrounded
    packing_factor: float  # unrounded
    lower_bound: int  # no packing of these records needs fewer packs (the best of the advisor's bounds)
    files: tuple[str, ...]
    excluded: tuple = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PrepareResult:
    out: str
    options: PrepareOptions
    splits: tuple[SplitResult, ...]
    files: tuple[str, ...]  # names in OUT, the cache aside
    seconds: float
    tokenize_seconds: float
    from_cache: str | None = None
    notes: tuple[str, ...] = field(default=())

    def specs(self) -> dict:
        """Megatron-Bridge's ``PackedSequenceSpecs`` fields that read this folder: a split's file, or a glob of its
        shards (never the folder: Bridge's reader would take the validation file into training too)."""
        out: dict[str, int | str] = {
            "packed_sequence_size": self.options.pack_size,
            "pad_seq_to_mult": self.options.pad_seq_to_mult,
        }
        if self.options.max_seq_length:
            out["max_single_sequence_length"] = self.options.max_seq_length
        for s in self.splits:
            spec = s.files[0] if len(s.files) == 1 else f"{s.split}_{self.options.pack_size}_*.idx.parquet"
            out["packed_train_data_path" if s.split == "training" else "packed_val_data_path"] = os.path.join(
                self.out, spec
            )
        out["packed_metadata_path"] = os.path.join(self.out, metadata_file(self.options.pack_size))
        return out


def prepare(
    out: str,
    options: PrepareOptions,
    *,
    train: TokenizeJob | None = None,
    validation: TokenizeJob | None = None,
    from_cache: str | None = None,
    progress: Progress | None = None,
) -> PrepareResult:
    """Write the packed data set into the folder ``out`` (new, or empty, or any with ``options.force``) from raw
    data (``train``, ``validation`` jobs) or from the token cache of a folder prepared before (``from_cache``)."""
    started = time.perf_counter()
    say = progress or (lambda what, done: None)
    if (train is None) == (from_cache is None):
        raise InputError("prepare", None, "give either the raw data (and its tokenizer) or --from-cache, not both")
    if not isinstance(options.rows_per_file, int) or options.rows_per_file < 1:
        raise InputError("prepare", "rows_per_file", f"must be a positive whole number, not {options.rows_per_file!r}")
    if options.engine not in ENGINES:
        raise InputError("prepare", "engine", f"{options.engine!r} is not one of {', '.join(ENGINES)}")
    cfg = options.packing()
    inputs = _inputs(train, validation, from_cache)
    swept = tuple(sweep_stale(out))  # an earlier run killed outright (SIGKILL) left its staging folder here
    staging = staging_folder(out, force=options.force, inputs=inputs, owned=written_by_prepare)
    tokenize_seconds = 0.0
    try:
        with _ray(options) as ray_notes:
            swept += tuple(ray_notes)
            splits = []
            parts = 2 if (validation is not None or from_cache) else 1  # each split's share of the progress
            for k, split in enumerate(SPLITS):

                def part(what: str, done: float, k: int = k) -> None:
                    say(what, min(1.0, (k + done) / parts))

                job = train if split == "training" else validation
                if from_cache:
                    cache = _cached(from_cache, split, staging, options)
                    if cache is None:
                        continue
                elif job is None:
                    continue
                else:
                    t0 = time.perf_counter()
                    cache = _tokenized(job, split, staging, options, part)
                    tokenize_seconds += time.perf_counter() - t0
                splits.append(_pack_and_write(cache, split, staging, options, cfg, part))
        names = [f for s in splits for f in s.files]
        meta_name = metadata_file(options.pack_size)
        write_text(os.path.join(staging, meta_name), metadata_text([s.metadata for s in splits]))
        shutil.rmtree(os.path.join(staging, ".work"), ignore_errors=True)
        publish_folder(staging, out, force=options.force, owned=written_by_prepare)
    except BaseException:
        discard_folder(staging)
        raise
    say("done", 1.0)
    return PrepareResult(
        out=out,
        options=options,
        splits=tuple(splits),
        files=tuple(names + [meta_name]),
        seconds=time.perf_counter() - started,
        tokenize_seconds=tokenize_seconds,
        from_cache=from_cache,
        notes=swept,
    )


def _inputs(train: TokenizeJob | None, validation: TokenizeJob | None, from_cache: str | None) -> list[str]:
    """What the run reads, which a forced run must never remove: the folder of the cache, or the data and tokenizer."""
    if from_cache:
        return [from_cache]
    if train is None:  # from_cache is ""
        raise InputError("prepare", "from_cache", "is empty: name the folder prepared before")
    return [j.data for j in (train, validation) if j] + [train.tokenizer]


@contextlib.contextmanager
def _ray(options: PrepareOptions):
    """Ray for the whole run when the engine is Ray (the tokenizing and the writing share it): started here, on
    this machine's cores or connected to ``address``, and stopped at the end if this run started it."""
    if options.engine != "ray":
        yield []
        return
    from advisor.processes import ray_session

    with ray_session(options.workers or os.cpu_count() or 1, options.address) as notes:
        yield notes


def _tokenized(
    job: TokenizeJob, split: str, staging: str, options: PrepareOptions, say: Progress
) -> token_cache.TokenCache:
    """Tokenize a split with the engine (its workers write the tokens), then join the parts into the cache."""
    settings = job.settings
    if job.fmt == "sft":
        from advisor.data.tokenize.sft import SftSettings

        # tokenize_dataset builds the dataset with is_test=True and max_seq_length = the stored maximum
        sft = job_settings(job, SftSettings) or SftSettings()
        settings = replace(sft, max_seq_length=options.stored_max, is_test=True)
    parts = os.path.join(staging, ".work", "parts", split)
    os.makedirs(parts)
    job = replace(job, settings=settings, tokens_dir=parts)
    tok = job_tokenizer(job)
    if job.fmt == "chat" or getattr(settings, "prompt_completion", None) is not None:
        # loaded here, before the pool forks: every worker inherits it instead of importing transformers itself
        # (seconds each, which on a small data set is most of the run)
        tok.transformers_tokenizer()
    result = tokenize(
        job,
        engine=options.engine,
        workers=options.workers,
        address=options.address,
        progress=lambda text, done: say(f"{split}: {text}", 0.6 * done),
    )
    files, _ = data_files_and_notes(job.data)
    say(f"{split}: fingerprinting the data and the tokenizer", 0.6)
    meta = {
        "split": split,
        "format": job.fmt,
        "mask_kind": mask_kind(job.fmt, settings),
        "eod": tok.special_id("eos"),
        "vocab_size": tok.vocab_size,
        "stored_max_seq_length": options.stored_max if job.fmt == "sft" else None,
        "settings": token_cache._settings_dict(settings),
        "data": job.data,
        "tokenizer": job.tokenizer,
        "fingerprint": token_cache.fingerprint(files, job.tokenizer, job.fmt, settings),
        "source": result.source,
        "records_read": result.total_records,
        "tokenized": int(result.lengths.size),
        "truncated": result.truncated,
        "seconds": result.seconds,
        "engine": result.engine,
        "excluded": [{"reason": e.reason, "count": e.count, "first_at": e.first_at} for e in result.excluded],
    }
    return token_cache.merge_parts(
        parts, result.shards, token_cache.split_folder(staging, split), result.sample_index, meta
    )


def _cached(source: str, split: str, staging: str, options: PrepareOptions) -> token_cache.TokenCache | None:
    """A split of a prepared folder's cache, checked against the new options and linked into the new folder (hard
    links: no copy; a copy where the file system has none)."""
    cache = token_cache.open_cache(source, split)
    if cache is None:
        if split == "training":
            raise InputError(
                source,
                None,
                f"holds no token cache ({token_cache.CACHE_DIR}/training): give a folder `advisor prepare` wrote",
            )
        return None
    stored_max = cache.meta.get("stored_max_seq_length")
    if cache.meta["format"] == "sft" and stored_max != options.stored_max:
        raise InputError(
            source,
            split,
            f"its SFT records were cut to {stored_max} tokens when they were "
            f"tokenized, and this packing needs them cut to {options.stored_max} (GPTSFTDataset cuts the "
            "input field, not the tail): use the same max_seq_length and padding (--max-seq-length, "
            "--pad-seq-to-mult), or prepare from the raw data",
        )
    dest = token_cache.split_folder(staging, split)
    os.makedirs(dest)
    for name in [*token_cache.ARRAYS, "meta"]:
        src = os.path.join(cache.folder, f"{name}.{'json' if name == 'meta' else 'npy'}")
        target = os.path.join(dest, os.path.basename(src))
        try:
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
    return token_cache.TokenCache(folder=dest, meta=cache.meta, origin=cache.folder)


def _pack_and_write(
    cache: token_cache.TokenCache, split: str, staging: str, options: PrepareOptions, cfg: PackingConfig, say: Progress
) -> SplitResult:
    meta = cache.meta
    stored = cache.stored
    runtime = runtime_of(stored, cfg.effective_max_seq_length, cfg.multiple)
    kept = runtime.kept
    if not kept.any():
        raise InputError(
            meta.get("source") or split,
            None,
            f"no record left to pack: all {stored.size:,} are longer "
            f"than max_seq_length {cfg.effective_max_seq_length}",
        )
    say(f"{split}: packing {int(kept.sum()):,} records ({options.algorithm})", 0.65)
    hist = LengthHistogram.from_samples(runtime.runtime[kept] + 1, source=meta.get("source") or split)
    packing = pack(hist, cfg)
    slot_record = assign_slots(runtime.runtime, packing, options.seed, PACKERS[options.algorithm].seeded)
    plan_dir = os.path.join(staging, ".work", "plan", split)
    save_plan(plan_dir, slot_record, runtime.target[slot_record], packing.offsets)
    names = file_names(split, options.pack_size, packing.num_packs, options.rows_per_file)
    eod = meta.get("eod")
    specs = [
        ShardSpec(
            path=os.path.join(staging, name),
            first=a,
            last=b,
            plan_dir=plan_dir,
            cache_dir=cache.folder,
            pad_id=eod if isinstance(eod, int) else None,
            mask_kind=meta["mask_kind"],
            vocab_size=meta.get("vocab_size") or -1,
            origin=cache.origin or cache.folder,
        )
        for name, a, b in names
    ]

    def wrote(done: int, of: int) -> None:
        say(f"{split}: wrote {done} of {of} file(s) ({packing.num_packs:,} packs)", 0.7 + 0.3 * done / of)

    if options.engine == "ray":
        write_ray(specs, wrote, options.workers)
    else:
        write_local(specs, max(1, options.workers or os.cpu_count() or 1), wrote)
    truncated = np.asarray(cache.array("truncated"))[kept] | runtime.cut[kept]
    metrics = packing.metrics
    return SplitResult(
        split=split,
        source=str(meta.get("source") or split),
        records_read=int(meta.get("records_read", stored.size)),
        tokenized=int(stored.size),
        skipped=int((~kept).sum()),
        truncated=int(truncated.sum()),
        packed=int(kept.sum()),
        packs=packing.num_packs,
        metadata=dict(packing.metadata),
        efficiency=float(metrics.packing_efficiency),
        packing_factor=float(packing.packing_factor),
        lower_bound=_best_bound(packing),
        files=tuple(n for n, _, _ in names),
        excluded=tuple(meta.get("excluded", ())),
        notes=packing.notes,
    )


def _best_bound(packing: PackingResult) -> int:
    m = packing.metrics
    lp = int(np.ceil(m.lower_bound_lp - 1e-9)) if m.lower_bound_lp is not None else 0
    return max(m.lower_bound_l1, m.lower_bound_l2, lp)
