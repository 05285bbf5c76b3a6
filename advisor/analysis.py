"""One analysis seam: ``analyze(plan, lengths)`` is what every CLI command and dashboard page calls.

Alternatives: each caller packing, estimating, checking and exporting on its own (what this replaced: the Memory page
ran 10 estimates a rerun, the Recommendations page 31 on first load), or a global memo per function.

An ``Analysis`` computes each part lazily (packing, estimate, findings, candidates, exports) and keeps it; analyses
themselves are cached on the content of the plan, the lengths and the settings, so a rerun with the same inputs
computes nothing.

The one second path, and why: the dashboard's Packing page packs through ``advisor.packing.cache`` directly
(``ui.state.ready_packing``/``packing_kept`` and the background worker in ``ui/ahead.py``), not through
``analyze``. On a 16M-sample data set a new pack size is the heavy step, and the page must show the last
packing's figures while it packs, hand the work to the worker that may be packing that size already, and pack
the neighbouring sizes ahead while the visitor reads: an ``Analysis`` would pack and estimate together, and its
key holds the whole plan. Both paths read the same packing cache (``PACKINGS``, keyed by the histogram and the
``PackingConfig`` that ``estimate.packing_config(plan)`` derives), so the page and ``analyze`` show the same packs.

>>> from advisor.data.lengths import LengthHistogram
>>> from advisor.plan import plan_from_dict
>>> plan = plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 512, "global_batch_samples": 64}})
>>> a = analyze(plan, LengthHistogram.from_samples([100, 200, 300, 400] * 50))
>>> a is analyze(plan, LengthHistogram.from_samples([100, 200, 300, 400] * 50)), round(a.packing_factor, 2)
(True, 1.87)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from advisor import caches
from advisor.advice.rules import check
from advisor.advice.search import SearchResult, check_vary, search
from advisor.data.lengths import LengthHistogram
from advisor.findings import Finding
from advisor.formats import ExportInputs, export_spec
from advisor.model.estimate import Estimate, estimate, packing_of
from advisor.model.loss_expectation import LossWeighting, loss_weighting
from advisor.model.memory import DEFAULT_OVERHEAD_GIB
from advisor.packing.cache import PACKING_CACHE_BYTES, packing_arrays
from advisor.packing.offline import PackingResult
from advisor.plan import Plan, PlanError
from advisor.vocabulary import SCHEDULED_MODES

ANALYSIS_CACHE_SIZE = 64  # the plan, the memory grid (<= 15 layouts) and the edits of a few sessions


def check_mfu(mfu: float | None) -> float | None:
    """An explicit model FLOPs utilisation replacing the performance model: None, or a finite number in [0.01, 1]."""
    if mfu is None:
        return None
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not math.isfinite(mfu) or not 0.01 <= mfu <= 1:
        raise ValueError(f"mfu {mfu!r} must be a number from 0.01 to 1 (leave it out to use the performance model)")
    return float(mfu)


def check_overhead(gib: float) -> float:
    """Memory the estimate reserves per GPU beyond the model (CUDA context, allocator): finite, 0 to 1024 GiB."""
    if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not math.isfinite(gib) or not 0 <= gib <= 1024:
        raise ValueError(f"overhead {gib!r} GiB must be a number from 0 to 1024")
    return float(gib)


@dataclass(frozen=True, kw_only=True, eq=False)
class Analysis:
    """A plan on its data, every part computed on first use and kept by the analysis (``_parts``): dashboard
    sessions share analyses through the cache, so a part may be computed twice at once, never half-stored.

    >>> from advisor.plan import plan_from_dict
    >>> plan = plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 8}})
    >>> a = Analysis(plan=plan, hist=LengthHistogram.from_samples([3, 5]))
    >>> a.computed("packing") is None, a.packing.num_packs, a.computed("packing") is a.packing
    (True, 1, True)
    """

    plan: Plan
    hist: LengthHistogram
    mfu: float | None = None  # None: the performance model; a number fixes the utilisation
    overhead_gib: float = DEFAULT_OVERHEAD_GIB
    _parts: dict = field(default_factory=dict, init=False, repr=False)

    def _part(self, name, compute):
        if name not in self._parts:
            self._parts.setdefault(name, compute())
        return self._parts[name]

    def computed(self, name: str):
        """A part if it is computed already (``packing``, ``estimate``, ...), else None: asking costs nothing."""
        return self._parts.get(name)

    @property
    def packing(self) -> PackingResult | None:
        """Megatron-Bridge's offline packing of the data (None unless the plan packs offline)."""
        return self._part("packing", lambda: packing_of(self.plan, self.hist))

    @property
    def packing_factor(self) -> float | None:
        """n: samples per pack, which divides the global batch (offline packing only)."""
        return self.packing.packing_factor if self.packing is not None else None

    @property
    def global_batch_packs(self) -> int | None:
        """Megatron-Bridge's global_batch_size with offline packing: the plan's packs, or its samples over n."""
        return self.plan.global_batch_packs(self.packing_factor) if self.packing_factor else self.plan.batch_in_packs

    @property
    def estimate(self) -> Estimate:
        return self._part(
            "estimate", lambda: estimate(self.plan, self.hist, mfu=self.mfu, overhead_gib=self.overhead_gib)
        )

    @property
    def micro_batches_per_rank(self) -> float:
        """Micro batches each DP rank runs a step: the plan's fixed count, or under a scheduler (online and
        global-batch packing: Megatron-LM's micro batches are the packs each rank gets) the schedule's mean, which
        is also what the step time uses. samples / (micro_batch_size x DP) said 16 where the schedule ran 2."""
        if self.plan.packing_mode in SCHEDULED_MODES:
            try:
                run = self.estimate.online
            except ValueError:  # nothing left to schedule: the plan's count, as before
                run = None
            if run is not None:
                return round(float(run.summary.micro_batches_mean), 2)
        return self.plan.micro_batches_per_step(self.packing_factor)

    @property
    def loss(self) -> LossWeighting:
        """Each token's weight in a step's gradient under the plan's loss settings, against the same run unpacked,
        and the step-0 loss ratios packed / unpacked to expect (advisor/model/loss_expectation.py)."""
        return self._part("loss", lambda: loss_weighting(self.plan, self.hist, self.packing))

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self._part("findings", self._findings)

    def _findings(self) -> tuple[Finding, ...]:
        error = None
        try:
            memory, straggler, time = self.estimate.memory, self.estimate.time.straggler_factor, self.estimate.time
        except ValueError as e:  # nothing left to estimate (every sample skipped): said, and the other rules speak
            memory, straggler, time, error = None, None, None, str(e)
        try:
            loss = self.loss
        except ValueError:
            loss = None
        return tuple(check(self.plan, self.packing, memory, loss, straggler, time, estimate_error=error))

    @property
    def search(self) -> SearchResult:
        return self.searched()

    def has_searched(self, vary=()) -> bool:
        """Whether the search with these freedoms is done (asking costs nothing)."""
        return ("search", check_vary(vary)) in self._parts

    def searched(self, progress=None, vary=()) -> SearchResult:
        """The layout search, kept once done per set of freedoms (``vary``: seq_length, batch; see
        advice/search.py); ``progress(stage, fraction)`` hears of each candidate."""
        vary = check_vary(vary)

        def run() -> SearchResult:
            # every candidate is an analysis of its own: the memory grid, other pages and later searches reuse them
            model = self.hist.scale_model()

            def estimator(plan: Plan) -> Estimate:
                return analyze(plan, model, mfu=self.mfu, overhead_gib=self.overhead_gib).estimate

            return search(self.plan, model, mfu=self.mfu, progress=progress, estimator=estimator, vary=vary)

        return self._part(("search", vary), run)

    def export(
        self,
        fmt: str,
        version: str | None = None,
        *,
        recommended: bool = False,
        vary=(),
        mock_lengths: str | None = None,
    ) -> str:
        """One export as text, the same for the CLI and the dashboard, for the plan's Megatron-Bridge release unless
        ``version`` says another (``recommended``: the best plan of the search
        with these freedoms; ``mock_lengths``: the Megatron-LM export trains on mock data read from that file)."""
        spec = export_spec(fmt)
        result = self.searched(vary=vary) if recommended else None
        target = (
            analyze(result.recommended, self.hist, mfu=self.mfu, overhead_gib=self.overhead_gib)
            if result is not None
            else self
        )
        return spec.render(
            ExportInputs(
                plan=target.plan,
                version=version or target.plan.versions.megatron_bridge,
                packing_factor=target.packing_factor,
                num_samples=target.hist.num_samples,
                num_packs=target.packing.num_packs if target.packing is not None else None,
                findings=target.findings if spec.report else (),
                estimate=target.estimate if spec.report else None,
                search=result,
                mock_lengths=mock_lengths,
            )
        )

    def summary(self) -> dict:
        """The plan's derived settings, as the CLI's JSON and the dashboard show them."""
        p = self.plan
        return {
            "packing_mode": p.packing_mode,
            "pad_seq_to_mult": p.pad_seq_to_mult,
            "dp": p.dp,
            "pack_size": p.pack_size if p.packing_mode == "offline" else None,
            "samples_per_step": p.requested_samples,
            "packing_factor": self.packing_factor,
            "effective_samples_per_step": p.effective_samples_per_step(self.packing_factor),
            "global_batch_unit": p.batch_unit,
            "megatron_bridge_global_batch_size": self.global_batch_packs or p.requested_samples,
            "micro_batches_per_step": self.micro_batches_per_rank,
            "batch": p.batch_text(self.packing_factor),
            "pipeline_layout": p.pipeline_layout_summary(),
            "plan_notes": list(p.notes),
        }


