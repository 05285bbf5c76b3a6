"""The step-time model's fitted constants and the published runs they are fitted on.

Alternatives: a constant per model, layout or system (fits anything, predicts nothing) or no fit (datasheet peaks:
40 % too fast). Here: eight constants shared by every run: the GEMM efficiency of BF16 and FP8 (one figure) on Hopper
and on Blackwell, and of NVFP4, attention's efficiency on Hopper and on Blackwell, the hidden share of TP
communication, and for MoE layers the grouped GEMMs' share of that efficiency and a fixed overhead per local expert,
layer and micro batch. They are fitted on log(predicted / measured) (soft-L1) over three published tables of
pre-training runs:

- ``sample_data/published_step_times.csv``: NVIDIA/dgxc-benchmarking v25.04.02, H100, NeMo 25.02, BF16 and FP8;
- ``sample_data/mb_performance_pretrain.csv``: Megatron-Bridge's performance summary, 25.11 to 26.02.01 containers,
  H100, B200, B300, GB200 and GB300, BF16, FP8 (current scaling), MXFP8 and NVFP4;
- ``sample_data/long_sequence_tflops.csv``: NeMo's long-sequence table, 4K to 1M tokens under CP, H100 and B200 in
  FP8: the rows that tell attention's efficiency from the GEMMs'.

``python bench/calibrate.py`` refits and prints every row, the fit per system and precision and the errors with
each system left out; the result is pasted below. Fine-tuning runs and later tables are never used here: they are
what the model is judged on.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor import caches
from advisor.model.perf.step import Efficiency, StepWork, step_time
from advisor.plan import Plan, PlanError, plan_from_dict
from advisor.plan.presets import MODEL_PRESETS, RECIPE_PIPELINE_SLOTS

BOUNDS = {
    "gemm": (0.3, 1.0),
    "gemm_blackwell": (0.3, 1.0),
    "gemm_fp4": (0.1, 1.0),
    "tp_overlap": (0.0, 1.0),
    "grouped": (0.3, 1.0),
    "expert_overhead_ms": (0.0, 3.0),
    "attention": (0.2, 0.8),
    "attention_blackwell": (0.2, 0.8),
}
# Attention's efficiency is fitted on the long-sequence rows only (``ATTENTION_ROWS_FROM``): the 4k-8k pre-training
# rows cannot tell GEMM from attention, and a free fit on them alone traded one for the other (it pushed attention to
# 100 % of peak). Kernel benchmarks promise more than those runs show: FlashAttention-3 (Shah et al. 2024, H100 SXM5
# BF16, causal, head dim 128, 4k-16k) runs forward at ~620 and backward at ~510 TFLOP/s, 3.5 / (1/0.63 + 2.5/0.52)
# = 0.55 of peak with backward 2.5x the forward FLOPs; NeMo's Llama 2 7B runs from 32K to 1M tokens on H100 put
# what Transformer Engine sustained under CP at 0.31 (their container, 24.03, predates FlashAttention-3; no newer
# long-context H100 table is public). On B200 FlashAttention-4 reaches 1,605 TFLOP/s forward, 1.3x cuDNN 9.13
# (Zadouri, Dao et al. 2026), 0.47 of peak by the same sum; NeMo 25.04's Llama 3 8B runs give 0.41.
ATTENTION_EFFICIENCY = 0.55  # the benchmark figure: Blackwell Ultra's (no long-context rows to fit it on)
ATTENTION_EFFICIENCY_BLACKWELL = 0.47  # the benchmark figure, the fit's starting point
BENCHMARK_ATTENTION = {"attention": ATTENTION_EFFICIENCY, "attention_blackwell": ATTENTION_EFFICIENCY_BLACKWELL}
# fitted by `python bench/calibrate.py` on the 118 rows of the three tables (docs/step-time.md, its calibration table)
EFFICIENCY = Efficiency(
    gemm=0.714,
    gemm_blackwell=0.565,
    gemm_fp4=0.383,
    attention=0.322,
    attention_blackwell=0.412,
    attention_ultra=ATTENTION_EFFICIENCY,
    tp_overlap=0.366,
    grouped=0.499,
    expert_overhead_ms=0.312,
)
# LoRA as the performance runs set it: the recipes' dim, 16 for Llama 3 70B and 8 for 8B (Megatron-Bridge
# recipes/llama/llama3.py llama3_70b_peft_config / llama3_8b_peft_config, as NeMo's Llama 3 recipes), else Bridge's
# LoRA default, 32 (megatron/bridge/peft/lora.py); on linear_qkv only, as both performance scripts set it from the
# 26.02 container: Megatron-Bridge's scripts/performance/configs/llama/llama3_llm_finetune.py (v0.3.0, v0.3.1: every
# system, cfg.peft.target_modules = ["linear_qkv"]) and NeMo's recipes in performance mode
# (finetune_performance_optimizations); the 25.11 scripts (v0.2.0) set no targets: LoRA's default four. A table's
# lora_rank and lora_targets columns (targets separated by spaces), where it has them, say otherwise.
LORA_RANK = 32
LORA_RANKS = {"llama3.1-70b": 16, "llama3.1-8b": 8}
LORA_TARGETS = ["linear_qkv"]
RELEASE_LORA_TARGETS = {"25.11": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}
SAMPLE_DATA = Path(__file__).resolve().parents[3] / "sample_data"
CALIBRATION_CSV = SAMPLE_DATA / "published_step_times.csv"
MB_CALIBRATION_CSV = SAMPLE_DATA / "mb_performance_pretrain.csv"
LONG_CALIBRATION_CSV = SAMPLE_DATA / "long_sequence_tflops.csv"
CALIBRATION_CSVS = (CALIBRATION_CSV, MB_CALIBRATION_CSV, LONG_CALIBRATION_CSV)
# Rows this long are mostly attention (Llama 2 7B at 32K: over half the step): they, and only they, tell the
# attention kernels' efficiency from the GEMMs'
ATTENTION_ROWS_FROM = 32768


# The CSV leaves VP blank for Nemotron-4 340B, but its source (dgxc-benchmarking v25.04.02 nemotron/README.md, H100
# table: TP 8, PP 8, VP 12) and NeMo's model_configs_h100.csv give 12: without it the 8-stage pipeline's bubble
# would be 7/16 of the step, which the measured 494 TFLOP/s per GPU rules out.
SOURCE_VPP = {"nemotron4-340b": "12"}
# Megatron-Bridge's table names Llama 3 models; the presets are Llama 3.1's, the same network (the RoPE scaling
# aside, which costs nothing)
MODEL_OF = {"llama3-8b": "llama3.1-8b", "llama3-70b": "llama3.1-70b"}
# models whose recipes count the embedding and the loss as pipeline layers (126 + 2 and 94 + 2 layers divide by
# PP x VP): Megatron-Bridge 0.6.2 recipes/llama/h100/llama3.py (405B), recipes/qwen/h100/qwen3_moe.py (235B)
PIPELINE_SLOTS = tuple(RECIPE_PIPELINE_SLOTS)
# NeMo 25.02's performance scripts ran FP8 with delayed scaling (bf16_with_fp8_mixed); the dgxc README names no
# recipe. Megatron-Bridge's table says FP8-CS: current scaling, tensorwise
FP8_RECIPE = {
    "published_step_times.csv": "delayed",
    "mb_performance_pretrain.csv": "tensorwise",
    "long_sequence_tflops.csv": "delayed",  # NeMo 24.03 and 25.04's FP8: delayed scaling, their only recipe then
}
# Megatron-Bridge's MoE settings per model and system (dispatcher, EP all-to-all overlap), as the performance scripts
# of the release that ran the row set them: scripts/performance/configs/qwen3/workload_base_configs.py at v0.2.0
# (the 25.11 container), configs/qwen/qwen3_workload_base_configs.py at v0.3.0 (26.02) and v0.3.1 (26.02.01), with
# the *_llm_pretrain.py functions and utils/overrides.py that apply them. The 235B on GB200/GB300 and the 30B on
# GB200/GB300/B300: moe_token_dispatcher_type flex, moe_flex_dispatcher_backend hybridep; the 235B elsewhere: alltoall,
# with moe_a2a_overlap (overlap_moe_expert_parallel_comm with delay_wgrad_compute) on H100 in every release; GPT-OSS
# (configs/gpt_oss/): alltoall without the overlap on every system and release (a hybridep label on main after v0.3.1
# never reaches the model). NeMo's Grok-1 (24.12) ran the all-to-all dispatcher without overlap, Megatron-Core's
# defaults.
MOE_SETTINGS = {
    ("qwen3-235b-a22b", "GB200"): ("flex_hybridep", False),
    ("qwen3-235b-a22b", "GB300"): ("flex_hybridep", False),
    ("qwen3-235b-a22b", "H100-80GB"): ("alltoall", True),
    **{("qwen3-30b-a3b", g): ("flex_hybridep", False) for g in ("GB200", "GB300", "B200", "B300", "H100-80GB")},
    # scripts/performance/configs/deepseek/deepseek_workload_base_configs.py: HybridEP on Blackwell (DeepEP for the
    # B200 V2 FP8 and NVFP4 variants, which a table row does not tell apart), and configs/deepseek/
    # deepseek_llm_pretrain.py enable_deepep=True on H100; configs/kimi/kimi_workload_base_configs.py: HybridEP on
    # GB200 and GB300, the bridge's alltoall elsewhere
    **{("deepseek-v3", g): ("flex_hybridep", False) for g in ("GB200", "GB300", "B200", "B300")},
    ("deepseek-v3", "H100-80GB"): ("flex_deepep", False),
    ("kimi-k2", "GB200"): ("flex_hybridep", False),
    ("kimi-k2", "GB300"): ("flex_hybridep", False),
}
# The table above is the newest release's (v0.3.1), which a later table's rows get too; where an earlier release ran
# them differently (release, model, system): the 30B on B200 ran alltoall before v0.3.1, on H100 alltoall with the
# overlap (v0.2.0), then DeepEP with it (v0.3.0); the 235B on B200 ran the overlap in v0.2.0, on B300 in v0.3.0
RELEASE_MOE_SETTINGS = {
    ("25.11", "qwen3-30b-a3b", "H100-80GB"): ("alltoall", True),
    ("26.02", "qwen3-30b-a3b", "H100-80GB"): ("flex_deepep", True),
    ("25.11", "qwen3-30b-a3b", "B200"): ("alltoall", False),
    ("26.02", "qwen3-30b-a3b", "B200"): ("alltoall", False),
    ("25.11", "qwen3-235b-a22b", "B200"): ("alltoall", True),
    ("26.02", "qwen3-235b-a22b", "B300"): ("alltoall", True),
}


# Activation offloading in Megatron-Bridge's FSDP runs of Llama 3 70B (scripts/performance/configs/llama/
# llama3_workload_base_configs.py at v0.3.1, V1 and V2 alike: cpu_offloading_num_layers 20 on GB300 and 40 on GB200 in
# FP8-CS, 30 and 20 in BF16, 5 on B200 in FP8-CS): without it the plan's activations would not fit the GPU
CPU_OFFLOAD = {
    ("llama3.1-70b", "GB300", "fp8"): 20,
    ("llama3.1-70b", "GB200", "fp8"): 40,
    ("llama3.1-70b", "GB300", "bf16"): 30,
    ("llama3.1-70b", "GB200", "bf16"): 20,
    ("llama3.1-70b", "B200", "fp8"): 5,
}


# Block recompute in Megatron-Bridge's H100 runs (utils/overrides.py: recompute_num_layers sets granularity full,
# method block): Llama 3 8B FP8-CS pre-training, 5 layers (v0.2.0 to v0.3.1); Llama 3 70B LoRA, 1 layer, in BF16
# from v0.3.0 (26.02) and in FP8-CS before (v0.2.0); keyed (model, system, precision, task[, release])
RECOMPUTE_LAYERS = {
    ("llama3.1-8b", "H100-80GB", "fp8", "pretrain"): 5,
    ("llama3.1-70b", "H100-80GB", "bf16", "lora"): 1,
    ("llama3.1-70b", "H100-80GB", "fp8", "lora", "25.11"): 1,
    ("llama3.1-70b", "H100-80GB", "bf16", "lora", "25.11"): 0,
}


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One published run: its plan as the benchmark ran it, its work per step and its measured step time."""

    name: str
    plan: Plan
    work: StepWork
    step_seconds: float
    source: str
    system: str = "H100-80GB"
    precision: str = "bf16"
    release: str = ""  # the NeMo container it ran in (the table's release column, else the one its source names)


