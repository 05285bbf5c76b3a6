"""The documentation holds to the code: every command, option and plan field is in the generated references, and
every one the hand-written pages and the README name exists (an option on a ``python -m advisor CMD`` line belongs
to CMD; a plan field written as ``section.field`` is a field of the schema)."""

from __future__ import annotations

import re

import pytest

from advisor.cli.parser import COMMANDS
from advisor.cli.reference import cli_reference, options_of, plan_fields, plan_reference
from tests.support import ROOT

PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
SECTIONS = ("model", "parallel", "training", "packing", "data", "hardware")


def test_the_references_hold_every_command_option_and_plan_field():
    cli, plan = cli_reference(), plan_reference()
    for command in COMMANDS:
        assert f"## `{command}`" in cli
        for action in options_of(command):
            for flag in action.option_strings or [action.dest]:
                assert f"`{flag}`" in cli, (command, flag)
    for key, _ in plan_fields():
        assert f"### `{key}`" in plan, key


def _advisor_lines(text: str) -> list[tuple[str, str]]:
    """(command, the line with its continuations) for every ``python -m advisor COMMAND ...`` written."""
    out = []
    joined = re.sub(r"\\\n\s*", " ", text)
    for m in re.finditer(r"python -m advisor ([a-z]+)([^\n`]*)", joined):
        out.append((m.group(1), m.group(2)))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_a_page_writes_on_a_command_line_exists(page):
    wrong = []
    for command, rest in _advisor_lines(page.read_text()):
        if command not in COMMANDS:
            wrong.append(f"no command {command!r}")
            continue
        known = {f for a in options_of(command) for f in a.option_strings} | {"-h", "--help"}
        wrong += [
            f"{command} {flag}" for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", rest) if flag not in known
        ]
    assert not wrong, wrong


def _finding_ids() -> set[str]:
    """Every finding id the rules raise (``id="data.truncated"``): named like plan fields, and documented too."""
    return {
        m
        for path in (ROOT / "advisor").rglob("*.py")
        for m in re.findall(r'\bid=f?"([a-z_]+\.[a-z_0-9]+)"', path.read_text())
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_plan_field_a_page_names_exists(page):
    known = {key for key, _ in plan_fields()} | _finding_ids()
    named = set(re.findall(rf"`((?:{'|'.join(SECTIONS)})\.[a-z_0-9]+)", page.read_text()))
    assert not named - known, sorted(named - known)


def test_the_option_check_sees_an_option_a_command_does_not_have():
    text = "python -m advisor pack FILE --pack-size 2048 \\\n    --no-such-flag\n"
    ((command, rest),) = _advisor_lines(text)
    known = {f for a in options_of(command) for f in a.option_strings}
    assert command == "pack" and "--pack-size" in known and "--no-such-flag" in rest and "--no-such-flag" not in known


def _examples(page) -> list[tuple[list[str], list[str]]]:
    """(arguments, the output lines shown) of each ``$ python -m advisor pack|schedule ...`` example on a page: the
    commands that read bundled data and write nothing."""
    out = []
    for block in re.findall(r"```\n(\$ python -m advisor .*?)```", page.read_text(), flags=re.S):
        command, *shown = re.sub(r"\\\n\s*", " ", block).splitlines()
        args = command.split()[4:]  # after '$ python -m advisor'
        if args[0] in ("pack", "schedule"):
            out.append((args, shown))
    return out


EXAMPLES = _examples(ROOT / "docs" / "cli.md")


@pytest.mark.parametrize(("args", "shown"), EXAMPLES, ids=[" ".join(a[:2]) for a, _ in EXAMPLES])
def test_the_cli_pages_examples_print_what_they_show(capsys, args, shown):
    """Each line the page shows is a line the command prints today (a timing's digits aside, "..." elides lines):
    the page showed seed 1234 and a worst step x3.47 after the default became 5678 and the figure x3.14."""
    from tests.support.cli import in_process

    run = in_process(capsys, *args)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    for line in shown:
        if line.strip() == "...":
            continue
        pattern = re.sub(r"in\\? \d+\\\.\d+\\? s", r"in [\\d.]+ s", re.escape(line))
        assert any(re.fullmatch(pattern, p) for p in printed), (line, printed[:8])