def _analysis_arrays(a: Analysis) -> list:
    """What an analysis keeps alive: its packing, and its estimate's micro batches and online schedule (a search
    over a 512-GPU online plan once kept GiBs of them: counted now, so the budget drops the oldest)."""
    return packing_arrays(a.computed("packing")) + caches.held_arrays(a.computed("estimate"))


_ANALYSES = caches.bounded(
    "analyses", size=ANALYSIS_CACHE_SIZE, max_bytes=PACKING_CACHE_BYTES, arrays=_analysis_arrays, by_histogram=True
)


def analyze(
    plan: Plan, hist: LengthHistogram, *, mfu: float | None = None, overhead_gib: float = DEFAULT_OVERHEAD_GIB
) -> Analysis:
    """The analysis of a plan on its data, cached on their content (an equal plan and equal lengths hit)."""
    if not isinstance(plan, Plan):
        raise PlanError("plan", [f"expected a Plan, got {type(plan).__name__}"])
    mfu, overhead_gib = check_mfu(mfu), check_overhead(overhead_gib)
    key = (plan.model_dump_json(), plan.notes, mfu, overhead_gib)  # notes: what reading it said travels with it
    return _ANALYSES.get(hist, key, lambda: Analysis(plan=plan, hist=hist, mfu=mfu, overhead_gib=overhead_gib))


