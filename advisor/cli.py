"""The command line: ``python -m advisor <command> ...`` over the same engine as the dashboard."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace

from advisor.errors import InputError, PlanError
from advisor.limits import MAX_GPUS, MAX_PACK, MAX_TOKENS

# Each command imports what it uses when it runs: `advisor pack` of a small file must not wait for pydantic, torch or
# pandas. These names are what the parser needs (kept equal to the engine's by tests/test_cli.py).
ALGORITHM_NAMES = ("first_fit_shuffle", "first_fit_decreasing", "best_fit_decreasing", "shortest_pack_first",
                   "column_generation")
MB_DEFAULT_ALGORITHM, MB_DEFAULT_SEED = "first_fit_shuffle", 1234
MB_RECIPE_SEED = 5678  # advisor.plan.schema's: the recipes' packing seed, a plan's default
DEFAULT_MAX_MB = 1024.0


class _Progress:
    """Stage lines on stderr with elapsed time, so long work is never silent."""

    def __init__(self, quiet: bool):
        self.quiet, self.t0 = quiet, time.perf_counter()

    def __call__(self, stage: str, fraction: float = 0.0) -> None:
        if not self.quiet:
            print(f"[advisor {time.perf_counter() - self.t0:6.2f}s] {stage}", file=sys.stderr, flush=True)


class _bar:
    """A tqdm bar on stderr fed by the engine's ``progress(stage, fraction)`` callbacks (silent with --quiet)."""

    def __init__(self, quiet: bool, what: str):
        self.quiet, self.what, self.tqdm = quiet, what, None

    def __enter__(self):
        if not self.quiet:
            from tqdm import tqdm

            self.tqdm = tqdm(total=100, desc=self.what, file=sys.stderr, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                             "{elapsed} {postfix}", leave=False)
        return self

    def __call__(self, stage: str, fraction: float) -> None:
        if self.tqdm is not None:
            self.tqdm.n = round(100 * fraction)
            self.tqdm.set_postfix_str(stage, refresh=True)

    def __exit__(self, *exc):
        if self.tqdm is not None:
            self.tqdm.close()


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("lengths", help="lengths file (csv, tsv, json, jsonl, npy, parquet), a Megatron-LM mock SFT "
                   "config (file or inline JSON), or a Megatron-Bridge packed data set (.parquet, folder, .npy)")
    p.add_argument("--column", help="column or record field holding lengths (default: chosen by name)")
    p.add_argument("--histogram", action="store_true", default=None, help="the file is a length,count histogram")
    p.add_argument("--on-bad", choices=("error", "skip"), default="error",
                   help="stop at the first bad row (default) or leave bad rows out and count them")
    p.add_argument("--max-file-mb", type=_megabytes, default=DEFAULT_MAX_MB, help="refuse larger files")
    p.add_argument("--mock-samples", type=_positive_int(50_000_000), default=1_000_000,
                   help="samples drawn for a mock lognormal config (Megatron-LM: 1,000,000)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _load(args, progress):
    from advisor.data.ingest import load_lengths

    progress(f"reading {args.lengths if len(args.lengths) < 80 else 'inline JSON'}")
    return load_lengths(args.lengths, column=args.column, histogram=args.histogram, on_bad=args.on_bad,
                        max_bytes=int(args.max_file_mb * 2**20), mock_samples=args.mock_samples)


def cmd_lengths(args) -> dict:
    from advisor.data.lengths import summarize

    progress = _Progress(args.quiet)
    hist = _load(args, progress)
    out = {"source": hist.source, **summarize(hist).as_dict(),
           "excluded": [e.__dict__ for e in hist.excluded], "notes": list(hist.notes)}
    if args.json:
        return out
    s = out
    print(f"{hist.source}: {s['num_samples']:,} samples, {s['total_tokens']:,} tokens")
    print(f"  mean {s['mean']:.1f}  p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}  max {s['max']}")
    print("  above: " + "  ".join(f">{k}: {v:.2%}" for k, v in s["share_above"].items()))
    _print_exclusions(hist)
    return {}


def _print_exclusions(hist) -> None:
    for e in hist.excluded:
        print(f"  left out: {e.count:,} rows ({e.reason}; first at {e.first_at})")
    for note in hist.notes:
        print(f"  note: {note}")


def cmd_pack(args) -> dict:
    import numpy as np

    from advisor.packing.baselines import pad_to_longest_in_batch, pad_to_sequence_length
    from advisor.packing.config import PackingConfig
    from advisor.packing.metrics import packing_metrics, per_pack
    from advisor.packing.offline import megatron_bridge_metadata, pack, runtime_lengths

    overlong = {"sft": "truncate", "chat": "skip"}.get(args.format, args.overlong or "truncate")
    if args.overlong and args.overlong != overlong:
        raise ValueError(f"--overlong {args.overlong} contradicts --format {args.format} ({args.format} data is "
                         f"{'skipped' if overlong == 'skip' else 'truncated'} past the max length): give one of them")
    progress = _Progress(args.quiet)
    hist = _load(args, progress)
    cfg = PackingConfig(pack_size=args.pack_size, algorithm=args.algorithm, seed=args.seed,
                        pad_seq_to_mult=args.pad_seq_to_mult, max_seq_length=args.max_seq_length,
                        overlong=overlong)
    result = pack(hist, cfg, progress=progress)
    # without packing nothing is pre-padded to pad_seq_to_mult: the baselines see the lengths as truncated only
    counts = runtime_lengths(hist, replace(cfg, pad_seq_to_mult=1)).counts
    baselines = [pad_to_sequence_length(counts, cfg.effective_max_seq_length),
                 pad_to_longest_in_batch(counts, cfg.effective_max_seq_length, args.micro_batch_size,
                                         seed=cfg.seed or 0)]
    out = result.summary()
    out["source"] = hist.source
    out["excluded"] = [e.__dict__ for e in hist.excluded]
    out["notes"] = list(result.notes)
    out["format"] = "chat" if overlong == "skip" else "sft"
    out["baselines"] = [{"name": b.name, "efficiency": b.efficiency, "padding_fraction": b.padding_fraction,
                         "micro_batches": b.micro_batches, "token_slots": b.token_slots} for b in baselines]
    if hist.packs is not None:
        audit = hist.packs
        if audit.items.max() > args.pack_size:
            raise ValueError(f"the existing packs hold a sequence of {int(audit.items.max())} tokens, longer than "
                             f"--pack-size {args.pack_size}: give the pack size they were made with")
        a_counts = np.bincount(audit.items, minlength=args.pack_size + 1)
        fill, nseq, work = per_pack(audit.offsets, audit.items)
        out["existing_packs"] = {
            "metadata": megatron_bridge_metadata(fill, nseq, a_counts, args.pack_size),
            **packing_metrics(fill, nseq, work, a_counts, args.pack_size, int(audit.items.sum())).as_dict(),
        }
    if args.json:
        return out
    md = result.metadata
    m = result.metrics
    print(f"{hist.source}: {m.num_sequences:,} samples -> {m.num_packs:,} packs of {cfg.pack_size} "
          f"({cfg.algorithm}, seed {cfg.seed}, pad_seq_to_mult {cfg.multiple}) in {result.seconds:.2f} s")
    print(f"  packing factor n = {md['packing_factor']}  (divide the global batch size by it)")
    rt = result.runtime
    print(f"  efficiency {md['packing_efficiency']} %  padding {m.padding_fraction:.2%}  "
          f"truncated {rt.num_truncated:,} samples ({rt.tokens_truncated:,} tokens)  "
          f"skipped {rt.num_skipped:,} samples ({rt.tokens_skipped:,} tokens; {out['format']} data)")
    bound = f"L1 {m.lower_bound_l1:,}  L2 {m.lower_bound_l2:,}" + (
        f"  LP {m.lower_bound_lp:,.1f}" if m.lower_bound_lp is not None else "")
    print(f"  lower bounds on packs: {bound}; {m.gap_to_bound:,} packs above the best")
    print(f"  attention work sum(s^2) per pack: mean {m.attention_work_mean:,.0f}, max {m.attention_work_max:,} "
          f"(straggler ratio {m.straggler_ratio:.2f})")
    for b in baselines:
        print(f"  without packing, {b.name}: efficiency {b.efficiency:.2f} %")
    print("  Megatron-Bridge metadata (" f"{cfg.pack_size}_metadata.jsonl entry):")
    print("    " + json.dumps(md))
    if "existing_packs" in out:
        e = out["existing_packs"]
        print(f"  existing packs: {e['num_packs']:,}, metadata {json.dumps(e['metadata'])}")
    _print_exclusions(hist)
    return {}


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def cmd_estimate(args) -> dict:
    from advisor.analysis import analyze

    progress = _Progress(args.quiet)
    plan, hist = _plan_and_lengths(args, progress)
    progress("estimating")
    analysis = analyze(plan, hist, **_cost_settings(args))
    est = analysis.estimate
    out = {**est.to_dict(), "plan": analysis.summary()}
    if args.json:
        return out
    m, f, t = est.memory, est.flops, est.time
    p = plan.parallel
    s = analysis.summary()
    print(f"{args.plan}: {plan.model_name} on {p.gpus} x {plan.hardware.gpu} (TP {p.tp}, PP {p.pp}, CP {p.cp}, "
          f"EP {p.ep}, DP {p.dp}), packing {est.mode}, pad_seq_to_mult {est.pad_seq_to_mult}")
    if analysis.packing_factor:
        print(f"  batch: {s['batch']} (n = {analysis.packing_factor:.2f}): Megatron-Bridge global_batch_size "
              f"{s['megatron_bridge_global_batch_size']}, {s['micro_batches_per_step']} micro batches per DP rank")
        r = est.packing.runtime
        print(f"  data.format {plan.data.format}: {r.num_truncated:,} samples truncated, {r.num_skipped:,} skipped "
              f"(longer than {est.packing.config.effective_max_seq_length:,} tokens)")
    else:
        print(f"  batch: {s['batch']}, {s['micro_batches_per_step']} micro batches per DP rank")
    print(f"  memory per GPU ({m.stage} stage): {_gib(m.total)} of {_gib(m.capacity)} -> "
          f"{'fits' if m.fits else 'DOES NOT FIT'}")
    for name, value in m.breakdown.items():
        print(f"    {name:<16} {_gib(value):>12}")
    mb = m.megatron_bridge
    print(f"  Megatron-Bridge 0.6.2 estimate (its log): weight and optimizer "
          f"{mb.weight_and_optimizer_bytes / 2**20:,.2f} MB, activation {mb.activation_bytes / 2**20:,.2f} MB, "
          f"total {mb.total_bytes / 2**20:,.2f} MB")
    for d in m.differences:
        print(f"    why they differ: {d}")
    print(f"  FLOPs per step: model {f.model_per_step:.3e} (real tokens), computed {f.computed_per_step:.3e} "
          f"({f.padding_waste:.1%} on padding)")
    a = f.attention
    print(f"  attention core per step: THD {a['thd']:.3e}, padded {a['padded']:.3e}, block-masked "
          f"{a['block_mask']:.3e}; sum(s^2)/(sum s)^2 = {f.attention_ratio:.3f}")
    print(f"  step {t.step_seconds:.3f} s ({t.model}; MFU {t.mfu:.0%}, straggler x{t.straggler_factor:.3f}), "
          f"{t.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, epoch {t.epoch_seconds / 3600:,.2f} h "
          f"({t.steps_per_epoch:,.0f} steps)")
    shown = [(k, v) for k, v in t.breakdown.items() if v > 0.0005 * t.step_seconds]
    print("    " + ", ".join(f"{k.replace('_', ' ')} {v:.3f} s" for k, v in shown))
    for note in est.notes:
        print(f"  note: {note}")
    return {}


def _cost_settings(args) -> dict:
    from advisor.model.memory import DEFAULT_OVERHEAD_GIB

    mfu = getattr(args, "mfu", None)
    overhead = getattr(args, "overhead_gib", None)
    return {"mfu": mfu,
            "overhead_gib": DEFAULT_OVERHEAD_GIB if overhead is None else overhead}


def _plan_and_lengths(args, progress):
    from advisor.data.ingest import load_lengths
    from advisor.plan import load_plan

    plan = load_plan(args.plan)
    source = getattr(args, "lengths", None) or plan.data.lengths
    if not source:
        raise ValueError(f"{args.plan}: no data.lengths in the plan; give --lengths FILE")
    progress(f"reading {source if len(source) < 200 else 'inline JSON'}")
    column = plan.data.column if not getattr(args, "lengths", None) else None
    return plan, load_lengths(source, column=column)


def cmd_recommend(args) -> dict:
    from advisor.analysis import analyze

    progress = _Progress(args.quiet)
    plan, hist = _plan_and_lengths(args, progress)
    progress("searching layouts")
    analysis = analyze(plan, hist, **_cost_settings(args))
    with _bar(args.quiet, "layouts") as bar:
        result = analysis.searched(progress=bar, vary=args.vary)
    findings = analysis.findings
    out = {"findings": [f.as_dict() for f in findings], "plan": analysis.summary(),
           "baseline": result.baseline.summary(), "candidates": [c.summary() for c in result.best],
           "evaluated": result.evaluated, "recommended_plan": result.recommended.to_dict()}
    if args.json:
        return out
    print(f"{args.plan}: {len(findings)} findings")
    for f in findings:
        print(f"  [{f.severity}] {f.id}: {f.message}")
        print(f"      why: {f.reason}")
        print(f"      source: {f.source}")
        if f.fix:
            print(f"      fix: {json.dumps(f.fix)}")
    kept = ", ".join(x for x in ("seq_length", "batch") if x not in args.vary)
    print(f"searched {result.evaluated} layouts{f' keeping {kept}' if kept else ''}; best candidates against "
          "your plan:")
    if not result.best:
        print("  none better that keeps what you fixed" + ("" if len(args.vary) == 2 else
                                                           " (recommend --vary seq_length,batch frees them)"))
    for label, c in [("yours", result.baseline)] + [(f"#{i + 1}", c) for i, c in enumerate(result.best)]:
        s = c.summary()
        mem = f"{s['memory_gib']:.1f} GiB" if s["memory_gib"] is not None else "-"
        print(f"  {label:>5}: TP {s['tp']} CP {s['cp']} DP {s['dp']} pack {s['pack_size']} seq {s['seq_length']}, "
              f"{c.plan.batch_text(_factor(c))}: {mem}, {s['tokens_per_second_per_gpu']:,.0f} tokens/s/GPU "
              f"({s['why']})")
    return {}


def _factor(candidate) -> float | None:
    packing = candidate.estimate.packing if candidate.estimate is not None else None
    return packing.packing_factor if packing is not None else None


def cmd_export(args) -> dict:
    from advisor.advice.exports import mock_lengths_csv
    from advisor.analysis import analyze

    progress = _Progress(args.quiet)
    plan, hist = _plan_and_lengths(args, progress)
    inputs = (args.plan, args.lengths or plan.data.lengths)
    if args.lengths_csv:  # refused before the search, not after it
        _output_file("--lengths-csv", args.lengths_csv, args.force, inputs)
    analysis = analyze(plan, hist)
    if args.recommended:
        progress("searching layouts")
    exported = analyze(analysis.searched(vary=args.vary).recommended, hist) if args.recommended else analysis
    over = [f for f in exported.findings if f.id == "memory.exceeds"]
    if over and not args.force and args.format != "torchrun":  # the torchrun script does not depend on the plan
        raise ValueError(f"{over[0].message} (use --force to export anyway)")
    text = analysis.export(args.format, args.megatron_bridge_version, recommended=args.recommended, vary=args.vary)
    if args.lengths_csv:
        _write_text("--lengths-csv", args.lengths_csv, mock_lengths_csv(hist, plan.packing_seed), args.force, inputs)
        progress(f"wrote {hist.num_samples:,} lengths to {args.lengths_csv} (line 1 is a header Megatron-LM drops)")
    sys.stdout.write(text)
    return {}


def _named(option: str, call, *args, **kwargs):
    """``call`` with a refusal's message naming the option too: "-o lengths.csv: exists; pass --force ..."."""
    try:
        return call(*args, **kwargs)
    except InputError as e:
        raise InputError(f"{option} {e.source}", e.where, e.what) from None


def _output_file(option: str, path: str, force: bool, inputs) -> str:
    """Check an output file before the work that fills it (advisor.safe_write: no overwrite without --force, no
    symlink, no system folder, never an input)."""
    from advisor.safe_write import check_output_file

    return _named(option, check_output_file, path, force=force, inputs=inputs)


def _write_text(option: str, path: str, text: str, force: bool, inputs) -> None:
    """Write atomically after checking again (the command may have run for minutes since the first check)."""
    from advisor.safe_write import write_text

    _named(option, write_text, path, text, force=force, inputs=inputs)


def _ordered_lengths(args, progress):
    """The samples in data-set order: a mock config as Megatron-LM draws it, a per-sample file in its own order,
    a length,count histogram shuffled with --seed (it has no order; the export writes the same shuffle)."""
    from pathlib import Path

    from advisor.data.guard import loads_json, read_file, text_bytes
    from advisor.packing.online import mock_config_lengths
    from advisor.packing.online.from_plan import dataset_order

    text = args.lengths
    config = None
    if text.lstrip().startswith("{"):
        config, source, base = text.encode("utf-8", "surrogateescape"), "inline JSON", None
    elif text.lower().endswith(".json"):
        source, base = os.path.basename(text), Path(text).resolve().parent
        config = text_bytes(read_file(text, source, int(args.max_file_mb * 2**20)), source)
    if config is not None:
        parsed = loads_json(config, source)  # depth and huge integers refused as for every JSON input
        if isinstance(parsed, dict) and "mode" in parsed:
            progress("drawing the mock SFT lengths as Megatron-LM does")
            return mock_config_lengths(parsed, source, base_dir=base, size=args.mock_samples), source, \
                "mock config (Megatron-LM's draw order)"
    hist = _load(args, progress)
    how = "file order" if hist.order is not None else f"histogram shuffled with seed {args.seed}"
    return dataset_order(hist, args.seed), hist.source, how


def cmd_schedule(args) -> dict:
    from advisor.packing.online import OnlineConfig, schedule

    progress = _Progress(args.quiet)
    lengths, source, how = _ordered_lengths(args, progress)
    vpp = 2 if args.vpp_group else None  # VPP on; the scheduler reads only the group size
    cfg = OnlineConfig(commit=args.megatron_lm, scheduler=args.scheduler,
                       dataset=args.dataset or ("mock_sft" if args.megatron_lm == "dev" else "custom"),
                       seq_length=args.seq_length, global_batch_size=args.global_batch_size,
                       micro_batch_size=args.micro_batch_size, dp=args.dp, cp=args.cp, tp=args.tp,
                       sequence_parallel=args.sp, pp=max(1, args.vpp_group or 1), vpp=vpp,
                       microbatch_group_size_per_vp_stage=args.vpp_group,
                       max_seqlen_per_dp_cp_rank=args.max_seqlen_per_dp_cp_rank)
    progress(f"scheduling {lengths.size:,} samples ({how})")
    run = schedule(lengths, cfg, steps=args.steps, source=source)
    s = run.summary
    if args.json:
        _check_listing(run)
        steps = []
        refused = {r.step: r.reason for r in run.refusals}
        for k in range(run.seqlens.shape[0]):
            st = run.step(k)
            steps.append({"step": k, "num_micro_batches": st.num_micro_batches, "seqlen_sum": st.seqlen_sum,
                          "seqlen_squared_sum": st.seqlen_squared_sum,
                          "groups": [[list(rank) for rank in mb] for mb in st.samples],
                          "local_cp_size": [list(mb) for mb in st.local_cp_size] if cfg.dynamic_cp else None,
                          "straggler": st.straggler, "refused": refused.get(k)})
        return {"source": source, "order": how, "config": cfg.__dict__,
                "max_seqlen_per_dp_cp_rank": run.max_seqlen_per_dp_cp_rank, "capacity": run.capacity,
                "padding_divisor": run.padding_divisor, "summary": s.__dict__,
                "findings": [f.as_dict() for f in run.findings], "global_batches": steps}
    print(f"{source}: {lengths.size:,} samples ({how}); Megatron-LM {cfg.commit} {cfg.scheduler}, DP {cfg.dp} x "
          f"CP {cfg.cp}, global batch {cfg.global_batch_size} samples, micro batch {cfg.micro_batch_size}")
    print(f"  buffer: max_seqlen_per_dp_cp_rank {run.max_seqlen_per_dp_cp_rank:,} (a pack holds {run.capacity:,} "
          f"tokens); sequences padded to a multiple of {run.padding_divisor}")
    if s.epoch_steps > s.steps:
        print(f"  a scale model: {s.steps:,} of the epoch's {s.epoch_steps:,} steps, spread evenly over it (each "
              "exactly as the real run schedules it); the whole epoch is past what one simulation holds")
    print(f"  {s.steps:,} steps: micro batches per step min {s.micro_batches_min}, mean {s.micro_batches_mean:.2f}, "
          f"max {s.micro_batches_max}; straggler x{s.straggler_factor:.3f} (worst step x{s.straggler_worst:.2f})")
    print(f"  padding {s.padding_fraction:.2%} of {s.padded_tokens:,} tokens; {s.truncated_samples:,} samples "
          f"truncated ({s.truncated_tokens:,} tokens); {s.unused_samples:,} samples left after the last full batch")
    if run.refusals:
        print(f"  REFUSED: {len(run.refusals):,} steps, first step {run.refusals[0].step}: {run.refusals[0].reason}")
    for i in run.findings:
        print(f"  {i.severity}: {i.message} ({i.source})")
    return {}


MAX_LISTED_IDS = 1 << 22  # --json of a schedule: 4M listed ids print ~40 MB and build in about 1 GiB of Python
MAX_LISTED_STEPS = 50_000  # and each step is a few Python objects: 45,000 steps took 10 s


def _listed_ids(run) -> int:
    """What ``schedule --json`` lists: one rank list per rank and micro batch, each sample id once per rank of its
    CP group (so a run of few samples on 131,072 ranks still lists 131,072 lists a micro batch)."""
    import numpy as np

    g = run.groups
    per_group = np.diff(g.item_offsets) * np.asarray(g.rank_count)
    return int(g.mb_offsets[-1]) * g.num_ranks + int(per_group.sum())


def _check_listing(run) -> None:
    steps = int(run.seqlens.shape[0])
    if steps > MAX_LISTED_STEPS:
        raise ValueError(f"--json: this schedule lists {steps:,} steps one by one, more than {MAX_LISTED_STEPS:,}; "
                         "give fewer --steps, or leave out --json for the summary")
    listed = _listed_ids(run)
    if listed > MAX_LISTED_IDS:
        raise ValueError(f"--json: this schedule lists {listed:,} rank entries and sample ids, more than "
                         f"{MAX_LISTED_IDS:,}; give fewer --steps, or leave out --json for the summary")


def _tokenize_job(args):
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.engine import TokenizeJob
    from advisor.data.tokenize.sft import SftSettings

    if args.format == "chat":
        fields = {"loss_mode": args.loss_mode, "tool_schemas": args.tool_schemas}
        settings = ChatSettings(**{k: v for k, v in fields.items() if v is not None})
    else:
        fields = {"prompt_template": args.prompt_template, "label_key": args.label_key,
                  "truncation_field": args.truncation_field, "add_bos": args.add_bos, "add_eos": args.add_eos,
                  "add_sep": args.add_sep, "max_seq_length": args.max_seq_length,
                  "truncation_method": args.truncation_method}
        settings = SftSettings(**{k: v for k, v in fields.items() if v is not None})
    return TokenizeJob(data=args.data, tokenizer=args.tokenizer, fmt=args.format, settings=settings,
                       on_bad=args.on_bad)


def cmd_tokenize(args) -> dict:
    from advisor.data.tokenize.engine import lengths_csv, tokenize

    progress = _Progress(args.quiet)
    inputs = (args.data, args.tokenizer)
    if args.output:  # refused before the tokenizing, not after it
        _output_file("-o", args.output, args.force, inputs)
    if args.ray_address:
        _check_ray_address(args.ray_address, args.engine)
    job = _tokenize_job(args)
    try:
        result = tokenize(job, engine=args.engine, workers=args.workers, sample=args.sample, seed=args.seed,
                          address=args.ray_address, progress=lambda text, done: progress(text))
    except ConnectionError as e:  # Ray's "ray client connection timeout" and the like: an OSError, not a bug
        raise ValueError(f"--ray-address {args.ray_address[:80]}: {str(e)[:200]}") from None
    if args.output:
        _write_text("-o", args.output, lengths_csv(result, histogram=args.histogram_output), args.force, inputs)
        progress(f"wrote {result.lengths.size:,} lengths to {args.output}")
    rate = result.lengths.size / max(result.seconds, 1e-9)
    out = {"source": result.source, "records": result.total_records, "tokenized": int(result.lengths.size),
           "engine": result.engine, "workers": result.workers, "seconds": result.seconds,
           "records_per_second": rate, "records_per_second_per_worker": rate / result.workers,
           "excluded": [e.__dict__ for e in result.excluded], "notes": list(result.notes),
           "settings": {k: v for k, v in job.settings.__dict__.items() if not k.startswith("_")},
           # what a plan needs to read these lengths as this format (data.format: chat skips, sft truncates)
           "format": result.fmt, "plan_data": {"lengths": args.output, "format": result.fmt}}
    hist = result.histogram()
    from advisor.data.lengths import summarize

    out["lengths"] = summarize(hist).as_dict()
    estimate = None
    if args.sample is not None:
        from advisor.packing.config import PackingConfig
        from advisor.packing.sampling import sample_estimate

        pack_size = args.pack_size or getattr(job.settings, "max_seq_length", None)
        if pack_size is None:
            raise InputError("tokenize", "--pack-size", "chat samples have no max_seq_length: give the pack size "
                             "to estimate (--pack-size)")
        # records left out of the sample are left out of the data set in the same share
        usable = round(result.total_records * result.lengths.size / max(1, result.selected))
        progress(f"bootstrapping the packing of {result.lengths.size:,} sampled lengths ({args.bootstraps} "
                 "replicates)")
        # GPTSFTChatDataset does not cut: offline packing skips a chat sample longer than the pack
        cfg = PackingConfig(pack_size=pack_size, overlong="skip" if args.format == "chat" else "truncate")
        estimate = sample_estimate(result.lengths, usable, cfg, bootstraps=args.bootstraps, seed=args.seed)
        out["sample_estimate"] = estimate.as_dict()
    if args.json:
        return out
    print(f"{result.source}: {result.total_records:,} records, {result.lengths.size:,} tokenized "
          f"({'a uniform random sample' if result.sampled else 'all'}) in {result.seconds:.1f} s on {result.engine} "
          f"with {result.workers} worker(s): {rate:,.0f} records/s, {rate / result.workers:,.0f} per worker")
    s = out["lengths"]
    print(f"  tokens per sample: mean {s['mean']:.1f}  p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}  max {s['max']}")
    for e in result.excluded:
        print(f"  left out: {e.count:,} {e.reason} (first at {e.first_at})")
    for note in result.notes:
        print(f"  note: {note}")
    print(f"  for the plan: data: {{lengths: {args.output or '<lengths file>'}, format: {result.fmt}}}")
    if estimate is not None:
        lvl = f"{estimate.level:.0%}"
        for label, iv, fmt in (("packs", estimate.packs, ",.0f"), ("packing factor n", estimate.packing_factor, ".3f"),
                               ("efficiency %", estimate.efficiency, ".3f")):
            print(f"  whole data set at pack size {estimate.pack_size}: {label} {iv.estimate:{fmt}} "
                  f"({lvl} interval {iv.low:{fmt}} to {iv.high:{fmt}})")
    return {}


RAY_PROBE_SECONDS = 5.0


def _check_ray_address(address: str, engine: str) -> None:
    """Refuse a --ray-address that cannot work, in seconds and with what to do: Ray itself waits 30 s on a closed
    port and then raises a ConnectionError, and without ``ray[client]`` (grpcio) a ray:// address is a traceback.

    >>> _check_ray_address("auto", "ray")
    >>> _check_ray_address("ray://h", "ray")
    Traceback (most recent call last):
    ...
    ValueError: --ray-address ray://h: give ray://HOST:PORT (the head's client port, usually 10001) or auto
    """
    import importlib.util
    import socket

    shown = address[:80]
    if engine != "ray":
        raise ValueError(f"--ray-address {shown}: only used with --engine ray")
    if address == "auto":
        return  # the cluster this machine belongs to: Ray finds it in its own files
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not address.startswith("ray://") or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address {shown}: give ray://HOST:PORT (the head's client port, usually 10001) or "
                         "auto")
    if importlib.util.find_spec("grpc") is None:
        raise ValueError(f"--ray-address {shown}: a ray:// address needs Ray's client: pip install "
                         "'ray[client]==2.60.0' (requirements.txt pins it; it adds grpcio)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_PROBE_SECONDS).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ValueError(f"--ray-address {shown}: nothing answers at {host[:60]}:{port} ({why}); start the head "
                         "with `ray start --head` (client port 10001) or check the address") from None


