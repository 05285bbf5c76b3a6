"""What each command computes, by name: a function from the parsed options to a result (a small frozen dataclass,
or None when there is nothing to show), which advisor/cli/output.py prints. Commands never print; their engine
imports happen when they run, so one command never waits for another's.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable

from advisor.cli.commands import data, plan, prepare, tokenize
from advisor.cli.commands.plan import CommandFailed

__all__ = ["COMMANDS", "CommandFailed", "run"]

COMMANDS: dict[str, Callable[[Namespace], object]] = {
    "lengths": data.lengths,
    "pack": data.pack,
    "estimate": plan.estimate,
    "recommend": plan.recommend,
    "export": plan.export,
    "trial": plan.trial,
    "schedule": data.schedule,
    "tokenize": tokenize.tokenize,
    "prepare": prepare.prepare,
    "schema": plan.schema,
    "warmup": data.warmup,
}


def run(args: Namespace) -> object:
    """The result of the command ``args`` names (every command the parser builds has one, and a text).

    >>> from advisor.cli.output import TEXT
    >>> from advisor.cli.parser import COMMANDS as PARSED
    >>> list(PARSED) == list(COMMANDS) == list(TEXT)
    True
    """
    return COMMANDS[args.command](args)
