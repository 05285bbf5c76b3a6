"""Megatron-Bridge's offline packing pipeline, simulated from sequence lengths alone.

Followed: megatron/bridge/data/packing/offline.py (``tokenize_dataset``, ``prepare_gpt_sft_packed_data``) and
algorithms.py (``create_hist``, ``create_packing_strategy``), Megatron-Bridge 0.6.2. The alternative, running
its tokenizer and packer on the real data set, gives the same packs hours later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from advisor.data.lengths import LengthHistogram, check_expandable
from advisor.packing.config import PackingConfig
from advisor.packing.first_fit import first_fit
from advisor.packing.metrics import PackingMetrics, packing_metrics, per_pack
from advisor.packing.packers import PACKERS
from advisor.packing.permutation import shuffled_lengths

MB_METADATA_KEYS = (
    "dataset_max_seqlen",
    "max_samples_per_bin",
    "packing_factor",
    "packing_efficiency",
    "pack_size",
    "min_packed_seqlen",
)


@dataclass(frozen=True, kw_only=True)
class RuntimeLengths:
    """The histogram ``create_hist`` builds: runtime lengths (``len(input_ids) - 1``) after truncation and padding."""

    counts: np.ndarray  # counts[v], v = 0..max_seq_length
    num_truncated: int  # samples that lost tokens (dataset truncation, or the pad cap)
    tokens_truncated: int
    num_skipped: int  # samples dropped by create_hist (overlong="skip")
    tokens_skipped: int
    pad_tokens: int  # tokens added by pad_seq_to_mult
    real_tokens: int  # runtime tokens that are data


def runtime_lengths(hist: LengthHistogram, cfg: PackingConfig) -> RuntimeLengths:
    """Each sample's runtime length as Megatron-Bridge will pack it.

    The dataset keeps at most ``max_seq_length`` stored tokens (``+ 1`` when padding to a multiple, since labels
    are the shifted input); runtime = stored - 1; with ``pad_seq_to_mult = m > 1`` it becomes
    ``min(cap, ceil(runtime / m) * m)``, ``cap = floor(max_seq_length / m) * m`` (offline.py, tokenize_dataset).

    >>> r = runtime_lengths(LengthHistogram.from_samples([5, 9, 20]), PackingConfig(pack_size=16, pad_seq_to_mult=4))
    >>> np.repeat(np.arange(r.counts.size), r.counts).tolist(), r.num_truncated, r.pad_tokens
    ([4, 8, 16], 1, 0)
    """
    M = cfg.effective_max_seq_length
    L, n = hist.lengths, hist.counts
    runtime, real, keep = runtime_per_length(hist, cfg)
    skip = ~keep
    wanted = np.maximum(L - 1, 0)
    lost = (wanted - real) * keep
    counts = np.bincount(runtime[keep], weights=n[keep], minlength=M + 1).astype(np.int64)
    return RuntimeLengths(
        counts=counts,
        num_truncated=int(n[keep & (lost > 0)].sum()),
        tokens_truncated=int((lost * n).sum()),
        num_skipped=int(n[skip].sum()),
        tokens_skipped=int((wanted * n)[skip].sum()),
        pad_tokens=int(((runtime - real) * n)[keep].sum()),
        real_tokens=int((real * n)[keep].sum()),
    )


def runtime_per_length(hist: LengthHistogram, cfg: PackingConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct length of the histogram: the runtime length (padding included), the real tokens in it (the
    labels that are data, ``min(runtime, length - 1)``) and whether ``create_hist`` keeps the sample (the rules of
    ``runtime_lengths``).

    >>> [a.tolist() for a in runtime_per_length(LengthHistogram.from_samples([5, 9, 20]),
    ...                                         PackingConfig(pack_size=16, pad_seq_to_mult=4))]
    [[4, 8, 16], [4, 8, 16], [True, True, True]]
    """
    M, m = cfg.effective_max_seq_length, cfg.multiple
    L = hist.lengths
    skip = np.zeros(L.shape, bool)
    if cfg.overlong == "skip" and m == 1:
        skip = L - 1 > M  # create_hist: "Skipped %d sequences longer than the maximum packed sequence length"
    runtime = runtime_of(L, cfg)
    real = np.minimum(runtime, np.maximum(L - 1, 0))
    return runtime, real, ~skip


