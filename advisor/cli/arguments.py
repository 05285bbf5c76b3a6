"""The argparse types of the command line: a value checked on its own, refused with one message (argparse then
exits 2), built by three factories (``whole``, ``positive``, ``number``) instead of one hand-written checker per
option; and the plan schema's bounds and names, read from the schema so an option and a plan field agree.

>>> whole(1, 8)("3"), positive(2)("0.5")
(3, 0.5)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, get_args

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

T = TypeVar("T")
SEEDS = 2**32  # numpy's legacy RandomState takes seeds below 2^32 (the packing shuffle is one)


def checked(check: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a checker that raises ValueError: argparse then exits 2 with the one message."""

    def parse(text: str) -> T:
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a whole number") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a number") from None


def whole(low: int, high: int, out_of_range: str = "{value} must be from {low} to {high:,}") -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``; ``out_of_range`` (with {value}, {low}, {high}) says why not."""

    def check(text: str) -> int:
        value = _whole_number(text)
        if not low <= value <= high:
            raise ValueError(out_of_range.format(value=value, low=low, high=high))
        return value

    return checked(check)


def positive(
    most: float,
    out_of_range: str = "{text!r} must be a number above 0 and at most {most:,}",
) -> Callable[[str], float]:
    """A finite number above 0 and at most ``most``; ``out_of_range`` (with {text}, {most}) says why not."""

    def check(text: str) -> float:
        value = _number(text)
        if not math.isfinite(value) or not 0 < value <= most:
            raise ValueError(out_of_range.format(text=text[:40], most=most))
        return value

    return checked(check)


def between(low: float, high: float, what: str) -> Callable[[str], float]:
    """A finite number from ``low`` to ``high`` (``what`` names it in the message: "--wall-seconds 0: ...").

    >>> between(1, 10, "seconds")("2.5")
    2.5
    """

    def check(text: str) -> float:
        value = _number(text)
        if not math.isfinite(value) or not low <= value <= high:
            raise ValueError(f"{text[:40]!r} must be {what} from {low:g} to {high:,g}")
        return value

    return checked(check)


def local_workers(requested: int | None, engine: str) -> tuple[int | None, str | None]:
    """The worker processes to start on this machine: at most its cores (4,096 processes of one file each once
    forked one per file), and the note that says so; a Ray cluster's workers are its own business.

    >>> local_workers(None, "local"), local_workers(1, "local")
    ((None, None), (1, None))
    """
    import os

    cores = os.cpu_count() or 1
    if requested is None or engine != "local" or requested <= cores:
        return requested, None
    return cores, f"--workers {requested}: this machine has {cores} cores; {cores} worker processes run"


def number(check: Callable[[float], T]) -> Callable[[str], T]:
    """A number, then the engine's own check of it (``advisor.analysis.check_mfu`` and the like)."""
    return checked(lambda text: check(_number(text)))


def seed() -> Callable[[str], int]:
    return whole(0, SEEDS - 1, "seed {value} must be from 0 to 2^32 - 1 (numpy's legacy seed)")


def megabytes() -> Callable[[str], float]:
    return positive(1 << 20, "{text!r} must be a number of MB from above 0 to {most:,}")


def comma_list(check: Callable[[Any], T]) -> Callable[[str], T]:
    """``a,b``: the non-empty items, stripped, given to the engine's check (``--vary seq_length,batch``)."""
    return checked(lambda text: check(x.strip() for x in text.split(",") if x.strip()))


def as_given(check: Callable[[str], object]) -> Callable[[str], str]:
    """The text itself, once the engine's check accepts it (a version written into a snippet)."""

    def keep(text: str) -> str:
        check(text)
        return text

    return checked(keep)


def _plan_field(section: str, name: str) -> FieldInfo:
    from pydantic import BaseModel

    from advisor.plan.schema import Plan

    model = Plan.model_fields[section].annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"the plan's {section!r} is not a section of fields")
    return model.model_fields[name]


def plan_max(section: str, name: str) -> int:
    """The largest value a plan's ``section.name`` takes (its ``le``): the option that sets it takes the same."""
    return next(m.le for m in _plan_field(section, name).metadata if hasattr(m, "le"))


def plan_choices(section: str, name: str) -> tuple[str, ...]:
    """The names a plan's ``section.name`` takes (its Literal)."""
    return get_args(_plan_field(section, name).annotation)


def plan_default(section: str, name: str) -> Any:
    return _plan_field(section, name).default
