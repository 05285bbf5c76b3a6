"""The trial's speed figures as both the command line and the dashboard show them: one function, one statistic.

``speed_report(result)`` reads the timed steps a ``trial.json`` holds (per way: the seconds and real tokens of
every timed step) and computes, with ``advisor.trial.stats``, each way's median tokens/s with its spread, the
packed/padded speed-up from medians with its bootstrap interval, and the noise warnings. The CLI prints
``speed_lines`` of it and the Trial page tables ``rows`` of it, so the two cannot disagree on the same result.
Light module: no torch.

>>> r = {"format": FORMAT, "predicted_speedup": 1.4, "packed_kernel": "note", **{w: {
...     "timed_step_seconds": [1.0, 1.1, 0.9, 1.0, 1.05], "timed_step_tokens": [k] * 5}
...     for w, k in (("packed", 2000), ("padded", 1000), ("block_masked", 1900))}}
>>> rep = speed_report(r)
>>> [row.way for row in rep.rows], shown(rep.rows[0])["median tokens/s"], round(rep.speedup.point, 2)
(['packed', 'padded', 'block_masked'], 2000, 2.0)
>>> rep.warnings
()
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from advisor.trial.stats import Speedup, noise_warnings, speedup, spread

FORMAT = 2  # trial.json layout: 2 = timed steps per way, medians and a bootstrap interval (1 had means of steps)
WAYS = ("packed", "padded", "block_masked")
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class WayRow:
    """One way's timed steps: per-step tokens/s statistics and the median step time."""

    way: str
    steps: int
    median_tokens_per_second: float
    min_tokens_per_second: float
    max_tokens_per_second: float
    iqr_tokens_per_second: float
    median_step_seconds: float


@dataclass(frozen=True)
class SpeedReport:
    rows: tuple[WayRow, ...]
    speedup: Speedup
    predicted_speedup: float | None
    warnings: tuple[str, ...]
    kernel_note: str


def timed_steps(result: dict, way: str) -> tuple[list[float], list[float]]:
    """(seconds, real tokens) of a way's timed steps in a trial result."""
    w = result[way]
    return list(w["timed_step_seconds"]), list(w["timed_step_tokens"])


def speed_report(result: dict) -> SpeedReport:
    """Medians, spreads, the speed-up with its interval and the warnings of a trial result (``trial.json``)."""
    rows, spreads, throughput = [], {}, {}
    for way in WAYS:
        if way not in result:
            continue
        seconds, tokens = timed_steps(result, way)
        throughput[way] = [k / s for k, s in zip(tokens, seconds, strict=True)]
        tps, sec = spread(throughput[way], way), spread(seconds, way)
        spreads[way] = tps
        rows.append(
            WayRow(
                way=way,
                steps=tps.n,
                median_tokens_per_second=tps.median,
                min_tokens_per_second=tps.minimum,
                max_tokens_per_second=tps.maximum,
                iqr_tokens_per_second=tps.iqr,
                median_step_seconds=sec.median,
            )
        )
    speed = speedup(throughput["packed"], throughput["padded"])
    warnings = noise_warnings(speed, {w: spreads[w] for w in ("packed", "padded")})
    predicted = result.get("predicted_speedup")
    return SpeedReport(
        rows=tuple(rows),
        speedup=speed,
        predicted_speedup=predicted,
        warnings=warnings,
        kernel_note=str(result.get("packed_kernel", "")),
    )


def shown(row: WayRow) -> dict:
    """A row as both the CLI and the page show it: tokens/s to the token, seconds to 4 significant digits."""
    return {
        "way": row.way,
        "steps": row.steps,
        "median tokens/s": round(row.median_tokens_per_second),
        "min tokens/s": round(row.min_tokens_per_second),
        "max tokens/s": round(row.max_tokens_per_second),
        "IQR tokens/s": round(row.iqr_tokens_per_second),
        "median step s": float(f"{row.median_step_seconds:.4g}"),
    }


def speedup_text(rep: SpeedReport) -> str:
    """'1.35x (95% interval 1.21x-1.52x, 10 steps)', as both the CLI and the page print it."""
    s = rep.speedup
    return f"{s.point:.2f}x ({s.confidence:.0%} interval {s.low:.2f}x-{s.high:.2f}x, {s.steps} steps)"


