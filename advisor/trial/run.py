"""The trial job: real training steps that check the plan against measurement.

Trains ``TrialGPT`` on synthetic tokens whose sample lengths are drawn from the plan's data, three ways on the same
samples (packed THD, padded, block-masked dense), checks that a packed step's loss and gradients equal those of
each sample processed alone (the classic silent packing bug is a wrong mask or position id), and measures tokens
per second and memory against the estimator's predictions. Runs on the CPU (float32, small) or CUDA (bf16), and
under ``torchrun`` as data parallelism (gloo on the CPU, NCCL on CUDA).

``run_trial`` runs six phases, each a function from data to a frozen result: ``setup`` (device, model shape,
samples, packs), ``check_parity``, ``check_loss_weighting`` (step 0 packed and unpacked under both loss settings,
against the predicted loss weighting: advisor/trial/loss.py), ``time_steps`` (warm-up, then timed steps, the three
ways interleaved), ``predict`` (FLOPs speed-up; step time on a GPU of the hardware table) and ``measure_memory``;
under torchrun ``distributed_summary`` adds each rank's work and wait. Speeds are medians over the timed steps with
their spread (``advisor.trial.report``), never a mean of a few steps.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from advisor.data.lengths import LengthHistogram
from advisor.model.flops import flops_coefficients
from advisor.model.memory import activation_bytes_per_token_per_layer
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time
from advisor.model.throughput import straggler_factor
from advisor.packing.packers import PACKERS
from advisor.plan import Plan, plan_from_dict
from advisor.plan.gpus import BY_NAME, match_device
from advisor.safe_write import make_folder, write_text
from advisor.trial.batches import Batch, packed_batch, padded_batch
from advisor.trial.batches import forward_loss as _forward_loss
from advisor.trial.config import DEFAULT, TrialConfig
from advisor.trial.loss import LossCheck, measure_loss_weighting
from advisor.trial.model import TrialGPT, TrialModelConfig, packed_attention_note
from advisor.trial.report import FORMAT, WAYS, speed_report
from advisor.vocabulary import Algorithm

__all__ = [
    "ParityError",
    "TrialConfig",
    "TrialResult",
    "leave_process_group",
    "run_trial",
    "write_outputs",
    "OUTPUT_NAMES",
]

LOSS_BOUND = 1e-5  # absolute, float32
GRAD_BOUND = 1e-4  # relative to the largest gradient entry


class ParityError(RuntimeError):
    """The packed step does not equal the samples processed alone: the mask or the position ids are wrong."""


@dataclass(frozen=True, kw_only=True)
class TrialSetup:
    """Where and on what the trial runs: ``steps`` holds this rank's packs of every step, warm-up steps first."""

    device: torch.device
    dtype: torch.dtype
    world: int
    rank: int
    model: TrialModelConfig
    data: tuple[np.ndarray, ...]
    packs: tuple[tuple[int, ...], ...]
    steps: tuple[tuple[tuple[int, ...], ...], ...]
    warmup: int
    loss_tokens: np.ndarray | None = None  # per sample, label positions with loss (the data's mask); None: all

    def lengths(self, step: int) -> list[list[int]]:
        """Sample lengths per pack of one step."""
        return [[len(self.data[i]) for i in p] for p in self.steps[step]]


@dataclass(frozen=True, kw_only=True)
class Parity:
    loss_diff: float
    grad_diff: float
    pack_samples: int

    @property
    def ok(self) -> bool:
        return self.loss_diff <= LOSS_BOUND and self.grad_diff <= GRAD_BOUND

    def to_dict(self) -> dict:
        return {
            "loss_parity": {"max_abs_diff": self.loss_diff, "bound": LOSS_BOUND, "ok": self.loss_diff <= LOSS_BOUND},
            "grad_parity": {"max_rel_diff": self.grad_diff, "bound": GRAD_BOUND, "ok": self.grad_diff <= GRAD_BOUND},
        }


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    mode: str
    step: int
    warmup: bool
    seconds: float
    loss: float
    real_tokens: int
    allreduce_wait_seconds: float


