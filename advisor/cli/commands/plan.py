"""The commands on a plan file: ``estimate`` (memory, FLOPs, step time), ``recommend`` (findings and the layout
search), ``export`` (snippets, arguments, reports), ``trial`` (a short real run) and ``schema`` (the plan's JSON
Schema). All go through ``advisor.analysis``, as the dashboard does; each returns its result, never prints.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.cli.commands.files import check_output_file, named, write_text
from advisor.cli.output import Bar, Progress, trial_progress

if TYPE_CHECKING:
    from advisor.advice.compare import PackingComparison
    from advisor.advice.findings import Finding
    from advisor.advice.search import SearchResult
    from advisor.analysis import Analysis
    from advisor.data.lengths import LengthHistogram
    from advisor.plan import Plan


class CommandFailed(Exception):
    """A command that ran and failed a check of its own (not a bad input): one message and this exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class EstimateResult:
    data: dict  # the --json object
    plan_file: str
    analysis: Analysis
    comparison: PackingComparison | None = None  # --compare: every way of packing, and the one to use


@dataclass(frozen=True, kw_only=True)
class RecommendResult:
    data: dict
    plan_file: str
    findings: tuple[Finding, ...]
    search: SearchResult
    vary: frozenset[str]
    analysis: Analysis


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    text: str


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    data: dict  # trial.json's content


@dataclass(frozen=True, kw_only=True)
class SchemaResult:
    data: dict


def plan_and_lengths(args: Namespace, progress: Progress) -> tuple[Plan, LengthHistogram]:
    """The plan file and its lengths: ``--lengths`` if given, else the plan's data.lengths (with its column)."""
    from advisor.data.ingest import load_lengths
    from advisor.plan import load_plan

    plan = load_plan(args.plan)
    for note in plan.notes:  # what reading an older plan file means now: said once, whatever the output format
        print(f"note: {args.plan}: {note}", file=sys.stderr)
    source = getattr(args, "lengths", None) or plan.data.lengths
    if not source:
        raise ValueError(f"{args.plan}: no data.lengths in the plan; give --lengths FILE")
    progress(f"reading {source if len(source) < 200 else 'inline JSON'}")
    given = getattr(args, "lengths", None)
    column = plan.data.column if not given else None
    hist = load_lengths(source, column=column)
    if given:  # the plan carries the data it was read with: an exported plan or trial script runs on the same data
        # inline JSON as load_lengths tells it (starts with "{", no such path); a file or a folder of packed
        # Parquet shards, absolute (a relative folder was written as given, and read from the plan's own folder)
        inline = given.lstrip().startswith("{") and not os.path.lexists(given)
        value = given if inline else str(Path(given).resolve())
        if len(value) <= 4096:  # data.lengths' own limit; longer inline data stays out
            plan = plan.model_copy(update={"data": plan.data.model_copy(update={"lengths": value, "column": None})})
    return plan, hist


def _cost_settings(args: Namespace) -> dict:
    from advisor.model.memory import DEFAULT_OVERHEAD_GIB

    overhead = getattr(args, "overhead_gib", None)
    return {"mfu": getattr(args, "mfu", None), "overhead_gib": DEFAULT_OVERHEAD_GIB if overhead is None else overhead}


def estimate(args: Namespace) -> EstimateResult:
    from advisor.analysis import analyze

    progress = Progress(args.quiet)
    plan, hist = plan_and_lengths(args, progress)
    progress("estimating")
    analysis = analyze(plan, hist, **_cost_settings(args))
    loss = loss_of(analysis)
    comparison = None
    if getattr(args, "compare", False):
        from advisor.advice.compare import compare_packing

        progress("comparing the ways of packing")
        # Megatron-LM's online packing beside them only for a plan that packs online (the others run on Bridge)
        comparison = compare_packing(
            plan, hist, megatron_lm=plan.packing.megatron_lm if plan.packing_mode == "online" else None
        )
    return EstimateResult(
        data={
            **analysis.estimate.to_dict(),
            "plan": analysis.summary(),
            "loss_weighting": loss.as_dict() if loss is not None else None,
            **(
                {}
                if comparison is None
                else {
                    "comparison": {
                        "ways": comparison.rows(),
                        "recommended": comparison.recommended,
                        "why": comparison.why,
                    }
                }
            ),
        },
        plan_file=args.plan,
        analysis=analysis,
        comparison=comparison,
    )


def loss_of(analysis: Analysis):
    """The plan's loss weighting, or None when the data leaves nothing to weigh (every sample skipped)."""
    try:
        return analysis.loss
    except ValueError:
        return None


