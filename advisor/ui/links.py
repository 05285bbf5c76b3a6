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
from advisor.ui.samples import DEFAULT_SAMPLE, SAMPLES, within_budget


# ------------------------------------------------------------------------------------------------ links
def plan_to_query(plan: Plan, sample: str | None) -> dict[str, str]:
    """Query parameters that reopen the dashboard on this plan (and sample, by name)."""
    text = json.dumps(plan.to_dict(), separators=(",", ":"))
    out = {"plan": base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()}
    if sample in SAMPLES:
        out["sample"] = sample
    return out


def plan_from_query(query: dict) -> tuple[str, Plan | None]:
    """The sample and plan of a shared link; a bad link raises ``PlanError`` (decompressed with a size cap, parsed
    with the plan files' depth limit, so a crafted link cannot blow up or crash the page)."""
    sample = query.get("sample", DEFAULT_SAMPLE)
    if sample not in SAMPLES:
        raise PlanError("link", [f"unknown sample {str(sample)[:40]!r}"])
    if "plan" not in query:
        return sample, None
    try:
        packed = base64.urlsafe_b64decode(str(query["plan"])[:MAX_PLAN_BYTES].encode())
        inflate = zlib.decompressobj()
        raw = inflate.decompress(packed, MAX_PLAN_BYTES)
        if inflate.unconsumed_tail:
            raise PlanError("link", [f"the plan parameter inflates past {MAX_PLAN_BYTES:,} bytes"])
        text = raw.decode()
    except (ValueError, binascii.Error, zlib.error, UnicodeDecodeError):
        raise PlanError("link", ["the plan parameter is not a plan link"]) from None
    return sample, within_budget(plan_from_dict(parse_plan_text(text, "link.json"), "link"), "link")

