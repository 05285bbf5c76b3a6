"""Benchmark: the advisor's packing simulator against Megatron-Bridge 0.6.2's create_packing_strategy.

Same runtime-length histogram (the Wikipedia@512 shape scaled to 100k, 1M and 10M samples), same algorithm and
seed, in one run: prints both times, the ratio, and checks the metadata is identical. Peak memory of the
advisor at each size is measured in a child process (ru_maxrss). Then the packing quality on the real
Wikipedia@512 and SQuAD@384 histograms: every algorithm's efficiency against the L2 and LP bounds.

    python bench/bench_packing.py                 # all sizes (Megatron-Bridge at 10M takes minutes)
    python bench/bench_packing.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.data.ingest import load_lengths  # noqa: E402
from advisor.data.lengths import LengthHistogram  # noqa: E402
from advisor.packing.algorithms import ALGORITHMS  # noqa: E402
from advisor.packing.config import PackingConfig  # noqa: E402
from advisor.packing.offline import pack  # noqa: E402

WIKI = ROOT / "sample_data" / "wikipedia_bert_len512_hist.csv"
SQUAD = ROOT / "sample_data" / "squad_v1.1_len384_hist.csv"


def wikipedia_shape(n: int) -> LengthHistogram:
    base = load_lengths(WIKI)
    counts = np.floor(base.counts * n / base.num_samples).astype(np.int64)
    counts[np.argmax(base.counts)] += n - counts.sum()  # exactly n samples
    keep = counts > 0
    return LengthHistogram(lengths=base.lengths[keep], counts=counts[keep], source=f"wikipedia-shape-{n}")


def child_memory(n: int, algorithm: str) -> dict:
    """Pack in a fresh process; report its peak RSS and the rise over the peak after imports and warm-up.

    Read from /proc/self/status (VmHWM), not getrusage: ru_maxrss survives exec and would report the parent's
    size (here, Megatron-Bridge's lists of 10M Python ints) for a child started by fork.
    """
    code = (
        "import re, sys\n"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from bench.bench_packing import wikipedia_shape\n"
        "from advisor.packing.offline import pack\nfrom advisor.packing.config import PackingConfig\n"
        f"h = wikipedia_shape({n})\n"
        f"pack(wikipedia_shape(1000), PackingConfig(pack_size=512, algorithm={algorithm!r}))\n"
        "base = hwm()\n"
        f"pack(h, PackingConfig(pack_size=512, algorithm={algorithm!r}))\n"
        "peak = hwm()\n"
        "print(base, peak)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    base, peak = int(out[0]) * 1024, int(out[1]) * 1024
    return {"peak_rss_bytes": peak, "rise_bytes": peak - base}


def time_mb(mb, counts: np.ndarray, algorithm: str, seed: int):
    state = np.random.get_state()
    np.random.seed(seed)
    t0 = time.perf_counter()
    _, metadata = mb.create_packing_strategy(counts.tolist(), 512, algorithm)
    seconds = time.perf_counter() - t0
    np.random.set_state(state)
    return seconds, metadata


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--skip-mb-above", type=int, default=10**9, help="skip Megatron-Bridge above this size")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from tests.mb_reference import load_module

    mb = load_module("megatron.bridge.data.packing.algorithms")
    pack(wikipedia_shape(1000), PackingConfig(pack_size=512))  # load the compiled kernels once
    pack(wikipedia_shape(1000), PackingConfig(pack_size=512, algorithm="first_fit_decreasing"))
    rows = []
    print(f"{'samples':>11} {'algorithm':<22} {'advisor s':>10} {'MB 0.6.2 s':>11} {'ratio':>8} {'same':>5} "
          f"{'peak RSS MiB':>13} {'rise MiB':>9}")
    for n in args.sizes:
        hist = wikipedia_shape(n)
        for algorithm in ("first_fit_shuffle", "first_fit_decreasing", "best_fit_decreasing"):
            cfg = PackingConfig(pack_size=512, algorithm=algorithm, seed=1234)
            t0 = time.perf_counter()
            ours = pack(hist, cfg)
            ours_s = time.perf_counter() - t0
            mb_s, same = float("nan"), None
            if algorithm in ("first_fit_shuffle", "first_fit_decreasing") and n <= args.skip_mb_above:
                print(f"  ... Megatron-Bridge {algorithm} on {n:,} samples", file=sys.stderr, flush=True)
                mb_s, metadata = time_mb(mb, ours.runtime.counts, algorithm, 1234)
                same = metadata == ours.metadata
            mem = child_memory(n, algorithm)
            row = {"samples": n, "algorithm": algorithm, "advisor_seconds": ours_s, "mb_seconds": mb_s,
                   "ratio": mb_s / ours_s, "identical_metadata": same, **mem}
            rows.append(row)
            print(f"{n:>11,} {algorithm:<22} {ours_s:>10.3f} {mb_s:>11.2f} {row['ratio']:>7.0f}x "
                  f"{str(same) if same is not None else '-':>5} {mem['peak_rss_bytes'] / 2**20:>13.0f} "
                  f"{mem['rise_bytes'] / 2**20:>9.0f}", flush=True)

    print("\nQuality on the real histograms (efficiency %, runtime lengths = length - 1):")
    print(f"{'data':<16} {'algorithm':<22} {'packs':>10} {'eff %':>7} {'L2 eff %':>9} {'LP eff %':>9} {'s':>7}")
    for path, size in ((WIKI, 512), (SQUAD, 384)):
        hist = load_lengths(path)
        for algorithm in ALGORITHMS:
            t0 = time.perf_counter()
            res = pack(hist, PackingConfig(pack_size=size, algorithm=algorithm))
            s = time.perf_counter() - t0
            m = res.metrics
            l2_eff = m.packed_tokens / m.lower_bound_l2 / size * 100
            lp_eff = m.packed_tokens / np.ceil(m.lower_bound_lp) / size * 100 if m.lower_bound_lp else float("nan")
            rows.append({"data": path.name, "algorithm": algorithm, "packs": m.num_packs,
                         "efficiency": m.packing_efficiency, "l2_efficiency": l2_eff, "lp_efficiency": lp_eff,
                         "seconds": s})
            print(f"{path.name[:16]:<16} {algorithm:<22} {m.num_packs:>10,} {m.packing_efficiency:>7.3f} "
                  f"{l2_eff:>9.3f} {lp_eff:>9.3f} {s:>7.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
