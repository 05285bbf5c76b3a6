"""Fit the step-time model's constants on published runs and print every row, predicted against measured.

    python bench/calibrate.py            # the stored constants row by row, a refit, the table per system and
                                         # precision, and the fit with each system left out
    python bench/calibrate.py --csv F    # other tables with the same columns (repeat --csv)
    python bench/calibrate.py --quick    # the stored constants only
    python bench/calibrate.py --scaling  # the weak-scaling pairs (the same work per GPU on more GPUs), measured
                                         # and predicted, and nothing else

The fitted constants are pasted into advisor/model/perf/calibration.py (EFFICIENCY); tests/unit/model/test_perf_model.py
checks that they are the fit's result and that the errors are what docs/step-time.md says.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from advisor.model.perf.calibration import (
    CALIBRATION_CSVS,
    EFFICIENCY,
    fit,
    load_measurements,
    residuals,
    weak_scaling_series,
)
from advisor.model.perf.hardware import gpu_of
from advisor.model.perf.step import step_time


def _layout(p, dp: bool = False) -> str:
    """A run's layout as the tables print it: "TP4 PP8 VP5 CP1 EP8 FSDP" (and its DP when asked)."""
    return (
        f"TP{p.tp} PP{p.pp}"
        + (f" VP{p.vpp}" if p.vpp else "")
        + f" CP{p.cp}"
        + (f" EP{p.ep}" if p.ep > 1 else "")
        + (" FSDP" if p.fsdp else "")
        + (f" DP{p.dp}" if dp else "")
    )


def table(rows, eff) -> np.ndarray:
    print(f"{'run':<46} {'layout':<30} {'measured s':>10} {'predicted s':>11} {'error':>7}   largest terms")
    errors = []
    for r in rows:
        t = step_time(r.plan, r.work, eff)
        layout = _layout(r.plan.parallel)
        err = t.step_seconds / r.step_seconds - 1
        errors.append(err)
        top = sorted(t.breakdown.items(), key=lambda kv: -kv[1])[:4]
        print(
            f"{r.name:<46} {layout:<30} {r.step_seconds:>10.2f} {t.step_seconds:>11.2f} {err:>+7.1%}   "
            + ", ".join(f"{k} {v:.2f}" for k, v in top)
        )
    e = np.abs(errors)
    print(
        f"|error|: median {np.median(e):.1%}, 90th percentile {np.percentile(e, 90):.1%}, max {e.max():.1%}, "
        f"mean signed {np.mean(errors):+.1%} over {len(errors)} rows"
    )
    return np.array(errors)


