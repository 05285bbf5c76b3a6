"""A finding: what is wrong or worth knowing about a plan or a run, why, the source that says so, and the fix.

One type for every layer: Megatron-LM's own checks of the online scheduler (``packing/online/validation.py``) and
the advisor's rules (``advice/rules.py``) both return these, so nothing converts between two vocabularies.

>>> f = Finding(id="cp.loss", severity="info", message="m", reason="r", source="s")
>>> f.as_dict()["severity"], SEVERITIES
('info', ('error', 'warning', 'info'))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

Severity = Literal["error", "warning", "info"]  # error: the run refuses to start or fails; info: worth knowing
SEVERITIES: tuple[Severity, ...] = get_args(Severity)  # most severe first: the order findings are listed in


@dataclass(frozen=True, kw_only=True)
class Finding:
    id: str
    severity: Severity
    message: str
    reason: str
    source: str
    fix: dict = field(default_factory=dict)  # plan changes, {section: {field: value}}: Plan.changed(fix) applies it
    # what a known trap does at the plan's versions (crash, hang, trains wrong, wastes memory, misleading logs:
    # advisor/advice/traps.py), None for the advisor's other rules; and the upstream thread it cites
    outcome: str | None = None
    link: str | None = None

    def __post_init__(self):
        if self.severity not in SEVERITIES:  # a typo would otherwise drop the finding from every severity group
            raise ValueError(f"finding {self.id}: severity {self.severity!r} is not one of {SEVERITIES}")

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "severity": self.severity,
            "message": self.message,
            "reason": self.reason,
            "source": self.source,
            "fix": self.fix,
            **({"outcome": self.outcome, "link": self.link} if self.outcome else {}),
        }


def by_severity(findings: Iterable[Finding]) -> dict[Severity, list[Finding]]:
    """The findings grouped by severity, most severe first, every group present (empty or not), order kept.

    >>> g = by_severity([Finding(id="a", severity="info", message="", reason="", source="")])
    >>> {k: len(v) for k, v in g.items()}
    {'error': 0, 'warning': 0, 'info': 1}
    """
    groups: dict[Severity, list[Finding]] = {s: [] for s in SEVERITIES}
    for f in findings:
        groups[f.severity].append(f)
    return groups


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first, in their order within a severity."""
    return [f for group in by_severity(findings).values() for f in group]
