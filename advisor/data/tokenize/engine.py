"""Token lengths of a whole data set: shards tokenized in parallel, on this machine or on a Ray cluster.

Alternatives: Megatron-Bridge's own dataset classes (exact, one Python loop over samples, minutes per 100k chats)
or a hand-written cluster runner. Here: the same exact length rules (``sft``, ``chat``) on shards (``records``),
run by a process pool (``local``) or as a Ray Data pipeline (``ray``): read a shard, tokenize it with the Rust
tokenizer's batch encoding, aggregate a length histogram. Both engines run ``tokenize_shard``, so their lengths are
identical, byte for byte.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, get_args

import numpy as np

from advisor import caches
from advisor.data.guard import display_name
from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.data.tokenize.records import Limits, Shard, data_files_and_notes, iter_records, plan_shards, shard_size
from advisor.data.tokenize.sequences import ROLLED, mask_kind
from advisor.errors import InputError
from advisor.processes import process_pool
from advisor.vocabulary import DataFormat

if TYPE_CHECKING:
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.sft import SftSettings

ENGINES = ("local", "ray")
FORMATS: tuple[DataFormat, ...] = get_args(DataFormat)
MAX_EXAMPLES = 3  # locations kept per kind of problem: the first is shown, the count is exact


@dataclass(frozen=True, kw_only=True)
class TokenizeJob:
    """What to tokenize and how: the data, a local tokenizer, the format and its settings (``SftSettings`` or
    ``ChatSettings``), and whether a bad record stops the run (``error``) or is left out and counted (``skip``)."""

    data: str
    tokenizer: str
    fmt: str = "sft"
    settings: SftSettings | ChatSettings | None = None
    on_bad: str = "error"
    limits: Limits = Limits()
    # prepare: each shard's token ids and loss masks are written here by the worker that tokenized it
    # (``part_paths``), so nothing but lengths travels back and the driver never holds the whole data set
    tokens_dir: str | None = None
    # each record's label positions that carry loss, as Megatron-Bridge's packed collate counts them (the loss
    # weighting's answer-only loss); tokenizes through the token path, which builds the masks
    loss_tokens: bool = False


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One kind of bad record in a shard: how many, and where the first ones are."""

    kind: str
    count: int
    first: tuple[str, ...]
    reason: str
    fatal: bool  # unreadable (not JSON, not UTF-8): stops an ``error`` run at once


@dataclass(frozen=True, kw_only=True)
class ShardResult:
    index: int
    lengths: np.ndarray  # int32, one per record of the shard (or per selected row), -1 where left out
    records: int  # records the shard holds
    problems: tuple[Problem, ...] = ()
    truncated: int = 0  # records the dataset cut to max_seq_length (tokens jobs only)
    loss: np.ndarray | None = None  # int32 per record like ``lengths``: label positions with loss (loss_tokens jobs)


