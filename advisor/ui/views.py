"""What the pages show, built from engine results: summary tables, the pack-size sweep, candidate tables, exports
and the worked examples of the explanations. Plain data in, plain data out (no Streamlit).
"""

from __future__ import annotations

import pandas as pd

from advisor import caches
from advisor.advice.compare import PackingComparison, compare_packing
from advisor.advice.exports import prepare_command
from advisor.advice.search import SearchResult
from advisor.analysis import Analysis, memory_grid
from advisor.data.lengths import SCALE_MODEL_SAMPLES, LengthHistogram, summarize
from advisor.data.prepared import find_prepared
from advisor.formats import EXPORTS
from advisor.model.loss_expectation import LossWeighting
from advisor.packing import packers
from advisor.packing.baselines import without_packing
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.plan import Plan
from advisor.plan.pipeline_layout import ranks_text
from advisor.ui.samples import MAX_DASHBOARD_PACK
from advisor.vocabulary import ExportFormat


# ------------------------------------------------------------------------------------------------ the data
def summary_table(hist: LengthHistogram) -> pd.DataFrame:
    s = summarize(hist)
    rows = [
        ("samples", f"{s.num_samples:,}"),
        ("tokens", f"{s.total_tokens:,}"),
        ("mean", f"{s.mean:,.1f}"),
        ("p50", f"{s.p50:,}"),
        ("p90", f"{s.p90:,}"),
        ("p99", f"{s.p99:,}"),
        ("max", f"{s.max:,}"),
    ]
    rows += [(f"share > {k:,}", f"{v:.2%}") for k, v in s.share_above.items()]
    rows.append(("rows left out", f"{s.excluded:,}"))
    return pd.DataFrame(rows, columns=["statistic", "value"])


def summary_numbers(hist: LengthHistogram) -> dict[str, str]:
    """The few figures shown large above the summary table."""
    s = summarize(hist)
    return {"samples": f"{s.num_samples:,}", "mean": f"{s.mean:,.0f}", "p99": f"{s.p99:,}", "max": f"{s.max:,}"}


def packing_headline(result) -> dict:
    """The Packing page's headline figures of a packing, as shown (a few strings: kept in the session, they stay on
    screen while the next pack size is packed)."""
    m = result.metrics
    return {
        "pack_size": result.config.pack_size,
        "algorithm": result.config.algorithm,
        "figures": [
            ("packs", f"{m.num_packs:,}", "packs"),
            ("packing factor n", str(result.metadata["packing_factor"]), "packing_factor"),
            ("efficiency", f"{result.metadata['packing_efficiency']} %", "efficiency"),
            ("data share", f"{100 * (1 - m.padding_fraction):.2f} %", "data_share"),
            ("straggler ratio", f"{m.straggler_ratio:.2f}", "straggler_ratio"),
        ],
    }


def schedule_caption(plan: Plan, est) -> str | None:
    """Under the Packing page's figures of a scheduled plan (online, global-batch): who schedules, with which cap,
    and the micro batches per step it gives (None for the other modes)."""
    run = est.online
    if run is None:
        return None
    from advisor.model.estimate import scheduled_text

    s = run.summary
    return (
        f"{scheduled_text(plan, run)}: {s.micro_batches_mean:.2f} micro batches per step "
        f"({s.micro_batches_min}-{s.micro_batches_max}), {run.over_cap_share:.0%} of the sequences longer than "
        f"the cap, ranks waiting x{s.straggler_factor:.3f} for the heaviest; {est.samples_lost:,} samples "
        f"truncated ({est.tokens_lost:,} tokens)."
    )


