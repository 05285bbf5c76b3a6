"""What a packing achieved, beyond Megatron-Bridge's metadata: bounds, padding, fill and attention work.

Lower bounds on packs: L1 = ceil(tokens / pack size); L2 (Martello & Toth 1990) adds that samples longer than
half a pack never share one; the LP bound of column generation, where it was run, is tighter still.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _pack_sums(offsets, items):
    n = offsets.size - 1
    fill = np.empty(n, np.int32)  # a pack's tokens, and its samples, are far below 2**31
    nseq = np.empty(n, np.int32)
    work = np.empty(n, np.int64)
    for p in range(n):
        f = w = 0
        for k in range(offsets[p], offsets[p + 1]):
            s = np.int64(items[k])
            f += s
            w += s * s
        fill[p], nseq[p], work[p] = f, offsets[p + 1] - offsets[p], w
    return fill, nseq, work


def per_pack(offsets: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, sequences, attention work sum(s^2)) of every pack, in one pass without copies of the items, in
    arrays no wider than their values need (fresh pages cost: 8M packs' int64 sums and ``np.diff`` took ~0.2 s).

    >>> fill, nseq, work = per_pack(np.array([0, 2, 3]), np.array([3, 1, 4], dtype=np.int32))
    >>> fill.tolist(), nseq.tolist(), work.tolist()
    ([4, 4], [2, 1], [10, 16])
    """
    return _pack_sums(np.asarray(offsets, dtype=np.int64), np.asarray(items))


@njit(cache=True, nogil=True)
def _counts(values, size):
    out = np.zeros(size, np.int64)
    for v in values:
        out[v] += 1
    return out


def integer_counts(values: np.ndarray, top: int | None = None) -> np.ndarray:
    """``np.bincount(values)`` of non-negative integers of any width, without first copying them to int64 (8M int32
    pack fills: ~10 ms instead of ~40).

    >>> integer_counts(np.array([3, 0, 3], np.int32)).tolist()
    [1, 0, 0, 2]
    """
    if values.size == 0:
        return np.zeros(0, np.int64)
    return _counts(values, int(values.max() if top is None else top) + 1)  # top: the largest, if known


@njit(cache=True, nogil=True)
def _even_counts(values, edges):
    bins = edges.size - 1
    first, last = edges[0], edges[-1]
    out = np.zeros(bins, np.int64)
    for v in values:
        x = np.float64(v)
        if x < first or x > last:
            continue
        i = np.int64((x - first) / (last - first) * bins)
        if i == bins:
            i -= 1
        if x < edges[i]:
            i -= 1
        elif i != bins - 1 and x >= edges[i + 1]:
            i += 1
        out[i] += 1
    return out


@njit(cache=True, nogil=True)
def _counts_within(values, lo, hi):
    """How many values equal each integer of lo..hi (others not counted)."""
    out = np.zeros(hi - lo + 1, np.int64)
    for v in values:
        if lo <= v <= hi:
            out[v - lo] += 1
    return out


