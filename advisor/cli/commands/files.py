"""Output files of the command line (``-o``, ``--out``, ``--lengths-csv``) through advisor.safe_write, each refusal
naming the option: checked before the work that fills them, written atomically after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from advisor.errors import InputError

T = TypeVar("T")


def named(option: str, call: Callable[..., T], *args, **kwargs) -> T:
    """``call`` with a refusal's message naming the option too: "-o lengths.csv: exists; pass --force ..."."""
    try:
        return call(*args, **kwargs)
    except InputError as e:
        raise InputError(f"{option} {e.source}", e.where, e.what) from None


def check_output_file(option: str, path: str, force: bool, inputs: Sequence[str]) -> str:
    """Check an output file before the work that fills it (no overwrite without --force, no symlink, no system
    folder, never an input)."""
    from advisor.safe_write import check_output_file as check

    return named(option, check, path, force=force, inputs=inputs)


def write_text(option: str, path: str, text: str, force: bool, inputs: Sequence[str]) -> None:
    """Write atomically after checking again (the command may have run for minutes since the first check)."""
    from advisor.safe_write import write_text as write

    named(option, write, path, text, force=force, inputs=inputs)
