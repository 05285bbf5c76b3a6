"""Everything the command line prints: each command's result as text, or as one JSON object (``--json``), on
stdout; progress lines and bars on stderr, so a pipe of the JSON never sees them. The commands compute
(advisor/cli/commands/) and never print; the text of a result lives only here.
"""

from __future__ import annotations

import json
import sys
import time
from argparse import Namespace
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from advisor.safe_write import shown as shown_path

if TYPE_CHECKING:
    from advisor.advice.search import Candidate
    from advisor.cli.commands.data import LengthsResult, PackResult, ScheduleResult
    from advisor.cli.commands.plan import EstimateResult, ExportResult, RecommendResult, SchemaResult, TrialResult
    from advisor.cli.commands.prepare import PrepareOutcome
    from advisor.cli.commands.tokenize import TokenizeOutcome


# ------------------------------------------------------------------------------------------------ progress
class Progress:
    """Stage lines on stderr with elapsed time, so long work is never silent (silent with --quiet)."""

    def __init__(self, quiet: bool):
        self.quiet, self.t0 = quiet, time.perf_counter()

    def __call__(self, stage: str, fraction: float = 0.0) -> None:
        if not self.quiet:
            print(f"[advisor {time.perf_counter() - self.t0:6.2f}s] {stage}", file=sys.stderr, flush=True)