def memory_grid(analysis: Analysis, pack_sizes: list[int] | None = None, cps: list[int] | None = None) -> list[dict]:
    """Memory per GPU over pack size and CP (other settings as in the plan); layouts the GPUs cannot hold are
    left out. Each cell is an analysis of its own, so reruns hit the cache; past ``SCALE_MODEL_SAMPLES`` samples the
    cells pack a scale model of the data (memory depends on the pack size, not on how many packs there are)."""
    p = analysis.plan
    model = analysis.hist.scale_model()
    base = p.pack_size
    sizes = pack_sizes or sorted({max(256, base // 2), base, base * 2})
    cps = cps or [c for c in (1, 2, 4, 8, 16) if p.parallel.gpus % (p.parallel.tp * p.parallel.pp * c) == 0]
    rows = []
    for cp in cps:
        for size in sizes:
            try:
                cell = p.changed(
                    {"parallel": {"cp": cp}, "training": {"seq_length": size}, "packing": {"pack_size": size}}
                )
            except PlanError:
                continue
            same = cell == p  # the plan's own cell: its exact analysis is already there
            cell_analysis = (
                analysis if same else analyze(cell, model, mfu=analysis.mfu, overhead_gib=analysis.overhead_gib)
            )
            est = cell_analysis.estimate
            # rules a cell breaks; not fitting is the fits column already (memory.exceeds)
            breaks = sorted(
                {f.id for f in cell_analysis.findings if f.severity == "error" and not f.id.startswith("memory.")}
            )
            rows.append(
                {
                    "cp": cp,
                    "pack_size": size,
                    "memory_gib": est.memory.total / 2**30,
                    "fits": est.memory.fits,
                    "breaks": ", ".join(breaks),
                }
            )
    return rows