@dataclass(frozen=True, kw_only=True)
class TokenizeResult:
    """Per-sample token lengths in data-set order (``sample_index`` are 0-based record numbers)."""

    source: str
    sample_index: np.ndarray
    lengths: np.ndarray
    total_records: int
    excluded: tuple[Exclusion, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    engine: str = "local"
    workers: int = 1
    sampled: bool = False
    selected: int = 0  # records read for the lengths: all of them, or the sample (bad ones included)
    fmt: str = "sft"  # the job's format: a plan's data.format (chat lengths are skipped, not cut, past the pack)
    truncated: int = 0  # records the dataset cut to max_seq_length (tokens jobs: SFT)
    shards: int = 0  # shards tokenized (tokens jobs: one part in tokens_dir each, numbered from 0)
    loss_tokens: np.ndarray | None = None  # per sample like ``lengths``: label positions with loss (loss_tokens jobs)

    def histogram(self) -> LengthHistogram:
        """The lengths as the rest of the advisor reads them, file order kept (online packing needs it)."""
        if self.lengths.size == 0:
            raise InputError(self.source, None, "no record could be tokenized" + _excluded_text(self.excluded))
        return LengthHistogram.from_samples(
            self.lengths,
            loss=self.loss_tokens,
            source=self.source,
            excluded=self.excluded,
            notes=self.notes,
            order=self.lengths.astype(np.int32),
        )


def _place(where: str) -> tuple[str, int]:
    """A record's place, ordered as the data is read: its file, then its line or row number.

    >>> sorted(["a.jsonl, line 10", "a.jsonl, line 9"], key=_place)
    ['a.jsonl, line 9', 'a.jsonl, line 10']
    """
    file, _, rest = where.rpartition(", ")
    number = rest.split()[-1] if rest.split() else ""
    return (file, int(number)) if number.isdigit() else (where, 0)


def _within(name: str, where: str) -> str:
    """Where a record is, said once when the data is that one file (``where`` names its file).

    >>> _within("a.jsonl", "a.jsonl, line 3"), _within("data", "a.jsonl, line 3")
    ('line 3', 'a.jsonl, line 3')
    """
    return where.removeprefix(f"{name}, ")


def _excluded_text(excluded) -> str:
    return (
        ""
        if not excluded
        else " (" + "; ".join(f"{e.count:,} {e.reason}, first at {e.first_at}" for e in excluded) + ")"
    )


# ------------------------------------------------------------------------------------------- one shard
# A process tokenizes with one or two tokenizers; four kept (a transformers tokenizer holds ~100 MB of vocabulary)
_TOKENIZERS = caches.bounded("tokenizers", size=4)
# tokenizer classes whose transformers loading keeps tokenizer.json as written; any other (Qwen2Tokenizer,
# GemmaTokenizer, ...) is rebuilt by transformers 5 from its vocabulary, as Megatron-Bridge's AutoTokenizer sees it
GENERIC_CLASSES = (None, "", "PreTrainedTokenizerFast", "TokenizersBackend")


def _tokenizer(path: str):
    return _TOKENIZERS.get(path, lambda: _load_tokenizer(path))


def job_tokenizer(job: TokenizeJob):
    """The tokenizer a job's workers encode with (loaded once per process; transformers' own for a model-specific
    class), for the driver's questions: its special ids, its template."""
    return _tokenizer(job.tokenizer)


def _load_tokenizer(path: str):
    from advisor.data.tokenize.tokenizer import load_tokenizer

    tok = load_tokenizer(path)
    if tok.kind == "huggingface" and tok.tokenizer_class not in GENERIC_CLASSES:
        tok = load_tokenizer(path, use_transformers=True)  # exact for model-specific classes (seconds to load)
    return tok


def _lengths_of(records: list[dict], job: TokenizeJob):
    tok = _tokenizer(job.tokenizer)
    if job.fmt == "chat":
        from advisor.data.tokenize.chat import ChatSettings, chat_lengths

        return chat_lengths(records, tok, job_settings(job, ChatSettings))
    from advisor.data.tokenize.sft import SftSettings, sft_lengths

    return sft_lengths(records, tok, job_settings(job, SftSettings))


_Settings = TypeVar("_Settings")


def job_settings(job: TokenizeJob, kind: type[_Settings]) -> _Settings | None:
    """The job's settings, refused unless of its format's kind (``ChatSettings`` for chat, else ``SftSettings``)."""
    if job.settings is None or isinstance(job.settings, kind):
        return job.settings
    raise InputError(
        "tokenize", "settings", f"the {job.fmt} format takes {kind.__name__}, not {type(job.settings).__name__}"
    )


def _kind(reason: str) -> str:
    """What a problem is, without the record's own details (positions, excerpts), so like problems count together.

    >>> _kind("messages[3] has neither 'content' nor tool calls"), _kind("must be a list of messages, not 'x 7'")
    ("messages[N] has neither 'content' nor tool calls", 'must be a list of messages')
    """
    return re.sub(r"\d+", "N", reason.split(", not ")[0].split(": ")[0].split(" (")[0])[:100]


def _tokens_of(records: list[dict], job: TokenizeJob):
    tok = _tokenizer(job.tokenizer)
    if job.fmt == "chat":
        from advisor.data.tokenize.chat import ChatSettings
        from advisor.data.tokenize.chat_tokens import chat_tokens

        return chat_tokens(records, tok, job_settings(job, ChatSettings))
    from advisor.data.tokenize.sft import SftSettings, sft_tokens

    return sft_tokens(records, tok, job_settings(job, SftSettings))


def loss_counts(batch, kind: str) -> np.ndarray:
    """Each record's label positions that carry loss, as Megatron-Bridge's packed collate counts them: the mask over
    the record's positions but its last (``_build_loss_mask``), after ``fill_packing_strategy``'s change of it
    (``kind`` ``loss_mask``: rolled by one; ``answer_start``: ``idx >= answer_start_idx - 1``, which the batch
    already holds; ``sequences.mask_kind``).

        >>> from advisor.data.tokenize.sequences import TokenBatch
        >>> b = TokenBatch.of([[5, 6, 7, 8], [9, 9], []], [[0, 0, 1, 1], [1, 1], []], [False, False, False])
        >>> loss_counts(b, "loss_mask").tolist(), loss_counts(b, "answer_start").tolist()
        ([2, 1, -1], [1, 1, -1])
    """
    summed = np.concatenate([[0], np.cumsum(batch.mask, dtype=np.int64)])
    a, b = batch.offsets[:-1], batch.offsets[1:]
    rolled = ROLLED[kind]
    # an empty span (a record that could not be built) is -1; its indices are clipped so none passes the end
    first, last = (np.minimum(a + 1, b), b) if rolled else (a, np.maximum(b - 1, a))
    return np.where(b > a, summed[last] - summed[first], -1).astype(np.int32)


def check_settings(job: TokenizeJob) -> None:
    """The job's settings against its tokenizer, here, before any worker starts: a refusal that holds for every
    record (no chat template, a loss mask Bridge cannot build, a setting prepare does not build) is one message at
    once, not one per shard from the workers."""
    (_tokens_of if job.tokens_dir is not None or job.loss_tokens else _lengths_of)([], job)


PART_ARRAYS = ("ids", "mask", "lengths", "truncated")


def part_paths(folder: str, index: int) -> dict[str, str]:
    """The files shard ``index`` writes its tokens to: ids (int32) and mask (int8) of its records back to back,
    lengths (int64 per record, -1 where one was left out: no tokens) and truncated (bool per record).

        >>> sorted(part_paths("/t", 3).values())[0]
        '/t/part-00003.ids.npy'
    """
    return {name: os.path.join(folder, f"part-{index:05d}.{name}.npy") for name in PART_ARRAYS}


def _save_part(folder: str, index: int, arrays: dict[str, np.ndarray]) -> None:
    for name, path in part_paths(folder, index).items():
        with open(path, "xb") as f:  # a fresh staging folder: a name already there is a bug, never overwritten
            np.save(f, arrays[name], allow_pickle=False)


def tokenize_shard(index: int, shard: Shard, job: TokenizeJob, select: np.ndarray | None = None) -> ShardResult:
    """The lengths of one shard's records (or of its rows ``select``, 0-based), -1 for each one left out; with
    ``job.tokens_dir``, their token ids and masks are written there too (``part_paths``)."""
    keep_tokens = job.tokens_dir is not None
    token_parts: list = []  # (ids, mask, truncated per row) per read batch
    out: list[np.ndarray] = []
    loss_out: list[np.ndarray] = []
    problems: dict[str, list] = {}
    row = 0
    wanted = None if select is None else set(int(x) for x in select)

    def note(where: str, reason: str, fatal: bool) -> None:
        p = problems.setdefault(_kind(reason), [0, [], reason, fatal])
        p[0] += 1
        if len(p[1]) < MAX_EXAMPLES:
            p[1].append(where)

    for records, wheres, bad in iter_records(shard, limits=job.limits):
        bad_at = {b.where: b for b in bad}
        keep = [k for k in range(len(records)) if wanted is None or (row + k) in wanted]
        lengths = np.full(len(keep), -1, np.int32)
        good = [(j, k) for j, k in enumerate(keep) if records[k] is not None]
        present = [record for k in keep if (record := records[k]) is not None]  # the records of good
        for k in keep:
            if records[k] is None:
                note(wheres[k], bad_at[wheres[k]].reason, True)
        truncated = np.zeros(len(keep), bool)
        loss = np.full(len(keep), -1, np.int32)
        if good:
            if keep_tokens or job.loss_tokens:
                batch, got, record_problems = _tokens_of(present, job)
                truncated[[j for j, _ in good]] = batch.truncated
                loss[[j for j, _ in good]] = loss_counts(batch, mask_kind(job.fmt, job.settings))
                if keep_tokens:
                    token_parts.append((batch.ids, batch.mask))
            else:
                got, record_problems = _lengths_of(present, job)
            got = np.asarray(got)
            for (j, _), n in zip(good, got, strict=True):
                lengths[j] = n
            for p in record_problems:
                note(wheres[good[p.index][1]], p.reason, False)
        out.append(lengths)
        loss_out.append(loss)
        if keep_tokens:
            token_parts.append((None, truncated))
        row += len(records)
    lengths = np.concatenate(out) if out else np.zeros(0, np.int32)
    cut = 0
    if job.tokens_dir is not None:
        ids = [a for a, _ in token_parts if a is not None]
        masks = [b for a, b in token_parts if a is not None]
        flags = [b for a, b in token_parts if a is None]
        truncated = np.concatenate(flags) if flags else np.zeros(0, bool)
        cut = int(truncated.sum())
        _save_part(
            job.tokens_dir,
            index,
            {
                "ids": np.concatenate(ids) if ids else np.zeros(0, np.int32),
                "mask": np.concatenate(masks) if masks else np.zeros(0, np.int8),
                "lengths": lengths.astype(np.int64),
                "truncated": truncated,
            },
        )
    losses = (np.concatenate(loss_out) if loss_out else np.zeros(0, np.int32)) if job.loss_tokens else None
    return ShardResult(
        index=index,
        lengths=lengths,
        records=row,
        truncated=cut,
        loss=losses,
        problems=tuple(
            Problem(kind=k, count=v[0], first=tuple(v[1]), reason=v[2], fatal=v[3]) for k, v in problems.items()
        ),
    )


# -------------------------------------------------------------------------------------------- engines
def _quiet_worker() -> None:
    # one process per core, each encoding on one thread: the Rust tokenizer's own thread pool on top would
    # oversubscribe the cores (and it warns when a process forks after using it)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def run_local(
    job: TokenizeJob,
    shards: list[Shard],
    workers: int,
    selects: list,
    progress: Callable,
    check: Callable[[ShardResult], None],
) -> list[ShardResult]:
    """A process pool over the shards; ``check`` sees each result as it lands (an ``error`` run stops there)."""
    total = len(shards)
    if workers <= 1 or total == 1:
        results = []
        for i, sh in enumerate(shards):
            results.append(tokenize_shard(i, sh, job, selects[i]))
            check(results[-1])
            progress(i + 1, total, results)
        return results
    results = []
    with process_pool(min(workers, total), _quiet_worker) as pool:
        futures = [pool.submit(tokenize_shard, i, sh, job, selects[i]) for i, sh in enumerate(shards)]
        try:
            for fut in as_completed(futures):
                results.append(fut.result())
                check(results[-1])
                progress(len(results), total, results)
        except BrokenProcessPool:
            raise InputError("tokenize", None, "a worker process died (out of memory?): try fewer --workers") from None
    return results