def micro_batch_headline(plan: Plan, mb) -> dict:
    """The Packing page's figures when the plan does not pack offline: what a micro batch holds (``MicroBatches``
    from the estimate, the same numbers the step time uses), with no packs and no metadata file (in-batch packing
    has neither: Megatron-Bridge concatenates each micro batch in the collate step).

    >>> import numpy as np
    >>> from advisor.model.micro_batches import in_batch_micro_batches
    >>> from advisor.plan import plan_from_dict
    >>> p = plan_from_dict({"version": 2, "model": "qwen2.5-vl-7b", "training": {"task": "vlm-sft",
    ...                     "micro_batch_size": 2, "seq_length": 64}})
    >>> mb = in_batch_micro_batches(np.array([0, 0, 0, 0, 4]), 2, 8, 0, 64)
    >>> [f[:2] for f in micro_batch_headline(p, mb)["figures"]]  # doctest: +NORMALIZE_WHITESPACE
    [('samples per micro batch', '2.0'), ('tokens per micro batch', '8'), ('computed per micro batch', '16'),
     ('padding', '50.00 %'), ('micro batches in the epoch', '2')]
    """
    real, computed = float(mb.real_tokens.sum()), float(mb.computed_tokens.sum())
    return {
        "mode": plan.packing_mode,
        "figures": [
            ("samples per micro batch", f"{float(mb.samples.mean()):.1f}", "mb_samples"),
            ("tokens per micro batch", f"{float(mb.real_tokens.mean()):,.0f}", "mb_tokens"),
            ("computed per micro batch", f"{float(mb.computed_tokens.mean()):,.0f}", "mb_computed"),
            ("padding", f"{100 * (1 - real / computed) if computed else 0.0:.2f} %", "mb_padding"),
            ("micro batches in the epoch", f"{mb.total_micro_batches:,}", "mb_total"),
        ],
    }


def no_packs_text(plan: Plan) -> str:
    """Why the Packing page shows micro batches and no packs for this plan, and what the export really writes."""
    mode = plan.packing_mode
    if mode == "in-batch":
        return (
            f"In-batch packing (Megatron-Bridge enable_in_batch_packing): each micro batch's "
            f"{plan.training.micro_batch_size} samples are concatenated into one THD row in the collate step, "
            f"each padded to a multiple of {plan.pad_seq_to_mult} (the CP/SP rule). There are no packs, no pack "
            "size and no metadata file; the export writes enable_in_batch_packing and no packing specs."
        )
    if mode == "online":
        return (
            "Online packing (Megatron-LM's scheduler) forms packs per global batch while training: the Online "
            "packing page shows its schedule; there is no packed file or metadata to write."
        )
    if mode == "global-batch":
        return (
            "Global-batch packing (Megatron-Bridge 0.7, dataset.enable_global_batch_packing) runs Megatron-Core's "
            f"{plan.packing.scheduler} scheduler on each global batch while training: every sequence is padded to "
            f"a multiple of {plan.pad_seq_to_mult} and packed into bins of max_seqlen_per_dp_cp_rank tokens a "
            "rank, so the micro batches per step change from step to step. There is no packed file or metadata "
            "to write; the Online packing page compares it with the other modes."
        )
    return f"No packing: each micro batch of {plan.training.micro_batch_size} samples is padded " + (
        "to seq_length." if plan.training.task == "pretrain" else "to its longest sample (rounded to 16)."
    )


_SWEEPS = caches.bounded("pack-size sweeps", size=16, by_histogram=True)
SWEEP_METRICS = ("packing_efficiency", "padding_fraction", "packing_factor")  # the sweep chart's curves
SWEEP_ALGORITHMS = packers.SWEEP_ALGORITHMS  # the Packing page's curves


def packing_sweep(
    hist: LengthHistogram,
    pack_sizes: list[int],
    algorithms: list[str],
    micro_batch_size: int = 4,
    seed: int = 1234,
    pad_seq_to_mult: int = 1,
    progress=None,
    overlong: str = "truncate",
) -> pd.DataFrame:
    """Efficiency, padding and n against pack size per algorithm, and the two no-packing baselines; computed once
    per (data, settings) and kept. On more than ``SCALE_MODEL_SAMPLES`` samples the curves come from a scale model
    of the data (same shape, fewer samples): the packs themselves are not shown, and the page's own packing stays
    exact."""
    setting = (tuple(pack_sizes), tuple(algorithms), micro_batch_size, seed, pad_seq_to_mult, overlong)
    return _SWEEPS.get(
        hist,
        setting,
        lambda: _sweep(
            hist.scale_model(), pack_sizes, algorithms, micro_batch_size, seed, pad_seq_to_mult, progress, overlong
        ),
    )


