"""The step-time model's three efficiency constants and the published runs they are fitted on.

Alternatives: a constant per model or per layout (fits anything, predicts nothing) or no fit (datasheet peaks:
40 % too fast). Here: two constants shared by every run (GEMM efficiency and the hidden share of TP communication;
attention's efficiency comes from kernel benchmarks), fitted once on H100 BF16 pre-training runs NVIDIA published
(``sample_data/published_step_times.csv``, from NVIDIA/dgxc-benchmarking v25.04.02) by least squares on
log(predicted / measured). ``python bench/calibrate.py`` refits and prints every row; the result is pasted below.
Packed fine-tuning runs are never used here: they are what the model is judged on.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.model.perf.step import Efficiency, StepWork, step_time
from advisor.plan import Plan, plan_from_dict

BOUNDS = {"gemm": (0.3, 1.0), "tp_overlap": (0.0, 1.0)}
# Not fitted: pre-training rows (all 4k-8k, one sequence per row) cannot tell GEMM from attention efficiency, and a
# free fit trades one for the other (it pushed attention to 100 % of peak). Taken from kernel benchmarks instead:
# FlashAttention-3 (Shah et al. 2024, H100 SXM5 BF16, causal, head dim 128, 4k-16k) runs forward at ~620 and
# backward at ~510 TFLOP/s; with backward 2.5x the forward FLOPs that is 3.5 / (1/0.63 + 2.5/0.52) = 0.55 of peak.
ATTENTION_EFFICIENCY = 0.55
# fitted by `python bench/calibrate.py` on the 12 rows of sample_data/published_step_times.csv: |error| median 3.3 %,
# max 11.6 % (Grok-1, the one MoE model: its all-to-all and routing imbalance are the least modelled)
EFFICIENCY = Efficiency(gemm=0.64, attention=ATTENTION_EFFICIENCY, tp_overlap=0.49)
CALIBRATION_CSV = Path(__file__).resolve().parents[3] / "sample_data" / "published_step_times.csv"


# The CSV leaves VP blank for Nemotron-4 340B, but its source (dgxc-benchmarking v25.04.02 nemotron/README.md, H100
# table: TP 8, PP 8, VP 12) and NeMo's model_configs_h100.csv give 12: without it the 8-stage pipeline's bubble
# would be 7/16 of the step, which the measured 494 TFLOP/s per GPU rules out.
SOURCE_VPP = {"nemotron4-340b": "12"}


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One published run: its plan as the benchmark ran it, its work per step and its measured step time."""

    name: str
    plan: Plan
    work: StepWork
    step_seconds: float
    source: str


def _plan(row: dict) -> Plan:
    """The benchmark's settings: NeMo's performance recipes run TP with sequence parallelism and TP communication
    overlap, the distributed optimizer with BF16 gradient reduction (grad_reduce_in_fp32 False), no recompute
    (recompute_layers 0 in NeMo's scripts/performance/recommended_model_configs/model_configs_h100.csv), expert
    TP = TP (Megatron-Core's default), and Llama 3.1 405B's 126 layers with the embedding and loss counted as
    pipeline layers."""
    tp, pp, ep = int(row["tp"]), int(row["pp"]), int(row["ep"])
    parallel = {"gpus": int(row["gpus"]), "tp": tp, "pp": pp, "cp": int(row["cp"]), "ep": ep,
                "etp": tp if ep > 1 else 1, "sp": tp > 1, "tp_comm_overlap": tp > 1}
    vpp = row["vpp"] or SOURCE_VPP.get(row["model"])
    if vpp:
        parallel["vpp"] = int(vpp)
    if row["model"] == "llama3.1-405b":
        parallel.update(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    return plan_from_dict({
        "model": row["model"], "parallel": parallel,
        "training": {"task": "pretrain", "seq_length": int(row["seq_length"]),
                     "micro_batch_size": int(row["micro_batch_size"]),
                     "global_batch_size": int(row["global_batch_size"]), "recompute": "none",
                     "grad_reduce_in_fp32": False},
        "packing": {"mode": "none"}})


def load_measurements(path: Path = CALIBRATION_CSV) -> list[Measurement]:
    """Rows of the published-runs CSV as plans and work (pre-training: full sequences, one causal mask each)."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            plan = _plan(row)
            t = plan.training
            work = StepWork(tokens=t.micro_batch_size * t.seq_length,
                            seqlen_squared_sum=t.micro_batch_size * float(t.seq_length) ** 2,
                            micro_batches=t.global_batch_size / (t.micro_batch_size * plan.parallel.dp))
            out.append(Measurement(name=f"{row['model']} {row['gpus']} GPUs", plan=plan, work=work,
                                   step_seconds=float(row["step_seconds"]), source=row["source"]))
    return out


def residuals(rows: Sequence[Measurement], eff: Efficiency) -> np.ndarray:
    """log(predicted / measured) per row."""
    return np.array([math.log(step_time(r.plan, r.work, eff).step_seconds / r.step_seconds) for r in rows])


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, steps: float = 0.05, iters: int = 400) -> np.ndarray:
    """The textbook downhill simplex (reflect, expand, contract, shrink): three variables, no scipy needed."""
    simplex = [x0] + [x0 + steps * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centre + (centre - worst)
        fr = f(reflected)
        if fr < values[0]:
            expanded = centre + 2 * (centre - worst)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (worst - centre)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                values = [f(x) for x in simplex]
        if max(values) - min(values) < 1e-12:
            break
    return simplex[int(np.argmin(values))]


def fit(rows: Sequence[Measurement], start: Efficiency = EFFICIENCY) -> Efficiency:
    """The fitted constants minimizing the sum of squared log errors over ``rows``, within physical bounds."""
    names = list(BOUNDS)

    def make(x: np.ndarray) -> Efficiency:
        return Efficiency(attention=ATTENTION_EFFICIENCY,
                          **{n: float(np.clip(v, *BOUNDS[n])) for n, v in zip(names, x, strict=True)})

    def loss(x: np.ndarray) -> float:
        outside = sum(max(0.0, lo - v, v - hi) for v, (lo, hi) in zip(x, BOUNDS.values(), strict=True))
        return float(np.sum(residuals(rows, make(x)) ** 2)) + 10 * outside

    best = _nelder_mead(loss, np.array([getattr(start, n) for n in names]))
    return make(np.round(best, 3))
