"""Pre-flight: the known traps of packed and long-context training that crash, hang, train wrong, waste memory or
print misleading logs, each a record (its upstream thread, the plans it bites, the releases that fix it) judged
against the releases the plan names (``plan.versions``). The alternative, one rule per trap written as code, hid
which versions each holds for; here a record says it, and a newcomer adds one by adding a record.

Every fact below was read from the thread, the fixing commit and ``git tag --contains`` of it (or the released
wheel), 2026-11-28; where the first release with a fix could not be checked the record says ``verified=False`` and
the finding says so.

>>> from advisor.plan import plan_from_dict
>>> old = plan_from_dict({"model": "llama3.1-70b", "parallel": {"gpus": 64, "tp": 8, "pp": 4, "cp": 2},
...                       "training": {"seq_length": 8192},
...                       "versions": {"megatron_bridge": "0.3.1", "transformer_engine": "2.16"}})
>>> [f.id for f in trap_findings(old) if f.severity == "error"]
['trap.mb-2952', 'trap.te-3331']
>>> "trap.mb-2952" in [f.id for f in trap_findings(old.changed({"versions": {"megatron_bridge": "0.6.2"}}))]
False
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

from advisor.findings import Finding, Severity
from advisor.model.parameters import moe_layer_pattern, padded_vocab_size
from advisor.model.preparation import MB_MEMORY, preparation_resources
from advisor.plan import Plan
from advisor.plan.versions import DEFAULT_VERSIONS, PACKAGE_NAMES, Package, known, older, parse

Outcome = Literal["crash", "hang", "trains wrong", "wastes memory", "misleading logs"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)  # the order the Recommendations page groups them in
SEVERITY_OF: dict[Outcome, Severity] = {
    "crash": "error",
    "hang": "error",
    "trains wrong": "error",
    "wastes memory": "warning",
    "misleading logs": "info",
}
GROUP_TITLE: dict[Outcome, str] = {
    "crash": "Would crash",
    "hang": "Would hang",
    "trains wrong": "Would train wrong",
    "wastes memory": "Would waste memory",
    "misleading logs": "Logs that mislead",
}
MB, MC, TE = (
    "https://github.com/NVIDIA-NeMo/Megatron-Bridge",
    "https://github.com/NVIDIA/Megatron-LM",
    ("https://github.com/NVIDIA/TransformerEngine"),
)


@dataclass(frozen=True, kw_only=True)
class Trap:
    id: str  # "mb-2952": the repository and the thread's number
    cites: str  # "Megatron-Bridge #2952", as the finding says it
    url: str  # the upstream thread
    outcome: Outcome
    # the releases that fix it, by package: the plan is affected while any of its versions is older (empty: no
    # release fixes it, every version is affected)
    fixed_in: dict[Package, str] = field(default_factory=dict)
    fixed_by: str  # the fixing PR and commit, or "open as of <date>"
    verified: bool = True  # False: the first release with the fix is inferred, not checked in the release
    # the plans it bites, whatever the versions: (plan, samples in the data set or None when not known)
    applies: Callable[[Plan, int | None], bool]
    what: str  # what happens, in one sentence
    fix: str  # what to do: an upgrade, a flag, a layout change
    plan_fix: Callable[[Plan], dict] | None = None  # a plan change that removes it (the dashboard's "Apply fix")
    # where the data set's size decides (plan, samples, tokens): what the finding adds to its message, or None when
    # the data does not bite; such a trap is cited only where both counts are known
    sized: Callable[[Plan, int, int], str | None] | None = None

    def affected(self, plan: Plan) -> bool:
        v = plan.versions
        return not self.fixed_in or any(older(getattr(v, pkg), ver) for pkg, ver in self.fixed_in.items())

    def fixed_text(self) -> str:
        if not self.fixed_in:
            return "no release fixes it"
        text = ", ".join(f"{PACKAGE_NAMES[p]} {v}" for p, v in self.fixed_in.items())
        return f"fixed in {text}" + ("" if self.verified else " (inferred, not checked in the release)")


# ---------------------------------------------------------------------------------------------- predicates
def _packed(plan: Plan) -> bool:
    """THD: several sequences in one row with cu_seqlens (offline, in-batch, online or global-batch packing)."""
    return plan.packing_mode in ("offline", "in-batch") or plan.scheduled


def _upgrade(pkg: Package, to: str) -> Callable[[Plan], dict]:
    return lambda plan: {"versions": {pkg: max(to, DEFAULT_VERSIONS[pkg], key=parse)}}


def _expert_tensors_per_rank(plan: Plan) -> int:
    """Expert weight tensors on one rank (fc1 and fc2 per local expert and MoE layer of its pipeline stage): each
    is five handles in FusedAdam's multi-tensor lists (parameter, gradient, master, two moments)."""
    m, p = plan.model, plan.parallel
    if not m.num_moe_experts:
        return 0
    layers = -(-sum(moe_layer_pattern(m)) // p.pp)
    return layers * -(-m.num_moe_experts // p.ep) * 2


FUSED_ADAM_HANDLES = 20_000  # TE's default 20 MiB handle pool ran out at 20,321 handles (TE PR #3418's report)


def _logits_buffer_bytes(plan: Plan) -> float:
    """The fp32 copy of the logits the vocab-parallel cross entropy keeps for backward: tokens per rank (a micro
    batch's row over CP; SP gathers it before the output layer) x vocabulary / TP x 4 bytes."""
    p, t = plan.parallel, plan.training
    row = plan.pack_size if plan.packing_mode == "offline" else t.seq_length
    tokens = row * (1 if plan.packing_mode == "offline" else t.micro_batch_size) / p.cp
    return tokens * padded_vocab_size(plan.model.vocab_size, p.tp) / p.tp * 4


def _mb_prepare_over_host(plan: Plan, samples: int, tokens: int) -> str | None:
    """Megatron-Bridge's preparation modelled (advisor/model/preparation.py, fitted by bench/bench_prepare_memory.py)
    against the host memory of the node its first rank runs on (the GPU registry's ``host_memory_gib``; a GPU not
    in it: H100's DGX, as the hardware table's other figures)."""
    need = preparation_resources(samples, tokens, plan.pack_size).mb_memory / 2**30
    host = float(plan.hardware.table["host_memory_gib"])
    if need <= host:
        return None
    return (
        f"modelled at {need:,.0f} GiB for {samples:,} samples of {tokens:,} tokens, the node has {host:,.0f} GiB "
        f"({plan.hardware.gpu})"
    )


LOGITS_SHARE = 0.10  # of GPU memory: above it the buffer, not attention, is what limits the tokens per rank

# ---------------------------------------------------------------------------------------------- the catalogue
TRAPS: tuple[Trap, ...] = (
    Trap(
        id="mb-2952",
        cites="Megatron-Bridge #2952",
        url=f"{MB}/issues/2952",
        outcome="trains wrong",
        fixed_in={"megatron_bridge": "0.5.0"},
        fixed_by="PR #3926, commit 2d58a6fe (2026-05-26); first in v0.5.0 (not in 0.4.2)",
        applies=lambda plan, samples: plan.packing_mode in ("offline", "in-batch") and plan.parallel.pp >= 3,
        what="the middle pipeline stages get no cu_seqlens, so packed documents attend to each other "
        "(10-20 points lost on benchmarks in the report)",
        fix="upgrade Megatron-Bridge to 0.5.0 or later, or use PP <= 2",
        plan_fix=_upgrade("megatron_bridge", "0.5.0"),
    ),
    Trap(
        id="te-3331",
        cites="Transformer Engine #3331",
        url=f"{TE}/issues/3331",
        outcome="trains wrong",
        fixed_in={"transformer_engine": "2.18"},
        fixed_by="TE PR #2898, commit 4cd705b7: padded and unpadded cu_seqlens passed apart take the exact path "
        "from v2.18 (the reporter's workaround: pad_between_seqs=True)",
        applies=lambda plan, samples: (
            _packed(plan) and plan.parallel.cp > 1 and plan.parallel.cp_comm_type in ("p2p", "a2a+p2p")
        ),
        what="THD with CP over p2p misses the padding after a pack's last sequence (sequences padded to 2 x CP) "
        "and takes a fast path that drops real keys and zeroes real queries, nondeterministically",
        fix="upgrade Transformer Engine to 2.18 or later, or pass pad_between_seqs=True",
        plan_fix=_upgrade("transformer_engine", "2.18"),
    ),
    Trap(
        id="mlm-7417",
        cites="Megatron-LM PR #7417",
        url=f"{MC}/pull/7417",
        outcome="crash",
        fixed_in={"transformer_engine": "2.18"},
        fixed_by="TE PR #3056 (bffde8f4): cuDNN fused attention trains head_dim 256 on Blackwell from v2.18, with "
        "cuDNN >= 9.25 for THD; Megatron-LM PR #7417 (derive pad_between_seqs) open as of 2026-09-16",
        applies=lambda plan, samples: (
            plan.model.head_dim >= 256
            and plan.hardware.table.get("compute_capability", 9.0) >= 10
            # Megatron-Core's scheduler sets pad_between_seqs=True for every bin until #7417 lands (fold or not)
            and (plan.scheduled or plan.pads_between_sequences)
        ),
        what="head_dim >= 256 on padded THD bins has no attention backend on Blackwell: FlashAttention rejects "
        "padding between sequences and cuDNN's backward needs TE 2.18",
        fix="upgrade Transformer Engine to 2.18 (and cuDNN to 9.25), or pack offline with pad_seq_to_mult 1; "
        "Megatron-Bridge 0.7's fold_alignment_padding needs Megatron-LM #7417 too",
        plan_fix=_upgrade("transformer_engine", "2.18"),
    ),
    Trap(
        id="mlm-6821",
        cites="Megatron-LM PR #6821",
        url=f"{MC}/pull/6821",
        outcome="trains wrong",
        fixed_by="merged on main 2026-08-24, after Megatron-Core 0.19.2 (checked: not in its wheel); dynamic CP "
        "lives on the dev branch, whose commit the advisor reproduces (d48bd6be, 2026-08-21) predates it: "
        "carry the patch",
        applies=lambda plan, samples: (
            plan.dynamic_cp  # Megatron-LM's online scheduler or Megatron-Bridge 0.7's global-batch packing
            and plan.model.position_embedding_type in ("rope", "mrope", "yarn")
        ),
        what="under dynamic CP the runtime CP group is not passed to RoPE: illegal memory access on short "
        "sub-samples, wrong positions and NaN gradients on long ones",
        fix="carry Megatron-LM PR #6821 on the dev pin, or use static CP (the dp_balanced scheduler)",
        plan_fix=lambda plan: {"packing": {"scheduler": "dp_balanced"}},
    ),
    Trap(
        id="mlm-5619",
        cites="Megatron-LM #5619",
        url=f"{MC}/issues/5619",
        outcome="crash",
        fixed_by="fixed on the dev branch only (#4359, 7f917520, needs TE 2.18); open on main as of 2026-08-22",
        applies=lambda plan, samples: (
            plan.training.cuda_graphs and _packed(plan) and plan.packing.megatron_lm == "main"
        ),
        what="Transformer Engine's CUDA graphs with attention in the captured scope assert on packed_seq_params",
        fix="keep attention out of the graph (cuda_graph_scope mlp or moe), or use the local full-iteration "
        "graphs with pad_cu_seqlens",
    ),
    Trap(
        id="mlm-4092",
        cites="Megatron-LM #4092",
        url=f"{MC}/issues/4092",
        outcome="crash",
        fixed_in={"megatron_core": "0.18.0"},
        fixed_by="PR #4103, commit 5e4fc931 (2026-05-21); first in core_v0.18.0",
        applies=lambda plan, samples: (
            plan.packing_mode == "online"
            and plan.training.task != "pretrain"
            and plan.parallel.pp >= 3
            and plan.parallel.tp >= 2
        ),
        what="in Megatron-LM's SFT packing the middle pipeline stages broadcast no cu_seqlens to TP ranks > 0 "
        "(a 4-D against 3-D tensor error in the 2nd or 3rd stage)",
        fix="upgrade Megatron-Core to 0.18.0 or later, or use PP <= 2 or TP 1",
        plan_fix=_upgrade("megatron_core", "0.18.0"),
    ),
    Trap(
        id="mb-4538",
        cites="Megatron-Bridge #4538",
        url=f"{MB}/issues/4538",
        outcome="hang",
        fixed_in={"megatron_core": "0.19.0", "megatron_bridge": "0.6.0"},
        fixed_by="Megatron-Core PR #5008 (81770cb0, moe_hybridep_pad_uneven_dispatch_inputs, first in 0.19.0), "
        "turned on for eager THD by Megatron-Bridge PR #5270/#5288 (first in 0.6.0)",
        applies=lambda plan, samples: (
            plan.parallel.moe_dispatcher == "flex_hybridep" and _packed(plan) and not plan.training.cuda_graphs
        ),
        what="HybridEP needs equal dispatch shapes; packed rows give EP ranks different token counts and the "
        "run hangs or stops making progress",
        fix="Megatron-Core 0.19.0 and Megatron-Bridge 0.6.0 or later (the padding is automatic for eager THD), "
        "moe_hybridep_pad_uneven_dispatch_inputs=True, or the alltoall dispatcher",
        plan_fix=lambda plan: {"parallel": {"moe_dispatcher": "alltoall"}},
    ),
    Trap(
        id="ce-logits",
        cites="Megatron-Core cross_entropy.py (the fp32 logits)",
        url="https://docs.nvidia.com/nemo/megatron-bridge/nightly/training/dynamic-context-parallel.html",
        outcome="wastes memory",
        fixed_by="by design (Megatron-Core tensor_parallel/cross_entropy.py l.25 casts the logits to fp32)",
        applies=lambda plan, samples: _logits_buffer_bytes(plan) > LOGITS_SHARE * plan.hardware.capacity_gib * 2**30,
        what="the cross entropy keeps an fp32 copy of the logits (tokens per rank x vocabulary / TP x 4 bytes): "
        "at a large vocabulary it, not attention, caps the tokens per rank",
        fix="raise CP or TP (each divides the buffer), or shorter packs per rank",
    ),
    Trap(
        id="te-2189",
        cites="Transformer Engine #2189",
        url=f"{TE}/issues/2189",
        outcome="crash",
        fixed_in={"transformer_engine": "2.20.2"},
        fixed_by="TE PR #3418 (FusedAdam calls bounded to 1,024 tensors), merged after 2026-08-23; "
        "NVTE_TENSOR_HANDLE_POOL_SIZE_MB from 2.19 (#3090)",
        verified=False,
        applies=lambda plan, samples: _expert_tensors_per_rank(plan) * 5 > FUSED_ADAM_HANDLES,
        what="with many experts per rank Transformer Engine's FusedAdam (precision-aware optimizer) runs out of "
        "tensor handles at the first optimizer step",
        fix="NVTE_TENSOR_HANDLE_POOL_SIZE_MB=128 (TE 2.19+), more EP ranks, or a newer Transformer Engine",
        plan_fix=_upgrade("transformer_engine", "2.20.2"),
    ),
    Trap(
        id="mb-6125",
        cites="Megatron-Bridge PR #6125",
        url=f"{MB}/pull/6125",
        outcome="crash",
        fixed_by="open as of 2026-09-16 (a ragged on-disk store); offline.py keeps every tokenized sample in memory",
        applies=lambda plan, samples: plan.packing_mode == "offline" and samples is not None,
        sized=_mb_prepare_over_host,
        what="Megatron-Bridge's own preparation holds every tokenized sample in host memory (offline.py l.50, "
        f"Python lists: ~{MB_MEMORY.per_token:.0f} bytes a token) and would not fit the node",
        fix="prepare with `python -m advisor prepare` (streamed, bounded memory), or on a larger-memory host",
    ),
)


def _check_catalogue() -> None:
    """Refuse to import a catalogue with a duplicate id or a fix in a package or outcome nobody knows."""
    ids = [t.id for t in TRAPS]
    problems = [f"duplicate id {i}" for i in ids if ids.count(i) > 1]
    problems += [f"{t.id}: unknown outcome {t.outcome!r}" for t in TRAPS if t.outcome not in OUTCOMES]
    problems += [f"{t.id}: unknown package {p!r}" for t in TRAPS for p in t.fixed_in if p not in PACKAGE_NAMES]
    if problems:
        raise RuntimeError("advisor/advice/traps.py: " + "; ".join(sorted(set(problems))))


_check_catalogue()


def trap_finding(trap: Trap, plan: Plan, measure: str | None = None) -> Finding:
    """The finding of one trap that bites this plan at its versions (``measure``: what its data check found)."""
    versions = ", ".join(f"{PACKAGE_NAMES[p]} {getattr(plan.versions, p)}" for p in trap.fixed_in)
    return Finding(
        id=f"trap.{trap.id}",
        severity=SEVERITY_OF[trap.outcome],
        message=f"{trap.cites}: {trap.what}" + (f": {measure}" if measure else ""),
        reason=f"{GROUP_TITLE[trap.outcome]} on "
        f"{versions or 'every release'} ({trap.fixed_text()}; {trap.fixed_by}). Fix: {trap.fix}.",
        source=trap.url,
        fix=trap.plan_fix(plan) if trap.plan_fix else {},
        outcome=trap.outcome,
        link=trap.url,
    )


def trap_findings(plan: Plan, samples: int | None = None, tokens: int | None = None) -> list[Finding]:
    """Every known trap that bites this plan at the versions it names (``samples``, ``tokens``: the data set's, where
    known; tokens as the dataset stores them), and a note for a version the advisor does not know (judged by its
    number)."""
    out = []
    for t in TRAPS:
        if not (t.applies(plan, samples) and t.affected(plan)):
            continue
        measure = None
        if t.sized is not None:
            measure = t.sized(plan, samples, tokens) if samples is not None and tokens is not None else None
            if measure is None:
                continue
        out.append(trap_finding(t, plan, measure))
    unknown = [
        f"{PACKAGE_NAMES[p]} {getattr(plan.versions, p)}"
        for p in PACKAGE_NAMES
        if not known(p, getattr(plan.versions, p))
    ]
    if unknown:
        out.append(
            Finding(
                id="trap.unknown_version",
                severity="info",
                message=f"{', '.join(unknown)}: not a release the advisor knows; traps are judged by the number",
                reason="The catalogue of known traps (advisor/advice/traps.py) names the release that fixes each; a "
                "version between known ones is judged by comparing numbers, a development build may differ.",
                source="advisor/plan/versions.py RELEASES",
            )
        )
    return out