def cmd_warmup(args) -> dict:
    from advisor.packing.warmup import warm_up

    for algorithm, seconds in warm_up():
        print(f"  {algorithm:<22} ready in {seconds:5.2f} s")
    return {}


def cmd_schema(args) -> dict:
    from advisor.plan.schema import json_schema

    print(json.dumps(json_schema(), indent=2))
    return {}


def cmd_trial(args) -> dict:
    from pathlib import Path

    from advisor.trial.config import from_cli
    from advisor.trial.report import speed_lines, speed_report
    from advisor.trial.run import OUTPUT_NAMES, ParityError, run_trial, write_outputs

    progress = _Progress(args.quiet)
    if args.heartbeat or args.wall_seconds:
        from advisor.trial.jobs import start_watchdog

        start_watchdog(args.heartbeat, args.heartbeat_seconds, args.wall_seconds)
    if args.memory_gib is not None:  # the process's own heap and mappings (RLIMIT_DATA: torch's tensors count)
        import resource

        limit = int(args.memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    plan, hist = _plan_and_lengths(args, progress)
    inputs = (args.plan, args.lengths or plan.data.lengths)
    if args.out:  # refused before the run, not after it
        from advisor.safe_write import check_output_folder

        _named("--out", check_output_folder, args.out, force=args.force, inputs=inputs, names=OUTPUT_NAMES)
    cfg = from_cli(args)
    try:
        result = run_trial(plan, hist, cfg, progress=(lambda m: None) if args.quiet else _trial_progress)
    except ParityError as e:
        print(f"error: trial failed the packing parity check: {e}", file=sys.stderr)
        raise SystemExit(3) from None
    except (MemoryError, RuntimeError) as e:  # torch reports an allocation it cannot make as a RuntimeError
        if args.memory_gib is None or not isinstance(e, MemoryError) and "alloc" not in str(e).lower():
            raise
        raise ValueError(f"the trial ran out of its {args.memory_gib:g} GiB (--memory-gib): a smaller --pack-size, "
                         "--packs-per-step, --micro-batch-size or --model-scale fits") from None
    finally:
        _leave_process_group()
    out = result.to_dict()
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports
        return {}
    if args.out:
        _named("--out", write_outputs, result, Path(args.out), force=args.force, inputs=inputs)
    if args.json:
        return out
    print(f"trial on {out['device']} ({out['torch_threads']} threads), {out['steps']} timed steps per way after "
          f"{out['warmup_steps']} warm-up, model {out['model']}")
    print(f"  parity: loss {out['loss_parity']['max_abs_diff']:.2e} (<= {out['loss_parity']['bound']:g}), "
          f"gradients {out['grad_parity']['max_rel_diff']:.2e} (<= {out['grad_parity']['bound']:g})")
    print("\n".join(speed_lines(speed_report(out))))  # the same report the Trial page tables
    m = out["memory"]
    print(f"  memory: measured {m['measured_bytes'] / 2**20:,.1f} MiB, predicted {m['predicted_bytes'] / 2**20:,.1f} "
          f"MiB (measured/predicted {m['ratio_measured_over_predicted']:.2f}; {m['how']})")
    if out["distributed"]:
        d = out["distributed"]
        print(f"  {d['world_size']} ranks ({d['backend']}): attention work per rank {d['per_rank_attention_work']}, "
              f"all-reduce wait {d['per_rank_allreduce_wait_seconds']} s; work straggler measured "
              f"x{d['measured_work_straggler']:.2f}, estimator x{d['predicted_straggler_factor']:.2f}")
    return {}


def _leave_process_group() -> None:
    """Under torchrun: wait for every rank, then tear the group down. Why: a rank that exits with gloo's threads
    still running aborts ("terminate called without an active exception") and torchrun reports the run failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def _trial_progress(message: str) -> None:
    print(f"[trial] {message}", file=sys.stderr, flush=True)


def _checked(check):
    """An argparse type from a checker that raises ValueError: argparse then exits 2 with the one message."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a number") from None


