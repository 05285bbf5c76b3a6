"""The command-line and plan references as Markdown, generated from the argparse tree (``build_parser``) and the
plan's pydantic schema, never typed twice: the documentation site builds its reference pages from these
(``docs/hooks.py``), and a test holds the hand-written pages to what exists. The alternatives, a hand-kept table
or ``--help`` pasted into the docs, drift the day an option is added.

>>> "| `--pack-size`" in cli_reference() and "### `training.global_batch_size`" in plan_reference()
True
"""

from __future__ import annotations

import argparse
import typing

from pydantic.fields import FieldInfo

from advisor.cli.parser import COMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-commands here and nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("%%", "%")


def options_of(command: str) -> list[argparse.Action]:
    """The options and positionals of one command, as argparse holds them (``-h`` left out)."""
    sub = _subparsers(build_parser(command))[command]
    return [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]


def cli_reference() -> str:
    """Every command, its purpose, and a table of its arguments: name, what it takes, default, help."""
    out = [
        "# Command-line reference",
        "",
        "Generated from the argparse tree (`advisor/cli/parser.py`) when the documentation is built; "
        "`python -m advisor COMMAND --help` prints the same.",
        "",
    ]
    for name, (text, _) in COMMANDS.items():
        out += [
            f"## `{name}`",
            "",
            _cell(text)[0].upper() + _cell(text)[1:] + ".",
            "",
            "| argument | takes | default | what it does |",
            "| --- | --- | --- | --- |",
        ]
        for a in options_of(name):
            flags = ", ".join(f"`{f}`" for f in a.option_strings) or f"`{a.dest}` (positional)"
            takes = (
                ("one of " + ", ".join(f"`{c}`" for c in a.choices))
                if a.choices
                else ("a flag" if a.nargs == 0 else "a value" if a.option_strings else a.dest)
            )
            default = "" if a.default in (None, argparse.SUPPRESS, False) or a.nargs == 0 else f"`{a.default}`"
            out.append(f"| {flags} | {_cell(takes)} | {default} | {_cell(a.help or '')} |")
        out.append("")
    return "\n".join(out)


def plan_fields() -> list[tuple[str, FieldInfo]]:
    """(section.field, pydantic FieldInfo) for every field of every plan section, in the schema's order."""
    from pydantic import BaseModel

    from advisor.plan import schema

    out: list[tuple[str, FieldInfo]] = []
    for section, info in schema.Plan.model_fields.items():
        models = [
            a
            for a in (info.annotation, *typing.get_args(info.annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not models:
            out.append((section, info))
            continue
        out += [(f"{section}.{name}", field) for name, field in models[0].model_fields.items()]
    return out


def _bounds(field) -> str:
    parts = []
    for m in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if hasattr(m, attr):
                value = getattr(m, attr)
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
    return ", ".join(parts)


def _type(annotation) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    for prefix in ("<class '", "'>"):
        text = text.replace(prefix, "")
    return " ".join(text.split())


def plan_reference() -> str:
    """Every plan field: its type, bounds, default and description, by section."""
    from pydantic_core import PydanticUndefined

    out = [
        "# Plan reference",
        "",
        "Generated from the plan's schema (`advisor/plan/schema.py`) when the documentation is built; "
        "`python -m advisor schema` prints the JSON Schema.",
        "",
    ]
    section = None
    for key, field in plan_fields():
        head = key.split(".")[0]
        if head != section and "." in key:
            section = head
            out += [f"## `{head}`", ""]
        default = getattr(field, "default", PydanticUndefined)
        shown = "required" if default is PydanticUndefined else f"default `{default!r}`"
        bounds = _bounds(field)
        out += [
            f"### `{key}`",
            "",
            f"{_cell(_type(field.annotation))}; {shown}" + (f"; {bounds}" if bounds else ""),
            "",
            _cell(field.description or ""),
            "",
        ]
    return "\n".join(out)


def traps_reference() -> str:
    """The catalogue of known traps (advisor/advice/traps.py) as a page: one row a trap, from its record."""
    from advisor.advice.traps import TRAPS
    from advisor.plan.versions import DEFAULT_VERSIONS, PACKAGE_NAMES

    defaults = ", ".join(f"{PACKAGE_NAMES[p]} {v}" for p, v in DEFAULT_VERSIONS.items())
    lines = [
        "# Known traps",
        "",
        "Generated from `advisor/advice/traps.py` when the site is built. `recommend` and the Recommendations page "
        "cite each trap where the plan walks into it at the releases in its `versions` section (default: "
        f"{defaults}), and not where those releases have the fix.",
        "",
        "| trap | what happens | bites | fixed in | fix |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in TRAPS:
        fixed = ", ".join(f"{PACKAGE_NAMES[p]} {v}" for p, v in t.fixed_in.items()) or "no release"
        fixed += "" if t.verified else " (inferred)"
        lines.append(
            f"| [{_cell(t.cites)}]({t.url}) | **{t.outcome}**: {_cell(t.what)} | `trap.{t.id}` | {_cell(fixed)}: "
            f"{_cell(t.fixed_by)} | {_cell(t.fix)} |"
        )
    return "\n".join(lines) + "\n"
