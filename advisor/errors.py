"""The two exceptions the engine raises for bad user input, each naming the file and what was wrong: ``InputError``
(a data file) and ``PlanError`` (a plan, one line per problem). Imported by every layer, so it stays tiny."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input, with where it is.

    >>> str(InputError("lengths.csv", "row 3", "'abc' is not a whole number"))
    "lengths.csv, row 3: 'abc' is not a whole number"
    """

    def __init__(self, source: str, where: str | None, what: str):
        self.source, self.where, self.what = str(source), where, what
        super().__init__(f"{self.source}, {where}: {what}" if where else f"{self.source}: {what}")


class PlanError(ValueError):
    r"""An invalid plan: ``problems`` holds one message per problem, each naming the field path.

    >>> str(PlanError("p.yaml", ["parallel.gpus: must be at least 1"]))
    'p.yaml: 1 problem(s):\n  - parallel.gpus: must be at least 1'
    """

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