class _RayTokenize:
    """A Ray Data map_batches worker: loads the tokenizer once, tokenizes the shards it is handed."""

    def __init__(self, job: TokenizeJob, shards: list[Shard], selects: list):
        _quiet_worker()
        self.job, self.shards, self.selects = job, shards, selects

    def __call__(self, batch: dict) -> dict:
        import pickle

        results = [tokenize_shard(int(i), self.shards[int(i)], self.job, self.selects[int(i)]) for i in batch["index"]]
        return {
            "index": np.array([r.index for r in results]),
            "result": np.array([pickle.dumps(r) for r in results], dtype=object),
        }


def _length_rows(batch: dict) -> dict:
    import pickle

    lengths = np.concatenate([pickle.loads(b).lengths for b in batch["result"]] or [np.zeros(0, np.int32)])
    return {"length": lengths[lengths >= 0].astype(np.int64)}


def run_ray(
    job: TokenizeJob,
    shards: list[Shard],
    workers: int,
    selects: list,
    progress: Callable,
    check: Callable[[ShardResult], None],
    address: str | None = None,
) -> tuple[list[ShardResult], dict, list[str]]:
    """The same shards as a Ray Data pipeline: from_items(shards) -> map_batches(tokenize) -> groupby(length).

    ``address``: an existing cluster (``ray://host:10001`` or ``auto``); without it a local Ray is started on this
    machine's cores. Returns the shard results, Ray's histogram (length -> count) to check against them, and notes.
    """

    from advisor.processes import ray_session

    with ray_session(workers, address) as notes:
        results, counts = _ray_pipeline(job, shards, workers, selects, progress, check)
    return results, counts, notes


