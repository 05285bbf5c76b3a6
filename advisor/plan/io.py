"""Plans in and out of files and links: YAML or JSON, with limits, and relative paths read from the plan's folder.

YAML is parsed with ``yaml.SafeLoader`` (no object is ever constructed from a tag) and, before it is constructed,
its node graph is measured with aliases expanded: an 800-byte "billion laughs" plan would otherwise expand to
gigabytes when validated.

>>> text = dump_plan(plan_from_dict({"model": {"preset": "llama3.1-8b", "num_layers": 16}}))
>>> plan_from_text(text, "p.yaml").model.num_layers
16
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from advisor.limits import json_too_deep
from advisor.plan.schema import Plan, PlanError, plan_from_dict

MAX_PLAN_BYTES = 256 * 1024
MAX_PLAN_NODES = 20_000  # values in the plan with YAML aliases expanded; a real plan has about 60
MAX_PLAN_DEPTH = 32
SCHEMA_HINT = "# yaml-language-server: $schema=plan.schema.json\n"


def _expanded_size(node: yaml.Node, limit: int) -> int:
    """Nodes the YAML graph expands to (aliases counted every time they are used), stopping past ``limit``."""
    memo: dict[int, int] = {}

    def size(n: yaml.Node, depth: int) -> int:
        if depth > MAX_PLAN_DEPTH:
            raise ValueError(f"is nested deeper than {MAX_PLAN_DEPTH} levels")
        if id(n) in memo:
            return memo[id(n)]
        total = 1
        if isinstance(n, yaml.MappingNode):
            keys = [k.value for k, _ in n.value if isinstance(k, yaml.ScalarNode)]
            repeated = sorted({k for k in keys if keys.count(k) > 1})
            if repeated:  # YAML keeps the last silently; a plan with two values for one field is a mistake
                raise ValueError(f"is ambiguous: the key {str(repeated[0])[:40]!r} appears twice in one mapping")
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c, depth + 1) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in n.value)
        if total > limit:
            raise ValueError(f"expands to more than {limit:,} values (YAML aliases?)")
        memo[id(n)] = total
        return total

    return size(node, 0)


def parse_plan_text(text: str, name: str) -> object:
    """The raw mapping of a plan file's text (JSON if the name ends .json, else YAML), within the limits."""
    kind = "JSON" if name.lower().endswith(".json") else "YAML"
    if len(text) > MAX_PLAN_BYTES:
        raise PlanError(name, [f"is {len(text):,} characters; a plan is at most {MAX_PLAN_BYTES:,}"])
    try:
        if kind == "JSON":
            if json_too_deep(text.encode("utf-8", "surrogatepass"), MAX_PLAN_DEPTH):  # the data files' scan
                raise ValueError(f"is nested deeper than {MAX_PLAN_DEPTH} levels")
            return json.loads(text, parse_constant=_no_constant)
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, MAX_PLAN_NODES)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        what = (
            str(e)
            if isinstance(e, ValueError) and str(e).startswith(("is ", "expands"))
            else f"is not valid {kind}: {str(e)[:300]}"
        )
        raise PlanError(name, [what]) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a plan can hold")


BUNDLED = Path(__file__).resolve().parents[2] / "sample_data"  # the advisor's own samples


def plan_from_text(text: str, name: str, base_dir: Path | None = None) -> Plan:
    """A plan from a file's text; a relative ``data.lengths`` is made absolute against ``base_dir`` if given."""
    raw = parse_plan_text(text, name)
    plan = plan_from_dict(raw, name)
    if base_dir is not None and plan.data.lengths and not plan.data.lengths.lstrip().startswith("{"):
        path = Path(plan.data.lengths).expanduser()
        resolved = os.path.normpath(path if path.is_absolute() else base_dir / path)
        if (
            not path.is_absolute()
            and path.parts[:1] == ("sample_data",)
            and not os.path.exists(resolved)
            and (BUNDLED.parent / path).is_file()
        ):  # a bundled sample, as the dashboard saves it: anywhere
            resolved = str(BUNDLED.parent / path)
        if resolved != plan.data.lengths:
            plan = plan.model_copy(update={"data": plan.data.model_copy(update={"lengths": resolved})})
    return plan


def load_plan(path) -> Plan:
    """Read a YAML or JSON plan file; relative data paths in it are read from the plan file's folder."""
    path = Path(path)
    try:
        if not path.is_file():
            raise PlanError(str(path), ["is not a file" if path.exists() else "file not found"])
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise PlanError(str(path), [f"is {path.stat().st_size:,} bytes; a plan is at most {MAX_PLAN_BYTES:,}"])
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise PlanError(str(path), [f"is not UTF-8 text (byte {e.start})"]) from None
    except OSError as e:
        raise PlanError(str(path), [f"cannot be read: {e.strerror}"]) from None
    return plan_from_text(text, str(path), base_dir=path.resolve().parent)


def dump_plan(plan: Plan, fmt: str = "yaml") -> str:
    """The plan as a file: YAML (with a pointer to the JSON Schema for editors) or JSON."""
    data = plan.to_dict()
    if fmt == "json":
        return json.dumps(data, indent=2)
    return SCHEMA_HINT + yaml.safe_dump(data, sort_keys=False)
