"""A finding: what is wrong or worth knowing about a plan, why, the source that says so, and the fix.

>>> f = Finding(id="cp.loss", severity="info", message="m", reason="r", source="s")
>>> f.as_dict()["severity"]
'info'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.plan import Plan

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, kw_only=True)
class Finding:
    id: str
    severity: str
    message: str
    reason: str
    source: str
    fix: dict = field(default_factory=dict)  # plan changes, {section: {field: value}}

    def as_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "message": self.message, "reason": self.reason,
                "source": self.source, "fix": self.fix}


def apply_fix(plan: Plan, fix: dict) -> Plan:
    """The plan with the fix's changes merged in (validated again; the plan itself is never changed)."""
    return plan.changed(fix)
