"""Benchmark: ``estimate`` and ``recommend`` on a plan whose data has 1M samples.

``estimate``: the first call packs, later calls reuse it.

Later calls change what does not change the packs (GPU count, pipeline stages, GPU type, recompute); a change of
pack size, algorithm or padding multiple (CP, TP with SP) packs again, since the packs differ.

    python bench/bench_estimate.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.advice.rules import check  # noqa: E402
from advisor.advice.search import search  # noqa: E402
from advisor.data.ingest import load_lengths  # noqa: E402
from advisor.data.megatron_mock import default_mock_config  # noqa: E402
from advisor.model.estimate import estimate  # noqa: E402
from advisor.plan import plan_from_dict  # noqa: E402


def main() -> None:
    t0 = time.perf_counter()
    hist = load_lengths(json.dumps(default_mock_config(8192)))  # Megatron-LM's default mock: 1,000,000 samples
    read = time.perf_counter() - t0
    base = {
        "version": 2,
        "model": "llama3.1-8b",
        "training": {"seq_length": 8192, "global_batch_samples": 64},
        "packing": {"mode": "offline", "pack_size": 8192},
    }
    variants = [
        ({"gpus": 16, "tp": 2, "cp": 2, "sp": True}, {}, {"gpu": "H100-80GB"}),
        ({"gpus": 32, "tp": 2, "cp": 2, "sp": True}, {}, {"gpu": "H100-80GB"}),
        ({"gpus": 32, "tp": 2, "cp": 2, "sp": True, "pp": 2}, {}, {"gpu": "H200-141GB"}),
        ({"gpus": 64, "tp": 2, "cp": 2, "sp": True}, {"recompute": "full"}, {"gpu": "B200"}),
    ]
    plans = [
        plan_from_dict({**base, "parallel": p, "training": {**base["training"], **t}, "hardware": h})
        for p, t, h in variants
    ]
    t0 = time.perf_counter()
    est = estimate(plans[0], hist)
    first = time.perf_counter() - t0
    later = []
    for plan in plans * 3:
        t0 = time.perf_counter()
        estimate(plan, hist)
        later.append(time.perf_counter() - t0)
    print(f"data: {hist.num_samples:,} samples (read in {read:.2f} s) -> {est.packing.num_packs:,} packs")
    print(f"first estimate (packs the data): {first:.3f} s")
    print(
        f"later estimates (packing reused): median {statistics.median(later):.3f} s, max {max(later):.3f} s "
        f"over {len(later)} calls (target < 1 s); speed-up over the first {first / statistics.median(later):.0f}x"
    )
    t0 = time.perf_counter()
    result = search(plans[0], hist)
    findings = check(result.recommended, result.best[0].estimate.packing if result.best else None)
    seconds = time.perf_counter() - t0
    print(
        f"recommend (rules + search over {result.evaluated} layouts, packing cached per pack size and padding "
        f"multiple): {seconds:.2f} s; {len(findings)} findings on the recommended plan"
    )


if __name__ == "__main__":
    main()
