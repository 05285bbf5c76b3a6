"""A plan and its data in, memory, FLOPs and time out: the one call behind ``python -m advisor estimate``.

Packing is the expensive part and is reused: ``packing_for`` caches results on the length histogram and the
packing settings, so changing the model, layout or GPU re-estimates without packing again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from advisor.data.lengths import LengthHistogram
from advisor.model.flops import flops_coefficients
from advisor.model.logged import LoggedThroughput, logged_throughput
from advisor.model.memory import DEFAULT_OVERHEAD_GIB, GIB, MemoryEstimate, estimate_memory
from advisor.model.micro_batches import (
    MicroBatches,
    in_batch_micro_batches,
    offline_micro_batches,
    online_micro_batches,
    padded_micro_batches,
    pretrain_micro_batches,
)
from advisor.model.numerics import numerics_of
from advisor.model.throughput import TimeEstimate, estimate_time, loader_bound, rank_straggler
from advisor.packing.cache import packing_for
from advisor.packing.config import OVERLONG_OF_FORMAT, PackingConfig
from advisor.packing.offline import PackingResult, runtime_lengths
from advisor.packing.online.from_plan import schedule_of
from advisor.packing.online.results import RunSchedule
from advisor.plan import Plan


def packing_config(plan: Plan) -> PackingConfig:
    """Megatron-Bridge's offline packing settings for this plan: the dataset's max length is min(seq_length, pack);
    SFT data (GPTSFTDataset) is truncated to it, chat data (GPTSFTChatDataset, which does not truncate) has its
    longer samples skipped by ``create_hist`` (Megatron-Bridge 0.6.2 data/datasets/gpt_sft.py,
    data/packing/algorithms.py). Every packing of a plan (CLI, pages, exports, search) is built here."""
    size = plan.pack_size
    return PackingConfig(
        pack_size=size,
        algorithm=plan.packing.algorithm,
        seed=plan.packing_seed,
        pad_seq_to_mult=plan.pad_seq_to_mult,
        max_seq_length=min(plan.training.seq_length, size),
        overlong=OVERLONG_OF_FORMAT[plan.data.format],
    )


def packing_of(plan: Plan, hist: LengthHistogram) -> PackingResult | None:
    """The offline packing of the data under this plan (cached), or None when the plan does not pack offline."""
    return packing_for(hist, packing_config(plan)) if plan.packing_mode == "offline" else None


@dataclass(frozen=True, kw_only=True)
class FlopsEstimate:
    model_per_step: float  # on real tokens, as Megatron-LM logs it (THD: real sum(L), sum(L^2))
    computed_per_step: float  # what the GPUs run, padding included
    attention: dict  # per step: thd, padded, block_mask (core attention FLOPs)
    attention_ratio: float  # sum(s_i^2) / (sum s_i)^2 over the packed rows

    @property
    def padding_waste(self) -> float:
        return 1 - _ratio(self.model_per_step, self.computed_per_step)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    plan: Plan
    mode: str
    pad_seq_to_mult: int
    packing: PackingResult | None
    micro_batches: MicroBatches
    memory: MemoryEstimate
    flops: FlopsEstimate
    time: TimeEstimate
    notes: tuple[str, ...] = field(default=())
    # the scheduler's schedule of the data in the scheduled modes: Megatron-LM's (online) or the one Megatron-Bridge
    # 0.7 runs (global-batch)
    online: RunSchedule | None = None
    logged: LoggedThroughput | None = None  # what Megatron-Bridge's and Megatron-LM's logs will print for the step
    # what never reaches training: samples truncated (their tokens past the max length) or skipped (chat data that
    # offline packing's create_hist leaves out), over the data's epoch
    samples_lost: int = 0
    tokens_lost: int = 0

    def to_dict(self) -> dict:
        m = self.memory
        return {
            "mode": self.mode,
            "pad_seq_to_mult": self.pad_seq_to_mult,
            "memory": {
                "total_bytes": m.total,
                "breakdown": m.breakdown,
                "fits": m.fits,
                "capacity_bytes": m.capacity,
                "stage": m.stage,
                "tokens_per_micro_batch": m.tokens_per_micro_batch,
                "offloaded_to_host_bytes": m.offloaded,
                "megatron_bridge": {
                    "weight_and_optimizer_bytes": m.megatron_bridge.weight_and_optimizer_bytes,
                    "activation_bytes": m.megatron_bridge.activation_bytes,
                    "total_bytes": m.megatron_bridge.total_bytes,
                    "activation_printed_in_log": m.megatron_bridge.printed_in_log,
                },
                "differences": list(m.differences),
            },
            "flops": {
                "model_per_step": self.flops.model_per_step,
                "computed_per_step": self.flops.computed_per_step,
                "padding_waste": self.flops.padding_waste,
                "attention": self.flops.attention,
                "attention_ratio_thd_over_block": self.flops.attention_ratio,
            },
            "time": asdict(self.time),
            "logged": None if self.logged is None else asdict(self.logged),
            "packing": None if self.packing is None else self.packing.metadata,
            "samples_left_out": None if self.packing is None else _left_out(self.plan, self.packing),
            "online": None if self.online is None else online_summary(self.online),
            "lost": {"samples": self.samples_lost, "tokens": self.tokens_lost},
            "notes": list(self.notes),
            "pipeline_layout": self.plan.pipeline_layout_summary(),
        }


def _micro_batches(
    plan: Plan, hist: LengthHistogram, mode: str
) -> tuple[MicroBatches, PackingResult | None, tuple[int, int]]:
    """The micro batches of a mode no scheduler packs, its offline packing (if any), and the (samples, tokens) the
    data set truncates or skips."""
    t, p = plan.training, plan.parallel
    fixed = p.pp > 1 or p.ep > 1 or t.cuda_graphs  # Megatron-Bridge forces pad_to_max_length with PP or EP
    if t.task == "pretrain" and mode == "none":
        return pretrain_micro_batches(hist.total_tokens, t.micro_batch_size, t.seq_length), None, (0, 0)
    if mode == "offline":
        result = packing_for(hist, packing_config(plan))
        r = result.runtime
        lost = (r.num_truncated + r.num_skipped, r.tokens_truncated + r.tokens_skipped)
        return offline_micro_batches(result, fixed), result, lost
    unpadded = PackingConfig(pack_size=t.seq_length, pad_seq_to_mult=1, seed=plan.packing_seed)
    runtime = runtime_lengths(hist, unpadded)
    counts, lost = runtime.counts, (runtime.num_truncated, runtime.tokens_truncated)
    if mode == "in-batch":
        return (
            in_batch_micro_batches(counts, t.micro_batch_size, plan.pad_seq_to_mult, plan.packing_seed, t.seq_length),
            None,
            lost,
        )
    return padded_micro_batches(counts, t.micro_batch_size, t.seq_length, plan.packing_seed, fixed), None, lost


def _left_out(plan: Plan, result: PackingResult) -> dict:
    """What the plan's data format does to samples longer than the max length: truncated (sft) or skipped (chat)."""
    r = result.runtime
    return {
        "format": plan.data.format,
        "max_seq_length": result.config.effective_max_seq_length,
        "num_truncated": r.num_truncated,
        "tokens_truncated": r.tokens_truncated,
        "num_skipped": r.num_skipped,
        "tokens_skipped": r.tokens_skipped,
    }


