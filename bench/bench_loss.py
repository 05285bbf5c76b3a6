"""Benchmark: the loss weighting (``advisor/model/loss_expectation.py``) of a plan on the 16.3M-sample Wikipedia
histogram and on the chat-like sample, with and without per-token loss; the packing itself is done first and not
timed (the analysis caches it).

    python bench/bench_loss.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.analysis import analyze  # noqa: E402
from advisor.model.loss_expectation import loss_weighting  # noqa: E402
from advisor.ui.samples import default_plan, load_sample  # noqa: E402


def main() -> None:
    for sample in ("Wikipedia BERT (real, 16.3M)", "chat-like (180k)"):
        hist = load_sample(sample)
        plan = default_plan(sample)
        t0 = time.perf_counter()
        packing = analyze(plan, hist).packing
        packed = time.perf_counter() - t0
        for ptl in (False, True):
            p = plan.changed({"training": {"calculate_per_token_loss": ptl}})
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                lw = loss_weighting(p, hist, packing)
                times.append(time.perf_counter() - t0)
            print(
                f"{sample}: {hist.num_samples:,} samples, {packing.num_packs:,} packs (packed in {packed:.2f} s); "
                f"calculate_per_token_loss={ptl}: loss weighting median {statistics.median(times):.3f} s, max "
                f"{max(times):.3f} s over {len(times)} runs ({lw.steps_sampled} steps sampled; target < 1 s)"
            )


if __name__ == "__main__":
    main()
