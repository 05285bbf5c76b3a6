"""Fit the step-time model's constants on published runs and print every row, predicted against measured.

    python bench/calibrate.py            # the stored constants, then a refit, row by row
    python bench/calibrate.py --csv F    # another table with the same columns

The fitted constants are pasted into advisor/model/perf/calibration.py (EFFICIENCY); tests/test_perf_model.py
checks that they are the fit's result.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from advisor.model.perf.calibration import CALIBRATION_CSV, EFFICIENCY, fit, load_measurements
from advisor.model.perf.step import step_time


def table(rows, eff) -> np.ndarray:
    print(f"{'run':<28} {'layout':<24} {'measured s':>10} {'predicted s':>11} {'error':>7}   largest terms")
    errors = []
    for r in rows:
        t = step_time(r.plan, r.work, eff)
        p = r.plan.parallel
        layout = f"TP{p.tp} PP{p.pp}" + (f" VP{p.vpp}" if p.vpp else "") + f" CP{p.cp}" + (f" EP{p.ep}" if p.ep > 1
                                                                                          else "")
        err = t.step_seconds / r.step_seconds - 1
        errors.append(err)
        top = sorted(t.breakdown.items(), key=lambda kv: -kv[1])[:4]
        print(f"{r.name:<28} {layout:<24} {r.step_seconds:>10.2f} {t.step_seconds:>11.2f} {err:>+7.1%}   "
              + ", ".join(f"{k} {v:.2f}" for k, v in top))
    e = np.abs(errors)
    print(f"|error|: median {np.median(e):.1%}, max {e.max():.1%}, mean signed {np.mean(errors):+.1%} "
          f"over {len(errors)} rows")
    return np.array(errors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CALIBRATION_CSV)
    args = ap.parse_args()
    rows = load_measurements(args.csv)
    print(f"stored constants: {EFFICIENCY}")
    table(rows, EFFICIENCY)
    start = time.perf_counter()
    refit = fit(rows)
    print(f"\nrefit in {time.perf_counter() - start:.2f} s: {refit}")
    table(rows, refit)
    # leave-one-model-out: fitted without a model's rows, judged on them (how the model does on a model it has
    # not seen)
    print("\nleave one model out (fit without the model, error on its rows):")
    for model in sorted({r.plan.model.preset for r in rows}):
        train = [r for r in rows if r.plan.model.preset != model]
        held = [r for r in rows if r.plan.model.preset == model]
        eff = fit(train)
        errs = [step_time(r.plan, r.work, eff).step_seconds / r.step_seconds - 1 for r in held]
        print(f"  {model:<16} gemm {eff.gemm:.3f} tp_overlap {eff.tp_overlap:.3f}   "
              + ", ".join(f"{e:+.1%}" for e in errs))


if __name__ == "__main__":
    main()
