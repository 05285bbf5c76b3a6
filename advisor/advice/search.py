"""Search for a faster plan: pack size, CP, TP and micro batch within the plan's GPUs, keeping what the user fixed.

Alternatives: rank every layout by tokens/s (what this replaced: its best candidate doubled the pack size and with it
seq_length and the samples per step, +70 %, so its "gain" trained another run), or ask the user for every knob.

Every candidate is the user's plan with only layout and batch settings changed (``Plan.changed``: the model, its
preset overrides included, is the baseline's), checked by the rules (no error-level finding) and the memory estimate
(it fits), then ranked by estimated real tokens per second per GPU. What the user fixed stays fixed unless they free it
(``vary``): ``seq_length`` (a pack may be smaller than it, never larger), the work of a step, the effective samples
per step (packs x n with offline packing), within ±5 % of the samples the user asked for (of what their packs hold
when they count packs; their own plan may miss that, and a finding says so), the GPU (``gpu``: every preset, at the
same GPU count), the precision (``precision``: BF16, FP8 with current scaling, MXFP8 and NVFP4 where the GPU runs
them) and Megatron FSDP (``fsdp``: on and off). Candidates are compared
at equal work; the user's own layout is the baseline, never a candidate. Packing is cached per (pack size, padding
multiple), so a search over 1M samples packs a handful of times, not once per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from advisor.advice.rules import check
from advisor.data.lengths import LengthHistogram
from advisor.findings import Finding
from advisor.model.estimate import Estimate, estimate, packing_of
from advisor.plan import Plan, PlanError
from advisor.plan.presets import GPU_PRESETS

Freedom = Literal["seq_length", "batch", "gpu", "precision", "fsdp"]  # what ``recommend --vary`` may free
FREEDOMS: tuple[str, ...] = get_args(Freedom)
BATCH_TOLERANCE = 0.05  # the effective samples per step a candidate may differ from the user's by


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
        return self.plan.global_batch_packs(packing.packing_factor)

    @property
    def effective_samples_per_step(self) -> float | None:
        """The samples a step of this candidate trains on (packs x n with offline packing)."""
        packing = self.estimate.packing if self.estimate is not None else None
        return self.plan.effective_samples_per_step(packing.packing_factor if packing is not None else None)

    def summary(self) -> dict:
        p, t = self.plan.parallel, self.plan.training
        e = self.estimate
        return {
            "tp": p.tp,
            "pp": p.pp,
            "cp": p.cp,
            "dp": p.dp,
            "sp": p.sp,
            "seq_length": t.seq_length,
            "pack_size": self.plan.pack_size if self.plan.packing_mode == "offline" else None,
            "micro_batch_size": t.micro_batch_size,
            "global_batch_size": t.global_batch_size,
            "global_batch_samples": self.plan.requested_samples,
            "global_batch_packs": self.global_batch_packs,
            "effective_samples_per_step": self.effective_samples_per_step,
            "recompute": t.recompute,
            "memory_gib": e.memory.total / 2**30 if e else None,
            "fits": self.fits,
            "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu,
            "step_seconds": e.time.step_seconds if e else None,
            "errors": [f.id for f in self.errors],
            "why": self.why,
        }


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    baseline: Candidate
    best: tuple[Candidate, ...]
    evaluated: int

    @property
    def recommended(self) -> Plan:
        """The best candidate, unless the user's own (viable) plan is faster: never a slower plan as "better"."""
        if not self.best or (
            self.baseline.viable and self.best[0].tokens_per_second_per_gpu < self.baseline.tokens_per_second_per_gpu
        ):
            return self.baseline.plan
        return self.best[0].plan


def evaluate(plan: Plan, hist: LengthHistogram, mfu: float | None = None, estimator=None) -> Candidate:
    """A candidate: its findings and estimate (``estimator(plan)`` if given, so a caller can share a cache)."""
    error: str | None = None
    try:
        if estimator is not None:
            est = estimator(plan)
        else:
            est = estimate(plan, hist) if mfu is None else estimate(plan, hist, mfu=mfu)
    except ValueError as e:
        est, error = None, str(e)
    findings = tuple(check(plan, packing_of(plan, hist), est.memory if est is not None else None, estimate_error=error))
    return Candidate(plan=plan, estimate=est, findings=findings)