def speed_lines(rep: SpeedReport) -> list[str]:
    """The command line's text of a speed report."""
    lines = [f"  {'way':<13}{'steps':>6}{'median tok/s':>14}{'min':>10}{'max':>10}{'IQR':>10}{'median step s':>15}"]
    for row in rep.rows:
        r = shown(row)
        lines.append(
            f"  {r['way']:<13}{r['steps']:>6}{r['median tokens/s']:>14,}{r['min tokens/s']:>10,}"
            f"{r['max tokens/s']:>10,}{r['IQR tokens/s']:>10,}{r['median step s']:>15}"
        )
    predicted = f"{rep.predicted_speedup:.2f}x" if rep.predicted_speedup is not None else "n/a"
    lines.append(f"  speed-up packed/padded (median tokens/s): {speedup_text(rep)}; predicted from FLOPs {predicted}")
    lines += [f"  warning: {w}" for w in rep.warnings]
    if rep.kernel_note:
        lines.append(f"  note: {rep.kernel_note}")
    return lines


def loss_rows(result: dict) -> list[dict]:
    """The loss-weighting check of a trial result as both the CLI and the Trial page show it: per loss setting, the
    step-0 ratios packed / unpacked measured and predicted (none for a trial.json from before the check).

    >>> r = {"loss_weighting": {"rows": [{"per_token_loss": False, "plan": True, "reported_measured": 1.0,
    ...      "reported_predicted": 1.0, "objective_measured": 0.95, "objective_predicted": 0.9501,
    ...      "objective_from_curve": 0.96, "error": 1e-4, "ok": True}]}}
    >>> loss_rows(r)[0]["setting"], loss_rows(r)[0]["objective measured"]
    ('calculate_per_token_loss=False (the plan)', 0.95)
    """
    rows = []
    for row in (result.get("loss_weighting") or {}).get("rows", []):
        rows.append(
            {
                "setting": f"calculate_per_token_loss={row['per_token_loss']}" + (" (the plan)" if row["plan"] else ""),
                "lm loss measured": row["reported_measured"],
                "lm loss predicted": row["reported_predicted"],
                "objective measured": row["objective_measured"],
                "objective predicted": row["objective_predicted"],
                "objective from the position curve": row["objective_from_curve"],
                "within 1 %": row["ok"],
            }
        )
    return rows


def loss_lines(result: dict) -> list[str]:
    """The command line's text of the loss-weighting check."""
    check = result.get("loss_weighting")
    if not check:
        return []
    lines = [
        f"  loss weighting at step 0, packed / unpacked on the same {check['samples']} samples ({check['packs']} "
        f"packs against {check['unpacked_micro_batches']} micro batches of {check['micro_batch_size']}):"
    ]
    for r in loss_rows(result):
        lines.append(
            f"    {r['setting']}: lm loss {r['lm loss measured']:.6f} (predicted "
            f"{r['lm loss predicted']:.4f}); objective {r['objective measured']:.6f} (predicted "
            f"{r['objective predicted']:.6f}, from the position curve "
            f"{r['objective from the position curve']:.4f})" + ("" if r["within 1 %"] else " OUTSIDE 1 %")
        )
    return lines


def check_result(result: dict, name: str) -> None:
    """Refuse a trial result this version cannot report, with one message (a ValueError naming ``name``)."""
    fmt = result.get("format")
    if fmt is None:
        raise ValueError(
            f"{name}: a trial.json from an older advisor (a mean of a few steps, no per-step timings "
            "to take a median and spread from); rerun the trial with this version"
        )
    if fmt != FORMAT:
        raise ValueError(f"{name}: trial.json format {str(fmt)[:20]!r}, this version reads format {FORMAT}")
    for way in WAYS:
        try:
            seconds, tokens = timed_steps(result, way)
            ok = 0 < len(seconds) == len(tokens) <= MAX_STEPS and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                for v in seconds + tokens
            )
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise ValueError(
                f"{name}: {way}.timed_step_seconds and timed_step_tokens must be two lists of the same "
                "length of numbers above 0"
            )
