"""The constraints of packed and long-context training, as findings: what, why, where it comes from, and the fix.

Each rule is a function of the plan (and, where it needs data, the packing result); it returns findings. A
finding's ``fix`` is a set of plan changes (``{"training": {"micro_batch_size": 1}}``) that ``Plan.changed``
merges in; applied, it removes its finding, and applying it twice changes nothing (a property test checks).
Derived settings (packing mode, padding multiple, DP) are the plan's own properties, not rules.

Sources are named per rule: Megatron-Bridge 0.6.2 ``training/config.py`` (``ConfigContainer.validate``),
``data/packing/`` and its docs; Megatron-LM ``megatron/training/arguments.py`` and ``datasets/sft_dataset.py``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from advisor.advice.global_batch import global_batch_problems, settings_of
from advisor.advice.memory_fixes import describe, fitting_fixes
from advisor.advice.traps import trap_findings
from advisor.findings import Finding, ordered
from advisor.model.loss_expectation import MOVED_THRESHOLD, LossWeighting
from advisor.model.memory import GIB, MemoryEstimate, estimate_memory
from advisor.model.numerics import numerics_of, quantized_widths
from advisor.model.throughput import TimeEstimate
from advisor.packing.offline import PackingResult
from advisor.packing.online.from_plan import online_config
from advisor.packing.online.validation import check as check_online
from advisor.plan import Plan
from advisor.plan.schema import MAX_PACK, MAX_TOKENS
from advisor.plan.versions import older

LONG_CONTEXT = 65536
MB_CONFIG = "Megatron-Bridge 0.6.2 training/config.py (ConfigContainer.validate)"


BATCH_TOLERANCE = 0.05  # the effective samples per step may differ from the requested by this share (issue 19)


def _batch(plan: Plan, micro_batch_size: int, packing: PackingResult | None = None) -> dict:
    """A micro batch size and the nearest global batch (samples: the fix leaves offline packing, where the framework
    counts samples) it divides with this DP, so the fix is valid. A plan counting packs keeps the samples those
    packs held (packs x n), so leaving offline packing keeps the work."""
    unit = micro_batch_size * plan.dp
    packs = plan.batch_in_packs  # without n, packs stand in for the samples they hold
    samples = plan.effective_samples_per_step(_factor(packing)) or (plan.batch_in_samples if packs is None else packs)
    return {
        "micro_batch_size": micro_batch_size,
        "global_batch_size": max(unit, round(samples / unit) * unit),
        "global_batch_samples": None,
    }


def _factor(packing: PackingResult | None) -> float | None:
    return packing.packing_factor if packing is not None else None


# ---------------------------------------------------------------------------------------------- rules
def rule_packing_mode(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    t, mode = plan.training, plan.packing_mode
    out = []
    gpt_sft_in_batch = t.task == "llm-sft" and mode == "in-batch"
    if gpt_sft_in_batch:
        out += _gpt_sft_in_batch(plan)
    elif t.task == "llm-sft" and mode not in ("offline", "online", "global-batch"):
        out.append(
            Finding(
                id="packing.mode",
                severity="warning",
                message=f"LLM SFT with packing '{mode}': use offline packing",
                reason="Offline packing packs the tokenized data set once before training and keeps micro batch size 1 "
                "with THD attention; it is Megatron-Bridge's packing path for text SFT.",
                source="Megatron-Bridge 0.6.2 data/packing/offline.py; docs sft_peft/packed_sequence",
                fix={
                    "packing": {
                        "mode": "offline",
                        **(
                            {"pack_size": None}
                            if plan.packing.pack_size is not None and plan.packing.pack_size > t.seq_length
                            else {}
                        ),
                    },
                    "training": {"micro_batch_size": 1},
                },
            )
        )
    if t.task == "vlm-sft" and mode == "offline":
        out.append(
            Finding(
                id="packing.mode",
                severity="error",
                message="VLM SFT cannot use offline packing: use in-batch packing",
                reason="Image and video samples are not pre-tokenized to a packable file; Megatron-Bridge packs VLM "
                "micro batches in the collate step instead (enable_in_batch_packing).",
                source="Megatron-Bridge 0.6.2 data/packing/in_batch.py",
                fix={"packing": {"mode": "in-batch"}, "training": _batch(plan, max(2, t.micro_batch_size), packing)},
            )
        )
    if mode == "in-batch" and t.micro_batch_size < 2:
        out.append(
            Finding(
                id="packing.in_batch_mbs",
                severity="error",
                message="in-batch packing needs micro_batch_size >= 2",
                reason="In-batch packing concatenates the sequences of one micro batch; with one there is nothing to "
                "pack (ConfigContainer.validate raises).",
                source=MB_CONFIG,
                fix={"training": _batch(plan, 2)},
            )
        )
    if t.task == "pretrain" and mode not in ("none", "global-batch"):  # global-batch packs variable-length documents
        out.append(
            Finding(
                id="packing.pretrain",
                severity="warning",
                message="pre-training needs no packing",
                reason="The GPT pre-training dataset already concatenates documents into full seq_length rows.",
                source="Megatron-LM megatron/core/datasets/gpt_dataset.py",
                fix={"packing": {"mode": "none"}, "training": _batch(plan, t.micro_batch_size, packing)},
            )
        )
    if mode == "offline" and packing is not None:
        out += _global_batch(plan, packing.packing_factor)
    return out


GPT_SFT_IN_BATCH = "Megatron-Bridge 0.7.0 data/builders/gpt_sft.py (GPTSFTDatasetConfig, PR #5493)"


def _gpt_sft_in_batch(plan: Plan) -> list[Finding]:
    """GPT-SFT in-batch packing: new in Megatron-Bridge 0.7.0 (enable_in_batch_packing on GPTSFTDatasetConfig, each
    micro batch's samples concatenated into one THD row in the collate step, each padded to the CP/SP multiple);
    0.6.2 packs VLM micro batches only. Its seq_length must be a multiple of that multiple (validate l.1547)."""
    t, v = plan.training, plan.versions.megatron_bridge
    if older(v, "0.7.0"):
        return [
            Finding(
                id="packing.in_batch_release",
                severity="error",
                message=f"in-batch packing of LLM SFT data needs Megatron-Bridge 0.7 (versions.megatron_bridge is "
                f"{v}): set versions.megatron_bridge to 0.7.1, or pack offline",
                reason=f"Megatron-Bridge {v} packs in the collate step only for VLM data sets; GPT-SFT in-batch "
                "packing (GPTSFTDatasetConfig.enable_in_batch_packing, both JSONL schemas) arrives in 0.7.0.",
                source=GPT_SFT_IN_BATCH + "; v0.7.0 release notes",
                fix={"versions": {"megatron_bridge": "0.7.1"}},
            )
        ]
    need = plan.collate_padding_multiple
    if t.seq_length % need == 0:
        return []
    rounded = -(-t.seq_length // need) * need
    return [
        Finding(
            id="packing.in_batch_seq_length",
            severity="error",
            message=f"training.seq_length {t.seq_length} is not a multiple of the CP/SP collate padding multiple "
            f"{need} GPT-SFT in-batch packing pads every sequence to: set it to {rounded}",
            reason="ConfigContainer.validate refuses a GPT-SFT data set with in-batch packing whose seq_length the "
            "multiple does not divide: a sample of seq_length tokens, padded, would outgrow it.",
            source="Megatron-Bridge 7bdc5ef4 training/config.py validate l.1542-1552 (PR #5493 l.1359-1380)",
            fix={"training": {"seq_length": rounded}},
        )
    ]


def _global_batch(plan: Plan, n: float) -> list[Finding]:
    """The batch in both units, and a warning when the packs Megatron-Bridge will run (a multiple of DP) hold more
    than 5 % more or fewer samples than the plan asked for: the learning-rate schedule and the epoch change."""
    dp = plan.dp
    packs = plan.global_batch_packs(n)
    source = "Megatron-Bridge docs sft_peft/packed_sequence (packing factor n)"
    out = [
        Finding(
            id="packing.global_batch",
            severity="info",
            message=f"a pack holds n = {n:.2f} samples: {plan.batch_text(n)}; the export writes Megatron-Bridge's "
            f"global_batch_size {packs}",
            reason="With offline packing Megatron-Bridge's global_batch_size counts packs, a multiple of DP "
            f"({dp}). A plan gives it as an MB config does (training.global_batch_size, in packs) or asks for "
            "samples (training.global_batch_samples, divided by n and rounded to DP by the export).",
            source=source,
        )
    ]
    asked = plan.requested_samples
    if asked is None:
        return out
    got = packs * n
    if abs(got / asked - 1) > BATCH_TOLERANCE:
        near = sorted({max(dp, packs - dp), packs, packs + dp})
        options = "; ".join(f"{k} packs ≈ {k * n:,.0f} samples ({k * n / asked - 1:+.0%})" for k in near)
        out.append(
            Finding(
                id="packing.effective_batch",
                severity="warning",
                message=f"{asked:,} samples per step requested, but Megatron-Bridge's global_batch_size must be a "
                f"multiple of DP {dp}: {packs} packs ≈ {got:,.0f} samples ({got / asked - 1:+.0%})",
                reason=f"The packs per step are the requested samples over n = {n:.2f}, rounded to a multiple of DP. "
                f"Nearest choices: {options}. A step that trains on other than the requested samples changes the "
                "learning-rate schedule per sample and the steps per epoch. The fix writes the batch in packs, as "
                "your MB config will (training.global_batch_size); or change the samples per step or the DP "
                "size.",
                source=source,
                fix={"training": {"global_batch_size": packs}},
            )
        )
    return out


def rule_context_parallel(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    p, t, m = plan.parallel, plan.training, plan.model
    if p.cp == 1:
        return []
    out = []
    size = plan.pack_size
    for name, value, section, most in (
        ("seq_length", t.seq_length, "training", MAX_TOKENS),
        ("pack_size", size, "packing", MAX_PACK),
    ):
        if value % (2 * p.cp):
            fixed = -(-value // (2 * p.cp)) * (2 * p.cp)
            if fixed > most:  # rounding up would pass the longest a plan holds: round down
                fixed = value // (2 * p.cp) * (2 * p.cp)
            out.append(
                Finding(
                    id=f"cp.{name}",
                    severity="error",
                    message=f"{name} {value} is not divisible by 2*CP = {2 * p.cp}",
                    reason="Context parallelism splits every sequence into 2*CP chunks (rank r takes chunks r and "
                    "2CP-1-r to balance causal attention).",
                    source=MB_CONFIG,
                    fix={section: {name: fixed}},
                )
            )
    need = plan.collate_padding_multiple
    mult = plan.packing.pad_seq_to_mult
    if plan.packing_mode in ("offline", "in-batch") and mult is not None and mult % need:
        out.append(
            Finding(
                id="cp.pad_seq_to_mult",
                severity="error",
                message=f"pad_seq_to_mult {mult} is not a multiple of {need} = lcm(2*CP, CP*TP with SP)",
                reason="With THD and CP every packed sequence is split into 2*CP chunks (and over TP with sequence "
                "parallelism), so each must be padded to this multiple. Megatron-Bridge 0.6 uses the lcm; older "
                "docs said 2*CP*TP (the product, also valid but pads more); 0.3.1 recipes used 2*CP.",
                source=MB_CONFIG + "; data/packing/in_batch.py",
                fix={"packing": {"pad_seq_to_mult": need}},
            )
        )
    elif plan.packing_mode in ("offline", "in-batch") and mult is None:
        out.append(
            Finding(
                id="cp.pad_seq_to_mult",
                severity="info",
                message=f"pad_seq_to_mult set to {need} for CP {p.cp}",
                reason="lcm(2*CP if CP > 1, CP*TP if sequence parallel and TP > 1), Megatron-Bridge 0.6's rule; "
                + (
                    "the export writes it (the packing specs' pad_seq_to_mult)."
                    if plan.packing_mode == "offline"
                    else "in-batch packing applies it in the collate step itself (ConfigContainer.validate "
                    "derives it from CP and TP), so the export writes nothing for it."
                ),
                source=MB_CONFIG,
                fix={"packing": {"pad_seq_to_mult": need}},
            )
        )
    if t.task != "pretrain":
        out.append(
            Finding(
                id="cp.loss",
                severity="info",
                message=(
                    "CP > 1 in SFT: calculate_per_token_loss=True and average_in_collective=False (set by the export)"
                ),
                reason="A CP rank whose tokens are all masked (prompt only) would divide by zero and give a NaN loss; "
                "Megatron-Bridge asserts both settings when fine-tuning with CP > 1.",
                source=MB_CONFIG,
            )
        )
    comm = plan.parallel.cp_comm_type
    groups = m.query_groups
    a2a_size = p.cp if comm == "a2a" else (p.hierarchical_cp_sizes or [1])[0] if comm == "a2a+p2p" else 1
    if a2a_size > 1 and (m.num_attention_heads % a2a_size or groups % a2a_size):
        out.append(
            Finding(
                id="cp.comm_type",
                severity="error",
                message=f"cp_comm_type {comm} needs attention heads ({m.num_attention_heads}) and query groups "
                f"({groups}) divisible by its all-to-all size {a2a_size}",
                reason="All-to-all (Ulysses) CP scatters heads over CP ranks, so its size cannot exceed the KV heads.",
                source="Transformer Engine attention (cp_comm_type); " + MB_CONFIG,
                fix={"parallel": {"cp_comm_type": "p2p", "hierarchical_cp_sizes": None}},
            )
        )
    if m.window_size and comm not in ("a2a", "all_gather"):
        out.append(
            Finding(
                id="cp.sliding_window",
                severity="error",
                message=f"sliding-window attention with CP needs cp_comm_type a2a or all_gather (is {comm})",
                reason="The ring (p2p) CP kernels do not support a sliding window.",
                source="Transformer Engine context parallel attention; " + MB_CONFIG,
                fix={"parallel": {"cp_comm_type": "a2a" if groups % p.cp == 0 else "all_gather"}},
            )
        )
    if comm == "p2p" and p.cp >= 8:
        a2a = math.gcd(groups, p.cp)
        if a2a > 1:
            out.append(
                Finding(
                    id="cp.hierarchical",
                    severity="info",
                    message=f"CP {p.cp}: consider cp_comm_type a2a+p2p with hierarchical sizes [{a2a}, {p.cp // a2a}]",
                    reason=(
                        "For large CP a ring over all ranks "
                        "exposes communication; all-to-all inside a node group and "
                        "a ring across groups hides more of it. Sizes must multiply to CP; the a2a part must divide "
                        "the query groups."
                    ),
                    source="Megatron-Core hierarchical_context_parallel_sizes; " + MB_CONFIG,
                    fix={"parallel": {"cp_comm_type": "a2a+p2p", "hierarchical_cp_sizes": [a2a, p.cp // a2a]}},
                )
            )
    return out


def rule_cuda_graphs(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    if not plan.training.cuda_graphs or plan.packing_mode == "none":
        return []
    return [
        Finding(
            id="cuda_graphs.packing",
            severity="warning",
            message="CUDA graphs with packed sequences: pad_cu_seqlens=True and pad_to_max_length=True (set by the "
            "export); custom packed data needs its metadata file",
            reason="A graph replays fixed shapes: every pack must be padded to the pack size and cu_seqlens to a fixed "
            "count (max_samples_per_bin from the packing metadata), so the metadata file must exist beside "
            "packed data you bring.",
            source="Megatron-Bridge 0.6.2 data/packing/config.py (pad_cu_seqlens); " + MB_CONFIG,
        )
    ]


def rule_long_context(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    p, t = plan.parallel, plan.training
    out = []
    s = t.seq_length
    if s > LONG_CONTEXT and p.cp > 1:
        gib = s * s / 2**30
        out.append(
            Finding(
                id="long_context.attention_mask",
                severity="warning",
                message=f"seq_length {s:,} > 64k with CP: in Megatron-LM pass --no-create-attention-mask-in-dataloader",
                reason=(
                    f"Otherwise the dataloader builds a dense s x s causal "
                    f"mask per sample ({gib * 4:,.0f} GiB in fp32, "
                    f"{gib:,.0f} GiB as bool at this length) and every TP rank broadcasts it; Transformer Engine makes "
                    "causal masks itself. Megatron-Bridge's default skip_getting_attention_mask_from_dataset=True "
                    "already avoids it."
                ),
                source="Megatron-LM megatron/training/arguments.py; megatron/core/datasets/gpt_dataset.py",
            )
        )
    if t.recompute == "full" and s >= 16384:
        out.append(
            Finding(
                id="long_context.recompute",
                severity="info",
                message="long sequences with full recompute: prefer more CP to full recompute",
                reason="Full recompute reruns the layers' forward (about 30 % slower when every layer); CP divides "
                "activations without "
                "recomputing. Try selective recompute with twice the CP if GPUs allow.",
                source="Megatron-Bridge docs (performance guide: context parallelism vs recompute)",
                fix={
                    "training": {
                        "recompute": "selective",  # a block size belongs to full recompute: it goes too
                        **({"recompute_num_layers": None} if t.recompute_num_layers else {}),
                    }
                },
            )
        )
    return out


def rule_data(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    p = plan.parallel
    out = []
    if packing is not None and packing.runtime.num_truncated:
        r = packing.runtime
        lost = r.tokens_truncated / max(1, r.real_tokens + r.tokens_truncated)  # a share of the data's tokens
        out.append(
            Finding(
                id="data.truncated",
                severity="warning",
                message=(
                    f"{r.num_truncated:,} samples longer than "
                    f"{packing.config.effective_max_seq_length} are truncated "
                    f"({r.tokens_truncated:,} tokens lost, {lost:.2%} of the data's)"
                ),
                reason="The dataset cuts samples at max_seq_length before packing; their tails are never trained on.",
                source="Megatron-Bridge 0.6.2 data/packing/offline.py (tokenize_dataset)",
            )
        )
    if packing is not None and packing.runtime.num_skipped:
        r = packing.runtime
        share = r.num_skipped / max(1, r.num_skipped + int(r.counts.sum()))
        out.append(
            Finding(
                id="data.skipped",
                severity="warning",
                message=f"{r.num_skipped:,} chat samples longer than {packing.config.effective_max_seq_length} are "
                f"skipped ({share:.2%} of the samples, {r.tokens_skipped:,} tokens never trained on)",
                reason=(
                    "GPTSFTChatDataset does not truncate, so Megatron-Bridge's "
                    "create_hist leaves samples longer than "
                    "the max length out of the packs (with a warning in its log); the packing factor n, the global "
                    "batch in packs and the epoch are those of the samples that remain. A larger pack keeps them."
                ),
                source="Megatron-Bridge 0.6.2 data/packing/algorithms.py (create_hist); data/datasets/gpt_sft.py "
                "(GPTSFTChatDataset._process_example)",
            )
        )
    if (p.pp > 1 or p.ep > 1) and plan.packing_mode != "none":
        out.append(
            Finding(
                id="data.fixed_length",
                severity="info",
                message="PP or EP > 1: every micro batch is padded to the full length (pad_to_max_length)",
                reason="Pipeline and expert parallelism exchange fixed-shape tensors, so Megatron-Bridge forces "
                "pad_to_max_length; packs are padded to the pack size.",
                source=MB_CONFIG,
            )
        )
    return out


STRAGGLER_WARNING = 1.05  # the modelled step this much slower than with balanced ranks: worth a warning


def rule_stragglers(plan: Plan, packing: PackingResult | None, straggler: float | None) -> list[Finding]:
    """DP ranks waiting for the heaviest, by the step's modelled straggler factor (the one the step time carries),
    with its cause: one pack's attention work against the mean. The pack's ratio alone overstated it (2.7x said
    beside a modelled x1.009): a rank runs many micro batches a step, so its sum averages the heavy pack out."""
    if straggler is None or straggler < STRAGGLER_WARNING or plan.dp < 2:
        return []
    cause = ""
    if packing is not None:
        m = packing.metrics
        per_rank = plan.micro_batches_per_step(packing.packing_factor)
        cause = (
            f" The heaviest pack holds {m.straggler_ratio:.1f}x the mean pack's attention work; over the "
            f"{per_rank:,} micro batch(es) each rank runs a step, the slowest rank's sum is x{straggler:.2f} "
            "the mean rank's."
        )
    return [
        Finding(
            id="data.stragglers",
            severity="warning",
            message=f"data-parallel ranks wait for the heaviest: the step is modelled x{straggler:.2f} as long as with "
            "balanced ranks",
            reason="Each step ends when the slowest DP rank ends; attention work grows with sum(s^2), so a pack of one "
            "long sample costs far more than a pack of many short ones." + cause + " Megatron-LM's "
            "--sequence-packing-scheduler dp_balanced (with --max-seqlen-per-dp-cp-rank) deals packs evenly by "
            "count, not by work; more micro batches per rank, a smaller pack size or sorting long samples apart "
            "narrows the spread.",
            source="advisor/model/throughput.py (straggler_factor); Megatron-LM's packing schedulers (dev branch)",
        )
    ]


def rule_compatibility(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    m = plan.model
    out = []
    if m.mtp_num_layers and plan.packing_mode != "none":
        out.append(
            Finding(
                id="compat.mtp",
                severity="error",
                message="packing with multi-token prediction (MTP) fine-tuning",
                reason="The MTP layers shift labels across the packed row, crossing sample boundaries; fine-tune with "
                "MTP off or without packing.",
                source="Megatron-Core multi_token_prediction.py; Megatron-Bridge docs",
                fix={"model": {"mtp_num_layers": 0}},
            )
        )
    if m.family in ("qwen3-omni",) and plan.packing_mode != "none":
        out.append(
            Finding(
                id="compat.family",
                severity="error",
                message=f"{m.family} does not support packed sequences",
                reason="Its Megatron-Bridge model raises NotImplementedError for packed sequences.",
                source="Megatron-Bridge 0.6.2 models/qwen_omni/qwen3_omni_step.py",
                fix={"packing": {"mode": "none"}, "training": _batch(plan, plan.training.micro_batch_size)},
            )
        )
    return out


def rule_performance(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    p = plan.parallel
    out = []
    if p.tp > 1 and p.sp and not p.tp_comm_overlap:
        out.append(
            Finding(
                id="perf.tp_comm_overlap",
                severity="info",
                message=f"TP {p.tp} communication is not overlapped",
                reason=(
                    "With sequence parallelism every layer all-gathers "
                    "and reduce-scatters its activations four times "
                    "per pass, and without overlap the GEMMs wait for each of them. Transformer Engine's userbuffers "
                    "run them under the GEMMs (the step-time model, fitted on NVIDIA's published runs, finds about "
                    "half of it hidden); Megatron-Bridge's performance recipes turn it on."
                ),
                source="Megatron-Core model_parallel_config.py (tp_comm_overlap); Megatron-Bridge comm_overlap.py",
                fix={"parallel": {"tp_comm_overlap": True}},
            )
        )
    return out


TE_SOURCE = "Transformer Engine transformer_engine/common/recipe/__init__.py, pytorch/utils.py, pytorch/constants.py"


def rule_precision(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    """What the plan's FP8 or FP4 recipe needs of the layer widths and the GPU, and what the export sets. (Which GPUs
    run a precision at all is the plan's own check: advisor/plan/precisions.py.)"""
    t = plan.training
    num = numerics_of(plan)
    if not num.quantized:
        return []
    out = []
    bad = {name: width for name, width in quantized_widths(plan).items() if width % num.divisor}
    if bad:
        widths = ", ".join(f"{k} {v}" for k, v in bad.items())
        out.append(
            Finding(
                id="precision.divisibility",
                severity="error",
                message=f"{num.name} needs every GEMM width on a GPU divisible by {num.divisor}: {widths}",
                reason="Transformer Engine refuses FP8 GEMMs whose last dimension is not a multiple of 16 "
                "(assert_dim_for_fp8_exec); MXFP8 scales blocks of 32 values and NVFP4 blocks of 16 along both "
                "dimensions. Change TP (or expert TP), or train in BF16.",
                source=TE_SOURCE,
                fix={"training": {"precision": "bf16", "fp8_recipe": None}},
            )
        )
    if t.precision == "fp8" and t.fp8_recipe == "blockwise" and plan.hardware.table["compute_capability"] >= 10:
        out.append(
            Finding(
                id="precision.blockwise_on_blackwell",
                severity="warning",
                message="FP8 blockwise scaling on Blackwell runs emulated through MXFP8: use mxfp8",
                reason="Float8BlockScaling targets Hopper; on Blackwell Transformer Engine emulates it with MXFP8 "
                "kernels for compatibility and recommends MXFP8 itself (Megatron-Bridge's mixed_precision.py: "
                "'blockwise (for Hopper only)').",
                source="Transformer Engine docs/examples/gemm_profiling/gemm_profiling.rst; Megatron-Bridge "
                "training/mixed_precision.py",
                fix={"training": {"precision": "mxfp8", "fp8_recipe": None}},
            )
        )
    what = {
        "fp8 tensorwise": "bf16_with_fp8_current_scaling_mixed with first_last_layers_bf16 = False (the recipe "
        "keeps the first and last layer in BF16; Megatron-Bridge's performance recipes and this "
        "estimate run every layer in FP8)"
    }.get(num.name, num.mb_recipe)
    out.append(
        Finding(
            id="precision.recipe",
            severity="info",
            message=f"{num.name}: the export sets Megatron-Bridge's mixed-precision recipe {what}",
            reason="The linear layers' GEMMs run in the recipe's format with their inputs cast first; attention, the "
            "router, the output layer and the residual stream stay BF16, the optimizer keeps FP32 master "
            "weights. The estimate counts the casts and the quantized copies layers keep for backward.",
            source="Megatron-Bridge training/mixed_precision.py; " + TE_SOURCE,
        )
    )
    return out


def rule_fsdp(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    p = plan.parallel
    if not p.fsdp:
        return []
    out = []
    if p.dp * p.cp == 1:
        out.append(
            Finding(
                id="fsdp.nothing_to_shard",
                severity="warning",
                message="Megatron FSDP with DP x CP = 1 shards nothing",
                reason="FSDP shards weights, gradients and optimizer state over the data-parallel (and CP) ranks; with "
                "one it only adds the per-layer gathers.",
                source="Megatron-Core megatron_fsdp",
                fix={"parallel": {"fsdp": False}},
            )
        )
    if (p.tp > 1 or p.cp > 1) and plan.hardware.table["compute_capability"] < 10:
        out.append(
            Finding(
                id="fsdp.connections",
                severity="info",
                message="Megatron FSDP with TP or CP > 1 before Blackwell: CUDA_DEVICE_MAX_CONNECTIONS pulls both ways",
                reason="Sequence parallelism wants CUDA_DEVICE_MAX_CONNECTIONS=1 and FSDP wants it larger (Megatron-LM "
                "warns; Megatron-Bridge asserts FSDP runs without 1): one of them loses its overlap.",
                source="Megatron-LM megatron/training/arguments.py; Megatron-Bridge training/config.py",
            )
        )
    return out


def rule_online(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    """Megatron-LM's own defaults and checks of the online scheduler's options (advisor/packing/online/validation.py
    follows arguments.py, model_parallel_config.py and transformer_config.py), and what main cannot do."""
    if plan.packing_mode != "online":
        return []
    out = [replace(f, id=f"online.{f.id}") for f in check_online(online_config(plan)).findings]
    if plan.packing.megatron_lm == "main":
        out.append(
            Finding(
                id="online.main_not_wired",
                severity="warning",
                message="Megatron-LM main has the scheduler but its training loop never calls it",
                reason="main d98e8a64 defines DpBalancedScheduler and wrap_data_iterator but has no "
                "--sequence-packing-scheduler option and train_step does not wrap the data iterator: a run on main "
                "trains unpacked. The simulation shows what the scheduler would do; run it on dev.",
                source="megatron/training/training.py, arguments.py (main d98e8a64 against dev d48bd6be)",
                fix={"packing": {"megatron_lm": "dev"}},
            )
        )
    return out


GB_DOCS = "Megatron-Bridge 0.7.0 docs training/packed-sequences (global-batch online packing)"
GB_BRANCH = "Megatron-Bridge 7bdc5ef4 (PR #6127)"


def rule_global_batch(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    """Megatron-Bridge 0.7's global-batch packing: the releases it needs, then every rule of its validation
    (advisor/advice/global_batch.py, checked against Megatron-Bridge's own code) on the plan as the export writes it.

    The plan's schema refuses what cannot be simulated at all, as it does for online packing (a VLM task, a bin
    smaller than seq_length); everything Megatron-Bridge refuses of a plan that can be simulated is a finding here,
    with its fix where the plan has the field."""
    if plan.packing_mode != "global-batch":
        return []
    v, k = plan.versions, plan.packing
    out = []
    if older(v.megatron_bridge, "0.7.0"):
        out.append(
            Finding(
                id="global_batch.megatron_bridge",
                severity="error",
                message=f"packing.mode global-batch needs Megatron-Bridge 0.7 (versions.megatron_bridge is "
                f"{v.megatron_bridge}): set versions.megatron_bridge to 0.7.1",
                reason="dataset.enable_global_batch_packing first appears in 0.7.0, whose packed-sequences page lists "
                f"global-batch online packing as a fourth packing path; {v.megatron_bridge}'s dataset configs have no "
                "such field, so the recipe refuses the setting.",
                source=GB_DOCS + f"; {GB_BRANCH} data/builders/gpt_sft.py, training/config.py",
                fix={"versions": {"megatron_bridge": "0.7.1"}},
            )
        )
    if older(v.megatron_core, "0.20.0"):
        out.append(
            Finding(
                id="global_batch.megatron_core",
                severity="error",
                message=f"global-batch packing runs Megatron-Core's packing scheduler, which Megatron-Core "
                f"{v.megatron_core} does not have: set versions.megatron_core to 0.20.0",
                reason="Up to 0.19.2 megatron/core/datasets/data_schedule.py holds no DpBalancedScheduler and no "
                "wrap_data_iterator (0.20.0 registers dp_balanced); Megatron-Bridge probes the pinned Megatron-Core "
                "and refuses to start without them (training/config.py l.1284, global_batch_packing.py "
                "probe_global_batch_packing_support).",
                source=f"{GB_BRANCH} training/config.py, training/global_batch_packing.py; Megatron-Core 0.19.2 wheel",
                fix={"versions": {"megatron_core": "0.20.0"}},
            )
        )
    branch_only = [
        what
        for what, used in (
            ("dynamic CP (scheduler default_dynamic_cp)", plan.dynamic_cp),
            ("fold_alignment_padding", k.fold_alignment_padding),
        )
        if used
    ]
    if branch_only:
        out.append(
            Finding(
                id="global_batch.branch_only",
                severity="warning",
                message=f"{' and '.join(branch_only)} on the global-batch path come from {GB_BRANCH}, which needs "
                "Megatron-LM dev's scheduler API; the 0.7.0 docs describe dp_balanced with static CP only",
                reason="The 7bdc5ef4 validation reads model.sequence_packing_scheduler and probes "
                "get_batch_on_this_rank_for_sequence_packing for dynamic_cp and config, which only Megatron-LM dev "
                "has (it asks for scripts/switch_mcore.sh dev); no Megatron-Core release registers "
                "default_dynamic_cp (0.20.0: dp_balanced only). The v0.7.0/v0.7.1 tag commits are not reachable "
                "here, so whether a release carries this is not known: check your Megatron-Bridge checkout.",
                source=f"{GB_BRANCH} training/config.py l.1284-1308, global_batch_packing.py; " + GB_DOCS,
            )
        )
    return out + [replace(f, fix=_keeping_the_batch(plan, f.fix)) for f in global_batch_problems(settings_of(plan))]


def _keeping_the_batch(plan: Plan, fix: dict) -> dict:
    """A fix that changes PP changes DP on the same GPUs: the samples per step move to the nearest multiple of the
    new micro batch x DP (Megatron asserts it), and a layout given for the old PP is dropped, so the fix gives a
    valid plan."""
    pp = fix.get("parallel", {}).get("pp")
    if pp is None:
        return fix
    p, t = plan.parallel, plan.training
    out = {**fix, "parallel": {**fix["parallel"], **({"pipeline_layout": None} if p.pipeline_layout else {})}}
    unit = t.micro_batch_size * (p.gpus // (p.tp * pp * p.cp))
    samples = plan.batch_in_samples
    if samples % unit:
        out["training"] = {
            **fix.get("training", {}),
            "global_batch_size": max(unit, round(samples / unit) * unit),
            "global_batch_samples": None,
        }
    return out


LOSS_SOURCE = (
    "Megatron-Bridge 0.6.2 training/losses.py (masked_next_token_loss: a micro batch's loss sum and token "
    "count); Megatron-Core pipeline_parallel/schedules.py (forward_step_calc_loss: / clamp(num_tokens, 1) "
    "/ num_microbatches without calculate_per_token_loss), distributed/finalize_model_grads.py "
    "(finalize_model_grads: / N with it), distributed/distributed_data_parallel.py "
    "(gradient_scaling_factor)"
)


def rule_loss_settings(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    """Per-token loss with average_in_collective: Megatron-Core's DistributedDataParallel refuses the pair."""
    if not (plan.per_token_loss and plan.average_in_collective):
        return []
    return [
        Finding(
            id="loss.average_in_collective",
            severity="error",
            message="calculate_per_token_loss with average_in_collective: Megatron-Core refuses to start",
            reason=(
                "DistributedDataParallel asserts 'Cannot average in collective "
                "when calculating per-token loss!': the "
                "gradient is summed over DP x CP and divided by the global batch's loss tokens N instead. "
                "average_in_collective changes no weight anyway (1 / DP before a sum, or an average)."
            ),
            source="Megatron-Core distributed/distributed_data_parallel.py (DistributedDataParallel.__init__)",
            fix={"training": {"average_in_collective": False}},
        )
    ]


def rule_loss(plan: Plan, packing: PackingResult | None, loss: LossWeighting | None) -> list[Finding]:
    """Offline packing without per-token loss: the objective depends on how samples were packed
    (advisor/model/loss_expectation.py ``depends_on_packing``)."""
    if loss is None or not loss.depends_on_packing:
        return []
    p, u = loss.packed, loss.unpacked
    if p is None:  # (depends_on_packing: weight moved in a packed run)
        return []
    fix = {"training": {"calculate_per_token_loss": True}}
    if plan.training.average_in_collective:  # Megatron-Core refuses the pair (rule_loss_settings)
        fix["training"]["average_in_collective"] = False
    return [
        Finding(
            id="loss.per_token",
            severity="warning",
            message=f"the loss depends on packing: {loss.moved_vs_unpacked:.0%} of each step's gradient weight moves "
            f"between samples against the same samples unpacked ({loss.short_shift_vs_unpacked:+.0%} onto "
            f"samples under {loss.short_below:,.0f} loss tokens); calculate_per_token_loss makes it invariant",
            reason=(
                "Without calculate_per_token_loss each micro batch's loss is divided "
                "by its own loss tokens and by the "
                f"micro batches of the step: packed, a pack's tokens weigh 1/(K x its tokens) (token weights spread "
                f"x{p.weight_max_over_min:.2f}, CV {p.weight_cv:.2f}); unpacked at micro batch size "
                f"{plan.training.micro_batch_size}, a sample's (x{u.weight_max_over_min:.0f}, CV "
                f"{u.weight_cv:.2f}), so turning packing on changes what is optimised, not only how fast. With "
                "calculate_per_token_loss every supervised token of the global batch weighs 1/N, packed or not. The "
                "weights still sum to 1, so no learning-rate rescale is implied (Adam is about scale-invariant; "
                "clipping sees the normalised gradient); what changes is the relative weight: a sample counts in "
                "proportion to its loss tokens, so long-answer samples weigh more than under per-sample means. "
                "Megatron-Bridge's logged lm loss is token-weighted either way, so its curve does not show this "
                f"(step-0 objective packed/unpacked {loss.objective_same.mean:.3f} with the assumed per-token loss). "
                f"Threshold: {MOVED_THRESHOLD:.0%} of the weight moved."
            ),
            source=LOSS_SOURCE,
            fix=fix,
        )
    ]


MEMORY_SOURCE = (
    "the advisor's memory model (advisor/model/memory.py: weights, gradients, optimizer, activations "
    "of the micro batch the plan really holds, logits, overhead); beside it Megatron-Bridge 0.6.2 "
    "training/utils/theoretical_memory_utils.py"
)


def _unless_it_overflows(finding: Finding, plan: Plan, memory: MemoryEstimate) -> Finding:
    """A fix that would make a fitting plan overflow is withdrawn (full recompute back to selective at a layout
    that needs it), so the memory error's fix and this one do not undo each other."""
    if finding.id != "long_context.recompute" or not finding.fix:
        return finding
    changed = plan.changed(finding.fix)
    if estimate_memory(
        changed,
        memory.tokens_per_micro_batch,
        changed.parallel.pp,
        overhead_bytes=memory.overhead,
        capacity_bytes=memory.capacity,
    ).fits:
        return finding
    return replace(
        finding,
        fix={},
        reason=finding.reason + " At this layout selective recompute does not fit the GPU: add CP first.",
    )


def rule_memory(plan: Plan, packing: PackingResult | None, memory: MemoryEstimate | None) -> list[Finding]:
    """A plan that does not fit its GPU is an error; its fixes are the first changes that make it fit
    (advisor/advice/memory_fixes.py), the first on the error and the others as alternatives."""
    if memory is None or memory.fits:
        return []

    def errors_of(changed: Plan) -> set[str]:
        return {f.id for rule in RULES for f in rule(changed, None) if f.severity == "error"}

    fixes = fitting_fixes(plan, memory, errors_of)
    need = describe(memory, plan)
    reason = (
        "Training would stop with CUDA out of memory at the first step. The estimate counts the micro batch "
        "the plan really holds (a pack with offline packing), split over TP and CP; recompute, more CP, TP or "
        "PP divide activations or weights; each change offered keeps seq_length and the samples per step and "
        "was checked to fit with the same memory model."
    )
    if not fixes:
        return [
            Finding(
                id="memory.exceeds",
                severity="error",
                message=f"{need}: no change of recompute, CP, TP, PP or pack size tried here fits (more GPUs "
                "or a GPU with more memory)",
                reason=reason,
                source=MEMORY_SOURCE,
            )
        ]
    first, *others = fixes
    out = [
        Finding(
            id="memory.exceeds",
            severity="error",
            message=f"{need}; {first.what} fits ({first.total_bytes / GIB:.1f} GiB)",
            reason=reason,
            source=MEMORY_SOURCE,
            fix=first.fix,
        )
    ]
    out += [
        Finding(
            id="memory.alternative",
            severity="info",
            message=f"also fits the GPU: {f.what} ({f.total_bytes / GIB:.1f} GiB per GPU)",
            reason=reason,
            source=MEMORY_SOURCE,
            fix=f.fix,
        )
        for f in others
    ]
    return out


def rule_traps(plan: Plan, packing: PackingResult | None) -> list[Finding]:
    """The known traps (advisor/advice/traps.py) that bite this plan at its versions; the data set's samples and
    tokens as the dataset stores them (each sample's runtime length + 1, the overlong ones whole)."""
    if packing is None:
        return trap_findings(plan)
    r = packing.runtime
    samples = int(r.counts.sum()) + r.num_skipped
    tokens = r.real_tokens + r.pad_tokens + r.tokens_skipped + samples
    return trap_findings(plan, samples, tokens)


def rule_dataloader(plan: Plan, time: TimeEstimate | None) -> list[Finding]:
    """A step the data loader bounds (``training.dataloader_seconds_per_sample``): the GPUs wait for samples
    tokenized on the fly, and how many workers would keep up."""
    t = plan.training
    wait = 0.0 if time is None else time.breakdown.get("dataloader", 0.0)
    if not t.dataloader_seconds_per_sample or wait <= 0 or time is None:
        return []
    compute = time.step_seconds - wait
    needed = math.ceil(t.dataloader_workers * time.step_seconds / compute) if compute > 0 else None
    keeps_up = needed is not None and needed <= 1024
    more = f" ({needed} a DP rank would keep up, CPU cores and host memory allowing)" if keeps_up else ""
    return [
        Finding(
            id="data.loader_bound",
            severity="warning",
            message=f"loader-bound: the GPUs wait {wait:.2f} s a step for the data loader ({time.step_seconds:.2f} s "
            f"a step against {compute:.2f} s of compute)",
            reason=f"Samples are tokenized on the fly at {t.dataloader_seconds_per_sample:g} s a sample per worker "
            f"with {t.dataloader_workers} worker(s) per DP rank; the loader prefetches the next step while the GPUs "
            f"run this one, so the step takes the longer of the two. More workers{more} or data tokenized ahead of "
            "time (offline packing's prepare step, or a pre-tokenized data set) lift the bound.",
            source="advisor/model/throughput.py (loader_bound); Megatron-Bridge DataloaderConfig.num_workers "
            "(megatron/bridge/data/base.py, default 2 in 0.6.2)",
            fix={"training": {"dataloader_workers": needed}} if keeps_up else {},
        )
    ]


def rule_epoch(plan: Plan, packing: PackingResult | None, time: TimeEstimate | None) -> list[Finding]:
    """Data that does not fill one step: the plan's global batch asks for more packs or samples than the data set
    holds, so every step repeats samples (Megatron-Bridge's SFT data set wraps around to the samples train_iters
    asks for) and the epoch's figures describe a fraction of a step."""
    if time is None or not 0 < time.steps_per_epoch < 1:
        return []
    batch = plan.batch_text(packing.packing_factor if packing is not None else None)
    x = time.steps_per_epoch
    share = f"{x:.2g}" if x < 0.9 else f"{math.floor(x * 1000) / 1000:.3f}"  # never rounded up to "1"
    return [
        Finding(
            id="data.under_one_batch",
            severity="warning",
            message=f"one epoch of the data fills {share} of a step: the global batch "
            f"({batch}) asks for more than the data set holds",
            reason="Each step then trains on repeated samples: Megatron-Bridge's SFT data sets wrap around to the "
            "samples train_iters x global_batch_size asks for, so an epoch is not one pass. A smaller global batch "
            "(or more data) gives whole steps of distinct samples.",
            source="Megatron-Bridge 0.6.2 data/datasets/gpt_sft.py and data/packing/parquet.py "
            "(_build_samples_mapping: the indices repeated over ceil(max_num_samples / len) epochs)",
        )
    ]


def rule_no_estimate(error: str | None) -> list[Finding]:
    """A plan the estimate cannot run (too little data for one step of a scheduler, every sample skipped): said as an
    error with the estimate's own reason, not left as a missing row (a search read it as "does not fit")."""
    if not error:
        return []
    return [
        Finding(
            id="estimate.none",
            severity="error",
            message=f"no estimate for this plan: {error}",
            reason="The memory, FLOPs and step time are computed on the plan's packs or schedule of the data; with "
            "none formed there is nothing to measure. More data, or a smaller global batch, gives one.",
            source="advisor/model/estimate.py",
        )
    ]


RULES = (
    rule_traps,
    rule_packing_mode,
    rule_context_parallel,
    rule_cuda_graphs,
    rule_long_context,
    rule_data,
    rule_compatibility,
    rule_performance,
    rule_precision,
    rule_fsdp,
    rule_online,
    rule_global_batch,
    rule_loss_settings,
)


def check(
    plan: Plan,
    packing: PackingResult | None = None,
    memory: MemoryEstimate | None = None,
    loss: LossWeighting | None = None,
    straggler: float | None = None,
    time: TimeEstimate | None = None,
    estimate_error: str | None = None,
) -> list[Finding]:
    """Every finding for the plan, errors first (``memory``: the plan's memory estimate; ``loss``: its loss weighting;
    ``straggler``: its step's modelled straggler factor; without one, its rule is not checked; ``time``: its step
    time, for the data loader's rule)."""
    found = (
        [f for rule in RULES for f in rule(plan, packing)]
        + rule_memory(plan, packing, memory)
        + rule_loss(plan, packing, loss)
        + rule_stragglers(plan, packing, straggler)
        + rule_dataloader(plan, time)
        + rule_epoch(plan, packing, time)
        + rule_no_estimate(estimate_error)
    )
    if memory is not None:
        found = [_unless_it_overflows(f, plan, memory) for f in found]
    return ordered([_keeping_the_buffer(f, plan) for f in found])


def _keeping_the_buffer(finding: Finding, plan: Plan) -> Finding:
    """A fix that lengthens seq_length of a scheduled plan whose per-rank buffer is given also raises the buffer
    where it would no longer hold a sequence (the plan refuses that), so every fix gives a valid plan."""
    k, seq = plan.packing, finding.fix.get("training", {}).get("seq_length")
    if seq is None or not plan.scheduled or k.max_seqlen_per_dp_cp_rank is None:
        return finding
    ranks = plan.parallel.cp * (1 if k.scheduler == "dp_balanced" else plan.dp)
    if k.max_seqlen_per_dp_cp_rank * ranks >= seq:
        return finding
    packing = {**finding.fix.get("packing", {}), "max_seqlen_per_dp_cp_rank": -(-seq // ranks)}
    return replace(finding, fix={**finding.fix, "packing": packing})