def _sweep(
    hist, pack_sizes, algorithms, micro_batch_size, seed, pad_seq_to_mult, progress=None, overlong="truncate"
) -> pd.DataFrame:
    rows = []
    steps = len(pack_sizes) * (len(algorithms) + 1)
    for i, size in enumerate(pack_sizes):
        for j, algorithm in enumerate(algorithms):
            if progress is not None:
                progress(
                    f"sweep {i * (len(algorithms) + 1) + j + 1} of {steps}: {algorithm} at pack size {size:,}",
                    (i * (len(algorithms) + 1) + j) / steps,
                )
            # not through the packing cache: the sweep is kept whole in _SWEEPS, its packs are not needed again
            res = pack(
                hist,
                PackingConfig(
                    pack_size=size, algorithm=algorithm, seed=seed, pad_seq_to_mult=pad_seq_to_mult, overlong=overlong
                ),
            )
            rows.append(
                {
                    "pack_size": size,
                    "algorithm": algorithm,
                    "packing_efficiency": res.metrics.packing_efficiency,
                    "padding_fraction": res.metrics.padding_fraction,
                    "packing_factor": res.packing_factor,
                    "straggler_ratio": res.metrics.straggler_ratio,
                }
            )
        for b in without_packing(hist, PackingConfig(pack_size=size, seed=seed, overlong=overlong), micro_batch_size):
            rows.append(
                {
                    "pack_size": size,
                    "algorithm": f"no packing: {b.name}",
                    "packing_efficiency": b.efficiency,
                    "padding_fraction": b.padding_fraction,
                    "packing_factor": 1.0,
                    "straggler_ratio": None,
                }
            )
    if progress is not None:
        progress("sweep done", 1.0)
    frame = pd.DataFrame(rows)
    frame.attrs["samples"] = hist.num_samples
    frame.attrs["scale_model"] = "scale model" in hist.source
    return frame


def sweep_sizes(hist: LengthHistogram, most: int = 6) -> list[int]:
    """Powers of two from the 10th-percentile length up to the first one that holds the longest sample: fixed per
    data set, so the sweep is computed once and a changed control does not pack it all again.

    >>> sweep_sizes(LengthHistogram.from_samples([100, 300, 5000]))
    [256, 512, 1024, 2048, 4096, 8192]
    """
    top = min(MAX_DASHBOARD_PACK, 1 << max(4, int(hist.max_length - 1).bit_length()))
    low = min(top, 1 << max(4, int(hist.percentile(10)).bit_length()))
    sizes: list[int] = []
    size = top
    while size >= low and len(sizes) < most:
        sizes.append(size)
        size //= 2
    return sorted(sizes)


def memory_grid_frame(analysis: Analysis) -> pd.DataFrame:
    return pd.DataFrame(memory_grid(analysis), columns=["cp", "pack_size", "memory_gib", "fits", "breaks"])


def offload_text(est) -> str | None:
    """What CPU offloading moves off the GPU and what its copies cost, when the plan offloads; None otherwise."""
    m = est.memory
    if not m.offloaded:
        return None
    exposed = est.time.breakdown.get("offload", 0.0)
    cost = f"{exposed:.3f} s a step waiting for the host link" if exposed else "hidden behind the compute"
    return (
        f"CPU offloading: {m.offloaded / 2**30:.1f} GiB of activations per GPU in host memory "
        f"(not in the GPU total); the copies out and back are {cost}."
    )


def pipeline_layout_text(plan) -> str | None:
    """Which layout places the layers on the pipeline ranks, when one does (the plan's own, or the recipe's that
    made a 61-layer model fit its pipeline), and each rank's layers; None with the even split.

    >>> from advisor.plan import plan_from_dict
    >>> pipeline_layout_text(plan_from_dict({"model": "deepseek-v3", "parallel": {"gpus": 64, "pp": 4, "ep": 8},
    ...                                      "training": {"task": "pretrain"}, "packing": {"mode": "none"}}))[:58]
    "Pipeline layout: Megatron-Bridge's deepseek-v3 recipe layo"
    """
    s = plan.pipeline_layout_summary()
    if s is None:
        return None
    return (
        f"Pipeline layout: {s['source']}, {s['layout']}; {ranks_text(s)}. The slowest rank sets the pace and "
        "the fullest the memory."
    )


