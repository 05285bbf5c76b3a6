"""The trial job: a few real training steps that check the plan against measurement.

Trains ``TrialGPT`` on synthetic tokens whose sample lengths are drawn from the plan's data, three ways on the same
samples (packed THD, padded, block-masked dense), checks that a packed step's loss and gradients equal those of
each sample processed alone (the classic silent packing bug is a wrong mask or position id), and measures tokens
per second and memory against the estimator's predictions. Runs on the CPU (float32, small) or CUDA (bf16), and
under ``torchrun`` as data parallelism (gloo on the CPU, NCCL on CUDA).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from advisor.data.lengths import LengthHistogram
from advisor.model.flops import flops_coefficients
from advisor.model.memory import activation_bytes_per_token_per_layer
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time
from advisor.model.throughput import straggler_factor
from advisor.packing.algorithms import first_fit_decreasing, first_fit_shuffle
from advisor.plan import Plan, plan_from_dict
from advisor.trial.model import TrialGPT, TrialModelConfig, token_loss

LOSS_BOUND = 1e-5  # absolute, float32
GRAD_BOUND = 1e-4  # relative to the largest gradient entry


class ParityError(RuntimeError):
    """The packed step does not equal the samples processed alone: the mask or the position ids are wrong."""


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    steps: int = 3
    device: str = "auto"
    scale: str = "small"  # small: a CPU run of a few steps in well under a minute; medium/large for a GPU
    seed: int = 0
    pack_size: int = 512
    packs_per_step: int = 4
    micro_batch_size: int = 4
    break_mask: bool = False  # test-only: attention across sample boundaries, which the parity check must catch


@dataclass(frozen=True, kw_only=True)
class Batch:
    tokens: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    positions: torch.Tensor
    cu_seqlens: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    real_tokens: int = 0
    attention_work: float = 0.0


@dataclass
class TrialResult:
    device: str
    steps: int
    modes: dict = field(default_factory=dict)
    loss_parity: dict = field(default_factory=dict)
    grad_parity: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    distributed: dict = field(default_factory=dict)
    per_step: list = field(default_factory=list)
    model: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        packed, padded = self.modes.get("packed", {}), self.modes.get("padded", {})
        return {"device": self.device, "steps": self.steps, "model": self.model, **self.modes,
                "speedup": packed.get("tokens_per_second", 0) / max(padded.get("tokens_per_second", 0), 1e-12),
                "predicted_speedup": self.modes.get("predicted_speedup"),
                "loss_parity": self.loss_parity, "grad_parity": self.grad_parity, "memory": self.memory,
                "distributed": self.distributed}


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
    return TrialModelConfig(num_layers=layers, num_heads=heads, num_kv_heads=heads // ratio, head_dim=head_dim,
                            ffn_hidden_size=ffn, vocab_size=512 if scale == "small" else 4096)


def trial_plan(plan: Plan, cfg: TrialModelConfig) -> Plan:
    """The same layout on one GPU, for the trial's model: what the estimator is asked about."""
    return plan_from_dict({"model": {"hidden_size": cfg.hidden_size, "num_layers": cfg.num_layers,
                                     "num_attention_heads": cfg.num_heads, "num_query_groups": cfg.num_kv_heads,
                                     "kv_channels": cfg.head_dim, "ffn_hidden_size": cfg.ffn_hidden_size,
                                     "vocab_size": cfg.vocab_size},
                           "parallel": {"gpus": 1}, "training": {"global_batch_size": 1}}, "trial")


def gpu_preset(device_name: str) -> str | None:
    """The hardware-table row of a CUDA device name ("NVIDIA H100 80GB HBM3" -> H100-80GB), None if unknown.

    >>> gpu_preset("NVIDIA H100 80GB HBM3"), gpu_preset("NVIDIA A100-SXM4-40GB"), gpu_preset("Tesla T4")
    ('H100-80GB', 'A100-40GB', None)
    """
    name = device_name.upper()
    for key, preset in (("H200", "H200-141GB"), ("H100", "H100-80GB"), ("B200", "B200"),
                        ("A100-SXM4-40GB", "A100-40GB"), ("A100-PCIE-40GB", "A100-40GB"), ("A100", "A100-80GB")):
        if key in name:
            return preset
    return None


def predicted_step(plan: Plan, cfg: TrialModelConfig, steps: list[list[list[int]]], world: int, gpu: str) -> dict:
    """The performance model's step time for the trial's own model and packs, to set beside the measured one.

    ``steps``: per measured step, its packs on this rank, each a list of sample lengths; one pack per micro batch,
    ``world`` data-parallel GPUs of the hardware table's ``gpu``.
    """
    small = trial_plan(plan, cfg).changed({"parallel": {"gpus": world}, "hardware": {"gpu": gpu}})
    packs = [p for step in steps for p in step]
    work = StepWork(tokens=float(np.mean([sum(p) for p in packs])),
                    seqlen_squared_sum=float(np.mean([sum(n * n for n in p) for p in packs])),
                    micro_batches=len(packs) / len(steps))
    t = step_time(small, work, EFFICIENCY)
    return {"step_seconds": t.step_seconds, "gpu": gpu, "breakdown": t.breakdown}