def _truncated(c: Candidate) -> int:
    """Tokens the candidate never trains on: cut from SFT samples, or in chat samples skipped whole."""
    packing = c.estimate.packing if c.estimate is not None else None
    return packing.runtime.tokens_truncated + packing.runtime.tokens_skipped if packing is not None else 0


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_vary(vary) -> frozenset[str]:
    """The freedoms the user gave the search, checked (one message naming the unknown ones).

    >>> sorted(check_vary(["batch"]))
    ['batch']
    """
    vary = frozenset(vary or ())
    unknown = sorted(str(v)[:40] for v in vary - set(FREEDOMS))
    if unknown:
        raise ValueError(f"--vary: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(FREEDOMS)}")
    return vary


# the precisions the search tries when freed: Megatron-Bridge's recipes for each format (FP8 with current scaling)
SEARCH_PRECISIONS = (
    {"precision": "bf16", "fp8_recipe": None},
    {"precision": "fp8", "fp8_recipe": None},
    {"precision": "mxfp8", "fp8_recipe": None},
    {"precision": "nvfp4", "fp8_recipe": None},
)


def _hardware_variants(plan: Plan, vary: frozenset[str]) -> list[dict]:
    """The GPU, precision and FSDP settings to try: the plan's own, or each preset / precision / both FSDP settings
    where freed (a precision the GPU cannot run is left to the plan's check, which refuses it)."""
    gpus = list(GPU_PRESETS) if "gpu" in vary else [None]
    precisions = SEARCH_PRECISIONS if "precision" in vary else [None]
    fsdps = [False, True] if "fsdp" in vary else [None]
    out = []
    for gpu in gpus:
        for precision in precisions:
            for fsdp in fsdps:
                change: dict = {}
                if gpu is not None:
                    change["hardware"] = {"gpu": gpu, "memory_gib": None, "bf16_tflops": None}
                if precision is not None:
                    change["training"] = dict(precision)
                if fsdp is not None:
                    change["parallel"] = {"fsdp": fsdp}
                out.append(change)
    return out


