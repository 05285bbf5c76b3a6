"""The two exceptions the engine raises for bad user input, each naming the file and what was wrong: ``InputError``
(a data file) and ``PlanError`` (a plan, one line per problem), and ``excerpt``, how every message quotes a user's
value. Imported by every layer, so it stays tiny (no numpy, pydantic or pandas)."""

from __future__ import annotations

import math
import sys

EXCERPT = 40  # characters of a user's value quoted in a message


class InputError(ValueError):
    """Bad input, with where it is.

    >>> str(InputError("lengths.csv", "row 3", "'abc' is not a whole number"))
    "lengths.csv, row 3: 'abc' is not a whole number"
    """

    def __init__(self, source: str, where: str | None, what: str):
        self.source, self.where, self.what = str(source), where, what
        super().__init__(f"{self.source}, {where}: {what}" if where else f"{self.source}: {what}")

    def __reduce__(self):
        """Pickled with its three parts: raised in a worker process, it reaches the driver as itself (by default
        only the message travels, and rebuilding it fails, so the pool reported a dead worker instead).

        >>> import pickle; str(pickle.loads(pickle.dumps(InputError("a.jsonl", "line 3", "not JSON"))))
        'a.jsonl, line 3: not JSON'
        """
        return (type(self), (self.source, self.where, self.what))


class PlanError(ValueError):
    r"""An invalid plan: ``problems`` holds one message per problem, each naming the field path.

    >>> str(PlanError("p.yaml", ["parallel.gpus: must be at least 1"]))
    'p.yaml: 1 problem(s):\n  - parallel.gpus: must be at least 1'
    """

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))

    def __reduce__(self):
        return (type(self), (self.source, self.problems))


def excerpt(value, limit: int = EXCERPT) -> str:
    """A short, escaped rendering of a user's value for a message (``repr`` of at most ``limit`` characters).

    >>> excerpt("abc"), excerpt("x" * 100)[:8], excerpt(True), excerpt(2.5)
    ("'abc'", "'xxxxxxx", 'True', '2.5')
    >>> excerpt(10**3999), excerpt(10**5000)
    ('10000000000000000000…(4,000 digits)', '(an integer of about 5,000 digits)')
    """
    np = sys.modules.get("numpy")  # a numpy scalar can only exist once numpy is loaded: no import for it here
    if np is not None and isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return _long_int(value)
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value):,} items"
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return repr(value[:limit]) + "…"
    text = repr(value)
    return text if len(text) <= limit + 2 else text[:limit] + "…"


def _long_int(value: int) -> str:
    """Leading digits and a digit count; str() of an int past 4300 digits raises ValueError, so only estimate."""
    try:
        text = str(value)
    except ValueError:
        digits = math.floor((value.bit_length() - 1) * math.log10(2)) + 1
        return f"(an integer of about {digits:,} digits)"
    return f"{text[:20]}…({len(text.lstrip('-')):,} digits)"