def candidates_table(result: SearchResult) -> pd.DataFrame:
    """Your plan and the search's candidates, the batch in both units (packs ≈ samples) on every row."""
    rows = [{"plan": "yours", **result.baseline.summary()}]
    rows += [{"plan": f"#{i + 1}", **c.summary()} for i, c in enumerate(result.best)]
    # what decides first (readable at 1280-1440 px without scrolling): the layout, memory and throughput; then the
    # batch in both units (the samples asked for are the same on every row: the page says them once)
    frame = pd.DataFrame(rows)[
        [
            "plan",
            "tp",
            "sp",
            "cp",
            "dp",
            "memory_gib",
            "fits",
            "tokens_per_second_per_gpu",
            "global_batch_packs",
            "effective_samples_per_step",
            "seq_length",
            "pack_size",
            "micro_batch_size",
            "why",
        ]
    ]
    frame = frame.rename(
        columns={
            "memory_gib": "GiB",
            "tokens_per_second_per_gpu": "tokens/s/GPU",
            "global_batch_packs": "packs/step (MB GBS)",
            "effective_samples_per_step": "≈ samples/step",
        }
    )
    return frame.round({"GiB": 1, "tokens/s/GPU": 0, "≈ samples/step": 0})


def search_note(analysis: Analysis, result: SearchResult | None = None) -> str | None:
    """Said under the candidates: none that keeps what the user fixed, and when they come from a scale model."""

    notes = []
    if result is not None and not result.best:
        notes.append(
            f"No layout of {analysis.plan.parallel.gpus} GPUs beats yours while keeping seq_length and the "
            "samples per step (±5 %); let the search change them to see more."
        )
    n = analysis.hist.num_samples
    if n > SCALE_MODEL_SAMPLES:
        notes.append(
            f"Candidates are estimated on a scale model of the data ({SCALE_MODEL_SAMPLES:,} of {n:,} "
            "samples, the same length distribution); your plan's own figures on the other pages use all of "
            "it."
        )
    return " ".join(notes) or None


MOCK_TOGGLE = "Train on Megatron-LM's mock data of these lengths"
MOCK_LENGTHS_FILE = "lengths.csv"  # the dashboard's mock lengths download, named in the arguments it goes with


def export_text(
    analysis: Analysis, fmt: ExportFormat, version: str | None, recommended: bool, vary=(), mock: bool = False
) -> tuple[str, str]:
    """What ``python -m advisor export`` prints for the same plan (for its Megatron-Bridge release, or ``version``),
    and a file name for it (``mock``: the
    Megatron-LM arguments train on mock SFT data of the lengths in MOCK_LENGTHS_FILE, as ``export --lengths-csv
    lengths.csv`` writes them); a plan whose data cannot be estimated gets one commented line saying why."""
    try:
        return (
            analysis.export(
                fmt,
                version,
                recommended=recommended,
                vary=vary,
                mock_lengths=MOCK_LENGTHS_FILE if mock and EXPORTS[fmt].mock_lengths else None,
            ),
            EXPORTS[fmt].file_name,
        )
    except ValueError as e:
        return f"# cannot export: {e}\n", "error.txt"


def mock_lengths_file(analysis: Analysis) -> str:
    """The lengths file the mock-data arguments name: the CLI's ``--lengths-csv`` content for the same data."""
    from advisor.advice.exports import mock_lengths_csv

    return mock_lengths_csv(analysis.hist, analysis.plan.packing_seed)


def prepare_text(plan: Plan) -> str | None:
    """The ``advisor prepare`` command that writes the plan's packed data set, or None when the plan packs nothing
    offline or its data already is a prepared folder (the exports then point at it)."""
    if plan.packing_mode != "offline" or find_prepared(plan.data.lengths, plan.pack_size) is not None:
        return None
    return prepare_command(plan)


def code_language(fmt: str) -> str:
    return EXPORTS[fmt].language if fmt in EXPORTS else "text"


# ------------------------------------------------------------------------------------------------ worked examples
def attention_example_text(lengths: tuple[int, ...] = (100, 200, 300)) -> str:
    """Three samples' attention work three ways, in one sentence (computed by advisor.ui.explain)."""
    from advisor.ui.explain import attention_example

    e = attention_example(list(lengths))
    squares = " + ".join(f"{s}²" for s in lengths)
    return (
        f"Worked example: samples of {', '.join(map(str, lengths))} tokens in one packed row. THD computes "
        f"{squares} = {e['thd']:,}; one block mask over the row computes ({sum(lengths)})² = "
        f"{e['block_mask']:,} ({e['block_mask'] / e['thd']:.1f}x); padding each to {max(lengths)} computes "
        f"{len(lengths)} x {max(lengths)}² = {e['padded']:,}."
    )


