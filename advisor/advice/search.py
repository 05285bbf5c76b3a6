"""Search for a faster plan: pack size, CP, TP, micro and global batch size within the plan's GPUs.

Every candidate is the user's plan with only layout and batch settings changed (``Plan.changed``: the model, its
preset overrides included, is the baseline's), checked by the rules (no error-level finding) and the memory estimate
(it fits), then ranked by estimated real tokens per second per GPU. The samples per step (the plan's
``global_batch_size``) are kept. Packing is cached per (pack size, padding multiple), so a search over 1M samples
packs a handful of times, not once per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from advisor.advice.findings import Finding
from advisor.advice.rules import check
from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import Estimate, estimate, packing_of
from advisor.plan import Plan, PlanError


@dataclass(frozen=True, kw_only=True)
class Candidate:
    plan: Plan
    estimate: Estimate | None
    findings: tuple[Finding, ...]
    why: str = ""

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def fits(self) -> bool:
        return self.estimate is not None and self.estimate.memory.fits

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.estimate.time.tokens_per_second_per_gpu if self.estimate else 0.0

    @property
    def viable(self) -> bool:
        return self.fits and not self.errors

    @property
    def global_batch_packs(self) -> int | None:
        """Megatron-Bridge's global batch in packs (offline packing), from this candidate's packing factor."""
        packing = self.estimate.packing if self.estimate is not None else None
        if packing is None:
            return None
        return self.plan.global_batch_packs(packing.metrics.num_sequences / packing.num_packs)

    def summary(self) -> dict:
        p, t = self.plan.parallel, self.plan.training
        e = self.estimate
        return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "dp": p.dp, "sp": p.sp, "seq_length": t.seq_length,
                "pack_size": self.plan.pack_size if self.plan.packing_mode == "offline" else None,
                "micro_batch_size": t.micro_batch_size,
                "global_batch_size": t.global_batch_size, "global_batch_packs": self.global_batch_packs,
                "recompute": t.recompute,
                "memory_gib": e.memory.total / 2**30 if e else None, "fits": self.fits,
                "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
                "step_seconds": e.time.step_seconds if e else None, "errors": [f.id for f in self.errors],
                "why": self.why}


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    baseline: Candidate
    best: tuple[Candidate, ...]
    evaluated: int

    @property
    def recommended(self) -> Plan:
        return self.best[0].plan if self.best else self.baseline.plan


def evaluate(plan: Plan, hist: LengthHistogram, mfu: float | None = None, estimator=None) -> Candidate:
    """A candidate: its findings and estimate (``estimator(plan)`` if given, so a caller can share a cache)."""
    try:
        if estimator is not None:
            est = estimator(plan)
        else:
            est = estimate(plan, hist) if mfu is None else estimate(plan, hist, mfu=mfu)
    except ValueError:
        est = None
    findings = tuple(check(plan, packing_of(plan, hist), est.memory if est is not None else None))
    return Candidate(plan=plan, estimate=est, findings=findings)


def _truncated(c: Candidate) -> int:
    packing = c.estimate.packing if c.estimate is not None else None
    return packing.runtime.tokens_truncated if packing is not None else 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _variants(plan: Plan):
    """Changes to try, all on the plan's GPU count: pack size ladder around the plan's, TP, CP, micro batch."""
    m, p, t = plan.model, plan.parallel, plan.training
    mode = plan.packing_mode
    sizes = sorted({plan.pack_size // 2, plan.pack_size, plan.pack_size * 2} - {0}) if mode == "offline" else [None]
    tps = [d for d in (1, 2, 4, 8) if m.num_attention_heads % d == 0 and m.query_groups % d == 0]
    mbss = [1] if mode == "offline" else [t.micro_batch_size] if mode == "online" else \
        sorted({t.micro_batch_size, 1, 2, 4} - ({1} if mode == "in-batch" else set()))
    for size in sizes:
        for tp in tps:
            for cp in _divisors(p.gpus // (tp * p.pp)):
                if cp > 32 or (p.gpus % (tp * p.pp * cp)):
                    continue
                dp = p.gpus // (tp * p.pp * cp)
                for mbs in mbss:
                    unit = dp * mbs
                    gbs = t.global_batch_size if mode == "offline" else \
                        max(unit, round(t.global_batch_size / unit) * unit)
                    change = {"parallel": {"tp": tp, "cp": cp, "sp": tp > 1, "hierarchical_cp_sizes": None,
                                           "cp_comm_type": "p2p"},
                              "training": {"micro_batch_size": mbs, "global_batch_size": gbs},
                              "packing": {"pad_seq_to_mult": None}}
                    if mode == "online":  # the buffer follows CP: Megatron-LM's default for each layout
                        change["packing"]["max_seqlen_per_dp_cp_rank"] = None
                    if size is not None:
                        change["training"]["seq_length"] = size
                        change["packing"]["pack_size"] = size
                    yield change


def _why(c: Candidate, base: Candidate) -> str:
    if not c.fits:
        return "does not fit in memory"
    if c.errors:
        return "breaks " + ", ".join(f.id for f in c.errors)
    parts = []
    a, b = c.plan, base.plan
    for label, x, y in (("TP", a.parallel.tp, b.parallel.tp), ("CP", a.parallel.cp, b.parallel.cp),
                        ("pack size", a.pack_size, b.pack_size),
                        ("micro batch", a.training.micro_batch_size, b.training.micro_batch_size)):
        if x != y:
            parts.append(f"{label} {y}->{x}")
    if base.tokens_per_second_per_gpu <= 0:  # no estimate, or no real tokens at all: no ratio to show
        gain_text = "tokens/s not comparable (0 for your plan)"
    else:
        gain_text = f"{c.tokens_per_second_per_gpu / base.tokens_per_second_per_gpu - 1:+.0%} tokens/s/GPU"
    ce, be = c.estimate, base.estimate
    detail = [gain_text]
    if be is not None:
        detail.append(f"memory {be.memory.total / 2**30:.0f}->{ce.memory.total / 2**30:.0f} GiB")
        detail.append(f"straggler x{be.time.straggler_factor:.2f}->x{ce.time.straggler_factor:.2f}")
        detail.append(f"padding waste {be.flops.padding_waste:.1%}->{ce.flops.padding_waste:.1%}")
    return (", ".join(parts) + ": " if parts else "same layout: ") + ", ".join(detail)


def search(plan: Plan, hist: LengthHistogram, *, top: int = 3, mfu: float | None = None,
           progress=None, estimator=None) -> SearchResult:
    """The ``top`` best viable candidates by estimated tokens/s/GPU, with the user's plan as the baseline."""
    baseline = evaluate(plan, hist, mfu, estimator)
    seen, viable, evaluated = set(), [], 0
    variants = list(_variants(plan))
    for i, change in enumerate(variants):
        key = repr(change)
        if key in seen:
            continue
        seen.add(key)
        try:
            cand_plan = plan.changed(change)
        except PlanError:
            continue
        cand = evaluate(cand_plan, hist, mfu, estimator)
        evaluated += 1
        if progress is not None:
            progress(f"candidate {i + 1}/{len(variants)}", (i + 1) / len(variants))
        # a smaller pack that cuts more of the data would "win" on tokens/s by training on less of it
        if cand.viable and _truncated(cand) <= _truncated(baseline):
            viable.append(cand)
    viable.sort(key=lambda c: -c.tokens_per_second_per_gpu)
    best = tuple(replace(c, why=_why(c, baseline)) for c in viable[:top])
    baseline = replace(baseline, why="your plan" + ("" if baseline.viable else " (" + _why(baseline, baseline) + ")"))
    return SearchResult(baseline=baseline, best=best, evaluated=evaluated)
