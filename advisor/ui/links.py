"""Shareable links: the address bar holds the plan (compressed JSON) and the sample's name, and a crafted link is
refused with one message (size-capped inflation, the plan files' depth limit, the dashboard's budget).

>>> from advisor.ui.samples import default_plan
>>> sample, plan = plan_from_query(plan_to_query(default_plan(), DEFAULT_SAMPLE))
>>> plan == default_plan()
True
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib

from advisor.plan import Plan, PlanError, plan_from_dict
from advisor.plan.io import MAX_PLAN_BYTES, parse_plan_text
from advisor.ui.samples import DEFAULT_SAMPLE, SAMPLES, sample_path, within_budget


# ------------------------------------------------------------------------------------------------ links
def plan_to_query(plan: Plan, sample: str | None) -> dict[str, str]:
    """Query parameters that reopen the dashboard on this plan (and sample, by name)."""
    text = json.dumps(plan.to_dict(), separators=(",", ":"))
    out = {"plan": base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()}
    if sample in SAMPLES:
        out["sample"] = sample
    elif sample:
        out["data"] = "upload"  # the data itself cannot travel in a link: the opened link says so
    return out


def plan_from_query(query: dict) -> tuple[str, Plan | None]:
    """The sample and plan of a shared link; a bad link raises ``PlanError`` (decompressed with a size cap, parsed
    with the plan files' depth limit, so a crafted link cannot blow up or crash the page)."""
    sample = query.get("sample", DEFAULT_SAMPLE)
    if sample not in SAMPLES:
        raise PlanError("link", [f"unknown sample {str(sample)[:40]!r}"])
    if "plan" not in query:
        return sample, None
    plan = _plan_of(query)
    notes = plan.notes  # what reading the link's plan said (an older version), kept past the change below
    # a link's data path is a name, never read on the server: the session's data is the sample's (a path in a
    # crafted link would otherwise be looked up, telling which folders exist there)
    plan = plan.changed({"data": {"lengths": sample_path(sample), "column": None}})
    if query.get("data") == "upload":
        notes = (*notes, LINK_UPLOAD_NOTE.format(sample=sample))
    return sample, plan.model_copy(update={"notes": notes})


LINK_UPLOAD_NOTE = (
    "This link was made on uploaded data, which a link cannot carry: the plan is the link's, the data "
    "is the bundled sample {sample}. Upload the same file on Data and plan to see the link's figures."
)


def _plan_of(query: dict) -> Plan:
    try:
        packed = base64.urlsafe_b64decode(str(query["plan"])[:MAX_PLAN_BYTES].encode())
        inflate = zlib.decompressobj()
        raw = inflate.decompress(packed, MAX_PLAN_BYTES)
        if inflate.unconsumed_tail:
            raise PlanError("link", [f"the plan parameter inflates past {MAX_PLAN_BYTES:,} bytes"])
        text = raw.decode()
    except (ValueError, binascii.Error, zlib.error, UnicodeDecodeError):
        raise PlanError("link", ["the plan parameter is not a plan link"]) from None
    return within_budget(plan_from_dict(parse_plan_text(text, "link.json"), "link"), "link")
