"""Changes that make a plan fit its GPU, each checked with the memory model: recompute, then CPU offloading of the
fewest layers that fit (PP 1), then more CP, TP or PP, then both, then the largest smaller pack that fits. The
samples per step and the sequence length are never changed.

A change is offered only when the changed plan's memory, computed with an upper bound on its micro batch (a whole
pack, or micro batch x seq_length rows), fits; so once applied the plan fits and the memory finding is gone: every
fix is a fixed point (tests/test_plan_properties.py). The bound is the plan's own peak when the change cannot move
it (same pack size, padding multiple, CP and fixed-length padding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from advisor.model.memory import GIB, MemoryEstimate, estimate_memory
from advisor.model.perf.calibration import EFFICIENCY
from advisor.model.perf.step import StepWork, step_time
from advisor.plan import Plan, PlanError

MAX_FIXES = 3  # offered: the first that fit, in the order tried
MIN_PACK = 256  # a smaller pack is tried down to this


@dataclass(frozen=True, kw_only=True)
class MemoryFix:
    fix: dict  # plan changes, {section: {field: value}}
    what: str  # "CP 8->16"
    total_bytes: float  # the changed plan's memory per GPU (an upper bound)


def _fixed_length(plan: Plan) -> bool:
    """Megatron-Bridge pads every micro batch to the full length with PP, EP or CUDA graphs."""
    return plan.parallel.pp > 1 or plan.parallel.ep > 1 or plan.training.cuda_graphs


def tokens_bound(plan: Plan, changed: Plan, memory: MemoryEstimate) -> int | None:
    """The most tokens a micro batch of ``changed`` can hold on a DP rank (None: not bounded here)."""
    same = (
        changed.pack_size == plan.pack_size
        and changed.pad_seq_to_mult == plan.pad_seq_to_mult
        and changed.parallel.cp == plan.parallel.cp
        and _fixed_length(changed) == _fixed_length(plan)
    )
    if same:
        return memory.tokens_per_micro_batch
    mode = changed.packing_mode
    if mode == "offline":
        return changed.pack_size  # a pack's fill is at most its size (exactly it with fixed-length padding)
    if changed.scheduled:  # the scheduler's buffer moves with CP and TP: only changes that keep it are offered
        return None
    t, m = changed.training, changed.pad_seq_to_mult
    return t.micro_batch_size * -(-t.seq_length // m) * m


def _parallel_change(plan: Plan, **sizes: int) -> dict:
    """A change of TP, CP or PP, with what must move along: SP with TP, hierarchical CP sizes, an explicit
    padding multiple that the new CP/TP no longer divides."""
    p = plan.parallel
    change: dict = {"parallel": dict(sizes)}
    if "tp" in sizes and sizes["tp"] > 1:
        change["parallel"]["sp"] = True
    if "cp" in sizes and p.cp_comm_type == "a2a+p2p" and p.hierarchical_cp_sizes:
        a2a = p.hierarchical_cp_sizes[0]
        change["parallel"]["hierarchical_cp_sizes"] = [a2a, sizes["cp"] // a2a] if sizes["cp"] % a2a == 0 else None
    mult = plan.packing.pad_seq_to_mult
    if mult is not None:
        tp, cp = sizes.get("tp", p.tp), sizes.get("cp", p.cp)
        sp = change["parallel"].get("sp", p.sp)
        need = math.lcm(2 * cp if cp > 1 else 1, cp * tp if sp and tp > 1 else 1)
        if mult % need:
            change["packing"] = {"pad_seq_to_mult": math.lcm(mult, need)}
    return change


def _merge(a: dict, b: dict) -> dict:
    out = {k: dict(v) for k, v in a.items()}
    for k, v in b.items():
        out.setdefault(k, {}).update(v)
    return out


def _no_block(plan: Plan, change: dict) -> dict:
    """``change`` with the plan's block recompute size dropped, where it has one (it belongs to the block method)."""
    return (
        _merge(change, {"training": {"recompute_num_layers": None}}) if plan.training.recompute_num_layers else change
    )


