"""Every way of packing the plan's data on its layout, side by side, and the one to use with the reason in a sentence.

The ways: Megatron-Bridge's offline packing; its in-batch packing (GPT-SFT from 0.7.0, VLM before); its global-batch
packing (0.7) with the dp_balanced scheduler and with dynamic CP; and, beside them, Megatron-LM's online packing
with the same schedulers (dev, or main for dp_balanced). A way Megatron-Bridge (or the plan's own rules) refuses for
this layout is listed with its refusal, not dropped.

Alternatives: two separate estimates the user lines up by hand (easy to compare unlike things: offline's global
batch counts packs, the others samples) or a rule of thumb ("offline always packs tighter"). Here every run is
estimated by the same performance model through the same samples per step where they can, and compared per sample.

The choice, among the ways the plan's framework runs (Megatron-Bridge's; Megatron-LM's too when the plan packs
online) that nothing refuses: the ways that fit in memory (a run that does not fit has no step time; when none
fits, all of them), then the step time per sample (within ``TIE`` of the fastest counts as as fast), then the tokens
lost (truncated or skipped), then the fewest new requirements (offline, in-batch, global-batch dp_balanced, dynamic
CP, in that order). ``why`` is one sentence with the fact that decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.advice.rules import rule_global_batch, rule_online, rule_packing_mode
from advisor.data.lengths import LengthHistogram
from advisor.errors import PlanError
from advisor.model.estimate import Estimate, cp_groups_of, estimate
from advisor.model.perf.hardware import gpu_of
from advisor.plan import Plan
from advisor.plan.versions import older
from advisor.vocabulary import SCHEDULED_MODES

TIE = 0.02  # step times per sample within 2 % of the fastest are as fast: the model is not finer than that
# the kinds of run, fewest new requirements first (the last tie-break)
KINDS = ("offline", "in-batch", "global-batch", "global-batch-dcp", "online", "online-dcp")
MB07 = {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"}  # the releases global-batch packing needs
PRETRAIN_REFUSAL = (
    "pre-training data sets (GPTDatasetConfig) concatenate documents into full rows: offline and in-batch "
    "packing are Megatron-Bridge's SFT data sets' (GPTSFTDatasetConfig); global-batch packing packs documents"
)


@dataclass(frozen=True, kw_only=True)
class PackingRun:
    """One way of packing, as the estimator sees it; ``refusal`` says why Megatron-Bridge (or the plan) refuses it
    for this layout, and then there is no estimate (and no plan when the plan itself cannot be built)."""

    label: str
    kind: str  # one of KINDS
    plan: Plan | None
    estimate: Estimate | None
    refusal: str | None = None

    @property
    def framework(self) -> str:
        return "Megatron-LM" if self.kind.startswith("online") else "Megatron-Bridge"

    @property
    def samples_per_step(self) -> float:
        e = self.estimate
        assert e is not None and self.plan is not None
        return self.plan.effective_samples_per_step(e.packing.packing_factor if e.packing is not None else None) or 1.0

    @property
    def sample_seconds(self) -> float:
        """Step time per sample trained: the runs are compared per sample (offline's packs hold n samples each)."""
        assert self.estimate is not None
        return self.estimate.time.step_seconds / self.samples_per_step

    @property
    def refused_steps(self) -> int:
        run = self.estimate.online if self.estimate is not None else None
        return len(run.refusals) if run is not None else 0

    def row(self) -> dict:
        if self.estimate is None:
            return {"way": self.label, "framework": self.framework, "refusal": self.refusal}
        e, t = self.estimate, self.estimate.time
        mb = e.micro_batches
        computed = float(mb.computed_tokens.sum())
        padding = 1 - float(mb.real_tokens.sum()) / computed if computed else 0.0
        if e.online is not None:
            s = e.online.summary
            per_step = (s.micro_batches_min, s.micro_batches_mean, s.micro_batches_max)
        else:
            assert self.plan is not None
            n = self.plan.micro_batches_per_step(e.packing.packing_factor if e.packing is not None else None)
            per_step = (n, float(n), n)
        return {
            "way": self.label,
            "framework": self.framework,
            "refusal": None,
            "micro_batches_min": per_step[0],
            "micro_batches_mean": per_step[1],
            "micro_batches_max": per_step[2],
            "padding": padding,
            "straggler": t.straggler_factor,
            "step_seconds": t.step_seconds,
            "samples_per_step": self.samples_per_step,
            "sample_seconds": self.sample_seconds,
            "tokens_per_second_per_gpu": t.tokens_per_second_per_gpu,
            "flops_per_step": e.flops.model_per_step,
            "mfu": t.mfu,
            "epoch_hours": t.epoch_seconds / 3600,
            "refused_steps": self.refused_steps,
            "memory_gib": e.memory.total / 2**30,
            "fits": e.memory.fits,
            "samples_lost": e.samples_lost,
            "tokens_lost": e.tokens_lost,
            "over_cap_share": e.online.over_cap_share if e.online is not None else None,
            "small_group_share": e.online.small_group_share if e.online is not None else None,
        }


@dataclass(frozen=True, kw_only=True)
class PackingComparison:
    runs: tuple[PackingRun, ...]
    recommended: str
    why: str

    def rows(self) -> list[dict]:
        return [r.row() for r in self.runs]

    @property
    def basis(self) -> str:
        """What the rows share, in a few words: the same samples a step, or which ways differ and why (offline's
        batch counts packs of n samples, so a plan that runs another way keeps its own batch and offline rounds it)."""
        counts = {r.label: (r.kind, round(r.samples_per_step)) for r in self.runs if r.estimate is not None and r.plan}
        values = [n for _, n in counts.values()]
        if len(set(values)) <= 1:
            return "the same samples per step each; compared per sample"
        common = max(set(values), key=values.count)
        why = {"offline": "whole packs of n samples", "in-batch": "a multiple of its micro batch x DP"}
        odd = "; ".join(
            f"{label} {n:,}: {why.get(kind, 'its own batch')}" for label, (kind, n) in counts.items() if n != common
        )
        return f"{common:,} samples per step, except {odd}; compared per sample"

    def run(self, label: str) -> PackingRun:
        return next(r for r in self.runs if r.label == label)

    def use(self, label: str) -> dict:
        """The plan changes that put run ``label`` into the plan: its packing section, its batch in the unit its
        mode counts, and the releases it needs (so "use" applies exactly the run the table shows, the recommended
        one by default)."""
        chosen = self.run(label).plan
        if chosen is None:
            raise ValueError(f"{label} cannot be put in the plan: {self.run(label).refusal}")
        t = chosen.training
        return {
            "packing": chosen.packing.model_dump(),
            "training": {
                "micro_batch_size": t.micro_batch_size,
                "global_batch_size": t.global_batch_size,
                "global_batch_samples": t.global_batch_samples,
            },
            "versions": chosen.versions.model_dump(),
        }


def _newer(plan: Plan, releases: dict[str, str]) -> dict[str, str]:
    """The plan's releases, each raised to ``releases``' where it is older."""
    mine = plan.versions.model_dump()
    return {k: v if k not in releases or not older(v, releases[k]) else releases[k] for k, v in mine.items()}


def _twin(plan: Plan, mode: str, samples: int | None = None, micro_batch_size: int = 1, **changes) -> Plan:
    """The plan packed another way (``changes``: its packing fields, and ``versions``); ``samples``: the samples per
    step to keep when the mode counts samples (the offline run's packs x n, to the multiple of micro batch x DP the
    frameworks assert). Raises PlanError when the plan refuses that way."""
    versions = changes.pop("versions", None)
    training: dict = {"micro_batch_size": micro_batch_size}
    if mode != "offline":
        unit = micro_batch_size * plan.dp
        asked = samples or plan.requested_samples or unit
        training.update(global_batch_size=max(unit, round(asked / unit) * unit), global_batch_samples=None)
    change: dict = {"packing": {"mode": mode, **changes}, "training": training}
    if versions:
        change["versions"] = versions
    return plan.changed(change)


def _refusal(twin: Plan) -> str | None:
    """Why Megatron-Bridge (or Megatron-LM) refuses the twin's packing on this layout: the first error of the
    packing rules (the releases it needs are set by the twin, so never these), or None."""
    for rule in (rule_packing_mode, rule_global_batch, rule_online):
        for f in rule(twin, None):
            if f.severity == "error":
                return f"{f.message} ({f.source})"
    return None


def _run(label: str, kind: str, hist: LengthHistogram, make) -> PackingRun:
    try:
        twin = make()
    except PlanError as e:
        return PackingRun(label=label, kind=kind, plan=None, estimate=None, refusal="; ".join(e.problems))
    refusal = _refusal(twin)
    if refusal is not None:
        return PackingRun(label=label, kind=kind, plan=twin, estimate=None, refusal=refusal)
    return PackingRun(label=label, kind=kind, plan=twin, estimate=estimate(twin, hist))


def compare_packing(
    plan: Plan,
    hist: LengthHistogram,
    *,
    megatron_lm: str | None = "dev",
    max_seqlen_per_dp_cp_rank: int | None = None,
) -> PackingComparison:
    """Every way of packing this plan's data on its layout (module docstring), the same samples per step each:
    Megatron-Bridge's offline, in-batch and global-batch packing (dp_balanced and dynamic CP, with
    ``max_seqlen_per_dp_cp_rank`` as the cap, seq_length / CP where none is given), and Megatron-LM's online packing
    on branch ``megatron_lm`` (None: left out) with dev's dynamic CP where the layout has DP and CP.

    >>> import numpy as np
    >>> from advisor.plan import plan_from_dict
    >>> h = LengthHistogram(lengths=np.array([200, 3000]), counts=np.array([900, 100]), source="x")
    >>> c = compare_packing(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8},
    ...                                     "training": {"global_batch_samples": 64}}), h, megatron_lm=None)
    >>> [(r["way"], r["refusal"] is None) for r in c.rows()]  # doctest: +NORMALIZE_WHITESPACE
    [('offline (Megatron-Bridge)', True), ('in-batch (Megatron-Bridge 0.7)', True),
     ('global-batch dp_balanced (Megatron-Bridge 0.7)', True), ('global-batch dynamic CP (Megatron-Bridge 0.7)', True)]
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    sft = t.task == "llm-sft"
    runs: list[PackingRun] = []
    samples = plan.requested_samples
    if t.task == "pretrain":
        runs += [
            PackingRun(label=label, kind=kind, plan=None, estimate=None, refusal=PRETRAIN_REFUSAL)
            for label, kind in (("offline (Megatron-Bridge)", "offline"), ("in-batch (Megatron-Bridge)", "in-batch"))
        ]
    else:
        offline = _run(
            "offline (Megatron-Bridge)",
            "offline",
            hist,
            lambda: _twin(plan, "offline", pack_size=k.pack_size, fold_alignment_padding=False),
        )
        runs.append(offline)
        # the same samples a step, every way: offline's (its batch counts packs of n samples) unless the plan runs
        # another way, whose own row must show the plan's own batch (its estimate), not one rounded to offline's packs
        own = plan.packing_mode in ("in-batch", *SCHEDULED_MODES)
        if offline.estimate is not None and offline.plan is not None and not own:
            packing = offline.estimate.packing
            n = packing.packing_factor if packing is not None else None
            samples = round(offline.plan.effective_samples_per_step(n) or 0) or samples
        runs.append(
            _run(
                "in-batch (Megatron-Bridge 0.7)" if sft else "in-batch (Megatron-Bridge)",
                "in-batch",
                hist,
                lambda: (
                    plan  # the plan's own way: as the plan sets it (its estimate's figures)
                    if plan.packing_mode == "in-batch"
                    else _twin(
                        plan,
                        "in-batch",
                        samples,
                        max(2, t.micro_batch_size),
                        fold_alignment_padding=False,
                        **({"versions": _newer(plan, {"megatron_bridge": "0.7.1"})} if sft else {}),
                    )
                ),
            )
        )

    def is_own(mode: str, scheduler: str, branch: str | None = None) -> bool:
        """The row is the plan's own way (the same mode, scheduler, branch and cap): the row is the plan as set, so
        its figures are the plan's estimate's (its micro batch, its cap), not a twin's."""
        return (
            plan.packing_mode == mode
            and k.scheduler == scheduler
            and (branch is None or k.megatron_lm == branch)
            and max_seqlen_per_dp_cp_rank in (None, k.max_seqlen_per_dp_cp_rank)
        )

    cap = max_seqlen_per_dp_cp_rank or (k.max_seqlen_per_dp_cp_rank if plan.packing_mode == "global-batch" else None)
    cap = cap or -(-t.seq_length // p.cp)  # Megatron-Bridge's own suggestion: a full sequence on the CP group
    fold = k.fold_alignment_padding and plan.packing_mode == "global-batch"
    for scheduler, kind, name in (
        ("dp_balanced", "global-batch", "dp_balanced"),
        ("default_dynamic_cp", "global-batch-dcp", "dynamic CP"),
    ):
        runs.append(
            _run(
                f"global-batch {name} (Megatron-Bridge 0.7)",
                kind,
                hist,
                lambda scheduler=scheduler: (
                    plan
                    if is_own("global-batch", scheduler)
                    else _twin(
                        plan,
                        "global-batch",
                        samples,
                        scheduler=scheduler,
                        max_seqlen_per_dp_cp_rank=cap,
                        megatron_lm="dev",
                        fold_alignment_padding=fold,
                        versions=_newer(plan, MB07),
                    )
                ),
            )
        )
    if megatron_lm is not None and sft:
        runs.append(
            _run(
                f"online dp_balanced (Megatron-LM {megatron_lm})",
                "online",
                hist,
                lambda: (
                    plan
                    if is_own("online", "dp_balanced", megatron_lm)
                    else _twin(
                        plan,
                        "online",
                        samples,
                        megatron_lm=megatron_lm,
                        scheduler="dp_balanced",
                        max_seqlen_per_dp_cp_rank=max_seqlen_per_dp_cp_rank,
                        fold_alignment_padding=False,
                    )
                ),
            )
        )
        if p.cp > 1 and p.dp > 1:
            runs.append(
                _run(
                    "online dynamic CP (Megatron-LM dev)",
                    "online-dcp",
                    hist,
                    lambda: (
                        plan
                        if is_own("online", "default_dynamic_cp", "dev")
                        else _twin(
                            plan,
                            "online",
                            samples,
                            megatron_lm="dev",
                            scheduler="default_dynamic_cp",
                            max_seqlen_per_dp_cp_rank=None,
                            fold_alignment_padding=False,
                        )
                    ),
                ),
            )
    return _verdict(tuple(runs), online_plan=plan.packing_mode == "online", data_tokens=hist.total_tokens)


def _pct(x: float) -> str:
    return f"{round(100 * x)} %"


def _short(run: PackingRun) -> str:
    return run.label.split(" (")[0]


def _verdict(runs: tuple[PackingRun, ...], online_plan: bool = False, data_tokens: int = 0) -> PackingComparison:
    """The run to use (the module docstring's order) and the one fact that decided, as a sentence. Tokens lost
    count in thousandths of the data's tokens (a token a truncated sample apart is no difference)."""
    ran = [r for r in runs if r.estimate is not None]
    if not ran:
        return PackingComparison(runs=runs, recommended=runs[0].label, why="every way of packing is refused here.")
    candidates = [r for r in ran if (online_plan or r.framework == "Megatron-Bridge") and not r.refused_steps] or ran
    fitting = [r for r in candidates if r.estimate is not None and r.estimate.memory.fits]
    pool = fitting or candidates
    fastest = min(pool, key=lambda r: r.sample_seconds)
    tied = [r for r in pool if r.sample_seconds <= fastest.sample_seconds * (1 + TIE)]

    def lost(r: PackingRun) -> int:
        return round(1000 * (r.estimate.tokens_lost if r.estimate else 0) / max(1, data_tokens))

    best = min(tied, key=lambda r: (lost(r), KINDS.index(r.kind)))
    why = _why(best, pool, candidates, tied, bool(fitting), lost)
    return PackingComparison(runs=runs, recommended=best.label, why=why)


def _why(best: PackingRun, pool: list, candidates: list, tied: list, fits: bool, lost) -> str:
    """One sentence: the fact that made ``best`` the choice."""
    e = best.estimate
    assert e is not None
    others = sorted((r for r in pool if r is not best), key=lambda r: r.sample_seconds)
    dcp = next((r for r in candidates if r.kind == "global-batch-dcp"), None)
    dcp_run = dcp.estimate.online if dcp is not None and dcp.estimate is not None else None
    # the sequences that need the whole static CP group: dynamic CP has no smaller group to give them
    whole = None if dcp_run is None or dcp_run.config.cp == 1 else 1 - dcp_run.small_group_share
    half = None if dcp_run is None else dcp_run.max_seqlen_per_dp_cp_rank * dcp_run.config.cp // 2
    faster = [r for r in candidates if r not in pool and r.sample_seconds < best.sample_seconds * (1 - TIE)]
    if not fits:
        return f"no way of packing fits in memory at this layout; {_short(best)} has the shortest step per sample."
    if faster:
        f = faster[0]
        gain = 1 - f.sample_seconds / best.sample_seconds
        return (
            f"{_short(f)} would shorten the step {_pct(gain)} but does not fit in memory "
            f"({f.estimate.memory.total / 2**30:.0f} GiB), so {_short(best)}."
        )
    if not others:
        return f"{_short(best)} is the only way of packing that runs on this layout."
    wait = _loader_wait(best)
    if wait > 0 and all(_loader_wait(r) > 0 for r in others):  # the loader sets every step: they tie per sample
        tail = (
            f"loses the fewest tokens ({e.tokens_lost:,})"
            if len({lost(r) for r in tied}) > 1 and lost(best) == min(lost(r) for r in tied)
            else "needs the fewest new features"
        )
        return (
            f"the data loader cannot keep up: the GPUs wait {wait:.1f} s a step for samples tokenized on the fly "
            f"under every way of packing, so the steps per sample tie and {_short(best)} {tail}."
        )
    runner = others[0]
    gain = 1 - best.sample_seconds / runner.sample_seconds
    b, o = best.row(), runner.row()
    if best not in tied or runner not in tied:  # the step time decided
        if wait == 0 and _loader_wait(runner) > 0:
            return (
                f"the data loader cannot keep up under {_short(runner)} (the GPUs wait {_loader_wait(runner):.1f} s "
                f"a step for samples tokenized on the fly), so {_short(best)} shortens the step {_pct(gain)}"
                + (": its data is tokenized once, when it is packed." if best.kind == "offline" else ".")
            )
        if best.kind == "global-batch-dcp" and e.online is not None:
            small = e.online.small_group_share
            if small >= 0.05:
                return (
                    f"dynamic CP shortens the step {_pct(gain)} against {_short(runner)} by giving short sequences "
                    f"smaller CP groups ({_pct(small)} of them run on fewer than CP {e.online.config.cp} ranks"
                    f"{_inside(best)})."
                )
            return (
                f"dynamic CP shortens the step {_pct(gain)} against {_short(runner)} by sizing each sequence's CP "
                f"group to its length (its ranks wait x{b['straggler']:.3f} for the heaviest against "
                f"x{o['straggler']:.3f})."
            )
        if best.kind == "global-batch" and whole is not None and whole > 0.5:
            return (
                f"most sequences ({_pct(whole)}) need the whole CP group (longer than {half:,} tokens"
                f"{_across(dcp)}), so dynamic "
                f"CP has nothing to rebalance, and {_short(best)} shortens the step {_pct(gain)} against "
                f"{_short(runner)}."
            )
        pp = best.plan.parallel.pp if best.plan is not None else 1
        return f"{_short(best)} shortens the step {_pct(gain)} against {_short(runner)}: {_cause(b, o, gain, pp)}."
    worst = max(tied, key=lost)
    if lost(best) < lost(worst):
        return (
            f"{_short(best)} steps as fast as {_short(worst)} (within {_pct(TIE)}) and loses "
            f"{e.tokens_lost:,} tokens where it loses {worst.estimate.tokens_lost:,}."
        )
    if whole is not None and whole > 0.5 and dcp in tied and dcp is not best:
        return (
            f"most sequences ({_pct(whole)}) need the whole CP group (longer than {half:,} tokens{_across(dcp)}), "
            f"so dynamic CP has nothing to rebalance: {_short(best)} steps as fast and needs less."
        )
    if best.kind == "offline":
        fewest = min(r.estimate.tokens_lost for r in tied if r.estimate is not None)
        loses = (
            "loses no tokens"
            if not e.tokens_lost
            else "loses no more tokens than the others"
            if e.tokens_lost <= fewest
            else "loses about as many tokens as the others (within a thousandth of the data)"
        )
        return (
            f"offline packing {loses} and needs no 0.7 features, and no other way steps more than {_pct(TIE)} "
            "faster per sample."
        )
    return f"{_short(best)} steps within {_pct(TIE)} of the fastest and needs the fewest new features."


def _loader_wait(run: PackingRun) -> float:
    """Seconds a step the GPUs wait for the data loader (``training.dataloader_seconds_per_sample``), 0 if none."""
    return run.estimate.time.breakdown.get("dataloader", 0.0) if run.estimate is not None else 0.0


def _domain_groups(run: PackingRun | None) -> tuple[int, float, int] | None:
    """Dynamic CP's runtime groups against the NVLink domain: (the largest group, the share of the ranks' micro
    batches on a group of more than one rank inside one domain, the GPUs one domain joins), with TP x g GPUs a group
    spans (its ranks contiguous in the DP x CP order, as ``perf.step._cp_comm`` takes them)."""
    if run is None or run.estimate is None or run.estimate.online is None or run.plan is None:
        return None
    groups = cp_groups_of(run.estimate.online)
    if not groups:
        return None
    tp, domain = run.plan.parallel.tp, gpu_of(run.plan).domain
    largest = max(g for _, g, _, _ in groups)
    inside = sum(share for share, g, _, _ in groups if 1 < g and g * tp <= domain)
    return largest, inside, domain


def _inside(run: PackingRun) -> str:
    """', N% of the ranks' micro batches on a group inside one node, where the longest sequences' groups cross
    nodes' when they do, else ''."""
    d = _domain_groups(run)
    if d is None or run.plan is None:
        return ""
    largest, inside, domain = d
    if largest * run.plan.parallel.tp <= domain or inside <= 0:
        return ""
    return (
        f"; {_pct(inside)} of the ranks' micro batches run on a group inside one node, the largest groups "
        f"({largest} ranks) across nodes"
    )


def _across(run: PackingRun | None) -> str:
    """', a group across nodes' when the whole CP group spans more than one NVLink domain, else ''."""
    d = _domain_groups(run)
    if d is None or run is None or run.plan is None:
        return ""
    p = run.plan.parallel
    return ", a group across nodes" if p.cp * p.tp > d[2] else ""


def _cause(b: dict, o: dict, gain: float, pp: int) -> str:
    """What the faster run does differently, as the rows show it: less padding or less waiting for the heaviest
    rank where that accounts for half the gain or more, else its micro batches (more fill a pipeline's bubble,
    fewer and fuller ones cost less per step)."""
    padding = o["padding"] - b["padding"]
    waiting = o["straggler"] / b["straggler"] - 1
    if max(padding, waiting) >= gain / 2:
        if padding >= waiting:
            return f"{b['padding']:.1%} of its computed tokens are padding against {o['padding']:.1%}"
        return f"its ranks wait x{b['straggler']:.3f} for the heaviest against x{o['straggler']:.3f}"
    counts = f"{b['micro_batches_mean']:.1f} a step against {o['micro_batches_mean']:.1f}"
    if pp > 1 and b["micro_batches_mean"] > o["micro_batches_mean"]:
        return f"more micro batches fill the pipeline's bubble ({counts})"
    if b["micro_batches_mean"] < o["micro_batches_mean"]:
        return f"fewer, fuller micro batches ({counts})"
    return f"its micro batches ({counts}) run faster in the performance model"