def global_batch_example_text(plan: Plan, packing_factor: float | None) -> str:
    """The plan's batch in both units ("N packs ≈ M samples"), as every page says it."""
    from advisor.ui.explain import global_batch_example

    if plan.packing_mode != "offline" or not packing_factor:
        return (
            f"Your plan packs {plan.packing_mode}: Megatron's global_batch_size counts samples "
            f"({plan.batch_text(packing_factor)}), no division by n."
        )
    e = global_batch_example(plan, packing_factor)
    asked = (
        f"your plan's {e['samples']} samples per step / n = {packing_factor:.2f} → "
        if e["samples"]
        else f"your plan counts packs (n = {packing_factor:.2f}): "
    )
    return (
        f"Batch: {plan.batch_text(packing_factor)}. Worked example: {asked}Megatron-Bridge global_batch_size "
        f"{e['packs']} packs (a multiple of DP {e['dp']}) ≈ {e['samples_trained']} samples per step."
    )


def fix_text(fix: dict) -> str:
    """A finding's fix as its button says it: each field set, by its path; a field cleared says "null".

    >>> fix_text({"training": {"micro_batch_size": 2, "global_batch_samples": None}, "packing": {"pack_size": 768}})
    'training.micro_batch_size 2, training.global_batch_samples null, packing.pack_size 768'
    """
    parts = []
    for section, values in fix.items():
        for name, value in values.items() if isinstance(values, dict) else [("", values)]:
            shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
            parts.append(f"{section}.{name} {shown}" if name else f"{section} {shown}")
    return ", ".join(parts)


def memory_error_text(est) -> str:
    """The red banner of a plan that does not fit: how much, on what, and where to look."""
    m = est.memory
    return (
        f"This plan does not fit: it needs {m.total / 2**30:.1f} GiB per GPU of {m.capacity / 2**30:.0f} GiB "
        f"({m.stage} stage). Megatron would run out of memory; the Recommendations page lists fixes that fit "
        "(more TP, CP or PP, recompute, a smaller pack), and the export refuses this plan."
    )


def cp_example_text(plan: Plan, length: int = 1001) -> str:
    """A sequence padded to the plan's CP/SP multiple."""
    from advisor.ui.explain import cp_padding_example

    p = plan.parallel
    e = cp_padding_example(length, plan.pad_seq_to_mult, p.cp)
    if e["multiple"] == 1:
        return "Worked example: with pad_seq_to_mult 1 a sequence is packed as it is."
    cut = f" and cut into {e['chunks']} chunks of {e['chunk_tokens']}, two per CP rank" if p.cp > 1 else ""
    return (
        f"Worked example: with pad_seq_to_mult {e['multiple']} (CP {p.cp}, TP {p.tp}{', SP' if p.sp else ''}) "
        f"a {length}-token sequence is padded to {e['padded']}{cut}."
    )


# ------------------------------------------------------------------------------------------ online packing
def _comparison_arrays(comparison: PackingComparison) -> list:
    """The arrays a comparison holds: its runs' micro batches and schedules (shared ones counted once)."""
    return caches.held_arrays(comparison, depth=6)


# the last few settings of the Online packing page, within a byte budget: the server's memory is shared
_COMPARISONS = caches.bounded(
    "packing comparisons", size=8, max_bytes=768 << 20, arrays=_comparison_arrays, by_histogram=True
)


def _comparison_key(plan: Plan, hist: LengthHistogram, megatron_lm: str, max_seqlen_per_dp_cp_rank: int | None):
    return plan.model_dump_json(), hist.order_digest, megatron_lm, max_seqlen_per_dp_cp_rank


def packing_comparison(
    plan: Plan, hist: LengthHistogram, megatron_lm: str = "dev", max_seqlen_per_dp_cp_rank: int | None = None
) -> PackingComparison:
    """Offline against online packing of the session's data and plan (kept for the last few settings: a page
    rerun with the same ones reuses it)."""
    key = _comparison_key(plan, hist, megatron_lm, max_seqlen_per_dp_cp_rank)
    return _COMPARISONS.get(
        hist,
        key,
        lambda: compare_packing(
            plan, hist, megatron_lm=megatron_lm, max_seqlen_per_dp_cp_rank=max_seqlen_per_dp_cp_rank
        ),
    )