def online_summary(run: RunSchedule) -> dict:
    """The schedule at a glance, as JSON: the summary, the buffer, and what the real scheduler refuses."""
    return {
        **asdict(run.summary),
        "scheduler": run.config.scheduler,
        "data_set": run.config.dataset,
        "max_seqlen_per_dp_cp_rank": run.max_seqlen_per_dp_cp_rank,
        "capacity": run.capacity,
        "over_cap_share": run.over_cap_share,
        "padding_divisor": run.padding_divisor,
        "refused": [{"step": r.step, "reason": r.reason, "source": r.source} for r in run.refusals[:20]],
    }


def _ratio(a: float, b: float) -> float:
    """a / b, 1 when both are 0 (every sample one token long: its runtime length, stored - 1, is 0)."""
    return a / b if b else 1.0


def estimate(
    plan: Plan, hist: LengthHistogram, *, mfu: float | None = None, overhead_gib: float = DEFAULT_OVERHEAD_GIB
) -> Estimate:
    """Memory per GPU, FLOPs and time for a plan on its data (time from the performance model unless ``mfu``
    fixes the utilisation). The caller reads the data (the CLI from the plan's
    ``data.lengths``; the dashboard from its session): the model layer never opens a file a plan names."""
    t, p = plan.training, plan.parallel
    mode = plan.packing_mode
    run = schedule_of(plan, hist) if plan.scheduled else None  # online and global-batch: the same schedulers
    if run is not None:
        mb, result = online_micro_batches(run, mode), None
        lost = (run.summary.truncated_samples, run.summary.truncated_tokens)
    else:
        mb, result, lost = _micro_batches(plan, hist, mode)
    capacity = plan.hardware.capacity_gib * GIB
    # MFU against the dense peak of the format the linear layers run in (NVIDIA's published FP8 MFUs are of the FP8
    # peak: dgxc-benchmarking's READMEs), so a fixed MFU means the same on every precision
    fmt = numerics_of(plan).gemm
    peak = (plan.hardware.table.get(f"{fmt}_tflops") or plan.hardware.peak_tflops) * 1e12
    n = result.packing_factor if result is not None else None
    num_microbatches = plan.micro_batches_per_step(n) if run is None else max(1, round(run.summary.micro_batches_mean))
    memory = estimate_memory(
        plan, mb.peak_tokens, num_microbatches, overhead_bytes=overhead_gib * GIB, capacity_bytes=capacity
    )
    coef = flops_coefficients(plan.model, p.tp)
    # rows of the step: packs with offline packing (samples / n, as Megatron-Bridge's global batch), else micro
    # batches of micro_batch_size samples
    rows: float = plan.global_batch_packs(n) if n else (plan.requested_samples or 1) // t.micro_batch_size
    if run is not None:  # scheduled: the scheduler's packs per step (micro batches x DP), a mean over the epoch
        rows = max(run.summary.micro_batches_mean, 1.0) * p.dp
    mean = lambda a: float(np.mean(a))  # noqa: E731 - per micro batch, then times the micro batches of a step
    samples_per_step = rows * mean(mb.samples)
    attention = {
        "thd": rows * float(coef.attention(mean(mb.real_tokens), mean(mb.attention_thd))),
        # the same samples without packing, each padded to seq_length (BSHD: b x s^2 per micro batch)
        "padded": samples_per_step * float(coef.attention(t.seq_length, float(t.seq_length) ** 2)),
        "block_mask": rows * float(coef.attention(mean(mb.computed_tokens), mean(mb.attention_block))),
    }
    flops = FlopsEstimate(
        model_per_step=rows * coef(mean(mb.real_tokens), mean(mb.attention_thd)),
        computed_per_step=rows * coef(mean(mb.computed_tokens), mean(mb.attention_computed)),
        attention=attention,
        attention_ratio=_ratio(mean(mb.attention_thd), mean(mb.attention_block)),
    )
    mlm_flops = None
    if run is not None:  # Megatron counts FLOPs with the scheduler's sums (training.py), over the steps that run
        ran = run.num_micro_batches > 0
        mlm_flops = (
            float(np.mean([coef(a, b) for a, b in zip(run.seqlen_sum[ran], run.seqlen_squared_sum[ran], strict=True)]))
            if ran.any()
            else 0.0
        )
        flops = FlopsEstimate(
            model_per_step=mlm_flops,
            computed_per_step=flops.computed_per_step,
            attention=flops.attention,
            attention_ratio=flops.attention_ratio,
        )
    time = estimate_time(
        mb,
        coef,
        plan=plan,
        global_batch=rows,
        dp=p.dp,
        gpus=p.gpus,
        peak_flops=peak,
        mfu=mfu,
        seed=plan.packing_seed,
        straggler=None if run is None else rank_straggler(run.rank_tokens, run.rank_work, coef),
        model_flops=mlm_flops,
        cp_groups=cp_groups_of(run) if run is not None and plan.dynamic_cp else (),
    )
    time = replace(time, peak_format=fmt)
    # tokenized on the fly, the loader may not keep up; offline packing's data was tokenized when it was packed
    # (Megatron-Bridge's packed-sequence preparation writes token ids), so its loader only reads
    if t.dataloader_seconds_per_sample and mode != "offline":
        time = loader_bound(
            time,
            samples_per_rank=samples_per_step / p.dp,
            seconds_per_sample=t.dataloader_seconds_per_sample,
            workers=t.dataloader_workers,
        )
    logged = logged_throughput(
        coef=coef,
        step_seconds=time.step_seconds,
        gpus=p.gpus,
        rows=rows,
        samples_per_row=mean(mb.samples),
        row_tokens=mean(mb.computed_tokens),
        real_tokens_per_row=mean(mb.real_tokens),
        seq_sq_sum=mean(mb.attention_thd),
        seq_length=t.seq_length,
        model_flops_per_step=flops.model_per_step,
        packed=mode in ("offline", "in-batch", "online", "global-batch"),
        cp=p.cp,
        pp=p.pp,
    )
    notes = list(plan.notes)  # what reading the plan changed or assumed, said where its figures are
    if p.cp > 1:
        notes.append(
            f"CP {p.cp}: each sequence is split in {2 * p.cp} chunks, rank r taking chunks r and "
            f"{2 * p.cp - 1}-r, so causal attention work is balanced across CP ranks; the cost is padding "
            f"every sequence to a multiple of {run.padding_divisor if run else plan.pad_seq_to_mult}."
        )
    if run is not None:
        notes.append(
            f"{scheduled_text(plan, run)}: {run.summary.micro_batches_mean:.2f} micro batches per step on average "
            f"({run.summary.micro_batches_min}-{run.summary.micro_batches_max}); the straggler factor "
            f"{time.straggler_factor:.3f} comes from the scheduler's own dealing of packs to ranks "
            f"(attention work alone: {run.summary.straggler_factor:.3f})"
        )
        if plan.dynamic_cp:
            notes.append(
                f"dynamic CP: each sequence runs on the smallest power-of-two group of the {p.dp * p.cp} DP x CP "
                f"ranks that holds it at {run.max_seqlen_per_dp_cp_rank:,} tokens a rank; {run.over_cap_share:.0%} "
                f"of the sequences are longer and need more than one rank; every sequence is padded to a "
                f"multiple of {run.padding_divisor} (2 x DP x CP)"
            )
        if run.scale > 1:
            notes.append(
                f"a scale model: {run.summary.steps:,} of the epoch's {run.summary.epoch_steps:,} steps "
                "simulated, spread evenly over it, each exactly; per-step figures are their averages and "
                "the epoch's time scales with its steps (the command line simulates every step)"
            )
        if run.refusals:
            notes.append(
                f"{len(run.refusals)} of {run.summary.steps} steps are refused by the real scheduler: "
                f"{run.refusals[0].reason}"
            )
    return Estimate(
        plan=plan,
        mode=mode,
        pad_seq_to_mult=plan.pad_seq_to_mult,
        packing=result,
        micro_batches=mb,
        memory=memory,
        flops=flops,
        time=time,
        notes=tuple(notes),
        online=run,
        logged=logged,
        samples_lost=lost[0],
        tokens_lost=lost[1],
    )


