"""The one exception the engine raises for bad user input: it names the file, the place and what was wrong."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input, with where it is.

    >>> str(InputError("lengths.csv", "row 3", "'abc' is not a whole number"))
    "lengths.csv, row 3: 'abc' is not a whole number"
    """

    def __init__(self, source: str, where: str | None, what: str):
        self.source, self.where, self.what = str(source), where, what
        super().__init__(f"{self.source}, {where}: {what}" if where else f"{self.source}: {what}")
