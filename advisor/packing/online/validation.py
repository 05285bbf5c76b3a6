"""The defaults and checks Megatron-LM applies to the scheduler's options, as plain problems and notes.

Followed: megatron/training/arguments.py ``validate_args``, megatron/core/model_parallel_config.py and
megatron/core/transformer/transformer_config.py at dev d48bd6be (main d98e8a64 has none of them: the scheduler is
not wired). The alternative, raising at the first problem as Megatron-LM does, would hide the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from advisor.findings import Finding
from advisor.packing.online.config import COMMITS, OnlineConfig

ARGS = "megatron/training/arguments.py validate_args"
TCONF = "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__"
MPCONF = "megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__"
SCHED = "megatron/core/datasets/data_schedule.py"
TE_MIN = (2, 9, 0)
TE_ALLOWED_DEV = "2.9.0.dev0+5b3092a"  # transformer_config.py accepts this one pre-release by name
MOE_DISPATCHERS = ("alltoall", "flex")


@dataclass(frozen=True, kw_only=True)
class Checked:
    """``max_seqlen_per_dp_cp_rank`` as the run will use it, and what the checks found."""

    max_seqlen_per_dp_cp_rank: int
    findings: tuple[Finding, ...]


def _at(source: str, commit: str) -> str:
    return f"{source} ({commit} {COMMITS[commit]})"


def default_max_seqlen(*, seq_length: int, dp: int, cp: int, scheduler: str) -> int:
    """``--max-seqlen-per-dp-cp-rank`` when not given: ceil(seq_length / CP) for dp_balanced, / (DP·CP) for
    dynamic CP (dev arguments.py, "Packed-sequence buffer-size check").

    >>> default_max_seqlen(seq_length=4097, dp=2, cp=4, scheduler="dp_balanced")
    1025
    >>> default_max_seqlen(seq_length=4096, dp=2, cp=4, scheduler="default_dynamic_cp")
    512
    """
    ranks = cp if scheduler == "dp_balanced" else dp * cp
    return -(-seq_length // ranks)


def scheduler_max_num_seqs(
    thd_max_packed_sequences: int | None, *, pad_packed_seq_alignment: bool, tail_padding_policy: str | None = None
) -> int | None:
    """dev's cap on real sequences a pack from ``--thd-max-packed-sequences``: one slot is kept for the dummy
    sequence when padding is on with the default tail policy (``_get_scheduler_max_real_num_seqs``).

    >>> [scheduler_max_num_seqs(32, pad_packed_seq_alignment=pad) for pad in (True, False)]
    [31, 32]
    """
    if thd_max_packed_sequences is None:
        return None
    dummy = pad_packed_seq_alignment and (tail_padding_policy or "append_dummy_seq") == "append_dummy_seq"
    return thd_max_packed_sequences - 1 if dummy else thd_max_packed_sequences


def te_at_least(version: str, minimum: tuple[int, ...] = TE_MIN) -> bool:
    """Release ``version`` >= ``minimum``; a pre-release, dev or rc build sorts below its release, as
    packaging's Version does.

    >>> te_at_least("2.9.0"), te_at_least("2.10.1+cu12"), te_at_least("2.9.0rc1"), te_at_least("2.8")
    (True, True, False, False)
    """
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)(.*)", version)
    if not m:
        return False
    nums = tuple(int(x) for x in m.group(1).split("."))
    nums += (0,) * (len(minimum) - len(nums))
    rest = m.group(2).lstrip(".").lower()
    pre = bool(rest) and not rest.startswith("+") and not rest.startswith("post")
    return nums > minimum if pre else nums >= minimum


def check(cfg: OnlineConfig) -> Checked:
    """What Megatron-LM would default and refuse for this config (data-independent checks only).

    >>> c = check(OnlineConfig(commit="dev", dataset="mock_sft", seq_length=8192, global_batch_size=8, cp=2,
    ...                        max_seqlen_per_dp_cp_rank=2048, te_version="2.9.0"))
    >>> c.max_seqlen_per_dp_cp_rank, [i.id for i in c.findings if i.severity == "error"]
    (2048, ['packing.buffer_too_small'])
    """
    findings: list[Finding] = []
    commit = cfg.commit
    ranks = cfg.cp if cfg.scheduler == "dp_balanced" else cfg.ranks
    max_seqlen = cfg.max_seqlen_per_dp_cp_rank
    if max_seqlen is None:
        max_seqlen = default_max_seqlen(seq_length=cfg.seq_length, dp=cfg.dp, cp=cfg.cp, scheduler=cfg.scheduler)
        findings.append(
            Finding(
                severity="info",
                id="packing.max_seqlen_default",
                message=f"max_seqlen_per_dp_cp_rank defaults to ceil({cfg.seq_length} / {ranks}) = {max_seqlen}",
                reason="dev's validate_args sets it so that one sequence of seq_length fits the packing buffer"
                + (
                    " (main has no default: its config field stays None and the scheduler would fail)"
                    if commit == "main"
                    else ""
                ),
                source=_at(ARGS, "dev"),
            )
        )
    if commit == "main":
        findings.append(
            Finding(
                severity="info",
                id="packing.main_not_wired",
                message="main d98e8a64 has no --sequence-packing-scheduler: training.py never calls wrap_data_iterator",
                reason="DpBalancedScheduler exists in data_schedule.py on main but only dev's training loop wraps the "
                "data iterator with it; this simulates what the class would do",
                source=_at("megatron/training/training.py", "main"),
            )
        )
    if ranks * max_seqlen < cfg.seq_length:
        findings.append(
            Finding(
                severity="error" if commit == "dev" else "warning",
                id="packing.buffer_too_small",
                message=f"packing buffer {ranks} x {max_seqlen} = {ranks * max_seqlen:,} tokens is below seq_length "
                f"{cfg.seq_length:,}",
                reason="validate_args asserts (CP or DP·CP) x max_seqlen_per_dp_cp_rank >= seq_length; a longer "
                "sequence gets a pack of its own past the buffer (after an empty pack if it opens the batch)",
                source=_at(ARGS, "dev"),
            )
        )
    if cfg.micro_batch_size > 1:
        if commit == "main":
            findings.append(
                Finding(
                    severity="error",
                    id="packing.mbs_main",
                    message=f"micro_batch_size {cfg.micro_batch_size} with main's packing path",
                    reason="main's _unpack_batch asserts a leading dimension of 1 under the default collate; the "
                    "identity collate is installed only with --hybrid-context-parallel (data_samplers.py)",
                    source=_at("megatron/core/datasets/data_schedule_utils.py _unpack_batch", "main"),
                )
            )
        else:
            findings.append(
                Finding(
                    severity="info",
                    id="packing.mbs",
                    message=f"micro_batch_size {cfg.micro_batch_size} sets only how many samples each DP rank loads "
                    "per micro step; the scheduler decides the micro batches",
                    reason="with a scheduler the data loader's collate is the identity, so the MBS samples are "
                    "unpacked and rescheduled with the rest of the global batch",
                    source=_at("megatron/training/datasets/data_samplers.py build_pretraining_data_loader", "dev"),
                )
            )
    if cfg.sequence_parallel and cfg.tp == 1:
        findings.append(
            Finding(
                severity="info",
                id="packing.sp_without_tp",
                message="sequence parallelism is switched off at TP 1",
                reason="validate_args disables it when tensor parallelism is off, so it adds no padding",
                source=_at(ARGS, "dev"),
            )
        )
    if cfg.vpp is not None:
        findings.append(
            Finding(
                severity="info",
                id="packing.vpp_multiple",
                message=f"with VPP the micro-batch count is made a multiple of {cfg.vpp_multiple} by splitting "
                + ("micro batches" if cfg.dynamic_cp else "trailing packs"),
                reason="wrap_data_iterator passes microbatch_group_size_per_vp_stage (default: PP) to the scheduler",
                source=_at(SCHED + " wrap_data_iterator", commit),
            )
        )
    if commit == "dev":
        findings.extend(_dev_only(cfg))
    if cfg.dataset == "sft":
        findings.append(
            Finding(
                severity="warning",
                id="packing.sft_full_length",
                message=f"SFTDataset pads each line's last sequence to seq_length ({cfg.seq_length}): with one "
                "conversation a line every sequence the scheduler sees is full length",
                reason="SFTDataset.__getitem__ sets cu_seqlens[-1] = pack_length after padding the line, and "
                "_unpack_batch takes the lengths from cu_seqlens; packing only helps lines of several "
                "conversations or the mock data set",
                source=_at("megatron/training/datasets/sft_dataset.py SFTDataset.__getitem__", commit),
            )
        )
    return Checked(max_seqlen_per_dp_cp_rank=max_seqlen, findings=tuple(findings))


def _dev_only(cfg: OnlineConfig) -> list[Finding]:
    out: list[Finding] = []
    if cfg.te_version is None:
        out.append(
            Finding(
                severity="info",
                id="packing.te_version",
                message="sequence packing needs Transformer Engine >= 2.9.0",
                reason="TransformerConfig raises for older TE (convergence findings below 2.9)",
                source=_at(TCONF, "dev"),
            )
        )
    elif not (te_at_least(cfg.te_version) or cfg.te_version.strip() == TE_ALLOWED_DEV):
        out.append(
            Finding(
                severity="error",
                id="packing.te_version",
                message=f"Transformer Engine {cfg.te_version} is below 2.9.0",
                reason="TransformerConfig raises: SFT sequence packing requires TE >= 2.9.0",
                source=_at(TCONF, "dev"),
            )
        )
    if cfg.num_moe_experts and cfg.moe_token_dispatcher_type not in MOE_DISPATCHERS:
        out.append(
            Finding(
                severity="error",
                id="packing.moe_dispatcher",
                message=f"MoE token dispatcher {cfg.moe_token_dispatcher_type!r} with sequence packing",
                reason="TransformerConfig asserts moe_token_dispatcher_type in ('alltoall', 'flex') when a scheduler "
                "is set",
                source=_at(TCONF, "dev"),
            )
        )
    if cfg.dynamic_cp:
        if cfg.min_dynamic_cp > cfg.ranks:
            out.append(
                Finding(
                    severity="error",
                    id="packing.min_dynamic_cp",
                    message=f"min_dynamic_context_parallel_size {cfg.min_dynamic_cp} exceeds DP x CP = {cfg.ranks}",
                    reason="validate_args asserts min_dynamic_context_parallel_size <= dp_size * cp_size",
                    source=_at(ARGS, "dev"),
                )
            )
        if cfg.calculate_per_token_loss is False:
            out.append(
                Finding(
                    severity="error",
                    id="packing.dynamic_cp_loss",
                    message="dynamic CP without --calculate-per-token-loss",
                    reason="validate_args asserts it: ranks hold different token counts",
                    source=_at(ARGS, "dev"),
                )
            )
        out.append(
            Finding(
                severity="info",
                id="packing.dynamic_cp_limits",
                message="dynamic CP runs without CUDA graphs and Megatron FSDP, with the 'single' data loader and "
                "--calculate-per-token-loss",
                reason="validate_args asserts each of these under --dynamic-context-parallel",
                source=_at(ARGS, "dev"),
            )
        )
        if cfg.max_num_seqs is not None:
            out.append(
                Finding(
                    severity="info",
                    id="packing.max_num_seqs_ignored",
                    message="DefaultDynamicCPScheduler ignores the cap on sequences a pack",
                    reason="wrap_data_iterator passes max_num_seqs but its get_groups_and_subsamples never reads it",
                    source=_at(SCHED, "dev"),
                )
            )
    return out