@dataclass(frozen=True)
class Timing:
    """Every step of every way, warm-up steps included (marked)."""

    records: tuple[StepRecord, ...]

    def timed(self, mode: str) -> tuple[list[float], list[int]]:
        """(seconds, real tokens) of a way's timed steps, in step order."""
        rows = [r for r in self.records if r.mode == mode and not r.warmup]
        return [r.seconds for r in rows], [r.real_tokens for r in rows]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The estimator's side: the FLOPs speed-up and, on a GPU of the hardware table, the step time."""

    speedup: float
    flops_per_real_token: dict
    step_seconds: float | None = None
    gpu: str | None = None
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class Memory:
    measured_bytes: int
    predicted_bytes: float
    measured_state_bytes: int
    measured_activation_bytes: int
    predicted_state_bytes: float
    predicted_activation_bytes: float
    tokens_in_micro_batch: int
    how: str

    @property
    def ratio(self) -> float:
        return self.measured_bytes / self.predicted_bytes

    def to_dict(self) -> dict:
        return asdict(self) | {"ratio_measured_over_predicted": self.ratio}


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    """A finished trial. ``to_dict`` is ``trial.json`` (format ``report.FORMAT``): per way the timed steps'
    ``timed_step_seconds`` and ``timed_step_tokens``, the median ``tokens_per_second`` and ``step_seconds``, their
    spread; ``speedup`` (median tokens/s packed over padded) with ``speedup_interval``; ``noise_warnings``;
    ``predicted_speedup``; ``loss_parity``, ``grad_parity``, ``memory``, ``distributed``."""

    device: str
    config: TrialConfig
    model: dict
    parity: Parity
    timing: Timing
    prediction: Prediction
    memory: Memory
    kernel_note: str
    torch_threads: int
    distributed: dict
    loss: LossCheck

    @property
    def per_step(self) -> list[dict]:
        return [asdict(r) for r in self.timing.records]

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "format": FORMAT,
            "device": self.device,
            "steps": self.config.steps,
            "warmup_steps": self.config.warmup,
            "config": asdict(self.config),
            "model": self.model,
            "torch_threads": self.torch_threads,
            "packed_kernel": self.kernel_note,
            "predicted_speedup": self.prediction.speedup,
        }
        for way in WAYS:
            seconds, tokens = self.timing.timed(way)
            out[way] = {
                "timed_step_seconds": seconds,
                "timed_step_tokens": tokens,
                "real_tokens": int(sum(tokens)),
                "predicted_flops_per_real_token": self.prediction.flops_per_real_token[way],
            }
        rep = speed_report(out)  # the same function the CLI and the page report with
        for row in rep.rows:
            out[row.way] |= {
                "tokens_per_second": row.median_tokens_per_second,
                "step_seconds": row.median_step_seconds,
                "tokens_per_second_min": row.min_tokens_per_second,
                "tokens_per_second_max": row.max_tokens_per_second,
                "tokens_per_second_iqr": row.iqr_tokens_per_second,
            }
        p = self.prediction
        out["packed"] |= {"predicted_step_seconds": p.step_seconds}
        if p.step_seconds is not None:
            out["packed"] |= {
                "prediction_error": p.step_seconds / out["packed"]["step_seconds"] - 1,
                "prediction_gpu": p.gpu,
            }
        else:
            out["packed"]["prediction_note"] = p.note
        s = rep.speedup
        return out | {
            "speedup": s.point,
            "speedup_interval": [s.low, s.high],
            "speedup_confidence": s.confidence,
            "speedup_statistic": "median tokens/s per timed step, packed over padded; paired bootstrap "
            "interval over steps",
            "noise_warnings": list(rep.warnings),
            **self.parity.to_dict(),
            "memory": self.memory.to_dict(),
            "distributed": self.distributed,
            "loss_weighting": self.loss.to_dict(),
        }