def cp_groups_of(run: RunSchedule) -> tuple[tuple[float, int, float, float], ...]:
    """Dynamic CP's runtime CP groups by size g: (share of the ranks' micro batches on a group of g, g, mean tokens
    and mean sum(s^2) per rank of such a group), for ``StepWork.cp_groups``.

    >>> from advisor.packing.online import OnlineConfig, schedule
    >>> cfg = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=64, global_batch_size=8, dp=2, cp=2,
    ...                    scheduler="default_dynamic_cp", max_seqlen_per_dp_cp_rank=32)
    >>> groups = cp_groups_of(schedule(np.array([60, 60, 10, 10, 10, 10, 10, 10] * 4), cfg))
    >>> [g for _, g, _, _ in groups], round(sum(share for share, *_ in groups), 9)
    ([1, 2], 1.0)
    """
    g = run.groups
    sizes = np.repeat(g.cp, g.rank_count)  # one entry per rank of each group, as online_micro_batches deals them
    if not sizes.size:
        return ()
    tokens = np.repeat(run.group_tokens / g.cp, g.rank_count)
    work = np.repeat(run.group_work / g.cp, g.rank_count)
    out = []
    for size in np.unique(sizes):
        at = sizes == size
        out.append((float(at.mean()), int(size), float(tokens[at].mean()), float(work[at].mean())))
    return tuple(out)