class Bar:
    """A tqdm bar on stderr fed by the engine's ``progress(stage, fraction)`` callbacks (silent with --quiet)."""

    def __init__(self, quiet: bool, what: str):
        self.quiet, self.what, self.tqdm = quiet, what, None

    def __enter__(self) -> Bar:
        if not self.quiet:
            from tqdm import tqdm

            self.tqdm = tqdm(
                total=100,
                desc=self.what,
                file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} {postfix}",
                leave=False,
            )
        return self

    def __call__(self, stage: str, fraction: float) -> None:
        if self.tqdm is not None:
            self.tqdm.n = round(100 * fraction)
            self.tqdm.set_postfix_str(stage, refresh=True)

    def __exit__(self, *exc) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def trial_progress(message: str) -> None:
    print(f"[trial] {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ results
def show(args: Namespace, result: Any) -> None:
    """A command's result on stdout: one JSON object with --json, else its text (nothing for None)."""
    if result is None:
        return
    if args.json:
        print(json.dumps(jsonable(result.data), indent=None))
    else:
        TEXT[args.command](result)


def jsonable(obj: Any) -> Any:
    """Dict keys as strings, tuples as lists, numpy scalars as Python numbers."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _lines(*lines: str) -> None:
    print("\n".join(lines))


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def _left_out(excluded, notes) -> list[str]:
    return [f"  left out: {e.count:,} rows ({e.reason}; first at {e.first_at})" for e in excluded] + [
        f"  note: {note}" for note in notes
    ]


def lengths_text(r: LengthsResult) -> None:
    s = r.data
    _lines(
        f"{r.hist.source}: {s['num_samples']:,} samples, {s['total_tokens']:,} tokens",
        f"  mean {s['mean']:.1f}  p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}  max {s['max']}",
        "  above: " + "  ".join(f">{k}: {v:.2%}" for k, v in s["share_above"].items()),
        *_left_out(r.hist.excluded, r.hist.notes),
    )


def pack_text(r: PackResult) -> None:
    res, cfg = r.packing, r.packing.config
    md, m, rt = res.metadata, res.metrics, res.runtime
    bound = f"L1 {m.lower_bound_l1:,}  L2 {m.lower_bound_l2:,}" + (
        f"  LP {m.lower_bound_lp:,.1f}" if m.lower_bound_lp is not None else ""
    )
    lines = [
        f"{r.hist.source}: {m.num_sequences:,} samples -> {m.num_packs:,} packs of {cfg.pack_size} "
        f"({cfg.algorithm}, seed {cfg.seed}, pad_seq_to_mult {cfg.multiple}) in {res.seconds:.2f} s",
        f"  packing factor n = {md['packing_factor']}  (divide the global batch size by it)",
        f"  efficiency {md['packing_efficiency']} %  padding {m.padding_fraction:.2%}  "
        f"truncated {rt.num_truncated:,} samples ({rt.tokens_truncated:,} tokens)  "
        f"skipped {rt.num_skipped:,} samples ({rt.tokens_skipped:,} tokens; {r.data['format']} data)",
        f"  lower bounds on packs: {bound}; {m.gap_to_bound:,} packs above the best",
        f"  attention work sum(s^2) per pack: mean {m.attention_work_mean:,.0f}, max {m.attention_work_max:,} "
        f"(straggler ratio {m.straggler_ratio:.2f})",
    ]
    lines += [f"  without packing, {b.name}: efficiency {b.efficiency:.2f} %" for b in r.baselines]
    lines += [f"  Megatron-Bridge metadata ({cfg.pack_size}_metadata.jsonl entry):", "    " + json.dumps(md)]
    if "existing_packs" in r.data:
        e = r.data["existing_packs"]
        lines.append(f"  existing packs: {e['num_packs']:,}, metadata {json.dumps(e['metadata'])}")
    _lines(*lines, *_left_out(r.hist.excluded, r.hist.notes))


def estimate_text(r: EstimateResult) -> None:
    analysis = r.analysis
    est, plan, s = analysis.estimate, analysis.plan, analysis.summary()
    m, f, t, p = est.memory, est.flops, est.time, plan.parallel
    lines = [
        f"{shown_path(r.plan_file)}: {plan.model_name} on {p.gpus} x {plan.hardware.gpu} (TP {p.tp}, PP {p.pp}, "
        f"CP {p.cp}, EP {p.ep}, DP {p.dp}), packing {est.mode}, pad_seq_to_mult {est.pad_seq_to_mult}",
        f"  {versions_text(plan)}",
    ]
    packing = est.packing
    if analysis.packing_factor and packing is not None:
        rt = packing.runtime
        lines += [
            f"  batch: {s['batch']} (n = {analysis.packing_factor:.2f}): Megatron-Bridge global_batch_size "
            f"{s['megatron_bridge_global_batch_size']}, {s['micro_batches_per_step']} micro batches per DP rank",
            f"  data.format {plan.data.format}: {rt.num_truncated:,} samples truncated, {rt.num_skipped:,} "
            f"skipped (longer than {packing.config.effective_max_seq_length:,} tokens)",
        ]
    elif est.online is not None:  # the scheduler's count changes from step to step: its mean, as the step uses
        lines.append(f"  batch: {s['batch']}, {s['micro_batches_per_step']:.2f} micro batches per DP rank (mean)")
    else:
        lines.append(f"  batch: {s['batch']}, {s['micro_batches_per_step']} micro batches per DP rank")
    if est.online is not None:  # online or global-batch: the scheduler's micro batches change from step to step
        from advisor.model.estimate import scheduled_text

        run = est.online
        lines.append(
            f"  schedule: {scheduled_text(plan, run)}: {run.summary.micro_batches_mean:.2f} micro batches per step "
            f"({run.summary.micro_batches_min}-{run.summary.micro_batches_max}), {run.over_cap_share:.0%} of the "
            f"sequences longer than the cap, {run.summary.padding_fraction:.2%} padding, "
            f"{len(run.refusals)} step(s) refused"
        )
    lines.append(f"  lost: {est.samples_lost:,} samples truncated or skipped ({est.tokens_lost:,} tokens)")
    layout = s["pipeline_layout"]
    if layout is not None:
        from advisor.plan.pipeline_layout import ranks_text

        lines.append(f"  pipeline layout {layout['layout']} ({layout['source']}): {ranks_text(layout)}")
    lines.append(
        f"  memory per GPU ({m.stage} stage): {_gib(m.total)} of {_gib(m.capacity)} -> "
        f"{'fits' if m.fits else 'DOES NOT FIT'}"
    )
    lines += [f"    {name:<16} {_gib(value):>12}" for name, value in m.breakdown.items()]
    if m.offloaded:
        lines.append(
            f"    (and {_gib(m.offloaded)} of activations in host memory: "
            f"{plan.training.cpu_offloading_num_layers} layers offloaded)"
        )
    mb = m.megatron_bridge
    lines.append(
        f"  Megatron-Bridge 0.6.2 estimate (its log): weight and optimizer "
        f"{mb.weight_and_optimizer_bytes / 2**20:,.2f} MB, activation {mb.activation_bytes / 2**20:,.2f} "
        f"MB, total {mb.total_bytes / 2**20:,.2f} MB"
    )
    lines += [f"    why they differ: {d}" for d in m.differences]
    a = f.attention
    shown = [(k, v) for k, v in t.breakdown.items() if v > 0.0005 * t.step_seconds]
    steps = f"{t.steps_per_epoch:,.0f}" if t.steps_per_epoch >= 100 else f"{t.steps_per_epoch:.3g}"  # never "0"
    lines += [
        f"  FLOPs per step: model {f.model_per_step:.3e} (real tokens), computed {f.computed_per_step:.3e} "
        f"({f.padding_waste:.1%} on padding)",
        f"  attention core per step: THD {a['thd']:.3e}, padded {a['padded']:.3e}, block-masked "
        f"{a['block_mask']:.3e}; sum(s^2)/(sum s)^2 = {f.attention_ratio:.3f}",
        f"  step {t.step_seconds:.3f} s ({t.model}; MFU {t.mfu:.0%} of the {t.peak_format.upper()} peak, "
        f"straggler x{t.straggler_factor:.3f}), "
        f"{t.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, epoch {t.epoch_seconds / 3600:,.2f} h ({steps} steps)",
        "    " + ", ".join(f"{k.replace('_', ' ')} {v:.3f} s" for k, v in shown),
    ]
    if est.logged is not None:
        lines.append("  what the logs will print (their own formulas):")
        lines += [f"    {g.framework}: {g.line}: {g.value:,.1f} {g.unit} ({g.counts})" for g in est.logged.figures()]
    _lines(*lines, *_loss_lines(analysis), *(f"  note: {note}" for note in est.notes), *_comparison_lines(r))


def _comparison_lines(r: EstimateResult) -> list[str]:
    """``estimate --compare``: one line a way of packing (its step, per sample, memory, tokens lost, or why it is
    refused), then the recommendation and its sentence."""
    c = r.comparison
    if c is None:
        return []
    lines = [f"ways of packing ({c.basis}):"]
    for row in c.rows():
        mark = "*" if row["way"] == c.recommended else " "
        if row["refusal"]:
            lines.append(f" {mark} {row['way']:<46} refused: {row['refusal']}")
            continue
        lines.append(
            f" {mark} {row['way']:<46} step {row['step_seconds']:7.2f} s ({row['samples_per_step']:,.0f} samples, "
            f"{row['sample_seconds']:.4f} s each), memory {row['memory_gib']:5.1f} GiB"
            f"{'' if row['fits'] else ' (DOES NOT FIT)'}, {row['tokens_lost']:,} tokens lost, padding "
            f"{row['padding']:.2%}, straggler x{row['straggler']:.3f}"
        )
    lines.append(f"recommended: {c.recommended}: {c.why}")
    return lines


def _loss_lines(analysis) -> list[str]:
    """The loss weighting's lines (advisor/model/loss_expectation.py), indented under the plan's."""
    from advisor.cli.commands.plan import loss_of

    loss = loss_of(analysis)
    return [] if loss is None else ["  " + line for line in loss.lines()]


def _packing_factor(candidate: Candidate) -> float | None:
    packing = candidate.estimate.packing if candidate.estimate is not None else None
    return packing.packing_factor if packing is not None else None


def versions_text(plan) -> str:
    """The releases the plan runs on, as every output says them."""
    v = plan.versions
    return (
        f"versions: Megatron-Bridge {v.megatron_bridge}, Megatron-Core {v.megatron_core}, "
        f"Transformer Engine {v.transformer_engine}"
    )


def recommend_text(r: RecommendResult) -> None:
    from advisor.advice.search import FREEDOMS

    traps = [f for f in r.findings if f.outcome]
    lines = [
        f"{shown_path(r.plan_file)}: {len(r.findings)} findings",
        f"  {versions_text(r.analysis.plan)}",
        f"pre-flight: {len(traps)} known trap(s) at these versions"
        + ("" if traps else " (none of the catalogue's bites this plan)"),
    ]
    for f in traps:
        lines += [f"  [{f.outcome}] {f.id}: {f.message}", f"      why: {f.reason}", f"      upstream: {f.link}"]
        if f.fix:
            lines.append(f"      fix: {json.dumps(f.fix)}")
    lines.append("findings:")
    for f in r.findings:
        if f.outcome:
            continue
        lines += [f"  [{f.severity}] {f.id}: {f.message}", f"      why: {f.reason}", f"      source: {f.source}"]
        if f.fix:
            lines.append(f"      fix: {json.dumps(f.fix)}")
    lines += _loss_lines(r.analysis)
    kept = ", ".join(x for x in FREEDOMS if x not in r.vary)
    lines.append(
        f"searched {r.search.evaluated} layouts{f' keeping {kept}' if kept else ''}; best candidates against your plan:"
    )
    if not r.search.best:
        freed = "" if r.vary == frozenset(FREEDOMS) else f" (recommend --vary {','.join(FREEDOMS)} frees them)"
        lines.append("  none better that keeps what you fixed" + freed)
    for label, c in [("yours", r.search.baseline)] + [(f"#{i + 1}", c) for i, c in enumerate(r.search.best)]:
        s = c.summary()
        mem = f"{s['memory_gib']:.1f} GiB" if s["memory_gib"] is not None else "-"
        lines.append(
            f"  {label:>5}: {c.plan.hardware.gpu} {c.plan.training.precision}"
            f"{' FSDP' if c.plan.parallel.fsdp else ''} TP {s['tp']} CP {s['cp']} DP {s['dp']} "
            + (f"pack {s['pack_size']}" if s["pack_size"] is not None else f"packing {c.plan.packing_mode}")
            + " seq "
            f"{s['seq_length']}, {c.plan.batch_text(_packing_factor(c))}: {mem}, "
            f"{s['tokens_per_second_per_gpu']:,.0f} tokens/s/GPU ({s['why']})"
        )
    _lines(*lines)


def export_text(r: ExportResult) -> None:
    sys.stdout.write(r.text)


def trial_text(r: TrialResult) -> None:
    from advisor.trial.report import loss_lines, speed_lines, speed_report

    out = r.data
    m = out["memory"]
    lines = [
        f"trial on {out['device']} ({out['torch_threads']} threads), {out['steps']} timed steps per way after "
        f"{out['warmup_steps']} warm-up, model {out['model']}",
        f"  parity: loss {out['loss_parity']['max_abs_diff']:.2e} (<= {out['loss_parity']['bound']:g}), "
        f"gradients {out['grad_parity']['max_rel_diff']:.2e} (<= {out['grad_parity']['bound']:g})",
        *speed_lines(speed_report(out)),  # the same report the Trial page tables
        f"  memory: measured {m['measured_bytes'] / 2**20:,.1f} MiB, predicted "
        f"{m['predicted_bytes'] / 2**20:,.1f} MiB (measured/predicted {m['ratio_measured_over_predicted']:.2f}; "
        f"{m['how']})",
        *loss_lines(out),
    ]
    if out["distributed"]:
        d = out["distributed"]
        lines.append(
            f"  {d['world_size']} ranks ({d['backend']}): attention work per rank "
            f"{d['per_rank_attention_work']}, all-reduce wait {d['per_rank_allreduce_wait_seconds']} s; work "
            f"straggler measured x{d['measured_work_straggler']:.2f}, estimator "
            f"x{d['predicted_straggler_factor']:.2f}"
        )
    _lines(*lines)


def schedule_text(r: ScheduleResult) -> None:
    cfg, run, s = r.config, r.run, r.run.summary
    lines = [
        f"{r.source}: {r.samples:,} samples ({r.order}); Megatron-LM {cfg.commit} {cfg.scheduler}, DP {cfg.dp} "
        f"x CP {cfg.cp}, global batch {cfg.global_batch_size} samples, micro batch {cfg.micro_batch_size}",
        f"  buffer: max_seqlen_per_dp_cp_rank {run.max_seqlen_per_dp_cp_rank:,} (a pack holds "
        f"{run.capacity:,} tokens); sequences padded to a multiple of {run.padding_divisor}",
    ]
    if s.epoch_steps > s.steps:
        lines.append(
            f"  a scale model: {s.steps:,} of the epoch's {s.epoch_steps:,} steps, spread evenly over it "
            "(each exactly as the real run schedules it); the whole epoch is past what one simulation holds"
        )
    lines += [
        f"  {s.steps:,} steps: micro batches per step min {s.micro_batches_min}, mean "
        f"{s.micro_batches_mean:.2f}, max {s.micro_batches_max}; straggler x{s.straggler_factor:.3f} (worst "
        f"step x{s.straggler_worst:.2f})",
        f"  padding {s.padding_fraction:.2%} of {s.padded_tokens:,} tokens; {s.truncated_samples:,} samples "
        f"truncated ({s.truncated_tokens:,} tokens); {s.unused_samples:,} samples left after the last full "
        "batch",
    ]
    if run.refusals:
        lines.append(
            f"  REFUSED: {len(run.refusals):,} steps, first step {run.refusals[0].step}: {run.refusals[0].reason}"
        )
    _lines(*lines, *(f"  {i.severity}: {i.message} ({i.source})" for i in run.findings))


def tokenize_text(r: TokenizeOutcome) -> None:
    res, est, s = r.result, r.estimate, r.data["lengths"]
    rate = r.data["records_per_second"]
    lines = [
        f"{res.source}: {res.total_records:,} records, {res.lengths.size:,} tokenized "
        f"({'a uniform random sample' if res.sampled else 'all'}) in {res.seconds:.1f} s on {res.engine} "
        f"with {res.workers} worker(s): {rate:,.0f} records/s, {rate / res.workers:,.0f} per worker",
        f"  tokens per sample: mean {s['mean']:.1f}  p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}  max {s['max']}",
    ]
    if r.data.get("loss_fraction") is not None:
        lines.append(f"  loss tokens (the loss mask): {r.data['loss_fraction']:.1%} of label positions")
    lines += [f"  left out: {e.count:,} {e.reason} (first at {e.first_at})" for e in res.excluded]
    lines += [f"  note: {note}" for note in res.notes]
    lines.append(f"  for the plan: data: {{lengths: {r.output or '<lengths file>'}, format: {res.fmt}}}")
    if est is not None:
        level = f"{est.level:.0%}"
        for label, iv, fmt in (
            ("packs", est.packs, ",.0f"),
            ("packing factor n", est.packing_factor, ".3f"),
            ("efficiency %", est.efficiency, ".3f"),
        ):
            lines.append(
                f"  whole data set at pack size {est.pack_size}: {label} {iv.estimate:{fmt}} "
                f"({level} interval {iv.low:{fmt}} to {iv.high:{fmt}})"
            )
    _lines(*lines)


def prepare_text(r: PrepareOutcome) -> None:
    res = r.result
    how = (
        f"re-packed from the token cache of {shown_path(res.from_cache)}"
        if res.from_cache
        else f"tokenized in {res.tokenize_seconds:.1f} s"
    )
    o = res.options
    lines = [
        f"{shown_path(res.out)}: {', '.join(res.files)} ({how}; {res.seconds:.1f} s in all)",
        f"  pack size {o.pack_size}, {o.algorithm}, seed {o.seed}, pad_seq_to_mult {o.pad_seq_to_mult}, "
        f"max_seq_length {o.max_seq_length or o.pack_size}",
    ]
    for s in res.splits:
        lines.append(
            f"  {s.split}: {s.records_read:,} records read, {s.packed:,} packed, {s.skipped:,} skipped "
            f"(longer than max_seq_length), {s.truncated:,} truncated -> {s.packs:,} packs "
            f"(lower bound {s.lower_bound:,}); efficiency {s.efficiency:.2f} %, n = {s.packing_factor:.3f}"
        )
        lines += [f"    left out: {e['count']:,} {e['reason']} (first at {e['first_at']})" for e in s.excluded]
    fields = ", ".join(f"{k}={v!r}" for k, v in res.specs().items())
    lines.append(f"  Megatron-Bridge: PackedSequenceSpecs({fields})")
    lines += [f"  note: {note}" for note in res.notes]
    _lines(*lines)


def schema_text(r: SchemaResult) -> None:
    print(json.dumps(r.data, indent=2))


def warmup_text(times: list[tuple[str, float]]) -> None:
    _lines(*(f"  {algorithm:<22} ready in {seconds:5.2f} s" for algorithm, seconds in times))


TEXT: dict[str, Callable[[Any], None]] = {
    "lengths": lengths_text,
    "pack": pack_text,
    "estimate": estimate_text,
    "recommend": recommend_text,
    "export": export_text,
    "trial": trial_text,
    "schedule": schedule_text,
    "tokenize": tokenize_text,
    "prepare": prepare_text,
    "schema": schema_text,
    "warmup": warmup_text,
}