def runtime_of(lengths: np.ndarray, cfg: PackingConfig) -> np.ndarray:
    """The runtime length of a sample of each given length (kept or skipped alike): non-decreasing in the length.

    >>> runtime_of(np.array([1, 5, 9, 20]), PackingConfig(pack_size=16, pad_seq_to_mult=4)).tolist()
    [0, 4, 8, 16]
    """
    M, m = cfg.effective_max_seq_length, cfg.multiple
    stored = lengths if cfg.overlong == "skip" and m == 1 else np.minimum(lengths, M + 1 if m > 1 else M)
    runtime = np.maximum(stored - 1, 0)
    if m > 1:
        runtime = np.minimum((M // m) * m, -(-runtime // m) * m)
    return runtime


def _shuffled_order(hist: LengthHistogram, cfg: PackingConfig, rt: RuntimeLengths):
    """first_fit_shuffle's items in their shuffled order as (indices, table of runtime lengths) from the histogram's
    cached order (``shuffled_codes``), or None where that order is not Megatron-Bridge's: samples skipped (fewer
    to shuffle)."""
    from advisor.packing.permutation import shuffled_codes

    if not PACKERS[cfg.algorithm].streamed or rt.num_skipped:
        return None
    table = runtime_of(hist.lengths, cfg).astype(np.int32)
    if np.any(np.diff(table) < 0):  # never, as runtime_of is monotone; the order would not be MB's otherwise
        return None
    return shuffled_codes(hist, cfg.seed), table


def megatron_bridge_metadata(fills: np.ndarray, nseq: np.ndarray, counts: np.ndarray, pack_size: int) -> dict:
    """The dict ``create_packing_strategy`` returns and offline.py appends to ``{size}_metadata.jsonl``, with its
    rounding (Python ``round`` to 2 places on the same float expressions), from the packs' sums (``per_pack``)."""
    packs = int(fills.size)
    n = int(counts.sum())
    present = np.nonzero(counts)[0]
    return {
        "dataset_max_seqlen": int(present.max()),
        "max_samples_per_bin": int(nseq.max()),
        "packing_factor": round(n / packs, 2),
        "packing_efficiency": round(int(fills.sum()) / packs / pack_size * 100, 2),
        "pack_size": pack_size,
        "min_packed_seqlen": int(fills.min()),
    }


@dataclass(frozen=True, kw_only=True, eq=False)  # eq=False: compared by identity (arrays have no single truth)
class PackingResult:
    """Packs in CSR form (pack i = ``items[offsets[i]:offsets[i+1]]``, runtime lengths) and what they mean.

    ``per_pack`` holds (fill, samples, attention work sum(s^2)) per pack, computed with the metrics and reused by
    charts and estimates. ``derived`` is what later layers compute from the packs and keep with them (the micro
    batches of an estimate): owned here, so the packing cache counts it in its byte budget and drops it together.

    The packs themselves (``offsets``, ``items``) are grouped when the packing is computed (``csr``), or, for
    first_fit_shuffle, only when asked for: its figures come from the packing itself, grouping 16M items costs a
    fifth of packing them, and the dashboard draws only the first packs (``first``, kept on the way). ``regroup``
    packs again, grouped, on the first use of ``offsets``, ``items`` or a pack past ``first``.
    """

    config: PackingConfig
    csr: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    first: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    regroup: Callable[[], tuple[np.ndarray, np.ndarray]] | None = field(default=None, repr=False)
    runtime: RuntimeLengths
    metadata: dict
    metrics: PackingMetrics
    seconds: float
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    per_pack: tuple[np.ndarray, np.ndarray, np.ndarray] = field(repr=False)
    _derived: dict = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def num_packs(self) -> int:
        return int(self.per_pack[0].size)

    @property
    def offsets(self) -> np.ndarray:
        return self.grouped()[0]

    @property
    def items(self) -> np.ndarray:
        return self.grouped()[1]

    def grouped(self) -> tuple[np.ndarray, np.ndarray]:
        """The packs in CSR form (offsets, items), grouped now if the packing was not (seconds at 16M samples)."""
        if self.csr is not None:
            return self.csr
        if self.regroup is None:
            raise ValueError("this packing keeps no packs")
        return self.derived("packs", self.regroup)

    @property
    def packing_factor(self) -> float:
        """n: samples per pack, unrounded (Megatron-Bridge's metadata rounds it to 2 places), which divides the
        samples per step into Megatron-Bridge's global batch of packs."""
        return self.metrics.num_sequences / max(1, self.num_packs)

    @property
    def num_skipped(self) -> int:
        """Samples left out as longer than the max length (chat data, ``overlong="skip"``)."""
        return self.runtime.num_skipped

    @property
    def num_truncated(self) -> int:
        """Samples packed with their tail cut (SFT data, or any data padded to a multiple past the cap)."""
        return self.runtime.num_truncated

    def derived(self, key: Hashable, compute: Callable[[], object]):
        """``compute()``'s value, computed once per key and kept with the packs (keys name their layer's concern,
        e.g. ``("micro_batches", fixed_length)``)."""
        with self._lock:
            if key not in self._derived:
                self._derived[key] = compute()
            return self._derived[key]

    def derived_values(self) -> list:
        """Everything kept with the packs so far (for a cache's byte budget)."""
        with self._lock:
            return list(self._derived.values())

    def pack(self, i: int) -> list[int]:
        if self.csr is None and 0 <= i < len(self.first):
            return list(self.first[i])
        offsets, items = self.grouped()
        return items[offsets[i] : offsets[i + 1]].tolist()

    def packs(self, limit: int | None = None) -> list[list[int]]:
        n = self.num_packs if limit is None else min(limit, self.num_packs)
        return [self.pack(i) for i in range(n)]

    def summary(self) -> dict:
        """One flat dict: Megatron-Bridge's six metadata keys first, then the advisor's own figures."""
        r = self.runtime
        out = dict(self.metadata)
        out.update(
            num_sequences=self.metrics.num_sequences,
            num_packs=self.num_packs,
            num_truncated=r.num_truncated,
            padding_fraction=self.metrics.padding_fraction,
            tokens_truncated=r.tokens_truncated,
            num_skipped=r.num_skipped,
            tokens_skipped=r.tokens_skipped,
            pad_tokens_added=r.pad_tokens,
            overlong=self.config.overlong,
            algorithm=self.config.algorithm,
            seed=self.config.seed,
            pad_seq_to_mult=self.config.multiple,
            max_seq_length=self.config.effective_max_seq_length,
            seconds=self.seconds,
        )
        out.update({k: v for k, v in self.metrics.as_dict().items() if k not in out})
        return out


def pack(hist: LengthHistogram, cfg: PackingConfig, progress=None, pause=None) -> PackingResult:
    """Simulate offline packing of a length histogram. ``progress(what, fraction)`` reports; ``pause()`` may block
    between chunks of first_fit_shuffle's items (a background packing yields to visitors' work there).

    >>> cfg = PackingConfig(pack_size=4, algorithm="first_fit_decreasing")
    >>> res = pack(LengthHistogram.from_samples([4, 3, 3, 2]), cfg)
    >>> res.packs(), res.metadata["packing_factor"]
    ([[3, 1], [2, 2]], 2.0)
    """
    t0 = time.perf_counter()
    if progress:
        progress("runtime lengths", 0.0)
    check_expandable(hist.num_samples, hist.source, "pack")
    rt = runtime_lengths(hist, cfg)
    if rt.counts.sum() == 0:
        raise ValueError(f"{hist.source or 'data'}: no samples left to pack ({rt.num_skipped} skipped as overlong)")
    if progress:
        progress(f"packing {int(rt.counts.sum()):,} samples with {cfg.algorithm}", 0.1)
    spec = PACKERS[cfg.algorithm]
    fn = spec.run
    stats: dict = {}
    csr, regroup = None, None
    first: tuple[tuple[int, ...], ...] = ()
    if spec.solver:  # its progress, and the bound and budget it reports
        csr = fn(rt.counts, cfg.pack_size, cfg.seed, progress=progress, stats=stats)
    elif spec.streamed:  # the figures from the packing itself; the packs grouped on demand
        step = (
            (lambda done: progress(f"packing {int(rt.counts.sum()):,} samples with {cfg.algorithm}", 0.1 + 0.8 * done))
            if progress
            else None
        )
        order = _shuffled_order(hist, cfg, rt) or (shuffled_lengths(rt.counts, cfg.seed), None)
        tokens = int((np.arange(rt.counts.size, dtype=np.int64) * rt.counts).sum())
        fit = first_fit(order[0], cfg.pack_size, progress=step, pause=pause, bins=False, table=order[1], tokens=tokens)
        del order
        first = fit.first_packs()
        regroup = partial(fn, rt.counts, cfg.pack_size, cfg.seed)  # holds the few-kB counts only
    else:
        csr = fn(rt.counts, cfg.pack_size, cfg.seed)
    if progress:
        progress("metrics", 0.9)
    fill, nseq, work = per_pack(*csr) if csr is not None else (fit.fill, fit.nseq, fit.work)
    metadata = megatron_bridge_metadata(fill, nseq, rt.counts, cfg.pack_size)
    metrics = packing_metrics(fill, nseq, work, rt.counts, cfg.pack_size, rt.real_tokens, stats.get("lp_bound"))
    notes = list(hist.notes)
    if rt.num_truncated:
        notes.append(
            f"{rt.num_truncated:,} samples truncated to max_seq_length {cfg.effective_max_seq_length} "
            f"({rt.tokens_truncated:,} tokens lost)"
            + (
                ""
                if cfg.overlong == "truncate"
                else f": padding to a multiple of {cfg.multiple} cuts chat samples too (offline.py _pre_pad_data_point)"
            )
        )
    if rt.num_skipped:
        notes.append(
            f"{rt.num_skipped:,} samples longer than {cfg.effective_max_seq_length} skipped by create_hist "
            f"({rt.tokens_skipped:,} tokens; chat data is not truncated by GPTSFTChatDataset, so "
            "Megatron-Bridge leaves these samples out of the packs)"
        )
    if progress:
        progress("done", 1.0)
    result = PackingResult(
        config=cfg,
        csr=csr,
        first=first,
        regroup=regroup,
        runtime=rt,
        metadata=metadata,
        metrics=metrics,
        seconds=time.perf_counter() - t0,
        source=hist.source,
        notes=tuple(notes),
        per_pack=(fill, nseq, work),
    )
    return result