def recommend(args: Namespace) -> RecommendResult:
    from advisor.analysis import analyze

    progress = Progress(args.quiet)
    plan, hist = plan_and_lengths(args, progress)
    progress("searching layouts")
    analysis = analyze(plan, hist, **_cost_settings(args))
    with Bar(args.quiet, "layouts") as bar:
        result = analysis.searched(progress=bar, vary=args.vary)
    findings = analysis.findings
    loss = loss_of(analysis)
    data = {
        "findings": [f.as_dict() for f in findings],
        "plan": analysis.summary(),
        "loss_weighting": loss.as_dict() if loss is not None else None,
        "baseline": result.baseline.summary(),
        "candidates": [c.summary() for c in result.best],
        "evaluated": result.evaluated,
        "recommended_plan": result.recommended.to_dict(),
    }
    return RecommendResult(
        data=data, plan_file=args.plan, findings=findings, search=result, vary=args.vary, analysis=analysis
    )


def export(args: Namespace) -> ExportResult:
    from advisor.advice.exports import mock_lengths_csv
    from advisor.analysis import analyze
    from advisor.formats import export_spec

    progress = Progress(args.quiet)
    plan, hist = plan_and_lengths(args, progress)
    inputs = tuple(p for p in (args.plan, args.lengths or plan.data.lengths) if p is not None)
    wanted = args.megatron_bridge_version
    if wanted and wanted != plan.versions.megatron_bridge:  # the plan exported says the release it is written for
        print(
            f"note: --megatron-bridge-version {wanted}: the plan's versions.megatron_bridge "
            f"{plan.versions.megatron_bridge} replaced in what is exported",
            file=sys.stderr,
        )
        plan = plan.changed({"versions": {"megatron_bridge": wanted}})
    if args.vary and not args.recommended:  # refused, not ignored: it sets the search --recommended runs
        raise ValueError("--vary sets what the search may change: it goes with --recommended")
    if args.lengths_csv:  # refused before the search, not after it
        check_output_file("--lengths-csv", args.lengths_csv, args.force, inputs)
    analysis = analyze(plan, hist)
    if args.recommended:
        progress("searching layouts")
    exported = analyze(analysis.searched(vary=args.vary).recommended, hist) if args.recommended else analysis
    spec = export_spec(args.format)
    over = [f for f in exported.findings if f.id == "memory.exceeds"]
    if over and not args.force and spec.uses_plan:
        raise ValueError(f"{over[0].message} (use --force to export anyway)")
    if args.lengths_csv and not spec.mock_lengths:
        raise ValueError(
            f"--lengths-csv writes Megatron-LM's mock SFT lengths: it goes with --format megatron-lm, not {args.format}"
        )
    text = analysis.export(
        args.format,
        recommended=args.recommended,
        vary=args.vary,
        mock_lengths=args.lengths_csv,
    )
    if args.lengths_csv:
        write_text("--lengths-csv", args.lengths_csv, mock_lengths_csv(hist, plan.packing_seed), args.force, inputs)
        progress(f"wrote {hist.num_samples:,} lengths to {args.lengths_csv} (line 1 is a header Megatron-LM drops)")
    return ExportResult(text=text)


def _limit_memory(gib: float) -> None:
    """The process's own heap and mappings (RLIMIT_DATA: torch's tensors count)."""
    import resource

    limit = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def trial(args: Namespace) -> TrialResult | None:
    """The trial's result, or None on a rank other than 0 under torchrun (rank 0 reports)."""
    from pathlib import Path

    from advisor.trial.config import from_cli
    from advisor.trial.run import OUTPUT_NAMES, ParityError, leave_process_group, run_trial, write_outputs

    progress = Progress(args.quiet)
    if args.heartbeat or args.wall_seconds:
        from advisor.trial.jobs import start_watchdog

        start_watchdog(args.heartbeat, args.heartbeat_seconds, args.wall_seconds)
    if args.memory_gib is not None:
        _limit_memory(args.memory_gib)
    plan, hist = plan_and_lengths(args, progress)
    inputs = (args.plan, args.lengths or plan.data.lengths)
    if args.out:  # refused before the run, not after it
        from advisor.safe_write import check_output_folder

        named("--out", check_output_folder, args.out, force=args.force, inputs=inputs, names=OUTPUT_NAMES)
    cfg = from_cli(args)
    try:
        result = run_trial(plan, hist, cfg, progress=(lambda m: None) if args.quiet else trial_progress)
    except ParityError as e:
        raise CommandFailed(f"trial failed the packing parity check: {e}", 3) from None
    except (MemoryError, RuntimeError) as e:  # torch reports an allocation it cannot make as a RuntimeError
        if args.memory_gib is None or not isinstance(e, MemoryError) and "alloc" not in str(e).lower():
            raise
        raise ValueError(
            f"the trial ran out of its {args.memory_gib:g} GiB (--memory-gib): a smaller --pack-size, "
            "--packs-per-step, --micro-batch-size or --model-scale fits"
        ) from None
    finally:
        leave_process_group()
    data = result.to_dict()
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    if args.out:
        named("--out", write_outputs, result, Path(args.out), force=args.force, inputs=inputs)
    return TrialResult(data=data)


def schema(args: Namespace) -> SchemaResult:
    from advisor.plan.schema import json_schema

    return SchemaResult(data=json_schema())
