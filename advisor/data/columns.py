"""Which column of a table (or key of a JSON record) holds the lengths, and which the counts: by ``--column``,
by a known name (``LENGTH_NAMES``, ``COUNT_NAMES``, ``IDS_NAMES``), or by elimination, and never by a guess
between two columns of the same name. Shared by the delimited-text, JSON and Parquet readers.
"""

from __future__ import annotations

from advisor.data.context import Ctx
from advisor.data.guard import excerpt, names_excerpt
from advisor.errors import InputError

__all__ = ["COUNT_NAMES", "IDS_NAMES", "LENGTH_NAMES", "LOSS_NAMES", "choose_columns", "pick", "refuse_duplicates"]

LENGTH_NAMES = (
    "length",
    "lengths",
    "seq_len",
    "seqlen",
    "seq_length",
    "sequence_length",
    "num_tokens",
    "n_tokens",
    "token_count",
    "tokens",
    "len",
    "input_length",
    "input_len",
)
COUNT_NAMES = ("count", "counts", "frequency", "freq", "num_samples", "n", "num")
# a sample's label positions that carry loss (python -m advisor tokenize --loss-tokens writes it): optional
LOSS_NAMES = ("loss_tokens",)
IDS_NAMES = ("input_ids", "token_ids", "ids")


def pick(names: list[str], wanted: tuple[str, ...]) -> str | None:
    """The first of ``wanted`` found among ``names`` (trimmed, any case), as the file spells it; else None.

    >>> pick(["id", " Seq_Len ", "count"], LENGTH_NAMES), pick(["a", "b"], COUNT_NAMES)
    (' Seq_Len ', None)
    """
    lowered = {n.strip().lower(): n for n in names if isinstance(n, str)}
    for w in wanted:
        if w in lowered:
            return lowered[w]
    return None


def choose_columns(names: list[str], ctx: Ctx, where: str) -> tuple[str, str | None]:
    """The length column and, for a histogram, the count column."""
    shown = names_excerpt(names)
    if ctx.column is not None:
        if ctx.column not in names:
            if ctx.column.isdigit() and 1 <= int(ctx.column) <= len(names):
                return names[int(ctx.column) - 1], None
            raise InputError(ctx.name, where, f"no column {excerpt(ctx.column)}; columns are {shown}")
        length_col: str | None = ctx.column
    else:
        length_col = pick(names, LENGTH_NAMES)
    count_col = pick([n for n in names if n != length_col], COUNT_NAMES)
    if ctx.histogram is False:
        count_col = None
    elif ctx.histogram and count_col is None:
        raise InputError(
            ctx.name, where, f"a histogram needs a count column ({', '.join(COUNT_NAMES)}); columns are {shown}"
        )
    if length_col is None:
        if len(names) == 1:
            length_col = names[0]
        elif len(names) == 2 and count_col is not None and names.count(count_col) == 1:
            length_col = next(n for n in names if n != count_col)
        else:
            raise InputError(
                ctx.name,
                where,
                f"cannot tell which of the columns {shown} holds lengths: name one "
                f"{LENGTH_NAMES[:4]}… or pass --column",
            )
    return length_col, count_col


def refuse_duplicates(names: list[str], chosen: tuple[str | None, ...], ctx: Ctx, where: str) -> None:
    """Two columns both named ``length`` (or ``Length`` and ``length``): which one is meant cannot be told."""
    for col in chosen:
        if col is None:
            continue
        same = [n for n in names if n == col or (isinstance(n, str) and n.strip().lower() == col.strip().lower())]
        if len(same) > 1:
            raise InputError(
                ctx.name,
                where,
                f"{len(same)} columns are named {excerpt(col)}: rename all but one, "
                "or pass --column with a column number",
            )
    dupes = {n for n in names if names.count(n) > 1} if len(names) < 1000 else set()
    if dupes:
        ctx.notes.append(f"columns named more than once (not used): {names_excerpt(sorted(map(str, dupes)))}")