def comparison_kept(
    plan: Plan, hist: LengthHistogram, megatron_lm: str = "dev", max_seqlen_per_dp_cp_rank: int | None = None
) -> bool:
    """Whether this comparison is already computed (a rerun needs no room on the server)."""
    return _COMPARISONS.peek(hist, _comparison_key(plan, hist, megatron_lm, max_seqlen_per_dp_cp_rank)) is not None


def online_estimate_text(run) -> str | None:
    """Under the online charts: where the epoch's figures come from, with their 95 % intervals when the steps are
    a scale model of the epoch (None when every step was scheduled)."""
    if run.scale <= 1:
        return None
    iv = run.intervals()
    nmb, strag = iv["micro_batches_mean"], iv["straggler_factor"]
    pad = iv.get("padding_fraction")
    s = run.summary
    padding = f", padding {pad[0]:.3%} ± {pad[1]:.3%}" if pad else ""
    return (
        f"The epoch's figures come from {s.steps:,} of its {s.epoch_steps:,} steps (an even spread over the "
        f"shuffled data, each scheduled exactly): micro batches per step {nmb[0]:.3f} ± {nmb[1]:.3f}, straggler "
        f"x{strag[0]:.4f} ± {strag[1]:.4f}{padding} (95 % intervals). The step below is scheduled exactly, "
        "whichever you pick."
    )


def online_step(plan: Plan, hist: LengthHistogram, run, step: int):
    """Step ``step`` of the epoch in full: from the run when its scale model holds it, else scheduled alone."""
    import numpy as np

    from advisor.packing.online.from_plan import step_of

    k = int(np.searchsorted(run.step_ids, step))
    if k < run.step_ids.size and int(run.step_ids[k]) == step:
        return run.step(k)
    return step_of(plan, hist, step)


def comparison_table(comparison: PackingComparison) -> pd.DataFrame:
    """One row per way of packing, the columns a reader compares; a way refused on this layout says why instead."""
    rows = comparison.rows()

    def col(fmt) -> list[str]:
        return ["-" if r["refusal"] else fmt(r) for r in rows]

    return pd.DataFrame(
        {
            "way": [r["way"] for r in rows],
            "micro batches / step": col(
                lambda r: f"{r['micro_batches_mean']:.2f} ({r['micro_batches_min']}-{r['micro_batches_max']})"
            ),
            "padding": col(lambda r: f"{r['padding']:.2%}"),
            "straggler": col(lambda r: f"x{r['straggler']:.3f}"),
            "step s": col(lambda r: f"{r['step_seconds']:.3f}"),
            "s / sample": col(lambda r: f"{r['sample_seconds']:.4f}"),
            "tokens/s/GPU": col(lambda r: f"{r['tokens_per_second_per_gpu']:,.0f}"),
            "FLOPs / step": col(lambda r: f"{r['flops_per_step']:.3e}"),
            "epoch h": col(lambda r: f"{r['epoch_hours']:.2f}"),
            "memory GiB": col(lambda r: f"{r['memory_gib']:.1f}" + ("" if r["fits"] else " (does not fit)")),
            "tokens lost": col(lambda r: f"{r['tokens_lost']:,}"),
            "refused steps": col(lambda r: str(r["refused_steps"])),
            "refused": [r["refusal"] or "" for r in rows],
        }
    )


def loss_metrics(lw: LossWeighting) -> list[tuple[str, str, str]]:
    """(label, value, explanation key) of the loss weighting's three headline figures, as the Recommendations page
    shows them."""
    d, o = lw.reported_drawn, lw.objective_same
    return [
        ("lm loss at step 0, packed / unpacked", f"{lw.reported_same:.3f}", "loss_reported_ratio"),
        ("lm loss, two random first steps", f"{d.low:.3f}-{d.high:.3f}", "loss_reported_ratio"),
        ("objective at step 0, packed / unpacked", f"{o.mean:.3f}", "loss_objective_ratio"),
        ("gradient weight moved by packing", f"{lw.moved_vs_unpacked:.1%}", "loss_moved"),
    ]


def loss_caption(lw: LossWeighting) -> str:
    """The words under the loss weighting's figures: what it models, the scale model it stands on when the plan's
    step is beyond what the advisor draws (said once), and its notes."""
    scale = [f"Scale model: {lw.scale}."] if lw.scale else []
    return " ".join([lw.lines()[0].rstrip(".") + "."] + scale + list(lw.notes))