MAX_GQA_RATIO, MAX_FFN_RATIO, MAX_HEAD_DIM = 8, 8, 256  # every real model is inside; a hostile plan is not


def model_config(plan: Plan, scale: str = "small") -> TrialModelConfig:
    """The plan's head dimension, GQA ratio and MLP width ratio, with few layers and heads.

    The ratios are capped (GQA 8, MLP 8x, head dimension 256): real models sit inside the caps, and a plan with
    64 query heads per KV head or a 1M-wide MLP would otherwise make a "small" trial model of many GB.
    """
    m = plan.model
    ratio = min(MAX_GQA_RATIO, max(1, m.num_attention_heads // m.query_groups))
    heads, layers = {"small": (ratio, 2), "medium": (2 * ratio, 4), "large": (4 * ratio, 8)}[scale]
    head_dim = min(m.head_dim, MAX_HEAD_DIM) if scale != "small" else min(m.head_dim, 64)
    hidden = heads * head_dim
    ffn = max(16, int(round(hidden * min(MAX_FFN_RATIO, m.ffn_hidden_size / m.hidden_size) / 16) * 16))
    return TrialModelConfig(
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads // ratio,
        head_dim=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=512 if scale == "small" else 4096,
    )


def trial_plan(plan: Plan, cfg: TrialModelConfig) -> Plan:
    """The trial's small model as a plan on one GPU with a global batch of one sample: what the estimator is asked
    about once ``predicted_step`` sets the GPU and the data-parallel world. The user's TP, PP and CP are not kept:
    the trial runs data parallel only."""
    return plan_from_dict(
        {
            "model": {
                "hidden_size": cfg.hidden_size,
                "num_layers": cfg.num_layers,
                "num_attention_heads": cfg.num_heads,
                "num_query_groups": cfg.num_kv_heads,
                "kv_channels": cfg.head_dim,
                "ffn_hidden_size": cfg.ffn_hidden_size,
                "vocab_size": cfg.vocab_size,
            },
            "parallel": {"gpus": 1},
            "training": {"global_batch_size": 1},
        },
        "trial",
    )


def gpu_preset(device_name: str) -> str | None:
    """The GPU registry's record of a CUDA device name ("NVIDIA H100 80GB HBM3" -> H100-80GB), None if unknown.

    >>> gpu_preset("NVIDIA H100 80GB HBM3"), gpu_preset("NVIDIA GB200"), gpu_preset("Tesla T4")
    ('H100-80GB', 'GB200', None)
    """
    return match_device(device_name)


def predicted_step(plan: Plan, cfg: TrialModelConfig, steps: list[list[list[int]]], world: int, gpu: str) -> dict:
    """The performance model's step time for the trial's own model and packs, to set beside the measured one.

    ``steps``: per measured step, its packs on this rank, each a list of sample lengths; one pack per micro batch,
    ``world`` data-parallel GPUs of the hardware table's ``gpu``.
    """
    small = trial_plan(plan, cfg).changed({"parallel": {"gpus": world}, "hardware": {"gpu": gpu}})
    packs = [p for step in steps for p in step]
    work = StepWork(
        tokens=float(np.mean([sum(p) for p in packs])),
        seqlen_squared_sum=float(np.mean([sum(n * n for n in p) for p in packs])),
        micro_batches=len(packs) / len(steps),
    )
    t = step_time(small, work, EFFICIENCY)
    return {"step_seconds": t.step_seconds, "gpu": gpu, "breakdown": t.breakdown}


def sample_lengths(
    hist: LengthHistogram, plan_pack_size: int, pack_size: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray | None]:
    """n sample lengths drawn from the data, scaled from the plan's pack size to the trial's, with each one's label
    positions that carry loss where the data has a loss mask (the drawn length's share of them, scaled alike)."""
    which = rng.choice(hist.lengths.size, size=n, p=hist.counts / hist.counts.sum())
    lengths = np.clip(np.round(hist.lengths[which] * pack_size / plan_pack_size), 2, pack_size).astype(np.int64)
    if hist.loss_tokens is None:
        return lengths, None
    share = hist.loss_tokens[which] / np.maximum(hist.lengths[which] - 1, 1)
    return lengths, np.minimum(np.round(share * (lengths - 1)), lengths - 1).astype(np.int64)


def make_packs(lengths: np.ndarray, pack_size: int, algorithm: Algorithm, seed: int) -> list[list[int]]:
    """Sample indices per pack, packed by the plan's algorithm (samples of equal length taken in order).

    ``column_generation`` is packed by first fit decreasing instead: its LP takes up to 30 s, out of place in a
    trial of a few hundred samples, and its result is first-fit-finished packs of nearly the same fill.

    >>> make_packs(np.array([3, 2, 2, 1]), 4, "first_fit_decreasing", 0)
    [[0, 3], [1, 2]]
    """
    counts = np.bincount(lengths, minlength=pack_size + 1)
    spec = PACKERS[algorithm]
    fn = PACKERS[spec.stand_in].run if spec.stand_in else spec.run  # a solver's seconds are out of place here
    offsets, items = fn(counts, pack_size, seed)
    queues: dict[int, list[int]] = {}
    for i, n in enumerate(lengths.tolist()):
        queues.setdefault(n, []).append(i)
    return [[queues[int(n)].pop(0) for n in items[a:b]] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def parity(model: TrialGPT, samples: list[np.ndarray], device, break_mask: bool) -> tuple[float, float]:
    """(max |loss difference|, max relative gradient difference) between one packed step and the samples alone."""
    packed, alone = copy.deepcopy(model).float(), copy.deepcopy(model).float()
    total, n = _forward_loss(packed, packed_batch(samples, device, break_mask), "packed")
    (total / n).backward()
    loss_alone, count = _forward_loss(alone, packed_batch(samples[:1], device), "packed")
    for s in samples[1:]:
        part, k = _forward_loss(alone, packed_batch([s], device), "packed")
        loss_alone = loss_alone + part
        count += k
    (loss_alone / count).backward()
    loss_diff = abs(float((total / n).detach()) - float((loss_alone / count).detach()))
    grad_scale = max(float(_grad(p).abs().max()) for p in alone.parameters())
    grad_diff = max(
        float((_grad(a) - _grad(b)).abs().max()) for a, b in zip(packed.parameters(), alone.parameters(), strict=True)
    )
    return loss_diff, grad_diff / grad_scale


def _grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient after the backward pass (every parameter of the trial model gets one)."""
    if p.grad is None:
        raise RuntimeError(f"a parameter of shape {tuple(p.shape)} got no gradient")
    return p.grad


def saved_tensor_bytes(forward, parameters):
    """Bytes that ``forward()`` keeps for backward, each storage counted once (views share one), the weights
    (and their transposed views) excluded; returns (bytes, what forward returned)."""
    params = {p.untyped_storage().data_ptr() for p in parameters}
    seen: set[int] = set()
    total = 0

    def pack(t):
        nonlocal total
        key = t.untyped_storage().data_ptr()
        if key not in seen and key not in params:
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    return total, out


def saved_bytes(model, batch: Batch, mode: str) -> int:
    """Bytes a training forward of the batch keeps for backward."""
    total, (loss, n) = saved_tensor_bytes(lambda: _forward_loss(model, batch, mode), model.parameters())
    (loss / n).backward()
    model.zero_grad(set_to_none=False)
    return total


def predicted_memory(plan: Plan, tokens: int, dtype_bytes: int) -> dict:
    """The estimator's formulas at the trial's precision: weights and gradients in the training dtype, Adam's two
    fp32 moments (no separate master copy when training in fp32), the per-layer activations (counted for bf16,
    scaled to the dtype), the embedding output, and the fp32 log-softmax of the logits the loss keeps."""
    m = plan.model
    from advisor.model.parameters import count_parameters

    params = count_parameters(m).total
    state = params * (dtype_bytes + dtype_bytes + 8 + (4 if dtype_bytes == 2 else 0))
    per_layer = activation_bytes_per_token_per_layer(plan) * dtype_bytes / 2
    acts = tokens * (per_layer * m.num_layers + 2 * m.hidden_size * dtype_bytes) + tokens * m.vocab_size * 4
    return {"state_bytes": state, "activation_bytes": acts, "total_bytes": state + acts}


def _progress(msg: str) -> None:
    print(f"[trial] {msg}", file=sys.stderr, flush=True)


def setup(plan: Plan, hist: LengthHistogram, cfg: TrialConfig) -> TrialSetup:
    """The device, the trial model's shape, the samples (lengths from the data, random tokens) and their packs."""
    import torch.distributed as dist

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if cfg.device == "cuda" and not torch.cuda.is_available():  # else torch fails deep in set_device
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ValueError(
            f"--device cuda: this machine's torch {torch.__version__} ({build}) sees no CUDA device; "
            "run on a GPU node, or use --device cpu (or auto)"
        )
    device = torch.device(
        "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu"
    )
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    mcfg = model_config(plan, cfg.scale)
    plan_size = plan.packing.pack_size or plan.training.seq_length
    mean_len = max(2.0, hist.total_tokens / hist.num_samples * cfg.pack_size / plan_size)
    total_steps = cfg.warmup + cfg.steps
    packs_needed = total_steps * cfg.packs_per_step * world
    n_samples = int(packs_needed * max(1.0, cfg.pack_size / mean_len) * 1.3) + 16  # packs are not all full
    for _ in range(8):  # lengths clipped to the pack size fill packs alone: draw more until there are enough
        rng = np.random.default_rng(cfg.seed)
        lengths, loss_tokens = sample_lengths(hist, plan_size, cfg.pack_size, n_samples, rng)
        packs = make_packs(lengths, cfg.pack_size, plan.packing.algorithm, cfg.seed)
        if len(packs) >= packs_needed:
            break
        n_samples = int(n_samples * packs_needed / max(1, len(packs)) * 1.2) + 16
    data = tuple(rng.integers(0, mcfg.vocab_size, n) for n in lengths)
    rng.shuffle(packs)
    pps = cfg.packs_per_step
    steps = tuple(
        tuple(tuple(p) for p in packs[(s * world + rank) * pps : (s * world + rank + 1) * pps])
        for s in range(total_steps)
    )
    if any(not packs_of_step for packs_of_step in steps):
        raise ValueError(f"{len(packs)} packs are too few for {total_steps} steps of {pps} packs on {world} rank(s)")
    return TrialSetup(
        device=device,
        dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
        world=world,
        rank=rank,
        model=mcfg,
        data=data,
        packs=tuple(tuple(p) for p in packs),
        steps=steps,
        warmup=cfg.warmup,
        loss_tokens=loss_tokens,
    )


def check_parity(st: TrialSetup, cfg: TrialConfig) -> Parity:
    """A packed step against the samples processed alone, in float32, on the pack with the most samples (a pack
    of one sample cannot show a leak across boundaries); raises ``ParityError`` beyond the bounds."""
    torch.manual_seed(cfg.seed)
    model = TrialGPT(st.model).to(device=st.device, dtype=st.dtype)
    first = [st.data[i] for i in max(st.packs[:64], key=len)]
    loss_diff, grad_diff = parity(model, first, st.device, cfg.break_mask)
    result = Parity(loss_diff=loss_diff, grad_diff=grad_diff, pack_samples=len(first))
    if not result.ok:
        raise ParityError(
            f"packed step differs from the samples processed alone: loss {loss_diff:.3e} (bound "
            f"{LOSS_BOUND:g}), gradients {grad_diff:.3e} relative (bound {GRAD_BOUND:g}): the attention "
            "mask or the position ids let samples see each other"
        )
    return result


def step_batches(st: TrialSetup, step: int, mode: str, micro_batch_size: int) -> list[Batch]:
    """One step's micro batches for a way: a pack per micro batch (packed, block-masked) or the same samples in
    padded rows of ``micro_batch_size``."""
    if mode == "padded":
        samples = [st.data[i] for p in st.steps[step] for i in p]
        return [
            padded_batch(samples[j : j + micro_batch_size], st.device) for j in range(0, len(samples), micro_batch_size)
        ]
    return [packed_batch([st.data[i] for i in p], st.device, dense=mode == "block_masked") for p in st.steps[step]]


def _train_step(net, opt, batches: list[Batch], mode: str, st: TrialSetup) -> tuple[float, float, float, int]:
    """One optimizer step; returns (seconds, all-reduce wait seconds, mean loss, real tokens)."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    opt.zero_grad()
    n_tokens = sum(b.real_tokens for b in batches)
    loss_total = 0.0
    for b in batches:
        loss, _ = _forward_loss(net, b, "packed" if mode == "packed" else "dense")
        (loss / n_tokens).backward()
        loss_total += loss.item()
    w0 = time.perf_counter()
    if st.world > 1:
        for p in net.parameters():
            dist.all_reduce(p.grad)
            p.grad /= st.world
    wait = time.perf_counter() - w0
    opt.step()
    if st.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, wait, loss_total / n_tokens, n_tokens


def time_steps(st: TrialSetup, cfg: TrialConfig, progress=_progress) -> Timing:
    """Warm-up steps, then timed steps, of the three ways on the same samples, each with its own model and AdamW
    from the same initialisation.

    The ways run interleaved (step 1 of each, then step 2 of each, their order rotating every step), so a
    moment when the machine is busy slows all three a little rather than one of them a lot. Batches are built
    before the clock starts.
    """
    nets, opts = {}, {}
    for mode in WAYS:
        torch.manual_seed(cfg.seed)
        nets[mode] = TrialGPT(st.model).to(device=st.device, dtype=st.dtype)
        opts[mode] = torch.optim.AdamW(nets[mode].parameters(), lr=1e-3)
    records = []
    for s in range(len(st.steps)):
        warm = s < st.warmup
        label = f"warm-up {s + 1}/{st.warmup}" if warm else f"step {s - st.warmup + 1}/{len(st.steps) - st.warmup}"
        for k in range(len(WAYS)):
            mode = WAYS[(s + k) % len(WAYS)]
            batches = step_batches(st, s, mode, cfg.micro_batch_size)
            dt, wait, loss, n_tokens = _train_step(nets[mode], opts[mode], batches, mode, st)
            records.append(
                StepRecord(
                    mode=mode,
                    step=s,
                    warmup=warm,
                    seconds=dt,
                    loss=loss,
                    real_tokens=n_tokens,
                    allreduce_wait_seconds=wait,
                )
            )
            progress(f"{mode:<12} {label}: loss {loss:.4f}, {dt * 1000:.0f} ms")
    return Timing(records=tuple(sorted(records, key=lambda r: (WAYS.index(r.mode), r.step))))


def _work(lengths: list[list[int]], mode: str, micro_batch_size: int) -> list[tuple[int, float]]:
    """(computed tokens, attention work) per micro batch of one step, as ``step_batches`` builds them."""
    if mode == "padded":
        flat = [n for p in lengths for n in p]
        rows = [flat[j : j + micro_batch_size] for j in range(0, len(flat), micro_batch_size)]
        return [(len(r) * max(r), float(len(r) * max(r) ** 2)) for r in rows]
    if mode == "block_masked":
        return [(sum(p), float(sum(p)) ** 2) for p in lengths]
    return [(sum(p), float(sum(n * n for n in p))) for p in lengths]


def predict(plan: Plan, st: TrialSetup, cfg: TrialConfig) -> Prediction:
    """FLOPs per real token of each way over the timed steps (their ratio is the predicted speed-up) and, on a GPU
    of the hardware table, the performance model's step time for the trial's model and packs."""
    coef = flops_coefficients(trial_plan(plan, st.model).model)
    timed = range(st.warmup, len(st.steps))
    per_token = {}
    for mode in WAYS:
        flops = sum(coef(t, w) for s in timed for t, w in _work(st.lengths(s), mode, cfg.micro_batch_size))
        per_token[mode] = flops / sum(sum(n - 1 for n in p) for s in timed for p in st.lengths(s))
    speedup = per_token["padded"] / per_token["packed"]
    preset = gpu_preset(torch.cuda.get_device_name()) if st.device.type == "cuda" else None
    if preset is None:
        where = torch.cuda.get_device_name() if st.device.type == "cuda" else st.device.type
        return Prediction(
            speedup=speedup,
            flops_per_real_token=per_token,
            note=f"the step-time model describes the registry's GPUs ({', '.join(BY_NAME)}), not {where}",
        )
    pred = predicted_step(plan, st.model, [st.lengths(s) for s in timed], st.world, preset)
    return Prediction(speedup=speedup, flops_per_real_token=per_token, step_seconds=pred["step_seconds"], gpu=preset)


def measure_memory(plan: Plan, st: TrialSetup, cfg: TrialConfig) -> Memory:
    """Parameters, gradients and Adam states after one packed step, plus what a forward of the step's largest
    pack keeps for backward (CUDA: the allocator's peak), against the estimator's formulas."""
    torch.manual_seed(cfg.seed)
    net = TrialGPT(st.model).to(device=st.device, dtype=st.dtype)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    _train_step(net, opt, step_batches(st, 0, "packed", cfg.micro_batch_size), "packed", st)
    biggest = max(
        (packed_batch([st.data[i] for i in p], st.device) for p in st.steps[0]), key=lambda b: b.tokens.numel()
    )
    state = sum(p.numel() * p.element_size() * 2 for p in net.parameters())  # weights and gradients
    state += sum(
        v.numel() * v.element_size()
        for s in opt.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )
    if st.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        loss, n = _forward_loss(net, biggest, "packed")
        (loss / n).backward()
        measured = torch.cuda.max_memory_allocated()
        acts = measured - state
    else:
        acts = saved_bytes(net, biggest, "packed")
        measured = state + acts
    predicted = predicted_memory(
        trial_plan(plan, st.model), biggest.tokens.numel(), 2 if st.dtype == torch.bfloat16 else 4
    )
    return Memory(
        measured_bytes=int(measured),
        predicted_bytes=predicted["total_bytes"],
        measured_state_bytes=int(state),
        measured_activation_bytes=int(acts),
        predicted_state_bytes=predicted["state_bytes"],
        predicted_activation_bytes=predicted["activation_bytes"],
        tokens_in_micro_batch=int(biggest.tokens.numel()),
        how="CUDA allocator peak"
        if st.device.type == "cuda"
        else "parameter, gradient and Adam bytes plus saved_tensors_hooks bytes of one forward",
    )


def check_loss_weighting(plan: Plan, st: TrialSetup, cfg: TrialConfig) -> LossCheck:
    """Step 0's samples (every rank's packs) packed and unpacked on the same weights, under the plan's loss setting
    and the other, against the prediction (advisor/trial/loss.py)."""
    step0 = [list(p) for p in st.packs[: st.world * cfg.packs_per_step]]
    lengths = np.array([len(x) for x in st.data])
    return measure_loss_weighting(
        step0,
        lengths,
        st.model,
        st.device,
        cfg.micro_batch_size,
        plan.per_token_loss,
        cfg.seed,
        loss_tokens=st.loss_tokens,
    )


def distributed_summary(st: TrialSetup, cfg: TrialConfig, timing: Timing) -> dict:
    """Under torchrun: each rank's attention work and all-reduce wait, beside the estimator's straggler factor."""
    import torch.distributed as dist

    timed = range(st.warmup, len(st.steps))
    work = torch.tensor([float(sum(n * n for p in st.lengths(s) for n in p)) for s in timed])
    wait = torch.tensor([sum(r.allreduce_wait_seconds for r in timing.records if r.mode == "packed" and not r.warmup)])
    gathered_work = [torch.zeros_like(work) for _ in range(st.world)]
    gathered_wait = [torch.zeros_like(wait) for _ in range(st.world)]
    dist.all_gather(gathered_work, work)
    dist.all_gather(gathered_wait, wait)
    costs = np.array([[float(w[s]) for w in gathered_work] for s in range(len(work))])
    return {
        "world_size": st.world,
        "backend": dist.get_backend(),
        "per_rank_attention_work": [float(w.sum()) for w in gathered_work],
        "per_rank_allreduce_wait_seconds": [float(w[0]) for w in gathered_wait],
        "measured_work_straggler": float(costs.max(axis=1).sum() / costs.mean(axis=1).sum()),
        "predicted_straggler_factor": straggler_factor(
            np.array([sum(len(st.data[i]) ** 2 for i in p) for p in st.packs], dtype=float),
            cfg.packs_per_step * st.world,
            st.world,
            cfg.seed,
        ),
    }


def run_trial(plan: Plan, hist: LengthHistogram, cfg: TrialConfig = DEFAULT, progress=_progress) -> TrialResult:
    """Run the trial's phases; raises ParityError when the packed step and the samples alone disagree beyond the
    bounds (before any timing)."""
    st = setup(plan, hist, cfg)
    par = check_parity(st, cfg)
    progress(
        f"parity on a pack of {par.pack_samples} sample(s): loss {par.loss_diff:.2e}, gradients {par.grad_diff:.2e}"
    )
    loss = check_loss_weighting(plan, st, cfg)
    for row in loss.rows:
        progress(
            f"loss weighting, calculate_per_token_loss={row.per_token_loss}: step-0 objective packed/unpacked "
            f"measured {row.objective_measured:.4f}, predicted {row.objective_predicted:.4f}"
        )
    timing = time_steps(st, cfg, progress)
    pred = predict(plan, st, cfg)
    memory = measure_memory(plan, st, cfg)
    samples_per_pack = float(np.mean([len(p) for s in st.steps for p in s]))
    return TrialResult(
        device=str(st.device),
        config=cfg,
        model=asdict(st.model) | {"world_size": st.world},
        parity=par,
        timing=timing,
        prediction=pred,
        memory=memory,
        kernel_note=packed_attention_note(st.device.type, samples_per_pack, st.model.num_layers),
        torch_threads=torch.get_num_threads(),
        distributed=distributed_summary(st, cfg, timing) if st.world > 1 else {},
        loss=loss,
    )


def leave_process_group() -> None:
    """Under torchrun, after a trial (however it ended): wait for every rank, then tear down the group ``setup``
    started. Why: a rank that exits with gloo's threads still running aborts ("terminate called without an active
    exception") and torchrun reports the run failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


OUTPUT_NAMES = ("trial.json", "steps.csv")  # what write_outputs puts in the --out folder


def write_outputs(result: TrialResult, out: Path, *, force: bool = False, inputs=()) -> None:
    """trial.json and steps.csv in ``out`` through advisor.safe_write: a new or empty folder (any other only with
    ``force``), no symlink followed, no system folder, never over an input; each file written atomically."""
    make_folder(str(out), force=force, inputs=inputs, names=OUTPUT_NAMES)
    steps = io.StringIO(newline="")
    writer = csv.DictWriter(steps, fieldnames=list(result.per_step[0]))
    writer.writeheader()
    writer.writerows(result.per_step)
    write_text(str(out / "trial.json"), json.dumps(result.to_dict(), indent=1), force=force, inputs=inputs)
    write_text(str(out / "steps.csv"), steps.getvalue(), force=force, inputs=inputs)
