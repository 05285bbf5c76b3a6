"""Megatron-Bridge's offline packing beside Megatron-LM's online packing, for the same data, model and layout.

Alternatives: two separate estimates the user lines up by hand (easy to compare unlike things: offline's global
batch counts packs, online's samples) or a rule of thumb ("offline always packs tighter"). Here both runs are
estimated by the same performance model and step through the same samples per step where they can.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import Estimate, estimate
from advisor.plan import Plan


@dataclass(frozen=True, kw_only=True)
class PackingRun:
    """One way of packing, as the estimator sees it."""

    label: str
    plan: Plan
    estimate: Estimate

    def row(self) -> dict:
        e, t = self.estimate, self.estimate.time
        mb = e.micro_batches
        computed = float(mb.computed_tokens.sum())
        padding = 1 - float(mb.real_tokens.sum()) / computed if computed else 0.0
        if e.online is not None:
            s = e.online.summary
            per_step = (s.micro_batches_min, s.micro_batches_mean, s.micro_batches_max)
        else:
            n = e.plan.micro_batches_per_step(e.packing.packing_factor if e.packing is not None else None)
            per_step = (n, float(n), n)
        return {
            "way": self.label,
            "micro_batches_min": per_step[0],
            "micro_batches_mean": per_step[1],
            "micro_batches_max": per_step[2],
            "padding": padding,
            "straggler": t.straggler_factor,
            "step_seconds": t.step_seconds,
            "tokens_per_second_per_gpu": t.tokens_per_second_per_gpu,
            "flops_per_step": e.flops.model_per_step,
            "mfu": t.mfu,
            "epoch_hours": t.epoch_seconds / 3600,
            "refused_steps": e.online.summary.refused_steps if e.online is not None else 0,
            "memory_gib": e.memory.total / 2**30,
            "fits": e.memory.fits,
        }


@dataclass(frozen=True, kw_only=True)
class PackingComparison:
    runs: tuple[PackingRun, ...]
    recommended: str
    why: str

    def rows(self) -> list[dict]:
        return [r.row() for r in self.runs]

    def run(self, label: str) -> PackingRun:
        return next(r for r in self.runs if r.label == label)

    def use(self, label: str) -> dict:
        """The plan changes that put run ``label`` into the plan: its packing section and its batch, in the unit
        its mode counts (so "use" applies exactly the run the table shows, the recommended one by default)."""
        chosen = self.run(label).plan
        t = chosen.training
        return {
            "packing": chosen.packing.model_dump(),
            "training": {
                "micro_batch_size": t.micro_batch_size,
                "global_batch_size": t.global_batch_size,
                "global_batch_samples": t.global_batch_samples,
            },
        }


def _twin(plan: Plan, mode: str, samples: int | None = None, **packing) -> Plan:
    """The plan packed another way; ``samples``: the samples per step to keep when the mode counts samples and the
    plan gives packs (its packs x n, to the multiple of DP Megatron-LM asserts)."""
    training: dict = {"micro_batch_size": 1}
    if mode != "offline" and plan.batch_in_packs is not None:
        unit = plan.dp
        training.update(global_batch_size=max(unit, round((samples or unit) / unit) * unit), global_batch_samples=None)
    return plan.changed({"packing": {"mode": mode, **packing}, "training": training})


def compare_packing(
    plan: Plan, hist: LengthHistogram, *, megatron_lm: str = "dev", max_seqlen_per_dp_cp_rank: int | None = None
) -> PackingComparison:
    """Offline (Megatron-Bridge, packs of seq_length) against online dp_balanced (Megatron-LM, dev unless
    ``megatron_lm`` says main, with the given per-rank buffer), and dev's dynamic CP where the layout has data
    parallelism to borrow ranks from.

    >>> import numpy as np
    >>> from advisor.plan import plan_from_dict
    >>> h = LengthHistogram(lengths=np.array([200, 3000]), counts=np.array([900, 100]), source="x")
    >>> c = compare_packing(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8},
    ...                                     "training": {"global_batch_samples": 64}}), h)
    >>> [r["way"] for r in c.rows()]
    ['offline (Megatron-Bridge)', 'online dp_balanced (Megatron-LM dev)']
    """
    offline = _twin(plan, "offline", pack_size=plan.packing.pack_size)
    offline_run = PackingRun(label="offline (Megatron-Bridge)", plan=offline, estimate=estimate(offline, hist))
    n = offline_run.estimate.packing.packing_factor if offline_run.estimate.packing is not None else None
    samples = round(offline.effective_samples_per_step(n) or 0) or None  # the same samples a step, every way
    online = _twin(
        plan,
        "online",
        samples,
        megatron_lm=megatron_lm,
        scheduler="dp_balanced",
        max_seqlen_per_dp_cp_rank=max_seqlen_per_dp_cp_rank,
    )
    runs = [
        offline_run,
        PackingRun(
            label=f"online dp_balanced (Megatron-LM {megatron_lm})", plan=online, estimate=estimate(online, hist)
        ),
    ]
    if plan.parallel.cp > 1 and plan.parallel.dp > 1:
        dyn = _twin(
            plan, "online", samples, megatron_lm="dev", scheduler="default_dynamic_cp", max_seqlen_per_dp_cp_rank=None
        )
        runs.append(PackingRun(label="online dynamic CP (Megatron-LM dev)", plan=dyn, estimate=estimate(dyn, hist)))
    return _verdict(tuple(runs))


def _verdict(runs: tuple[PackingRun, ...]) -> PackingComparison:
    """The way with the most real tokens per second per GPU that fits and is never refused, with the reasons."""
    ok = [r for r in runs if r.estimate.memory.fits and not (r.estimate.online and r.estimate.online.refusals)]
    pool = ok or list(runs)
    best = max(pool, key=lambda r: r.estimate.time.tokens_per_second_per_gpu)
    rows = {r.label: r.row() for r in runs}
    b = rows[best.label]
    others = [rows[r.label] for r in runs if r is not best]
    reasons = []
    for o in others:
        gain = (
            b["tokens_per_second_per_gpu"] / o["tokens_per_second_per_gpu"] - 1
            if o["tokens_per_second_per_gpu"]
            else float("inf")
        )
        bits = [f"{gain:+.0%} tokens/s/GPU over {o['way']}"]
        if o["straggler"] > b["straggler"] * 1.02:
            bits.append(f"its ranks wait x{o['straggler']:.2f} for the heaviest (x{b['straggler']:.2f} here)")
        if o["padding"] > b["padding"] + 0.01:
            bits.append(f"{o['padding']:.1%} of its computed tokens are padding ({b['padding']:.1%} here)")
        if o["refused_steps"]:
            bits.append(f"the real scheduler refuses {o['refused_steps']} of its steps")
        if not o["fits"]:
            bits.append("it does not fit in memory")
        reasons.append("; ".join(bits))
    note = (
        ""
        if best.estimate.online is None
        else " Online packing needs no preprocessing pass and sees each global batch's lengths only, so it cannot "
        "balance work across steps; offline packing needs the data tokenized and packed before training."
    )
    return PackingComparison(runs=runs, recommended=best.label, why=". ".join(reasons) + "." + note)