def _ray_pipeline(job, shards, workers, selects, progress, check) -> tuple[list[ShardResult], dict]:
    import pickle

    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    ds = ray.data.from_items([{"index": i} for i in range(len(shards))], override_num_blocks=max(1, len(shards)))
    tokenized = ds.map_batches(
        _RayTokenize,
        fn_constructor_kwargs={"job": job, "shards": shards, "selects": selects},
        batch_size=1,
        concurrency=max(1, min(workers, len(shards))),
        batch_format="numpy",
    ).materialize()
    results = []
    for batch in tokenized.iter_batches(batch_size=None, batch_format="numpy"):
        for blob in batch["result"]:
            results.append(pickle.loads(blob))
            check(results[-1])
        progress(len(results), len(shards), results)
    if not any((r.lengths >= 0).any() for r in results):
        return results, {}  # nothing to aggregate (an empty dataset has no length column to group)
    parts = max(1, min(workers, len(shards)))  # Ray's default of 200 shuffle partitions costs seconds on one machine
    hist = (
        tokenized.map_batches(_length_rows, batch_format="numpy")
        .groupby("length", num_partitions=parts)
        .count()
        .to_pandas()
    )
    counts = dict(zip(hist["length"].astype(int).tolist(), hist["count()"].astype(int).tolist(), strict=True))
    return results, counts