def scheduled_text(plan: Plan, run: RunSchedule) -> str:
    """Which scheduler packs a scheduled plan, run by what, with which cap, as every output names it.

    >>> from advisor.plan import plan_from_dict
    >>> from advisor.data.lengths import LengthHistogram
    >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8, "cp": 2},
    ...                     "training": {"seq_length": 4096, "global_batch_samples": 16},
    ...                     "packing": {"mode": "global-batch"}})
    >>> print(scheduled_text(p, schedule_of(p, LengthHistogram.from_samples([300, 900, 2000] * 20))))
    ... # doctest: +NORMALIZE_WHITESPACE
    global-batch packing (Megatron-Bridge 0.7 running Megatron-Core's dp_balanced, max_seqlen_per_dp_cp_rank
    2,048: seq_length / CP, as the plan sets none; padded to multiples of 4)
    """
    k = plan.packing
    if plan.packing_mode == "online":
        return f"online packing ({k.scheduler}, Megatron-LM {k.megatron_lm})"
    cap = f"max_seqlen_per_dp_cp_rank {run.max_seqlen_per_dp_cp_rank:,}"
    if k.max_seqlen_per_dp_cp_rank is None:
        cap += ": seq_length / CP, as the plan sets none"
    fold = ", alignment padding folded into each sequence" if k.fold_alignment_padding else ""
    return (
        f"global-batch packing (Megatron-Bridge 0.7 running Megatron-Core's {k.scheduler}, {cap}; padded to "
        f"multiples of {run.padding_divisor}{fold})"
    )