def sample_lengths(hist: LengthHistogram, plan_pack_size: int, pack_size: int, n: int,
                   rng: np.random.Generator) -> np.ndarray:
    """n sample lengths drawn from the data, scaled from the plan's pack size to the trial's."""
    draws = rng.choice(hist.lengths, size=n, p=hist.counts / hist.counts.sum())
    return np.clip(np.round(draws * pack_size / plan_pack_size), 2, pack_size).astype(np.int64)


def make_packs(lengths: np.ndarray, pack_size: int, algorithm: str, seed: int) -> list[list[int]]:
    """Sample indices per pack, packed by the plan's algorithm (samples of equal length taken in order)."""
    counts = np.bincount(lengths, minlength=pack_size + 1)
    fn = first_fit_shuffle if algorithm == "first_fit_shuffle" else first_fit_decreasing
    offsets, items = fn(counts, pack_size, seed)
    queues: dict[int, list[int]] = {}
    for i, n in enumerate(lengths.tolist()):
        queues.setdefault(n, []).append(i)
    return [[queues[int(n)].pop(0) for n in items[a:b]] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def packed_batch(samples: list[np.ndarray], device, break_mask: bool = False, dense: bool = False) -> Batch:
    """One THD row: tokens concatenated, positions restarting, labels shifted inside each sample only."""
    tokens = np.concatenate(samples)
    labels = np.concatenate([np.append(s[1:], 0) for s in samples])
    loss_mask = np.concatenate([np.append(np.ones(len(s) - 1), 0) for s in samples])  # no target across a boundary
    positions = np.concatenate([np.arange(len(s)) for s in samples])
    lens = [len(s) for s in samples]
    cu = np.concatenate([[0], np.cumsum(lens)])
    if break_mask:  # the bug: one causal mask over the whole row, samples see each other
        cu = np.array([0, cu[-1]])
    t = torch.tensor
    mask = None
    if dense:  # block-diagonal causal mask over the packed row: (sum s_i)^2 work
        doc = np.repeat(np.arange(len(lens)), lens)
        same = doc[:, None] == doc[None, :]
        mask = t(same & np.tril(np.ones((len(doc), len(doc)), bool)), device=device)[None, None]
    return Batch(tokens=t(tokens, device=device)[None], labels=t(labels, device=device)[None],
                 loss_mask=t(loss_mask, device=device)[None], positions=t(positions, device=device)[None],
                 cu_seqlens=t(cu, device=device), mask=mask, real_tokens=int(sum(lens) - len(lens)),
                 attention_work=float(sum(n * n for n in lens)) if not dense else float(sum(lens)) ** 2)


def padded_batch(samples: list[np.ndarray], device) -> Batch:
    """A micro batch of rows, each right-padded to the longest sample, with causal and key-padding masks."""
    longest = max(len(s) for s in samples)
    n = len(samples)
    tokens = np.zeros((n, longest), np.int64)
    labels = np.zeros((n, longest), np.int64)
    loss_mask = np.zeros((n, longest))
    for i, s in enumerate(samples):
        tokens[i, :len(s)] = s
        labels[i, :len(s) - 1] = s[1:]
        loss_mask[i, :len(s) - 1] = 1
    valid = np.arange(longest)[None, :] < np.array([len(s) for s in samples])[:, None]
    causal = np.tril(np.ones((longest, longest), bool))
    # padding queries attend to themselves only, so no row of the mask is empty (their loss is masked anyway)
    mask = (causal[None] & valid[:, None, :]) | np.eye(longest, dtype=bool)[None]
    t = torch.tensor
    return Batch(tokens=t(tokens, device=device), labels=t(labels, device=device),
                 loss_mask=t(loss_mask, device=device), positions=t(np.tile(np.arange(longest), (n, 1)), device=device),
                 mask=t(mask, device=device)[:, None],
                 real_tokens=int(sum(len(s) - 1 for s in samples)), attention_work=float(n * longest * longest))


def _forward_loss(model, batch: Batch, mode: str):
    logits = model(batch.tokens, batch.positions, mode, batch.cu_seqlens, batch.mask)
    return token_loss(logits, batch.labels, batch.loss_mask)


def parity(model: TrialGPT, samples: list[np.ndarray], device, break_mask: bool) -> tuple[float, float]:
    """(max |loss difference|, max relative gradient difference) between one packed step and the samples alone."""
    packed, alone = copy.deepcopy(model).float(), copy.deepcopy(model).float()
    total, n = _forward_loss(packed, packed_batch(samples, device, break_mask), "packed")
    (total / n).backward()
    loss_alone, count = 0.0, 0
    for s in samples:
        part, k = _forward_loss(alone, packed_batch([s], device), "packed")
        loss_alone = loss_alone + part
        count += k
    (loss_alone / count).backward()
    loss_diff = abs(float((total / n).detach()) - float((loss_alone / count).detach()))
    grad_scale = max(float(p.grad.abs().max()) for p in alone.parameters())
    grad_diff = max(float((a.grad - b.grad).abs().max()) for a, b in zip(packed.parameters(), alone.parameters(),
                                                                         strict=True))
    return loss_diff, grad_diff / grad_scale


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


def run_trial(plan: Plan, hist: LengthHistogram, cfg: TrialConfig = TrialConfig(), progress=_progress) -> TrialResult:
    """Run the trial; raises ParityError when the packed step and the samples alone disagree beyond the bounds."""
    import torch.distributed as dist

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    device = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    mcfg = model_config(plan, cfg.scale)
    model = TrialGPT(mcfg).to(device=device, dtype=dtype)
    plan_size = plan.packing.pack_size or plan.training.seq_length
    mean_len = max(2.0, hist.total_tokens / hist.num_samples * cfg.pack_size / plan_size)
    packs_needed = (cfg.steps + 1) * cfg.packs_per_step * world
    n_samples = int(packs_needed * max(1.0, cfg.pack_size / mean_len) * 1.3) + 16  # packs are not all full
    lengths = sample_lengths(hist, plan_size, cfg.pack_size, n_samples, rng)
    data = [rng.integers(0, mcfg.vocab_size, n) for n in lengths]
    packs = make_packs(lengths, cfg.pack_size, plan.packing.algorithm, cfg.seed)
    rng.shuffle(packs)
    result = TrialResult(device=str(device), steps=cfg.steps, model=mcfg.__dict__ | {"world_size": world})

    # correctness first: a packed step must equal the samples processed alone (float32)
    # the pack with the most samples: a pack of one sample cannot show a leak across boundaries
    first = [data[i] for i in max(packs[:64], key=len)]
    loss_diff, grad_diff = parity(model, first, device, cfg.break_mask)
    result.loss_parity = {"max_abs_diff": loss_diff, "bound": LOSS_BOUND, "ok": loss_diff <= LOSS_BOUND}
    result.grad_parity = {"max_rel_diff": grad_diff, "bound": GRAD_BOUND, "ok": grad_diff <= GRAD_BOUND}
    progress(f"parity on a pack of {len(first)} sample(s): loss {loss_diff:.2e}, gradients {grad_diff:.2e}")
    if loss_diff > LOSS_BOUND or grad_diff > GRAD_BOUND:
        raise ParityError(f"packed step differs from the samples processed alone: loss {loss_diff:.3e} (bound "
                          f"{LOSS_BOUND:g}), gradients {grad_diff:.3e} relative (bound {GRAD_BOUND:g}): the attention "
                          "mask or the position ids let samples see each other")

    steps = [packs[(s * world + rank) * cfg.packs_per_step:(s * world + rank + 1) * cfg.packs_per_step]
             for s in range(cfg.steps + 1)]
    coef = flops_coefficients(trial_plan(plan, mcfg).model)
    computed = {}
    for mode in ("packed", "padded", "block_masked"):
        torch.manual_seed(cfg.seed)
        net = TrialGPT(mcfg).to(device=device, dtype=dtype)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        times, tokens, flops, waits = [], 0, 0.0, []
        for s, step_packs in enumerate(steps):
            samples = [data[i] for p in step_packs for i in p]
            if mode == "padded":
                batches = [padded_batch(samples[j:j + cfg.micro_batch_size], device)
                           for j in range(0, len(samples), cfg.micro_batch_size)]
            else:
                batches = [packed_batch([data[i] for i in p], device, dense=mode == "block_masked")
                           for p in step_packs]
            t0 = time.perf_counter()
            opt.zero_grad()
            n_tokens = sum(b.real_tokens for b in batches)
            loss_total = 0.0
            for b in batches:
                loss, _ = _forward_loss(net, b, "packed" if mode == "packed" else "dense")
                (loss / n_tokens).backward()
                loss_total += loss.item()
            w0 = time.perf_counter()
            if world > 1:
                for p in net.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            wait = time.perf_counter() - w0
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if s > 0:  # step 0 warms up
                times.append(dt)
                waits.append(wait)
                tokens += n_tokens
                flops += sum(coef(b.tokens.numel(), b.attention_work) for b in batches)
            result.per_step.append({"mode": mode, "step": s, "seconds": dt, "loss": loss_total / n_tokens,
                                    "real_tokens": n_tokens, "allreduce_wait_seconds": wait})
            progress(f"{mode:<12} step {s}/{cfg.steps}: loss {loss_total / n_tokens:.4f}, {dt * 1000:.0f} ms")
        result.modes[mode] = {"tokens_per_second": tokens / sum(times), "step_seconds": float(np.mean(times)),
                              "real_tokens": tokens}
        computed[mode] = flops / tokens
    result.modes["predicted_speedup"] = computed["padded"] / computed["packed"]
    # the performance model on the same small model, packs and GPU count: only meaningful for a GPU in BF16
    preset = gpu_preset(torch.cuda.get_device_name()) if device.type == "cuda" else None
    if preset is not None:
        lengths_of = [[[len(data[i]) for i in p] for p in st] for st in steps[1:]]
        pred = predicted_step(plan, mcfg, lengths_of, world, preset)
        measured = result.modes["packed"]["step_seconds"]
        result.modes["packed"]["predicted_step_seconds"] = pred["step_seconds"]
        result.modes["packed"]["prediction_error"] = pred["step_seconds"] / measured - 1
        result.modes["packed"]["prediction_gpu"] = preset
    else:
        where = torch.cuda.get_device_name() if device.type == "cuda" else device.type
        result.modes["packed"]["predicted_step_seconds"] = None
        result.modes["packed"]["prediction_note"] = f"the step-time model describes H100, H200, B200 and A100 " \
                                                    f"GPUs in BF16, not {where}"
    result.modes["packed"]["predicted_flops_per_real_token"] = computed["packed"]
    result.modes["padded"]["predicted_flops_per_real_token"] = computed["padded"]

    # memory: parameters, gradients and Adam states after a step, plus what a forward keeps for backward
    biggest = max((packed_batch([data[i] for i in p], device) for p in steps[1]), key=lambda b: b.tokens.numel())
    state = sum(p.numel() * p.element_size() * 2 for p in net.parameters())  # weights and gradients
    state += sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                 if torch.is_tensor(v) and v.dim() > 0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        loss, n = _forward_loss(net, biggest, "packed")
        (loss / n).backward()
        measured = torch.cuda.max_memory_allocated()
        acts = measured - state
    else:
        acts = saved_bytes(net, biggest, "packed")
        measured = state + acts
    predicted = predicted_memory(trial_plan(plan, mcfg), biggest.tokens.numel(), 2 if dtype == torch.bfloat16 else 4)
    result.memory = {"measured_bytes": measured, "predicted_bytes": predicted["total_bytes"],
                     "ratio_measured_over_predicted": measured / predicted["total_bytes"],
                     "measured_state_bytes": state, "measured_activation_bytes": acts,
                     "predicted_state_bytes": predicted["state_bytes"],
                     "predicted_activation_bytes": predicted["activation_bytes"],
                     "tokens_in_micro_batch": biggest.tokens.numel(),
                     "how": "CUDA allocator peak" if device.type == "cuda" else
                            "parameter, gradient and Adam bytes plus saved_tensors_hooks bytes of one forward"}
    if world > 1:
        work = torch.tensor([float(sum(sum(len(data[i]) ** 2 for i in p) for p in st)) for st in steps[1:]])
        wait = torch.tensor([sum(w["allreduce_wait_seconds"] for w in result.per_step
                                 if w["mode"] == "packed" and w["step"] > 0)])
        gathered_work = [torch.zeros_like(work) for _ in range(world)]
        gathered_wait = [torch.zeros_like(wait) for _ in range(world)]
        dist.all_gather(gathered_work, work)
        dist.all_gather(gathered_wait, wait)
        costs = np.array([[float(w[s]) for w in gathered_work] for s in range(len(work))])
        result.distributed = {
            "world_size": world, "backend": dist.get_backend(),
            "per_rank_attention_work": [float(w.sum()) for w in gathered_work],
            "per_rank_allreduce_wait_seconds": [float(w[0]) for w in gathered_wait],
            "measured_work_straggler": float(costs.max(axis=1).sum() / costs.mean(axis=1).sum()),
            "predicted_straggler_factor": straggler_factor(
                np.array([sum(len(data[i]) ** 2 for i in p) for p in packs], dtype=float),
                cfg.packs_per_step * world, world, cfg.seed),
        }
    return result


def write_outputs(result: TrialResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "trial.json").write_text(json.dumps(result.to_dict(), indent=1))
    with open(out / "steps.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(result.per_step[0]))
        writer.writeheader()
        writer.writerows(result.per_step)
