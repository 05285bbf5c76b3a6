"""The export formats: one record each (its name, the file it is saved as, the code block's language, what it is, and
the function that renders it), read by ``Analysis.export``, the command line's ``export --format`` and the
Recommendations page. Adding an export is one record here, its name in ``advisor.vocabulary.ExportFormat`` (checked
at import) and its renderer in ``advisor.advice`` or ``advisor.trial``.

The alternative, a renderer table in each caller and a file-name table beside it, had four lists to keep in step.

>>> [f.name for f in EXPORTS.values()][:3], EXPORTS["python"].file_name
(['python', 'overrides', 'megatron-lm'], 'packing_config.py')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from advisor.advice.exports import (
    markdown_report,
    megatron_lm_args,
    overrides,
    packed_paths,
    python_snippet,
)
from advisor.findings import Finding
from advisor.plan import Plan, dump_plan
from advisor.trial.launch import trial_slurm, trial_torchrun
from advisor.vocabulary import ExportFormat

if TYPE_CHECKING:
    from advisor.advice.search import SearchResult
    from advisor.model.estimate import Estimate


@dataclass(frozen=True, kw_only=True)
class ExportInputs:
    """What any export may read: the plan and what the analysis derived from it and the data."""

    plan: Plan
    version: str  # the Megatron-Bridge release the snippet targets (MAJOR.MINOR.PATCH)
    packing_factor: float | None = None  # offline packing's n (samples per pack)
    num_samples: int | None = None
    num_packs: int | None = None
    findings: Sequence[Finding] = ()
    estimate: Estimate | None = None
    search: SearchResult | None = None
    mock_lengths: str | None = None  # the Megatron-LM arguments train on mock data of the lengths in this file


@dataclass(frozen=True, kw_only=True)
class ExportSpec:
    name: ExportFormat
    file_name: str
    language: str  # the code block's highlighting on the page
    what: str  # one line for the command line's help and the page
    render: Callable[[ExportInputs], str]
    # False: not the plan's training run (the trial runs a scaled model): a plan that does not fit may export it
    uses_plan: bool = True
    mock_lengths: bool = False  # can train on mock data of the user's lengths, written beside it (--lengths-csv)
    report: bool = False  # reads the analysis's findings and estimate, not only the plan


def _size(i: ExportInputs) -> dict[str, Any]:
    return {"num_samples": i.num_samples, "num_packs": i.num_packs}


EXPORTS: dict[ExportFormat, ExportSpec] = {
    s.name: s
    for s in (
        ExportSpec(
            name="python",
            file_name="packing_config.py",
            language="python",
            what="a Megatron-Bridge snippet that sets a recipe's ConfigContainer",
            render=lambda i: python_snippet(i.plan, i.version, i.packing_factor, **_size(i)),
        ),
        ExportSpec(
            name="overrides",
            file_name="overrides.txt",
            language="text",
            what="the same settings as Megatron-Bridge command-line overrides",
            render=lambda i: overrides(i.plan, i.version, i.packing_factor, **_size(i)),
        ),
        ExportSpec(
            name="megatron-lm",
            file_name="megatron_lm_args.sh",
            language="bash",
            what="Megatron-LM pretrain_gpt.py arguments",
            render=lambda i: megatron_lm_args(
                i.plan, i.mock_lengths, num_samples=i.num_samples, packing_factor=i.packing_factor
            ),
            mock_lengths=True,
        ),
        ExportSpec(
            name="paths",
            file_name="packed_paths.txt",
            language="text",
            what="where Megatron-Bridge writes and reads the packed files",
            render=lambda i: packed_paths(i.plan, i.version, packing_factor=i.packing_factor or 1.0),
        ),
        ExportSpec(
            name="plan",
            file_name="plan.yaml",
            language="yaml",
            what="the plan file itself",
            render=lambda i: dump_plan(i.plan),
        ),
        ExportSpec(
            name="markdown",
            file_name="report.md",
            language="markdown",
            what="a report: the plan, its figures, findings and candidates",
            render=lambda i: markdown_report(i.plan, list(i.findings), i.estimate, i.search, i.packing_factor),
            report=True,
        ),
        ExportSpec(
            name="torchrun",
            file_name="trial_torchrun.sh",
            language="bash",
            what="the trial of the plan (written into the script) on one node's GPUs",
            render=lambda i: trial_torchrun(i.plan),
            uses_plan=False,
        ),
        ExportSpec(
            name="slurm",
            file_name="trial.sbatch",
            language="bash",
            what="the trial of the plan (written into the script) as a Slurm batch job over the plan's nodes",
            render=lambda i: trial_slurm(i.plan),
            uses_plan=False,
        ),
    )
}
ALL_FORMATS: tuple[ExportFormat, ...] = tuple(EXPORTS)


def export_spec(name: str) -> ExportSpec:
    """The record of export ``name``, or ValueError naming the formats there are.

    >>> export_spec("docx")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: unknown export format 'docx'; choose from python, overrides, megatron-lm, ..., slurm
    """
    for spec in EXPORTS.values():
        if spec.name == name:
            return spec
    raise ValueError(f"unknown export format {str(name)[:40]!r}; choose from {', '.join(ALL_FORMATS)}")


def _check_vocabulary() -> None:
    """Refuse to import when the records and the vocabulary's names differ (not an assert: ``python -O`` skips
    those): a name the command line offers with nothing to render it, or a record no plan can ask for."""
    names = set(get_args(ExportFormat))
    if set(EXPORTS) != names:
        raise RuntimeError(
            f"advisor/formats.py EXPORTS {sorted(EXPORTS)} and advisor/vocabulary.py ExportFormat {sorted(names)} "
            "differ"
        )


_check_vocabulary()