MAX_PACK_TOKENS = MAX_PACK  # the simulator keeps arrays of pack-size length: 4M tokens stays well inside 2 GiB


def _bootstraps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a whole number") from None
    if not 2 <= value <= 10_000:
        raise ValueError(f"{value} bootstrap replicates: give 2 to 10,000 (an interval needs a spread)")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a whole number") from None
    if not 0 <= value < 2**32:
        raise ValueError(f"seed {value} must be from 0 to 2^32 - 1 (numpy's legacy seed)")
    return value


def _mfu(text: str) -> float:
    from advisor.analysis import check_mfu

    return _checked(lambda t: check_mfu(_number(t)))(text)


def _overhead(text: str) -> float:
    from advisor.analysis import check_overhead

    return _checked(lambda t: check_overhead(_number(t)))(text)


def _version(text: str) -> str:
    from advisor.advice.exports import _version as check_version

    def check(t: str) -> str:
        check_version(t)
        return t
    return _checked(check)(text)


def _positive_int(most: int):
    def check(t: str) -> int:
        try:
            value = int(t)
        except ValueError:
            raise ValueError(f"{t[:40]!r} is not a whole number") from None
        if not 1 <= value <= most:
            raise ValueError(f"{value} must be from 1 to {most:,}")
        return value
    return _checked(check)