def by_group(rows, errors) -> None:
    """The fit per system and precision: rows, median and max |error| (a Markdown table, as in docs/step-time.md)."""
    groups = defaultdict(list)
    for r, e in zip(rows, errors, strict=True):
        groups[(r.system, r.precision)].append(e)
    print("| system | precision | rows | median abs error | max abs error | mean signed |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (system, precision), errs in sorted(groups.items()):
        a = np.abs(errs)
        print(f"| {system} | {precision} | {len(a)} | {np.median(a):.1%} | {a.max():.1%} | {np.mean(errs):+.1%} |")
    parts = []
    for label, moe in (("dense models", False), ("MoE models", True)):
        errs = [abs(e) for r, e in zip(rows, errors, strict=True) if bool(r.plan.model.num_moe_experts) == moe]
        if errs:  # a table of one kind only (a dense fine-tuning table) has no line for the other
            parts.append(
                f"{label}: {len(errs)} rows, median {np.median(errs):.1%}, 90th percentile "
                f"{np.percentile(errs, 90):.1%}"
            )
    print("; ".join(parts))


def left_out(rows, key) -> list:
    """Per value of ``key`` (a system, a model, a release): (value, its rows, the constants fitted without them, the
    |error| on them)."""
    folds = []
    for value in sorted({key(r) for r in rows}):
        held = [r for r in rows if key(r) == value]
        eff = fit([r for r in rows if key(r) != value])
        folds.append((value, held, eff, np.abs(np.expm1(residuals(held, eff)))))
    return folds


def leave_one_out(folds, label) -> None:
    """Fitted without a group's rows, judged on them: how the model does on a system (or model) it has not seen."""
    print(f"\nleave one {label} out (fit without its rows, error on them):")
    print(f"| {label} | rows | median abs error | max abs error | constants fitted without it |")
    print("| --- | ---: | ---: | ---: | --- |")
    for value, held, eff, errs in folds:
        constants = ", ".join(
            f"{k} {getattr(eff, k):.3f}"
            for k in ("gemm", "gemm_blackwell", "gemm_fp4", "tp_overlap", "grouped", "expert_overhead_ms")
        )
        print(f"| {value} | {len(held)} | {np.median(errs):.1%} | {errs.max():.1%} | {constants} |")


def scaling(rows, eff) -> None:
    """Every weak-scaling series in the tables (the same layout and work per GPU on more GPUs, so more DP ranks and
    nodes): the step at each GPU count, measured and predicted, and each one's growth over the smallest run."""
    print("\nweak scaling: the same work per GPU on more GPUs (growth over the series' smallest run)")
    print("| run | layout | GPUs | nodes | measured s | growth | predicted s | growth | DP sync s | slowest GPU s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for runs in weak_scaling_series(rows):
        first = step_time(runs[0].plan, runs[0].work, eff)
        for r in runs:
            t = step_time(r.plan, r.work, eff)
            p = r.plan.parallel
            name = " ".join(r.name.split()[:-1])
            nodes = gpu_of(r.plan).nodes(p.gpus)
            print(
                f"| {name} | {_layout(p, dp=True)} | {p.gpus} | {nodes} | {r.step_seconds:.2f} | "
                f"{r.step_seconds / runs[0].step_seconds - 1:+.1%} | {t.step_seconds:.2f} | "
                f"{t.step_seconds / first.step_seconds - 1:+.1%} | {t.breakdown['dp_comm']:.3f} | "
                f"{t.breakdown['slowest_gpu']:.3f} |"
            )


def leave_one_out_by_precision(folds, label) -> None:
    """The same folds (a system, a release left out), their errors per system and precision."""
    print(f"\nleave one {label} out, per system and precision (fit without its rows, error on them):")
    print(f"| {label} left out | system | precision | rows | median abs error | max abs error |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for value, held, _eff, errs in folds:
        groups = defaultdict(list)
        for r, e in zip(held, errs, strict=True):
            groups[(r.system, r.precision)].append(e)
        for (system, precision), es in sorted(groups.items()):
            print(f"| {value} | {system} | {precision} | {len(es)} | {np.median(es):.1%} | {max(es):.1%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, action="append", help="a table of published runs (default: both shipped)")
    ap.add_argument("--quick", action="store_true", help="the stored constants only, no refit")
    ap.add_argument("--scaling", action="store_true", help="the weak-scaling series only")
    args = ap.parse_args()
    refused: list = []
    rows = load_measurements(args.csv or CALIBRATION_CSVS, refused)
    if args.scaling:
        scaling(rows, EFFICIENCY)
        return
    print(f"stored constants: {EFFICIENCY}")
    errors = table(rows, EFFICIENCY)
    by_group(rows, errors)
    if refused:  # every row is accounted for: a refused one is listed, not dropped
        print(f"\nrefused {len(refused)} of {len(refused) + len(rows)} rows (no estimate):")
        for table_name, line, what, why in refused:
            print(f"  {table_name} line {line}: {what}: {why}")
    if args.quick:
        return
    start = time.perf_counter()
    refit = fit(rows)
    print(f"\nrefit in {time.perf_counter() - start:.1f} s: {refit}")
    by_group(rows, np.expm1(residuals(rows, refit)))
    systems = left_out(rows, lambda r: r.system)
    leave_one_out(systems, "system")
    leave_one_out(left_out(rows, lambda r: r.plan.model.preset), "model")
    leave_one_out_by_precision(systems, "system")
    leave_one_out_by_precision(left_out(rows, lambda r: r.release), "release")
    scaling(rows, EFFICIENCY)


if __name__ == "__main__":
    main()