def _variants(plan: Plan, vary: frozenset[str]):
    """Changes to try, all on the plan's GPU count: pack sizes up to seq_length (past it only when seq_length is
    free), TP, CP, micro batch. The batch is set afterwards, once the candidate's packing factor is known."""
    m, p, t = plan.model, plan.parallel, plan.training
    mode = plan.packing_mode
    sizes: list[int] | list[None]
    if mode == "offline":
        wanted = {plan.pack_size // 2, plan.pack_size} | ({plan.pack_size * 2} if "seq_length" in vary else set())
        sizes = sorted(x for x in wanted if x > 0 and ("seq_length" in vary or x <= t.seq_length))
    else:
        sizes = [None]
    tps = [d for d in (1, 2, 4, 8) if m.num_attention_heads % d == 0 and m.query_groups % d == 0]
    mbss = (
        [1]
        if mode in ("offline", "global-batch")  # global-batch: Megatron-Bridge's micro batch is one bin
        else [t.micro_batch_size]
        if mode == "online"
        else sorted({t.micro_batch_size, 1, 2, 4} - ({1} if mode == "in-batch" else set()))
    )
    for size in sizes:
        for tp in tps:
            for cp in _divisors(p.gpus // (tp * p.pp)):
                if cp > 32 or (p.gpus % (tp * p.pp * cp)):
                    continue
                for mbs in mbss:
                    change: dict[str, dict[str, Any]] = {
                        "parallel": {
                            "tp": tp,
                            "cp": cp,
                            "sp": tp > 1,
                            "hierarchical_cp_sizes": None,
                            "cp_comm_type": "p2p" if cp != p.cp else p.cp_comm_type,
                        },
                        "training": {"micro_batch_size": mbs},
                        "packing": {"pad_seq_to_mult": None},
                    }
                    if cp == p.cp and p.cp_comm_type == "a2a+p2p":
                        change["parallel"]["hierarchical_cp_sizes"] = p.hierarchical_cp_sizes
                    if mode == "online":  # the buffer follows CP: Megatron-LM's default for each layout
                        change["packing"]["max_seqlen_per_dp_cp_rank"] = None
                    elif mode == "global-batch" and plan.packing.max_seqlen_per_dp_cp_rank is not None:
                        # Megatron-Bridge has no default: the cap follows CP as its own suggestion does
                        cap = plan.packing.max_seqlen_per_dp_cp_rank if cp == p.cp else -(-t.seq_length // cp)
                        change["packing"]["max_seqlen_per_dp_cp_rank"] = cap
                    if size is not None:
                        change["packing"]["pack_size"] = size
                        if "seq_length" in vary and size > t.seq_length:
                            change["training"]["seq_length"] = size
                    for hardware in _hardware_variants(plan, vary):
                        yield {k: {**change.get(k, {}), **hardware.get(k, {})} for k in {*change, *hardware}}


def _target_samples(plan: Plan, base: Candidate) -> float | None:
    """The samples per step the search keeps: those the user asked for, or, when the user counts packs, what
    their packs hold; or what the user's plan really runs when its layout cannot run fewer (one pack per DP rank
    already holds more than the ask).

    Why the last: 128 samples asked on 2,048 GPUs run as 2,048 packs. Holding candidates to 128 left only layouts
    with DP <= 128, i.e. CP 16 to 32 on 512-token sequences, and the search "recommended" them at -83 % to -94 %
    tokens/s: a comparison at another step's work, not a better layout for the run the user has.
    """
    asked, got = plan.requested_samples, base.effective_samples_per_step
    if asked is None:
        return got
    if (
        got is not None
        and got > asked * (1 + BATCH_TOLERANCE)
        and base.global_batch_packs is not None
        and base.global_batch_packs <= plan.dp
    ):
        return got
    return float(asked)


def _with_batch(cand_plan: Plan, hist: LengthHistogram, target: float | None, vary: frozenset[str]) -> Plan | None:
    """The candidate with the batch that keeps the step's work: in packs (offline: the multiple of DP nearest to the
    target over this candidate's n), else in samples (the multiple of micro batch x DP nearest to it)."""
    t, dp = cand_plan.training, cand_plan.dp
    if cand_plan.packing_mode == "offline":
        packing = packing_of(cand_plan, hist)
        if target is None or packing is None or "batch" in vary:
            return cand_plan
        n = packing.packing_factor
        packs = max(dp, round(target / n / dp) * dp)
        return cand_plan.changed({"training": {"global_batch_size": packs}})
    unit = dp * t.micro_batch_size
    samples = cand_plan.batch_in_samples if target is None else target
    return cand_plan.changed({"training": {"global_batch_size": max(unit, round(samples / unit) * unit)}})


def _keeps_the_work(c: Candidate, target: float | None, vary: frozenset[str]) -> bool:
    """Within ±5 % of the target samples per step (the user's own plan may miss it: a finding says so)."""
    if "batch" in vary or target is None:
        return True
    got = c.effective_samples_per_step
    return got is not None and abs(got / target - 1) <= BATCH_TOLERANCE


def _layout(plan: Plan) -> tuple:
    """What makes two plans the same layout for the search (the batch's unit aside)."""
    p, t = plan.parallel, plan.training
    return (
        p.tp,
        p.pp,
        p.cp,
        p.sp,
        p.cp_comm_type,
        plan.pack_size,
        t.seq_length,
        t.micro_batch_size,
        t.recompute,
        plan.pad_seq_to_mult,
        plan.packing.max_seqlen_per_dp_cp_rank,
        plan.hardware.gpu,
        t.precision,
        t.fp8_recipe,
        p.fsdp,
    )


def _why(c: Candidate, base: Candidate) -> str:
    if c.estimate is None:  # no estimate at all: not a memory verdict
        return "no estimate: see the finding estimate.none"
    if not c.fits:
        return "does not fit in memory"
    if c.errors:
        return "breaks " + ", ".join(f.id for f in c.errors)
    parts = []
    a, b = c.plan, base.plan
    for label, x, y in (
        ("TP", a.parallel.tp, b.parallel.tp),
        ("SP", a.parallel.sp, b.parallel.sp),
        ("CP", a.parallel.cp, b.parallel.cp),
        ("pack size", a.pack_size, b.pack_size),
        ("seq_length", a.training.seq_length, b.training.seq_length),
        ("micro batch", a.training.micro_batch_size, b.training.micro_batch_size),
        ("GPU", a.hardware.gpu, b.hardware.gpu),
        ("precision", a.training.precision, b.training.precision),
        ("FSDP", a.parallel.fsdp, b.parallel.fsdp),
    ):
        if x != y:
            parts.append(f"{label} {y}->{x}")
    got, own = c.effective_samples_per_step, base.effective_samples_per_step
    if got is not None and own is not None and round(got) != round(own):
        parts.append(f"samples/step {own:,.0f}->{got:,.0f}")
    if base.tokens_per_second_per_gpu <= 0:  # no estimate, or no real tokens at all: no ratio to show
        gain_text = "tokens/s not comparable (0 for your plan)"
    else:
        gain_text = f"{c.tokens_per_second_per_gpu / base.tokens_per_second_per_gpu - 1:+.0%} tokens/s/GPU"
    ce, be = c.estimate, base.estimate
    detail = [gain_text]
    if be is not None and ce is not None:  # (ce: c fits)
        detail.append(f"memory {be.memory.total / 2**30:.0f}->{ce.memory.total / 2**30:.0f} GiB")
        detail.append(f"straggler x{be.time.straggler_factor:.2f}->x{ce.time.straggler_factor:.2f}")
        detail.append(f"padding waste {be.flops.padding_waste:.1%}->{ce.flops.padding_waste:.1%}")
    return (", ".join(parts) + ": " if parts else "same layout: ") + ", ".join(detail)


def search(
    plan: Plan, hist: LengthHistogram, *, top: int = 3, mfu: float | None = None, progress=None, estimator=None, vary=()
) -> SearchResult:
    """The ``top`` best viable candidates by estimated tokens/s/GPU, with the user's plan as the baseline; ``vary``
    frees seq_length and/or the batch (see the module docstring)."""
    vary = check_vary(vary)
    if mfu is not None and "precision" in vary:
        raise ValueError(
            "--vary precision with --mfu: a fixed MFU is of each precision's own peak, so the ranking "
            "would be the datasheet's ratio of peaks; drop --mfu (the performance model prices each "
            "precision) or keep the precision fixed"
        )
    baseline = evaluate(plan, hist, mfu, estimator)
    target = _target_samples(plan, baseline)
    seen, viable, evaluated = {_layout(plan)}, [], 0
    variants = list(_variants(plan, vary))
    for i, change in enumerate(variants):
        if progress is not None:
            progress(f"candidate {i + 1}/{len(variants)}", (i + 1) / len(variants))
        try:
            cand_plan = _with_batch(plan.changed(change), hist, target, vary)
        except PlanError:
            continue
        if cand_plan is None or _layout(cand_plan) in seen:  # the user's own layout is the baseline, not a candidate
            continue
        seen.add(_layout(cand_plan))
        cand = evaluate(cand_plan, hist, mfu, estimator)
        evaluated += 1
        # a smaller pack that cuts more of the data would "win" on tokens/s by training on less of it
        if cand.viable and _truncated(cand) <= _truncated(baseline) and _keeps_the_work(cand, target, vary):
            # only the best ``top`` are kept as the search goes: each candidate's estimate holds its micro batches
            # (an online schedule on 256 GPUs: ~100 MB), and 47 of them once took 1.7 GB (a stable sort: ties keep
            # their order, as one sort at the end did)
            viable.append(cand)
            viable.sort(key=lambda c: -c.tokens_per_second_per_gpu)
            del viable[top:]
    best = tuple(replace(c, why=_why(c, baseline)) for c in viable[:top])
    baseline = replace(baseline, why="your plan" + ("" if baseline.viable else " (" + _why(baseline, baseline) + ")"))
    return SearchResult(baseline=baseline, best=best, evaluated=evaluated)