def _parallel(row: dict, model: str, moe: bool, system: str = "H100-80GB") -> dict:
    """The layout as published. Both tables' recipes run TP with sequence parallelism; dense models overlap TP
    communication (NeMo's and Megatron-Bridge's comm-overlap configs), Megatron-Bridge's MoE recipes do not
    (perf_recipes/qwen/h100/qwen3_moe.py, tp_comm_overlap=False) and set expert TP 1 (Qwen3-MoE, GPT-OSS); NeMo's
    Grok-1 keeps Megatron-Core's default expert TP = TP."""
    tp, pp, ep = int(row["tp"]), int(row["pp"]), int(row["ep"])
    mb = "fsdp" in row
    parallel = {
        "gpus": int(row["gpus"]),
        "tp": tp,
        "pp": pp,
        "cp": int(row["cp"]),
        "ep": ep,
        "etp": (1 if mb else tp) if ep > 1 else 1,
        "sp": tp > 1,
        "tp_comm_overlap": tp > 1 and not (mb and moe),
        "fsdp": row.get("fsdp") == "yes",
    }
    vpp = row["vpp"] or SOURCE_VPP.get(row["model"])
    if vpp and pp > 1:
        parallel["vpp"] = int(vpp)
    if model in PIPELINE_SLOTS:
        parallel.update(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    dispatcher, overlap = RELEASE_MOE_SETTINGS.get((row.get("release", ""), model, system)) or MOE_SETTINGS.get(
        (model, system), ("alltoall", False)
    )
    # the overlap needs a virtual pipeline with PP (Megatron-Core); a row published without one ran without it
    parallel.update(moe_dispatcher=dispatcher, moe_a2a_overlap=overlap and ep > 1 and (pp == 1 or "vpp" in parallel))
    return parallel


def plan_of_row(row: dict, table: str) -> Plan:
    """The benchmark's settings: the layout as published, the precision (FP8 with the table's recipe), the
    distributed optimizer with BF16 gradient reduction (grad_reduce_in_fp32 False in both tables' scripts), no
    recompute (NeMo's model_configs_h100.csv recompute_layers 0; Megatron-Bridge's perf recipes set none but the
    block recompute of ``RECOMPUTE_LAYERS``), the CPU offloading of ``CPU_OFFLOAD``; the row's task: pre-training
    on full sequences, or SFT and LoRA on packs of the sequence length (``work_of``)."""
    model = MODEL_OF.get(row["model"], row["model"])
    precision = row["precision"].lower()
    moe = bool(MODEL_PRESETS.get(model, {}).get("num_moe_experts"))
    task = _task_of(row)
    training = {
        "task": "pretrain" if task == "pretrain" else "llm-sft",
        "seq_length": int(row["seq_length"]),
        "micro_batch_size": int(row["micro_batch_size"]),
        "recompute": "none",
        "grad_reduce_in_fp32": False,
        "precision": precision,
        "peft": "lora" if task == "lora" else "none",
    }
    if task == "lora":  # LoRA's rank and targets only on LoRA rows (the plan refuses them without LoRA)
        training.update(
            lora_rank=_whole(row.get("lora_rank"), "lora_rank") or LORA_RANKS.get(model, LORA_RANK),
            lora_targets=(row.get("lora_targets") or "").split()
            or RELEASE_LORA_TARGETS.get(row.get("release", ""), LORA_TARGETS),
        )
    packed = task != "pretrain" and (row.get("packed") or "yes").strip().lower() != "no"
    # packed: the table's global batch counts packs (one pack a micro batch), as Megatron-Bridge's does
    training["global_batch_size"] = int(row["global_batch_size"])
    if precision == "fp8":
        training["fp8_recipe"] = FP8_RECIPE.get(table, "tensorwise")
    gpu = row.get("system") or row.get("gpu") or "H100-80GB"
    if row.get("fsdp") == "yes" and int(row["pp"]) == 1:
        training["cpu_offloading_num_layers"] = CPU_OFFLOAD.get((model, gpu, precision), 0)
    if table == "mb_performance_pretrain.csv" or "Megatron-Bridge" in (row.get("source") or ""):
        key = (model, gpu, precision, task)
        layers = RECOMPUTE_LAYERS.get((*key, row.get("release", "")), RECOMPUTE_LAYERS.get(key, 0))
        if layers:
            training.update(recompute="full", recompute_num_layers=layers)
    packing = {"mode": "offline", "pack_size": int(row["seq_length"])} if packed else {"mode": "none"}
    return plan_from_dict(
        {
            "version": 2,
            "model": model,
            "parallel": _parallel(row, model, moe, gpu),
            "training": training,
            "packing": packing,
            "hardware": {"gpu": gpu},
        },
        f"{table} row {row['model']} {row.get('system', '')} {row['gpus']} GPUs",
    )


def _whole(cell: str | None, column: str) -> int | None:
    """An optional whole-number cell: None when blank, else its value, or a message naming the column."""
    text = (cell or "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"{column} {text[:20]!r} is not a whole number")
    return int(text)


def _task_of(row: dict) -> str:
    """pretrain, sft or lora, as the tables name them (finetune and fine-tuning are SFT; peft and lora LoRA)."""
    task = (row.get("task") or "pretrain").strip().lower().replace("-", "").replace("_", "")
    if task in ("pretrain", "pretraining"):
        return "pretrain"
    if task in ("lora", "peft"):
        return "lora"
    if task in ("sft", "finetune", "finetuning", "fullsft"):
        return "sft"
    raise ValueError(f"task {row.get('task')!r}: pretrain, sft or lora")


def work_of(plan: Plan) -> StepWork:
    """What a step of a table's row runs. Pre-training: full sequences, one causal mask each. Fine-tuning (the
    performance scripts of NeMo and Megatron-Bridge fine-tune on SQuAD, packed to the sequence length:
    Megatron-Bridge scripts/performance/configs/llama/llama3_llm_finetune.py, packed_sequence=True): the packs
    the advisor forms from the bundled SQuAD lengths at that size, their tokens and sum(s_i^2) per micro batch."""
    t = plan.training
    if plan.packing_mode == "none":
        return StepWork(
            tokens=t.micro_batch_size * t.seq_length,
            seqlen_squared_sum=t.micro_batch_size * float(t.seq_length) ** 2,
            micro_batches=plan.batch_in_samples / (t.micro_batch_size * plan.parallel.dp),
        )
    from advisor.model.estimate import _micro_batches  # the estimate's own packing (it imports this module)

    mb, result, _ = _micro_batches(plan, _squad(), plan.packing_mode)
    return StepWork(
        tokens=float(np.mean(mb.computed_tokens)),
        seqlen_squared_sum=float(np.mean(mb.attention_computed)),
        micro_batches=plan.micro_batches_per_step(result.packing_factor if result else None),
    )


@functools.lru_cache(maxsize=1)
def _squad():
    from advisor.data.ingest import load_lengths

    return load_lengths(SAMPLE_DATA / "squad_v1.1_len384_hist.csv")


caches.listed("the SQuAD lengths fine-tuning rows are packed from", _squad)


def load_measurements(paths: Sequence[Path] = CALIBRATION_CSVS, refused: list | None = None) -> list[Measurement]:
    """Rows of the published-runs tables as plans and work (``work_of``): pre-training, SFT and LoRA rows. A row
    the plan refuses (a model without a preset, a layout Megatron would refuse) raises, or with ``refused`` is
    counted there as (table, line, row's model and system, why) and the others are read."""
    out = []
    for path in [paths] if isinstance(paths, Path) else paths:
        with open(path, newline="", encoding="utf-8") as f:
            for line, row in enumerate(csv.DictReader(f), start=2):
                try:
                    plan = plan_of_row(row, path.name)
                except (PlanError, ValueError) as e:
                    if refused is None:
                        raise
                    refused.append(
                        (
                            path.name,
                            line,
                            f"{row.get('model')} {row.get('system') or row.get('gpu')} "
                            f"{row.get('precision')} {row.get('gpus')}",
                            str(e).splitlines()[-1][:300],
                        )
                    )
                    continue
                t = plan.training
                work = work_of(plan)
                release = f"{row['release']} " if row.get("release") else ""
                container = row.get("release") or _container(row["source"])
                task = "" if t.task == "pretrain" else f" {_task_of(row)}"
                out.append(
                    Measurement(
                        name=f"{release}{row['model']}{task} {plan.hardware.gpu} {t.precision} {row['gpus']}",
                        plan=plan,
                        work=work,
                        step_seconds=float(row["step_seconds"]),
                        source=row["source"],
                        system=plan.hardware.gpu,
                        precision=t.precision,
                        release=container,
                    )
                )
    return out


def _container(source: str) -> str:
    """The NeMo container a source names: "… llama3.1/README.md (NeMo 25.02.01)" -> "25.02.01" ("" if none)."""
    found = re.search(r"NeMo (\d+\.\d+[\w.]*)", source)
    return found.group(1) if found else ""


def residuals(rows: Sequence[Measurement], eff: Efficiency) -> np.ndarray:
    """log(predicted / measured) per row."""
    return np.array([math.log(step_time(r.plan, r.work, eff).step_seconds / r.step_seconds) for r in rows])


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, steps: float = 0.05, iters: int = 400) -> np.ndarray:
    """The textbook downhill simplex (reflect, expand, contract, shrink): a few variables, no scipy needed."""
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
        if max(values) - min(values) < 1e-10:
            break
    return simplex[int(np.argmin(values))]


def fitted_names(rows: Sequence[Measurement]) -> list[str]:
    """The constants the rows can determine: a format's GEMM efficiency only with rows in that format (leaving
    every FP4 row out, say, leaves gemm_fp4 at its stored value), TP overlap only with rows that overlap TP."""
    formats = {r.plan.training.precision for r in rows}
    blackwell = {r.plan.hardware.table["compute_capability"] >= 10 for r in rows}
    # BF16 and FP8 GEMMs share an efficiency per architecture: fitted apart they came out 0.589 and 0.552, and
    # apart the BF16 figure rested on a few MoE rows once H100's were left out (0.38). An architecture without
    # rows takes the other's (leaving H100 out, Hopper's GEMMs run at Blackwell's fitted share)
    names = (["gemm"] if False in blackwell else []) + (["gemm_blackwell"] if True in blackwell else [])
    if "nvfp4" in formats:
        names.append("gemm_fp4")
    if any(r.plan.parallel.tp_comm_overlap for r in rows):
        names.append("tp_overlap")
    if any(r.plan.model.num_moe_experts for r in rows):
        names += ["grouped", "expert_overhead_ms"]
    long = {
        r.plan.hardware.table["compute_capability"] for r in rows if r.plan.training.seq_length >= ATTENTION_ROWS_FROM
    }
    if any(cc < 10 for cc in long):  # Hopper (Blackwell Ultra keeps the benchmark figure: Efficiency.attention_for)
        names.append("attention")
    if any(10 <= cc < 10.3 for cc in long):
        names.append("attention_blackwell")
    return names


# The fit's loss is soft-L1 on the log errors with this scale: quadratic below ~10 %, linear beyond. Why not least
# squares: the published tables hold rows the model cannot share constants with (the same Qwen3 30B-A3B layout on
# H100 is 28.9 s in 26.02.01 and 51.3 s in 26.02), and squared errors let a few of them pull the shared GEMM
# efficiency; least squares put every dense H100 BF16 run 3-10 % slow, soft-L1 keeps them within 8 %
ROBUST_SCALE = 0.10


def soft_l1(r: np.ndarray, scale: float = ROBUST_SCALE) -> np.ndarray:
    """Soft-L1 of residuals ``r``: r^2 for small ones, about 2 scale |r| for large ones.

    >>> soft_l1(np.array([0.01, 1.0])).round(4).tolist()
    [0.0001, 0.181]
    """
    return 2 * scale * scale * (np.sqrt(1 + (r / scale) ** 2) - 1)


def fit(rows: Sequence[Measurement], start: Efficiency = EFFICIENCY) -> Efficiency:
    """The fitted constants minimizing the soft-L1 of the log errors over ``rows`` (``ROBUST_SCALE``), within
    physical bounds."""
    names = fitted_names(rows)
    # attention without long rows to fit it on is the kernel benchmarks' figure, not a value fitted on rows left out
    # (leave one system out would otherwise keep H100's or B200's own long rows in through the stored constant)
    fixed = {k: BENCHMARK_ATTENTION.get(k, getattr(start, k)) for k in (*BOUNDS, "attention_ultra") if k not in names}
    if "gemm" not in names:  # no Hopper rows: Hopper as Blackwell
        names[names.index("gemm_blackwell")] = "gemm"
        fixed.pop("gemm")
        fixed["gemm_blackwell"] = 0.0
    elif "gemm_blackwell" not in names:  # no Blackwell rows: Blackwell as Hopper
        fixed["gemm_blackwell"] = 0.0

    def make(x: np.ndarray) -> Efficiency:
        return Efficiency(**fixed, **{n: float(np.clip(v, *BOUNDS[n])) for n, v in zip(names, x, strict=True)})

    def loss(x: np.ndarray) -> float:
        outside = sum(max(0.0, BOUNDS[n][0] - v, v - BOUNDS[n][1]) for n, v in zip(names, x, strict=True))
        return float(np.sum(soft_l1(residuals(rows, make(x))))) + 10 * outside

    best = _nelder_mead(loss, np.array([getattr(start, n) for n in names]))
    return make(np.round(best, 3))


def weak_scaling_series(rows: Sequence[Measurement]) -> list[list[Measurement]]:
    """The published runs that differ only in their GPU count (and with it their global batch): the same layout and
    work per GPU on more GPUs, so more DP ranks and nodes. Each series in order of GPUs; runs of one count only are
    no series."""
    series: dict[tuple, list[Measurement]] = {}
    for r in rows:
        p, t = r.plan.parallel, r.plan.training
        key = (
            r.release, r.plan.model.preset, t.task, r.system, r.precision, p.tp, p.pp, p.cp, p.vpp, p.ep, p.fsdp,
            t.micro_batch_size, t.seq_length, (t.global_batch_size or 0) / p.gpus,
        )  # fmt: skip
        series.setdefault(key, []).append(r)
    out = [sorted(runs, key=lambda r: r.plan.parallel.gpus) for runs in series.values()]
    return sorted((s for s in out if len({r.plan.parallel.gpus for r in s}) > 1), key=lambda s: s[0].name)