def _positive_float(most: float):
    def check(t: str) -> float:
        value = _number(t)
        if not math.isfinite(value) or not 0 < value <= most:
            raise ValueError(f"{t[:40]!r} must be a number above 0 and at most {most:,}")
        return value
    return _checked(check)


def _megabytes(text: str) -> float:
    def check(t: str) -> float:
        value = _number(t)
        if not math.isfinite(value) or not 0 < value <= 1 << 20:
            raise ValueError(f"{t[:40]!r} must be a number of MB from above 0 to 1,048,576")
        return value
    return _checked(check)(text)


def _vary(text: str) -> frozenset[str]:
    """--vary seq_length,batch: what the search may change beyond the layout."""
    from advisor.advice.search import check_vary

    return _checked(lambda t: check_vary(x.strip() for x in t.split(",") if x.strip()))(text)


_VARY_HELP = ("what the search may change besides the layout, comma-separated: seq_length (packs longer than it), "
              "batch (the samples per step beyond ±5 %%); by default both stay as the plan has them")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m advisor", description="Sequence packing advisor for "
                                     "Megatron-Bridge and Megatron-LM.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("lengths", help="read a lengths file and summarise it")
    _add_input_args(p)
    p.set_defaults(func=cmd_lengths)
    p = sub.add_parser("pack", help="simulate Megatron-Bridge offline packing of a length distribution")
    _add_input_args(p)
    p.add_argument("--pack-size", type=_positive_int(MAX_PACK_TOKENS), required=True,
                   help=f"packed_sequence_size (at most {MAX_PACK_TOKENS:,})")
    p.add_argument("--algorithm", choices=list(ALGORITHM_NAMES), default=MB_DEFAULT_ALGORITHM)
    p.add_argument("--seed", type=_checked(_seed), default=MB_DEFAULT_SEED,
                   help="the dataset config's seed (default 1234)")
    p.add_argument("--pad-seq-to-mult", type=_positive_int(65536), default=1,
                   help="pad each sample to a multiple (CP: 2*CP)")
    p.add_argument("--max-seq-length", type=_positive_int(MAX_PACK_TOKENS),
                   help="dataset max length (default: the pack size)")
    p.add_argument("--format", choices=("sft", "chat"), default=None,
                   help="what the lengths are, as a plan's data.format: sft (GPTSFTDataset truncates overlong "
                        "samples; the default) or chat (GPTSFTChatDataset does not, create_hist skips them)")
    p.add_argument("--overlong", choices=("truncate", "skip"), default=None,
                   help="the same choice by its effect: truncate (as --format sft) or skip (as --format chat)")
    p.add_argument("--micro-batch-size", type=_positive_int(4096), default=4, help="for the pad-to-longest baseline")
    p.set_defaults(func=cmd_pack)
    p = sub.add_parser("estimate", help="memory per GPU, FLOPs and step time for a plan file")
    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")
    p.add_argument("--mfu", type=_mfu, help="fix the model FLOPs utilisation, in [0.01, 1], instead of the "
                                            "performance model's step time")
    p.add_argument("--overhead-gib", type=_overhead, help="fixed memory overhead per GPU, 0 to 1024 (default 3 GiB)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_estimate)
    p = sub.add_parser("recommend", help="findings, with reasons and fixes, and the best layouts found")
    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")
    p.add_argument("--vary", type=_vary, default=frozenset(), help=_VARY_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_recommend)
    p = sub.add_parser("export", help="the plan as a Megatron-Bridge snippet, overrides, Megatron-LM arguments, "
                       "packed-file paths, plan file or Markdown report")
    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--format", choices=("python", "overrides", "megatron-lm", "paths", "plan", "markdown",
                                        "torchrun", "slurm"), default="python")
    p.add_argument("--megatron-bridge-version", default="0.6.2", type=_version,
                   help="API generation of the snippet, MAJOR.MINOR.PATCH (default 0.6.2)")
    p.add_argument("--recommended", action="store_true", help="export the best plan the search found instead")
    p.add_argument("--vary", type=_vary, default=frozenset(), help="with --recommended: " + _VARY_HELP)
    p.add_argument("--force", action="store_true", help="export a plan that does not fit its GPU's memory (refused "
                                                        "otherwise, exit code 2), and overwrite --lengths-csv")
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")
    p.add_argument("--lengths-csv", help="also write the lengths for Megatron-LM's mock SFT data (mode: file; "
                   "an existing file only with --force)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_export, json=False)
    from advisor.trial.config import DEVICES, SCALES, TrialConfig

    d = TrialConfig()  # the defaults the dashboard's job also runs with
    p = sub.add_parser("trial", help="a short real training run: packed vs padded vs block-masked, parity, memory")
    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")
    p.add_argument("--steps", type=_positive_int(100_000), default=d.steps,
                   help="timed steps per way (after the warm-up steps); the report takes their median and spread")
    p.add_argument("--warmup", type=_positive_int(1000), default=d.warmup, help="untimed warm-up steps per way")
    p.add_argument("--device", choices=DEVICES, default=d.device)
    p.add_argument("--model-scale", choices=SCALES, default=d.scale)
    p.add_argument("--pack-size", type=_positive_int(1 << 20), default=d.pack_size,
                   help="the trial's pack size (lengths are scaled to it)")
    p.add_argument("--packs-per-step", type=_positive_int(4096), default=d.packs_per_step,
                   help="packs per step and rank (one per micro batch)")
    p.add_argument("--micro-batch-size", type=_positive_int(4096), default=d.micro_batch_size,
                   help="samples per padded micro batch")
    p.add_argument("--seed", type=_checked(_seed), default=d.seed,
                   help="fixes the data, the initialisation and the order")
    p.add_argument("--threads", type=_positive_int(1024), default=d.threads,
                   help="torch CPU threads (default: all cores); 1 is slower but steadier on a shared machine")
    p.add_argument("--break-mask", action="store_true", help=argparse.SUPPRESS)  # test-only: must fail parity
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", help="folder for trial.json and steps.csv (new or empty; any other only with --force)")
    p.add_argument("--force", action="store_true", help="write into a --out folder that holds files, replacing "
                   "trial.json and steps.csv")
    p.add_argument("--heartbeat", help=argparse.SUPPRESS)  # the dashboard's job: stop when this file goes stale
    p.add_argument("--heartbeat-seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    p.add_argument("--wall-seconds", type=float, help="stop the trial after this many seconds")
    p.add_argument("--memory-gib", type=_positive_float(1024), help="stop the trial, with one message, when it "
                   "would hold more than this much memory (the dashboard gives its trials 2)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_trial)
    p = sub.add_parser("schedule", help="Megatron-LM's online THD packing of a data set, global batch by global "
                       "batch (--sequence-packing-scheduler)")
    _add_input_args(p)
    p.add_argument("--megatron-lm", choices=("main", "dev"), default="dev", help="which commit's scheduler")
    p.add_argument("--scheduler", choices=("dp_balanced", "default_dynamic_cp"), default="dp_balanced")
    p.add_argument("--dataset", choices=("mock_sft", "sft", "custom"),
                   help="the data set's padding (default: dev's mock SFT, main: lengths as given)")
    p.add_argument("--seq-length", type=_positive_int(MAX_TOKENS), required=True)
    p.add_argument("--max-seqlen-per-dp-cp-rank", type=_positive_int(MAX_TOKENS),
                   help="tokens per DP x CP rank (default: Megatron-LM's, seq_length / CP)")
    p.add_argument("--dp", type=_positive_int(MAX_GPUS), required=True)
    p.add_argument("--cp", type=_positive_int(MAX_GPUS), required=True)
    p.add_argument("--tp", type=_positive_int(1024), default=1)
    p.add_argument("--sp", action="store_true", help="sequence parallelism (pads to a multiple of TP as well)")
    p.add_argument("--global-batch-size", type=_positive_int(1 << 24), required=True, help="samples per step")
    p.add_argument("--micro-batch-size", type=_positive_int(4096), default=1)
    p.add_argument("--vpp-group", type=_positive_int(1024),
                   help="microbatch_group_size_per_vp_stage under VPP (packs rounded to DP x this)")
    p.add_argument("--steps", type=_positive_int(1 << 24), help="steps to schedule (default: one epoch)")
    p.add_argument("--seed", type=_checked(_seed), default=MB_RECIPE_SEED,
                   help=f"shuffle of a length,count histogram (it has no order; default {MB_RECIPE_SEED}, the "
                        "export's when the plan sets no packing.seed)")
    p.set_defaults(func=cmd_schedule)
    p = sub.add_parser("tokenize", help="token lengths of a raw SFT or chat data set, exactly as Megatron-Bridge "
                       "0.6.2 tokenizes it (on this machine or a Ray cluster)")
    p.add_argument("data", help="JSONL (plain, .gz, .zst), Parquet, a folder or glob of shards, or a "
                   "datasets.save_to_disk folder")
    p.add_argument("--tokenizer", required=True, help="a local Hugging Face tokenizer folder or a SentencePiece "
                   ".model (nothing is downloaded)")
    p.add_argument("--format", choices=("sft", "chat"), default="sft",
                   help="sft: GPTSFTDataset (prompt template); chat: GPTSFTChatDataset with the tokenizer's template")
    p.add_argument("--prompt-template", help="sft: the template, label last (default '{input} {output}')")
    p.add_argument("--label-key", help="sft: the field the model learns to write (default output)")
    p.add_argument("--truncation-field", help="sft: the field(s) cut when a sample is too long (default input)")
    for flag in ("bos", "eos", "sep"):
        p.add_argument(f"--add-{flag}", action=argparse.BooleanOptionalAction, default=None,
                       help=f"sft: add the {flag.upper()} token (Megatron-Bridge's default)")
    p.add_argument("--max-seq-length", type=_positive_int(MAX_TOKENS), help="sft: GPTSFTDataset's max_seq_length "
                   "(default 1024, as Megatron-Bridge's builder)")
    p.add_argument("--truncation-method", choices=("left", "right"), help="sft: which end is cut (default right)")
    p.add_argument("--loss-mode", choices=("assistant", "last_turn", "full"), help="chat: the loss mask's mode")
    p.add_argument("--tool-schemas", help="chat: the data set's tools as JSON (records' own tools win)")
    p.add_argument("--engine", choices=("local", "ray"), default="local")
    p.add_argument("--ray-address", help="ray: an existing cluster (ray://HOST:10001, needs ray[client], or auto); "
                   "default a local Ray")
    p.add_argument("--workers", type=_positive_int(4096), help="processes (local) or tasks (ray); default every core")
    p.add_argument("--sample", type=_positive_int(1 << 40), help="tokenize a uniform random sample of this many "
                   "records and estimate the whole data set's packing with bootstrap intervals")
    p.add_argument("--seed", type=_checked(_seed), default=0, help="the sample's and the bootstrap's seed")
    p.add_argument("--pack-size", type=_positive_int(MAX_PACK_TOKENS), help="--sample: the pack size to estimate "
                   "(default max_seq_length)")
    p.add_argument("--bootstraps", type=_checked(_bootstraps), default=200, help="--sample: bootstrap replicates "
                   "(2 to 10,000)")
    p.add_argument("-o", "--output", help="write the lengths file (sample_index,length in data-set order; a new "
                   "file, or an existing one with --force)")
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--histogram-output", action="store_true", help="write length,count instead")
    p.add_argument("--on-bad", choices=("error", "skip"), default="error",
                   help="error (default): stop at an unreadable record, or after the run name the records the "
                   "template cannot fill; skip: leave such records out and count them")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_tokenize)
    p = sub.add_parser("schema", help="print the plan file's JSON Schema (for editors and validation)")
    p.set_defaults(func=cmd_schema, json=False)
    p = sub.add_parser("warmup", help="compile the packing kernels once (the set-up command runs it)")
    p.set_defaults(func=cmd_warmup, json=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = args.func(args)
        if out:  # inside the try: `advisor ... --json | head` closes the pipe during this print too
            print(json.dumps(_jsonable(out), indent=None))
    except BrokenPipeError:  # `advisor ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0
    except (InputError, PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a bad setting: one message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