def even_histogram(values: np.ndarray, lo: float, hi: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.histogram(values, bins, range=(lo, hi))`` with the same counts, without its float copies of the values.

    Integers spanning a range no larger than the values are counted per integer first and those few points binned
    by numpy itself (a value's bin depends only on the value): 9.4M packs' attention work at pack size 384 in
    ~15 ms. Binning each value in float arithmetic took ~100 ms on those (half the packs hold one sample at the
    cap, so half the values are one number; ~35 ms on uniform values), numpy's own ~110 ms. Other values go by
    numpy's arithmetic for evenly spaced bins, in one pass.

    >>> v = np.array([0, 1, 5, 9, 10, 10, 3], np.int32)
    >>> [a.tolist() for a in even_histogram(v, 0.0, 10.0, 4)] == [a.tolist() for a in np.histogram(v, 4, (0.0, 10.0))]
    True
    >>> even_histogram(v.astype(float), 0.0, 10.0, 4)[0].tolist()
    [2, 1, 1, 3]
    """
    if lo > hi:
        raise ValueError("max must be larger than min in range parameter.")  # numpy's own refusal
    if lo == hi:  # numpy widens an empty range by half a unit each way
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    if values.dtype.kind in "iu" and values.dtype != np.uint64 and values.size and np.isfinite(lo) and np.isfinite(hi):
        first, last = int(np.ceil(lo)), int(np.floor(hi))
        if last < first:
            return np.zeros(bins, np.int64), edges
        # per value only where values repeat (the counts array at most an eighth of the values' entries, or 64k):
        # 9.4M packs' work spanning 9M values took 0.2 s that way, against 0.03 s one by one
        if last - first < max(1 << 16, values.size // 8):
            per_value = _counts_within(values, first, last)
            at = np.nonzero(per_value)[0]
            counts, _ = np.histogram(at + first, edges, weights=per_value[at])
            return counts.astype(np.int64), edges
    return _even_counts(values, edges), edges


def l1_bound(counts: np.ndarray, pack_size: int) -> int:
    total = int((np.arange(counts.size, dtype=np.int64) * counts).sum())
    return -(-total // pack_size)


def l2_bound(counts: np.ndarray, pack_size: int) -> int:
    """Martello-Toth L2 over every alpha in 0..pack_size/2, evaluated where it can peak.

    For alpha: J1 = items > P - alpha, J2 = P - alpha >= items > P/2, J3 = P/2 >= items >= alpha;
    L(alpha) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| P - sum J2)) / P)).
    |J1| + |J2| (the items over P/2) does not depend on alpha; sum J3 only drops as alpha passes an item size, and
    J2's free room only shrinks as alpha grows, so L peaks at the largest alpha of each stretch where sum J3 holds:
    at each item size up to P/2, and at P/2. Why not every alpha: at a 4M-token pack size that was a 4M-long scan
    per packing (0.15 s), two hundred times over in a sampled estimate's bootstrap.

    >>> l2_bound(np.array([0, 0, 0, 3, 0]), 4)    # three 3s in packs of 4: L1 says 3 (9/4), and so does L2
    3
    >>> l2_bound(np.array([0, 6, 0, 2, 0]), 4)    # two 3s plus six 1s: 12 tokens fit 3 packs, and 3 are needed
    3
    """
    P = pack_size
    c = np.asarray(counts[: P + 1], dtype=np.int64)
    sizes = np.flatnonzero(c)
    if sizes.size == 0:
        return 0
    n = c[sizes]
    half = P // 2
    cnt = np.concatenate([[0], np.cumsum(n)])  # items among the first k distinct sizes
    tok = np.concatenate([[0], np.cumsum(n * sizes)])

    def below(limit: np.ndarray) -> np.ndarray:  # how many distinct sizes are < limit
        return np.searchsorted(sizes, limit, side="left")

    alpha = np.unique(np.concatenate([sizes[sizes <= half], [half]]))
    j2_lo = int(below(np.array([half + 1]))[0])  # the first distinct size over P/2
    big = cnt[-1] - cnt[j2_lo]  # |J1| + |J2|
    j2_hi, j3_lo = below(P - alpha + 1), below(alpha)
    j2 = cnt[j2_hi] - cnt[j2_lo]
    s2 = tok[j2_hi] - tok[j2_lo]
    s3 = tok[j2_lo] - tok[j3_lo]
    extra = np.maximum(0, -(-(s3 - (j2 * P - s2)) // P))
    return int(big + extra.max())


def percentile_of_integers(values: np.ndarray, q: float, top: int | None = None) -> float:
    """``np.percentile(values, q)`` (linear interpolation between the two nearest ranks) of non-negative integers,
    by counting instead of partitioning: 8M pack fills in ~20 ms instead of ~100.

    >>> v = np.array([5, 1, 9, 9, 3, 0, 7])
    >>> [percentile_of_integers(v, q) == float(np.percentile(v, q)) for q in (0, 1, 37.5, 50, 99, 100)]
    [True, True, True, True, True, True]
    """
    cum = np.cumsum(integer_counts(values, top))
    rank = (values.size - 1) * q / 100
    below = int(np.floor(rank))
    lo = int(np.searchsorted(cum, below, side="right"))
    hi = int(np.searchsorted(cum, min(below + 1, values.size - 1), side="right"))
    return float(lo + (hi - lo) * (rank - below))


@dataclass(frozen=True, kw_only=True)
class PackingMetrics:
    num_sequences: int
    num_packs: int
    real_tokens: int
    packed_tokens: int  # real tokens plus pad_seq_to_mult padding
    packing_efficiency: float  # packed tokens / (packs * pack size), %, unrounded
    padding_fraction: float  # share of the packs' token slots that hold no real token
    lower_bound_l1: int
    lower_bound_l2: int
    lower_bound_lp: float | None
    gap_to_bound: int  # packs above the best lower bound
    bound_efficiency: float  # efficiency a packing at the best bound would reach, %
    fill_mean: float
    fill_p01: float
    fill_min: float
    max_samples_per_pack: int
    attention_work_mean: float
    attention_work_max: int
    straggler_ratio: float  # heaviest pack's attention work / mean

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@njit(cache=True, nogil=True)
def _sums(fill, nseq, work):
    """(sum, min, max) of the fills, (sum, max) of the samples and of the work, in one pass over the three."""
    fsum, fmin, fmax = 0, fill[0], fill[0]
    nsum, nmax, wsum, wmax = 0, nseq[0], 0, work[0]
    for p in range(fill.size):
        f, k, w = fill[p], nseq[p], work[p]
        fsum += f
        nsum += k
        wsum += w
        fmin = min(fmin, f)
        fmax = max(fmax, f)
        nmax = max(nmax, k)
        wmax = max(wmax, w)
    return fsum, fmin, fmax, nsum, nmax, wsum, wmax


def packing_metrics(fill, nseq, work, counts, pack_size, real_tokens, lp_bound=None) -> PackingMetrics:
    """Figures of a packing from its per-pack sums (``per_pack``), in two passes over them (16M Wikipedia samples
    at pack size 384, 9.4M packs: ~15 ms, where numpy's eight reductions took ~45).

    >>> m = packing_metrics(np.array([4, 3]), np.array([2, 1]), np.array([8, 9]), np.array([0, 1, 1, 1]), 4, 7)
    >>> m.num_sequences, m.packing_efficiency, m.fill_min, m.attention_work_max, m.straggler_ratio
    (3, 87.5, 0.75, 9, 1.0588235294117647)
    """
    packs = int(fill.size)
    fsum, fmin, fmax, nsum, nmax, wsum, wmax = (int(v) for v in _sums(fill, nseq, work))
    packed = fsum
    mean_work = wsum / packs
    l1, l2 = l1_bound(counts, pack_size), l2_bound(counts, pack_size)
    best = max(l2, int(np.ceil(lp_bound - 1e-9)) if lp_bound is not None else 0)
    return PackingMetrics(
        num_sequences=nsum,
        num_packs=packs,
        real_tokens=int(real_tokens),
        packed_tokens=packed,
        packing_efficiency=packed / packs / pack_size * 100,
        padding_fraction=1 - real_tokens / (packs * pack_size),
        lower_bound_l1=l1,
        lower_bound_l2=l2,
        lower_bound_lp=lp_bound,
        gap_to_bound=packs - best,
        bound_efficiency=packed / max(best, 1) / pack_size * 100,
        fill_mean=packed / packs / pack_size,
        fill_p01=percentile_of_integers(fill, 1, top=fmax) / pack_size,
        fill_min=float(fmin) / pack_size,
        max_samples_per_pack=nmax,
        attention_work_mean=mean_work,
        attention_work_max=wmax,
        straggler_ratio=float(wmax / mean_work) if mean_work > 0 else 1.0,
    )
