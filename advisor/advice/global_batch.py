"""Megatron-Bridge's global-batch online packing (``dataset.enable_global_batch_packing``): the rules its
``ConfigContainer.validate`` enforces, as findings, and the per-sequence alignment multiple it pushes to the dataset.

Alternatives: the docs' wording (no line to check, and a product where the code takes an lcm) or running Megatron-
Bridge's own validation (exact, but it needs torch and a Megatron-Core dev pin, and stops at the first problem).
Here every rule is checked at once, reported in the code's order, each citing its line; tests/oracle/
test_global_batch_rules.py runs the real methods on the same settings (tests/support/mb07.py) and compares.

Followed: Megatron-Bridge 7bdc5ef4 (the PR #6127 branch, with dynamic CP; not the v0.7.0 tag, which no snapshot here
carries) ``training/config.py``: ``validate`` l.1445 (mutual exclusion) and l.1527-1539 (alignment),
``_validate_thd_per_token_loss_mode`` l.1257-1267, ``_validate_global_batch_packing`` l.1311-1351 and
``_apply_global_batch_packing_padding`` l.1375 (seq_length a multiple of the alignment). Not
reproduced, as the settings cannot express them: what the pinned Megatron-Core provides (l.1284 and the probe at
l.1306 need the dev scheduler API: these rules assume it), a scheduler chosen by hand against dynamic CP (l.1301), a
dataset that does not yield unpacked samples (l.1289), ``dataset.seq_length`` above ``model.seq_length`` (l.1356:
one ``seq_length`` here, as ``validate`` requires them equal), and dynamic CP set without global-batch packing
(l.1452: global-batch packing is on here).

>>> s = GlobalBatchSettings(seq_length=8192, max_seqlen_per_dp_cp_rank=4096, dp=4, cp=2, tp=2, sp=True)
>>> [f.id for f in global_batch_problems(s)], global_batch_padding_multiple(s)
([], 4)
>>> from dataclasses import replace
>>> [f.id for f in global_batch_problems(replace(s, micro_batch_size=2, max_seqlen_per_dp_cp_rank=1024))]
['global_batch.micro_batch_size', 'global_batch.capacity']
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.findings import Finding
from advisor.plan import Plan
from advisor.plan.schema import multiple_of_layout

SOURCE = "Megatron-Bridge 7bdc5ef4 (PR #6127) training/config.py"
FEATURE = "global-batch packing"
RUNTIME_THD = (
    "Packed micro batches hold one bin each, their token counts differ across ranks and their shapes change every "
    "step (Megatron-Bridge's _validate_thd_per_token_loss_mode)."
)


@dataclass(frozen=True, kw_only=True)
class GlobalBatchSettings:
    """What Megatron-Bridge's global-batch packing rules read, in the advisor's words. The defaults are the documented
    configuration (docs/training/packed-sequences.md), not the dataclasses' defaults (GPT-SFT's dataloader is
    "batch", per-token loss is off)."""

    seq_length: int  # dataset.seq_length = model.seq_length
    max_seqlen_per_dp_cp_rank: int | None  # model.max_seqlen_per_dp_cp_rank: a rank's tokens per micro batch
    micro_batch_size: int = 1
    calculate_per_token_loss: bool = True
    average_in_collective: bool = False  # ddp.average_in_collective
    cuda_graphs: bool = False  # model.cuda_graph_impl other than "none"
    pp: int = 1
    vpp: int | None = None
    megatron_fsdp: bool = False  # ddp.use_megatron_fsdp
    mamba_hybrid: bool = False  # model.is_hybrid_model
    dataloader_type: str | None = "single"  # dataset.dataloader_type
    dp: int = 1
    cp: int = 1
    tp: int = 1
    sp: bool = False
    dynamic_cp: bool = False  # model.dynamic_context_parallel
    min_dynamic_cp_size: int = 1  # model.min_dynamic_context_parallel_size
    use_decentralized_pg: bool = False  # dist.use_decentralized_pg
    other_packing_enabled: bool = False  # offline, in-batch or Energon packing on the same dataset


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _finding(*, id: str, method: str, line: int, message: str, reason: str, fix: dict | None = None) -> Finding:
    return Finding(
        id=id,
        severity="error",
        message=message,
        reason=reason,
        source=f"{SOURCE} {method} l.{line}",
        fix=fix or {},
    )


def global_batch_problems(s: GlobalBatchSettings) -> list[Finding]:
    """Every rule Megatron-Bridge 7bdc5ef4 refuses these settings by, in the order its code checks them (it raises at
    the first; a finding's ``fix`` is empty where the plan has no field for the change)."""
    out: list[Finding] = []
    if s.other_packing_enabled:
        out.append(
            _finding(
                id="global_batch.exclusive",
                method="validate",
                line=1445,
                message="dataset.enable_global_batch_packing cannot be combined with offline, in-batch or Energon "
                "packing: turn the other packing off (enable_offline_packing, enable_in_batch_packing, "
                "packing_buffer_size)",
                reason="The scheduler packs unpacked samples itself: the dataset must yield one sample per item.",
            )
        )
    thd = "_validate_thd_per_token_loss_mode"
    if s.micro_batch_size != 1:
        out.append(
            _finding(
                id="global_batch.micro_batch_size",
                method=thd,
                line=1257,
                message=f"{FEATURE} needs train.micro_batch_size=1 (it is {s.micro_batch_size}): set it to 1",
                reason=RUNTIME_THD + " A micro batch is one bin the scheduler filled, so there is one row.",
                fix={"training": {"micro_batch_size": 1}},
            )
        )
    if not s.calculate_per_token_loss:
        out.append(
            _finding(
                id="global_batch.per_token_loss",
                method=thd,
                line=1259,
                message=f"{FEATURE} needs model.calculate_per_token_loss=True: turn it on",
                reason=RUNTIME_THD + " A per-micro-batch mean would weigh tokens by how full their bin happened to be.",
                fix={"training": {"calculate_per_token_loss": True}},
            )
        )
    if s.average_in_collective:
        out.append(
            _finding(
                id="global_batch.average_in_collective",
                method=thd,
                line=1261,
                message=f"{FEATURE} needs ddp.average_in_collective=False: turn it off",
                reason=RUNTIME_THD + " Per-token loss divides by the global token count, not by the ranks.",
                fix={"training": {"average_in_collective": False}},
            )
        )
    if s.cuda_graphs:
        out.append(
            _finding(
                id="global_batch.cuda_graphs",
                method=thd,
                line=1263,
                message=f'{FEATURE} runs without CUDA graphs: set model.cuda_graph_impl="none" (and '
                "vision_cuda_graph_impl)",
                reason=RUNTIME_THD + " A graph replays fixed shapes.",
                fix={"training": {"cuda_graphs": False}},
            )
        )
    if s.pp > 1:
        out.append(
            _finding(
                id="global_batch.pp",
                method=thd,
                line=1267,
                message=f"{FEATURE} does not support pipeline parallelism yet: set "
                f"model.pipeline_model_parallel_size=1 (it is {s.pp})",
                reason=RUNTIME_THD + " The number of micro batches changes every step.",
                fix={"parallel": {"pp": 1, "vpp": None}},
            )
        )
    gbp = "_validate_global_batch_packing"
    if s.dataloader_type not in ("single", "cyclic"):
        out.append(
            _finding(
                id="global_batch.dataloader",
                method=gbp,
                line=1311,
                message=f'{FEATURE} needs dataset.dataloader_type "single" or "cyclic" (it is '
                f'{s.dataloader_type!r}; GPT-SFT\'s default is "batch"): set it to "single"',
                reason="The scheduler consumes per-sample micro batches: the loader yields samples, not batches.",
            )
        )
    if s.vpp not in (None, 1):
        out.append(
            _finding(
                id="global_batch.vpp",
                method=gbp,
                line=1316,
                message=f"{FEATURE} does not support virtual pipeline parallelism yet: set "
                f"model.virtual_pipeline_model_parallel_size=None (it is {s.vpp})",
                reason="Not yet supported by Megatron-Bridge's global-batch path.",
                fix={"parallel": {"vpp": None}},
            )
        )
    if s.mamba_hybrid:
        out.append(
            _finding(
                id="global_batch.mamba",
                method=gbp,
                line=1318,
                message=f"{FEATURE} does not support Mamba hybrid models (model.is_hybrid_model) yet: use another "
                "packing mode",
                reason="Packed sequence boundaries are not propagated to the SSM layers.",
            )
        )
    if s.megatron_fsdp:
        out.append(
            _finding(
                id="global_batch.fsdp",
                method=gbp,
                line=1322,
                message=f"{FEATURE} does not run with Megatron FSDP: set ddp.use_megatron_fsdp=False",
                reason="Not supported by Megatron-Bridge's global-batch path.",
                fix={"parallel": {"fsdp": False}},
            )
        )
    pool = s.dp * s.cp if s.dynamic_cp else s.cp
    if s.max_seqlen_per_dp_cp_rank is None:
        suggested = -(-s.seq_length // s.cp)
        out.append(
            _finding(
                id="global_batch.max_seqlen",
                method=gbp,
                line=1324,
                message=f"{FEATURE} needs model.max_seqlen_per_dp_cp_rank set explicitly: set it to seq_length / CP "
                f"= {suggested}",
                reason="It is a rank's token capacity per micro batch (dynamic CP: the length above which a sequence "
                "needs a larger CP group); Megatron-Bridge derives no default.",
                fix={"packing": {"max_seqlen_per_dp_cp_rank": suggested}},
            )
        )
    if s.dynamic_cp:
        if s.use_decentralized_pg:
            out.append(
                _finding(
                    id="global_batch.dcp_decentralized_pg",
                    method=gbp,
                    line=1335,
                    message="model.dynamic_context_parallel needs dist.use_decentralized_pg=False: turn it off",
                    reason="Megatron-Core resolves dynamic CP groups from its global parallel state.",
                )
            )
        if not (pool >= 2 and _power_of_two(pool)):
            out.append(
                _finding(
                    id="global_batch.dcp_pool",
                    method=gbp,
                    line=1340,
                    message=f"dynamic CP needs DP x CP to be a power of two of at least 2 (it is {s.dp} x {s.cp} = "
                    f"{pool}): change the GPUs or the layout, or turn model.dynamic_context_parallel off",
                    reason="The scheduler gives each bin a power-of-two group of the DP x CP pool.",
                )
            )
        if not (_power_of_two(s.min_dynamic_cp_size) and s.min_dynamic_cp_size <= pool):
            out.append(
                _finding(
                    id="global_batch.dcp_min_size",
                    method=gbp,
                    line=1345,
                    message=f"model.min_dynamic_context_parallel_size must be a power of two in [1, DP x CP = "
                    f"{pool}] (it is {s.min_dynamic_cp_size}): set it to 1",
                    reason="Dynamic CP groups are powers of two within the DP x CP pool.",
                )
            )
    if s.max_seqlen_per_dp_cp_rank is not None and pool * s.max_seqlen_per_dp_cp_rank < s.seq_length:
        needed = -(-s.seq_length // pool)
        ranks = "DP x CP" if s.dynamic_cp else "CP"
        out.append(
            _finding(
                id="global_batch.capacity",
                method=gbp,
                line=1351,
                message=f"a bin holds {ranks} {pool} x model.max_seqlen_per_dp_cp_rank "
                f"{s.max_seqlen_per_dp_cp_rank} = {pool * s.max_seqlen_per_dp_cp_rank} tokens, fewer than "
                f"seq_length {s.seq_length}: raise max_seqlen_per_dp_cp_rank to at least {needed}",
                reason="The longest sample could never be scheduled.",
                fix={"packing": {"max_seqlen_per_dp_cp_rank": needed}},
            )
        )
    multiple = global_batch_padding_multiple(s)
    if s.seq_length % multiple:
        rounded = -(-s.seq_length // multiple) * multiple
        out.append(
            _finding(
                id="global_batch.seq_length_multiple",
                method="_apply_global_batch_packing_padding",
                line=1375,
                message=f"dataset.seq_length {s.seq_length} is not a multiple of the alignment multiple {multiple} "
                f"({'2 x DP x CP' if s.dynamic_cp else '2 x CP'}, and CP x TP with SP): set seq_length to {rounded} "
                "(model.seq_length too)",
                reason="Every sequence is padded to the multiple, so a sample of seq_length tokens must stay "
                "seq_length long (l.1539-1541 push the multiple to the dataset, then check it).",
                fix={"training": {"seq_length": rounded}},
            )
        )
    return out


def global_batch_padding_multiple(s: GlobalBatchSettings) -> int:
    """The multiple every sequence is padded to (``global_batch_packing_pad_to_multiple_of``, validate l.1527-1539):
    lcm(2·CP (1 without CP), CP·TP with SP and TP > 1), or lcm(2·DP·CP, CP·TP) under dynamic CP. An lcm, as the
    code takes it: the docs' "times the tensor-parallel size" would be a product (CP 2, TP 2, SP: 8, not 4).

    >>> global_batch_padding_multiple(GlobalBatchSettings(seq_length=1, max_seqlen_per_dp_cp_rank=1, dp=4, cp=2,
    ...                                                   dynamic_cp=True))
    16
    """
    return multiple_of_layout(dp=s.dp, cp=s.cp, tp=s.tp, sp=s.sp, dynamic_cp=s.dynamic_cp)


def settings_of(plan: Plan) -> GlobalBatchSettings:
    """A plan as Megatron-Bridge's global-batch rules read it, as the export writes it: the data loader "single",
    per-token loss and ``average_in_collective`` as the run will have them (``Plan.per_token_loss``: the export
    sets them), the scheduler's dynamic CP, and nothing the plan cannot say (decentralized process groups off,
    the smallest dynamic CP group 1, no Mamba hybrid, no other packing on the data set).

    >>> from advisor.plan import plan_from_dict
    >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "cp": 2},
    ...                     "training": {"seq_length": 8192}, "packing": {"mode": "global-batch"}})
    >>> s = settings_of(p)
    >>> s.dp, s.cp, s.max_seqlen_per_dp_cp_rank, s.calculate_per_token_loss, [f.id for f in global_batch_problems(s)]
    (8, 2, None, True, ['global_batch.max_seqlen'])
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    return GlobalBatchSettings(
        seq_length=t.seq_length,
        max_seqlen_per_dp_cp_rank=k.max_seqlen_per_dp_cp_rank,
        micro_batch_size=t.micro_batch_size,
        calculate_per_token_loss=plan.per_token_loss,
        average_in_collective=plan.average_in_collective,
        cuda_graphs=t.cuda_graphs,
        pp=p.pp,
        vpp=p.vpp,
        megatron_fsdp=p.fsdp,
        dataloader_type="single",
        dp=p.dp,
        cp=p.cp,
        tp=p.tp,
        sp=p.sp,
        dynamic_cp=plan.dynamic_cp,
    )
