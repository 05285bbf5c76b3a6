"""What a page shows, as data: the engine's views return a tuple of blocks, the frame (``pages/_frame.py place``)
draws them with Streamlit; the alternative, pages calling ``st.metric``/``st.caption`` on engine values, puts layout
logic where no test without a browser reaches it.

Each block is a frozen record; ``Row`` sets blocks side by side, ``Fold`` hides them under a label. Text is the
engine's or a visitor's and is always escaped when drawn (``say``), never read as Markdown, except ``Markdown``
blocks, which the engine writes itself (the explanations).

>>> blocks = (Metrics(items=(Metric(label="packs", value="1,024", help="num_packs"),)), Text(kind="caption", text="n"))
>>> [type(b).__name__ for b in blocks], len(texts(blocks))
(['Metrics', 'Text'], 2)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

TextKind = Literal["caption", "info", "warning", "error", "success", "write", "subheader"]


@dataclass(frozen=True, kw_only=True)
class Metric:
    label: str
    value: str
    help: str | None = None  # a key of advisor/ui/explain.py's help texts


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """One row of metrics, one column each."""

    items: tuple[Metric, ...]


@dataclass(frozen=True, kw_only=True)
class Text:
    kind: TextKind
    text: str
    help: str | None = None  # the help key of its question mark
    markdown: bool = False  # the engine's own words with Markdown (code spans): drawn as written, not escaped


@dataclass(frozen=True, kw_only=True)
class Markdown:
    """Markdown the engine wrote (an explanation, a list of its own items); never a visitor's text."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Chart:
    figure: Any  # a plotly Figure
    explain: str  # the key of its "What am I looking at?" text


@dataclass(frozen=True, kw_only=True)
class Table:
    frame: Any  # a pandas DataFrame
    stretch: bool = False  # the page's full width


@dataclass(frozen=True, kw_only=True)
class Code:
    text: str
    language: str = "text"
    wrap: bool = False


@dataclass(frozen=True, kw_only=True)
class Row:
    """Columns of equal width, each a tuple of blocks."""

    columns: tuple[tuple[Block, ...], ...]


@dataclass(frozen=True, kw_only=True)
class Fold:
    """Blocks under an expander's label."""

    label: str
    body: tuple[Block, ...]
    expanded: bool = False


Block = Metrics | Text | Markdown | Chart | Table | Code | Row | Fold


def metrics(items: Iterable[tuple[str, str, str | None]]) -> Metrics:
    """A metric row from (label, value, help key) triples, the shape the views return.

    >>> metrics([("packs", "12", None)]).items[0].value
    '12'
    """
    return Metrics(items=tuple(Metric(label=a, value=b, help=c) for a, b, c in items))


def walk(blocks: tuple[Block, ...]) -> Iterator[Block]:
    """Every block, those in rows and folds included, depth first."""
    for b in blocks:
        yield b
        if isinstance(b, Row):
            for column in b.columns:
                yield from walk(column)
        elif isinstance(b, Fold):
            yield from walk(b.body)


def texts(blocks: tuple[Block, ...]) -> list[str]:
    """The words a visitor reads in these blocks (metric labels and values, texts, fold labels): what tests check."""
    out: list[str] = []
    for b in walk(blocks):
        if isinstance(b, Metrics):
            out += [f"{m.label}: {m.value}" for m in b.items]
        elif isinstance(b, Text | Markdown):
            out.append(b.text)
        elif isinstance(b, Fold):
            out.append(b.label)
    return out