def _offload(plan: Plan, memory: MemoryEstimate) -> tuple[dict, str] | None:
    """The fewest layers (more than the plan offloads already) whose activations CPU offloading must take to host
    memory for the plan to fit (pp 1; without recompute, as Megatron-Core requires), with what the copies cost a
    micro batch; None where no count fits or the plan has PP."""
    layers, now = plan.model.num_layers, plan.training.cpu_offloading_num_layers
    if plan.parallel.pp != 1 or now >= layers - 1:
        return None

    def change(n: int) -> dict:
        return _no_block(plan, {"training": {"recompute": "none", "cpu_offloading_num_layers": n}})

    def changed(n: int) -> Plan | None:
        try:
            return plan.changed(change(n))
        except PlanError:
            return None

    def fits(n: int) -> bool:
        p = changed(n)
        return (
            p is not None
            and estimate_memory(
                p, memory.tokens_per_micro_batch, 1, overhead_bytes=memory.overhead, capacity_bytes=memory.capacity
            ).fits
        )

    if not fits(layers - 1):
        return None
    lo, hi = now + 1, layers - 1  # the least n that fits: memory falls as n grows
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    tokens = memory.tokens_per_micro_batch
    fitting = changed(lo)
    if fitting is None:  # (fits(lo): it is a valid plan)
        return None
    t = step_time(fitting, StepWork(tokens=tokens, seqlen_squared_sum=float(tokens) ** 2, micro_batches=1), EFFICIENCY)
    exposed = t.breakdown["offload"]
    cost = (
        f"the copies add about {exposed / (t.step_seconds - exposed):.0%} to the step over "
        f"{plan.hardware.gpu}'s host link"
        if exposed > 0
        else "the copies hide behind the compute"
    )
    return change(lo), (
        f"offload {lo} of {layers} layers' activations to host memory (CPU offloading, no recompute; {cost})"
    )


def _candidates(plan: Plan, memory: MemoryEstimate | None = None):
    """(change, description) in the order tried."""
    p, t = plan.parallel, plan.training
    # recompute and PP cannot run beside CPU offloading (Megatron-Core): they replace it
    instead = (
        ({"training": {"cpu_offloading_num_layers": 0}}, " instead of CPU offloading")
        if t.cpu_offloading_num_layers
        else ({}, "")
    )
    # full recompute of every layer: from none or selective, or from the block method's first N layers a chunk
    every = t.recompute != "full" or t.recompute_num_layers is not None
    recompute = _merge(_no_block(plan, {"training": {"recompute": "full"}}), instead[0]) if every else None
    offload = _offload(plan, memory) if memory is not None else None
    layout = []
    for factor in (2, 4, 8):
        layout.append((_parallel_change(plan, cp=p.cp * factor), f"CP {p.cp}->{p.cp * factor}"))
    for factor in (2, 4, 8):
        sp = "" if p.sp else " with sequence parallelism"
        layout.append((_parallel_change(plan, tp=p.tp * factor), f"TP {p.tp}->{p.tp * factor}{sp}"))
    for factor in (2, 4, 8):
        layout.append((_merge(_parallel_change(plan, pp=p.pp * factor), instead[0]), f"PP {p.pp}->{p.pp * factor}"))
    if recompute:
        yield recompute, f"full recompute{' of every layer' if t.recompute_num_layers else ''}{instead[1]}"
    if offload:
        yield offload
    for change, what in layout:
        yield change, what + (instead[1] if "pp" in change["parallel"] else "")
    if recompute:
        for change, what in layout:
            yield _merge(recompute, change), f"full recompute and {what}{instead[1]}"
    if plan.packing_mode == "offline":
        cut = "skipped (chat data)" if plan.data.format == "chat" else "truncated"
        size = plan.pack_size // 2
        while size >= MIN_PACK:
            yield {"packing": {"pack_size": size}}, f"pack size {plan.pack_size}->{size} (longer samples {cut})"
            size //= 2


def fitting_fixes(
    plan: Plan, memory: MemoryEstimate, errors_of: Callable[[Plan], set[str]], most: int = MAX_FIXES
) -> list[MemoryFix]:
    """The first ``most`` changes under which the plan fits, each bringing no rule error the plan did not have."""
    before = errors_of(plan)
    out: list[MemoryFix] = []
    for change, what in _candidates(plan, memory):
        if "pack_size" in change.get("packing", {}) and any("pack_size" in f.fix.get("packing", {}) for f in out):
            continue  # the largest pack that fits, not every smaller one as well
        try:
            changed = plan.changed(change)
        except PlanError:  # a layout the GPUs, heads or layers do not divide
            continue
        if changed == plan:
            continue
        tokens = tokens_bound(plan, changed, memory)
        if tokens is None:
            continue
        bound = estimate_memory(
            changed, tokens, changed.parallel.pp, overhead_bytes=memory.overhead, capacity_bytes=memory.capacity
        )
        if not bound.fits or errors_of(changed) - before:
            continue
        out.append(MemoryFix(fix=change, what=what, total_bytes=bound.total))
        if len(out) == most:
            break
    return out


def describe(memory: MemoryEstimate, plan: Plan) -> str:
    """'plan needs 133.3 GiB per GPU of 79.6 GiB on H100-80GB (activations 68.1 GiB, ...)'."""
    parts = sorted(memory.breakdown.items(), key=lambda kv: -kv[1])
    largest = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.1f}" for k, v in parts[:3] if v > 0)
    return (
        f"plan needs {memory.total / GIB:.1f} GiB per GPU of {memory.capacity / GIB:.1f} GiB on "
        f"{plan.hardware.gpu} ({largest} GiB)"
    )