# ------------------------------------------------------------------------------------------- the run
def count_records(shards: list[Shard]) -> list[Shard]:
    """Shards with their record counts (compressed JSONL and Arrow files are read once to count them)."""
    out = []
    for sh in shards:
        if sh.records is None:
            n = sum(len(recs) for recs, _, _ in iter_records(sh))
            sh = Shard(path=sh.path, kind=sh.kind, start=sh.start, stop=sh.stop, first_line=sh.first_line, records=n)
        out.append(sh)
    return out


def _selection(shards: list[Shard], sample: int, seed: int) -> tuple[list, int]:
    """``sample`` records drawn uniformly without replacement (seeded), as row lists per shard."""
    sizes = np.array([sh.records for sh in shards], np.int64)
    total = int(sizes.sum())
    if sample >= total:
        return [None] * len(shards), total
    chosen = np.sort(np.random.default_rng(seed).choice(total, size=sample, replace=False))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    shard_of = np.searchsorted(starts, chosen, side="right") - 1
    return [chosen[shard_of == i] - starts[i] for i in range(len(shards))], total


def tokenize(
    job: TokenizeJob,
    *,
    engine: str = "local",
    workers: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    address: str | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> TokenizeResult:
    """Tokenize ``job.data`` (or a uniform random ``sample`` of its records) and return per-sample lengths."""
    if engine not in ENGINES:
        raise InputError("tokenize", "engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
    if job.fmt not in FORMATS:
        raise InputError("tokenize", "format", f"{job.fmt!r} is not one of {', '.join(FORMATS)}")
    if job.tokens_dir is not None and sample is not None:
        raise InputError("tokenize", "sample", "a sample keeps no tokens: tokens_dir needs every record")
    _tokenizer(job.tokenizer)  # a bad tokenizer is one message before any work starts
    check_settings(job)  # and so are settings no record can be tokenized with
    started = time.perf_counter()
    say = progress or (lambda text, done: None)
    workers = max(1, workers or os.cpu_count() or 1)
    files, scan_notes = data_files_and_notes(job.data)
    # enough shards to keep every worker busy to the end (about four each), none under 256 KiB or over 8 MiB
    size = sum(os.path.getsize(f) for f in files)
    shards = plan_shards(files, shard_size(size, workers))
    known = all(sh.records is not None for sh in shards)
    total = sum(sh.records or 0 for sh in shards)
    selects: list = [None] * len(shards)
    selected = None
    if sample is not None:
        shards = count_records(shards)
        selects, total = _selection(shards, sample, seed)
        known = True
        selected = min(sample, total)
    # shown escaped: a file named with a newline or a terminal escape must not reach the user's terminal as is
    name = display_name(os.path.basename(job.data.rstrip(os.sep)) or job.data)

    goal = selected if selected is not None else (total if known else None)
    seen = {"records": 0, "results": 0}  # a running count: results arrive one shard at a time

    def report(done: int, of: int, results: list[ShardResult]) -> None:
        for r in results[seen["results"] :]:
            seen["records"] += r.lengths.size
        seen["results"] = len(results)
        n = seen["records"]
        rate = n / max(1e-9, time.perf_counter() - started)
        left = "" if not goal or n >= goal else f", about {(goal - n) / max(rate, 1e-9):,.0f} s left"
        say(
            f"tokenized {n:,}{f' of {goal:,}' if goal else ''} records ({done}/{of} shards, {rate:,.0f} "
            f"records/s{left})",
            done / max(1, of),
        )

    def check(result: ShardResult) -> None:
        if job.on_bad == "error":
            bad = [p for p in result.problems if p.first]
            if any(p.fatal for p in bad):  # an unreadable record stops the run at once, at the shard's first bad
                # record of any kind (the kinds are found in separate passes: line 9's list was named before
                # line 3's missing field)
                first = min(bad, key=lambda p: _place(p.first[0]))
                what = first.reason if first.fatal else f"cannot be tokenized: {first.reason}"
                raise InputError(
                    name,
                    _within(name, first.first[0]),
                    what + " (--on-bad skip leaves such records out and counts them)",
                )

    if engine == "ray":
        results, ray_counts, ray_notes = run_ray(job, shards, workers, selects, report, check, address)
        scan_notes = [*scan_notes, *ray_notes]
    else:
        results, ray_counts = run_local(job, shards, workers, selects, report, check), None
    results.sort(key=lambda r: r.index)
    out = _assemble(
        job,
        name,
        shards,
        selects,
        results,
        ray_counts,
        total,
        selected is not None and selected < total,
        engine,
        workers,
        time.perf_counter() - started,
    )
    return replace(
        out,
        notes=out.notes + tuple(scan_notes),
        fmt=job.fmt,
        selected=selected if selected is not None else out.total_records,
    )


def _assemble(job, name, shards, selects, results, ray_counts, total, sampled, engine, workers, seconds):
    merged: dict[str, list] = {}
    for r in results:
        for p in r.problems:
            m = merged.setdefault(p.kind, [0, [], p.reason])
            m[0] += p.count
            m[1] += list(p.first)
    excluded = tuple(
        Exclusion(reason=f"records left out: {v[2]}", count=v[0], first_at=v[1][0]) for v in merged.values()
    )
    if job.on_bad == "error" and excluded:
        e = min(excluded, key=lambda x: _place(x.first_at))
        raise InputError(
            name,
            _within(name, e.first_at),
            f"{e.count:,} record(s) cannot be tokenized: {e.reason[18:]} "
            "(--on-bad skip leaves them out and counts them)",
        )
    base = np.cumsum([0] + [r.records for r in results])[:-1]
    index_parts, length_parts, loss_parts = [], [], []
    for r, b, sel in zip(results, base, selects, strict=True):
        rows = np.arange(r.lengths.size) if sel is None else np.asarray(sel)
        keep = r.lengths >= 0
        index_parts.append(b + rows[keep])
        length_parts.append(r.lengths[keep].astype(np.int64))
        if r.loss is not None:
            loss_parts.append(r.loss[keep].astype(np.int64))
    index = np.concatenate(index_parts) if index_parts else np.zeros(0, np.int64)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    records = int(sum(r.records for r in results))
    if records == 0:
        raise InputError(name, None, "holds no records (every file is empty)")
    if lengths.size == 0:
        raise InputError(name, None, "no record could be tokenized" + _excluded_text(excluded))
    notes = []
    if ray_counts is not None:
        values, counts = np.unique(lengths, return_counts=True)
        if dict(zip(values.tolist(), counts.tolist(), strict=True)) != ray_counts:
            raise RuntimeError("Ray's histogram differs from the shards' lengths")  # a bug, not bad input
        notes.append("Ray's groupby(length) histogram equals the per-sample lengths")
    return TokenizeResult(
        source=name,
        sample_index=index.astype(np.int64),
        lengths=lengths,
        total_records=records,
        excluded=excluded,
        notes=tuple(notes),
        seconds=seconds,
        engine=engine,
        workers=workers,
        sampled=sampled,
        truncated=int(sum(r.truncated for r in results)),
        shards=len(results),
        loss_tokens=np.concatenate(loss_parts) if job.loss_tokens and loss_parts else None,
    )


def lengths_csv(result: TokenizeResult, histogram: bool = False) -> str:
    """The lengths file every other command reads: ``sample_index,length`` per sample in data-set order, or a
    ``length,count`` histogram.

    >>> r = TokenizeResult(source="d", sample_index=np.array([0, 2]), lengths=np.array([5, 3]), total_records=3)
    >>> lengths_csv(r)
    'sample_index,length\\n0,5\\n2,3\\n'
    >>> lengths_csv(r, histogram=True)
    'length,count\\n3,1\\n5,1\\n'
    """
    if histogram:
        values, counts = np.unique(result.lengths, return_counts=True)
        rows = zip(values.tolist(), counts.tolist(), strict=True)
        return "length,count\n" + "".join(f"{v},{c}\n" for v, c in rows)
    if result.loss_tokens is not None:  # a loss_tokens job: each sample's label positions with loss beside it
        with_loss = zip(result.sample_index.tolist(), result.lengths.tolist(), result.loss_tokens.tolist(), strict=True)
        return "sample_index,length,loss_tokens\n" + "".join(f"{i},{n},{x}\n" for i, n, x in with_loss)
    rows = zip(result.sample_index.tolist(), result.lengths.tolist(), strict=True)
    return "sample_index,length\n" + "".join(f"{i},{n}\n" for i, n in rows)
