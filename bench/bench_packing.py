"""Benchmark: the advisor's packing simulator against Megatron-Bridge 0.6.2's create_packing_strategy and against
the advisor's own previous first-fit kernel (a max segment tree over bins, kept as ``first_fit_tree``).

Same runtime-length histogram (the Wikipedia@512 shape scaled to 1M samples, and the real 16.3M-sample Wikipedia
histogram), same algorithm and seed, in one run. Per size and algorithm: ``pack`` of a data set met for the first
time (its shuffled order drawn), ``pack`` of another pack size (the order kept), the previous pipeline (a random
gather of the shuffled lengths, the tree kernel, grouping into CSR, per-pack sums), the two kernels alone on the
same items, and Megatron-Bridge's own packer: measured up to ``--mb-max`` samples and, above it, estimated from the
largest size measured (its segment tree does O(log n) per item: scaled by n log n, and said so). Every time is the
best of ``--repeat`` runs, printed with its range. The metadata is checked identical to Megatron-Bridge's where it
ran and to the previous kernel's everywhere. Peak memory of ``pack`` is measured in a child process (VmHWM). Then
the packing quality on the real Wikipedia@512 and SQuAD@384 histograms: every algorithm against the L2 and LP
bounds.

    python bench/bench_packing.py                           # 1M and 16.3M; Megatron-Bridge measured at 1M
    python bench/bench_packing.py --sizes 100000 1000000 --mb-max 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.data.ingest import load_lengths  # noqa: E402
from advisor.data.lengths import LengthHistogram  # noqa: E402
from advisor.packing.config import PackingConfig  # noqa: E402
from advisor.packing.offline import pack  # noqa: E402
from advisor.packing.packers import PACKERS  # noqa: E402

WIKI = ROOT / "sample_data" / "wikipedia_bert_len512_hist.csv"
SQUAD = ROOT / "sample_data" / "squad_v1.1_len384_hist.csv"


def wikipedia_shape(n: int) -> LengthHistogram:
    base = load_lengths(WIKI)
    counts = np.floor(base.counts * n / base.num_samples).astype(np.int64)
    counts[np.argmax(base.counts)] += n - counts.sum()  # exactly n samples
    keep = counts > 0
    return LengthHistogram(lengths=base.lengths[keep], counts=counts[keep], source=f"wikipedia-shape-{n}")


def child_memory(n: int, algorithm: str) -> dict:  # noqa: D401
    """Pack in a fresh process; report its peak RSS and the rise over the peak after imports and warm-up.

    Read from /proc/self/status (VmHWM), not getrusage: ru_maxrss survives exec and would report the parent's
    size (here, Megatron-Bridge's lists of 10M Python ints) for a child started by fork.
    """
    code = (
        "import re, sys\n"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from bench.bench_packing import data\n"
        "from advisor.packing.offline import pack\nfrom advisor.packing.config import PackingConfig\n"
        f"h = data({n})\n"
        f"pack(data(1000), PackingConfig(pack_size=512, algorithm={algorithm!r}))\n"
        "base = hwm()\n"
        f"pack(h, PackingConfig(pack_size=512, algorithm={algorithm!r}))\n"
        "peak = hwm()\n"
        "print(base, peak)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    base, peak = int(out[0]) * 1024, int(out[1]) * 1024
    return {"peak_rss_bytes": peak, "rise_bytes": peak - base}


def time_mb(mb, counts: np.ndarray, algorithm: str, seed: int, pack_size: int = 512):
    state = np.random.get_state()
    np.random.seed(seed)
    t0 = time.perf_counter()
    _, metadata = mb.create_packing_strategy(counts.tolist(), pack_size, algorithm)
    seconds = time.perf_counter() - t0
    np.random.set_state(state)
    return seconds, metadata


def data(n: int) -> LengthHistogram:
    """The real Wikipedia histogram at its own size, else its shape scaled to n samples."""
    real = load_lengths(WIKI)
    return real if n == real.num_samples else wikipedia_shape(n)


def previous_pack(hist: LengthHistogram, cfg: PackingConfig):
    """first_fit_shuffle as the advisor packed before this kernel: the shuffled lengths gathered through a
    permutation drawn by numpy's own shuffle, the max-tree kernel, the packs grouped into CSR, their sums, the
    metrics."""
    from advisor.packing.algorithms import _csr_from_bins
    from advisor.packing.first_fit import first_fit_tree
    from advisor.packing.metrics import packing_metrics, per_pack
    from advisor.packing.offline import megatron_bridge_metadata, runtime_lengths

    rt = runtime_lengths(hist, cfg)
    perm = np.arange(int(rt.counts.sum()), dtype=np.int32)
    np.random.RandomState(cfg.seed).shuffle(perm)
    items = np.repeat(np.arange(rt.counts.size, dtype=np.int32), rt.counts)[perm]
    bins, count = first_fit_tree(items, cfg.pack_size)
    out = np.empty(items.size, np.int32)
    offsets = _csr_from_bins(items, bins, count, out)
    fill, nseq, work = per_pack(offsets, out)
    packing_metrics(fill, nseq, work, rt.counts, cfg.pack_size, rt.real_tokens)
    return megatron_bridge_metadata(fill, nseq, rt.counts, cfg.pack_size)


def best(run, repeat: int, fresh=None) -> tuple[float, float, object]:
    """(best seconds, worst seconds, last value) of ``repeat`` runs; ``fresh()`` before each (caches emptied)."""
    times, value = [], None
    for _ in range(repeat):
        if fresh is not None:
            fresh()
        t0 = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - t0)
    return min(times), max(times), value


def span(lo: float, hi: float) -> str:
    return f"{lo:.2f}-{hi:.2f}" if hi - lo >= 0.005 else f"{lo:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 16_279_552])
    parser.add_argument("--mb-max", type=int, default=1_000_000, help="measure Megatron-Bridge up to this size")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from advisor import caches
    from advisor.packing.first_fit import first_fit, first_fit_tree
    from advisor.packing.permutation import shuffled_lengths
    from tests.support.mb_reference import load_module

    mb = load_module("megatron.bridge.data.packing.algorithms")
    pack(wikipedia_shape(1000), PackingConfig(pack_size=512))  # load the compiled kernels once
    pack(wikipedia_shape(1000), PackingConfig(pack_size=512, algorithm="first_fit_decreasing"))
    previous_pack(wikipedia_shape(1000), PackingConfig(pack_size=512))
    first_fit(np.array([3, 4], np.int32), 8, bins=False)  # the int32-items kernel too
    rows, mb_rate = [], {}
    print(f"seconds, best of {args.repeat} (range); pack size 512; 'new size' packs 640 with the shuffled order kept")
    print(
        f"{'samples':>11} {'algorithm':<21} {'pack':>11} {'new size':>10} {'previous':>10} {'kernel':>10} "
        f"{'tree kernel':>11} {'MB 0.6.2':>12} {'MB/pack':>8} {'prev/pack':>9} {'tree/kernel':>11} {'same':>5} "
        f"{'peak MiB':>8}"
    )
    for n in args.sizes:
        hist = data(n)
        for algorithm in ("first_fit_shuffle", "first_fit_decreasing"):
            cfg = PackingConfig(pack_size=512, algorithm=algorithm, seed=1234)
            lo, hi, ours = best(partial(pack, hist, cfg), args.repeat, fresh=caches.clear)
            nlo, nhi, _ = best(
                partial(pack, hist, PackingConfig(pack_size=640, algorithm=algorithm, seed=1234)), args.repeat
            )
            row = {"samples": n, "algorithm": algorithm, "pack_seconds": [lo, hi], "new_size_seconds": [nlo, nhi]}
            prev = kern = tree = None
            same = True
            if algorithm == "first_fit_shuffle":
                plo, phi, prev_meta = best(partial(previous_pack, hist, cfg), args.repeat, fresh=caches.clear)
                same &= prev_meta == ours.metadata
                items = shuffled_lengths(ours.runtime.counts, 1234).astype(np.int32)
                klo, khi, fit = best(partial(first_fit, items, 512, bins=False), args.repeat)
                tlo, thi, (_, count) = best(partial(first_fit_tree, items, 512), args.repeat)
                same &= count == fit.count
                prev, kern, tree = (plo, phi), (klo, khi), (tlo, thi)
                row.update(previous_seconds=[plo, phi], kernel_seconds=[klo, khi], tree_kernel_seconds=[tlo, thi])
                del items
            if n <= args.mb_max:
                print(f"  ... Megatron-Bridge {algorithm} on {n:,} samples", file=sys.stderr, flush=True)
                mb_s, metadata = time_mb(mb, ours.runtime.counts, algorithm, 1234)
                same &= metadata == ours.metadata
                mb_rate[algorithm] = (n, mb_s)
                mb_text, estimated = f"{mb_s:.1f}", False
            elif algorithm in mb_rate:  # its segment tree: O(log n) a sample
                m, secs = mb_rate[algorithm]
                mb_s = secs * n * np.log2(n) / (m * np.log2(m))
                mb_text, estimated = f"~{mb_s:.0f} est.", True
            else:
                mb_s, mb_text, estimated = float("nan"), "-", False
            mem = child_memory(n, algorithm)
            row.update(mb_seconds=mb_s, mb_estimated=estimated, identical_metadata=bool(same), **mem)
            rows.append(row)
            print(
                f"{n:>11,} {algorithm:<21} {span(lo, hi):>11} {span(nlo, nhi):>10} "
                f"{span(*prev) if prev else '-':>10} {span(*kern) if kern else '-':>10} "
                f"{span(*tree) if tree else '-':>11} {mb_text:>12} {mb_s / lo:>7.0f}x "
                f"{(prev[0] / lo) if prev else float('nan'):>8.1f}x "
                f"{(tree[0] / kern[0]) if kern else float('nan'):>10.1f}x {str(same):>5} "
                f"{mem['peak_rss_bytes'] / 2**20:>8.0f}",
                flush=True,
            )

    print("\nQuality on the real histograms (efficiency %, runtime lengths = length - 1):")
    print(f"{'data':<16} {'algorithm':<22} {'packs':>10} {'eff %':>7} {'L2 eff %':>9} {'LP eff %':>9} {'s':>7}")
    for path, size in ((WIKI, 512), (SQUAD, 384)):
        hist = load_lengths(path)
        for algorithm in PACKERS:
            t0 = time.perf_counter()
            res = pack(hist, PackingConfig(pack_size=size, algorithm=algorithm))
            s = time.perf_counter() - t0
            m = res.metrics
            l2_eff = m.packed_tokens / m.lower_bound_l2 / size * 100
            lp_eff = m.packed_tokens / np.ceil(m.lower_bound_lp) / size * 100 if m.lower_bound_lp else float("nan")
            rows.append(
                {
                    "data": path.name,
                    "algorithm": algorithm,
                    "packs": m.num_packs,
                    "efficiency": m.packing_efficiency,
                    "l2_efficiency": l2_eff,
                    "lp_efficiency": lp_eff,
                    "seconds": s,
                }
            )
            print(
                f"{path.name[:16]:<16} {algorithm:<22} {m.num_packs:>10,} {m.packing_efficiency:>7.3f} "
                f"{l2_eff:>9.3f} {lp_eff:>9.3f} {s:>7.2f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
