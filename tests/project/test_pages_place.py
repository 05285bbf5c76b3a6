"""Pages only place: text the engine or a visitor wrote reaches the page through the frame's ``say``/``place``
(escaped), never ``st.caption(...)`` and its kin on a computed value; a literal string is the page's own words."""

from __future__ import annotations

import ast

import pytest

from advisor.ui.pages import page_paths
from tests.support import ROOT

TEXT_CALLS = {"caption", "info", "error", "warning", "write", "markdown", "subheader", "success", "text"}


def raw_text_calls(source: str) -> list[str]:
    """``x.caption(...)`` and its kin whose text is not a literal string."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TEXT_CALLS
            and node.args
            and not isinstance(node.args[0], ast.Constant)
        ):
            out.append(f"line {node.lineno}: .{node.func.attr}({ast.unparse(node.args[0])[:60]})")
    return out


@pytest.mark.parametrize("page", page_paths())
def test_a_page_shows_computed_text_only_through_the_frame(page):
    assert not raw_text_calls((ROOT / page).read_text())


def test_the_check_sees_a_computed_caption_and_passes_a_literal_one():
    assert raw_text_calls("st.caption(views.note(plan))\nst.caption('mine')\nb.info(f'{x}')\n") == [
        "line 1: .caption(views.note(plan))",
        "line 3: .info(f'{x}')",
    ]


PAGE_MOST_LINES = 50  # a page places the engine's blocks and its own controls; more is layout logic to move out


@pytest.mark.parametrize("page", page_paths())
def test_a_page_is_at_most_fifty_lines(page):
    lines = (ROOT / page).read_text().splitlines()
    assert len(lines) <= PAGE_MOST_LINES, f"{page}: {len(lines)} lines; move what it computes into advisor/ui/screens"


def test_pages_draw_blocks_only_through_place():
    """A page calls ``place`` on what advisor/ui/screens.py builds, never ``st.metric``/``st.dataframe`` itself."""
    drawn = {"metric", "dataframe", "plotly_chart", "table", "json"}
    calls = [
        f"{page}:{node.lineno} .{node.func.attr}"
        for page in page_paths()
        for node in ast.walk(ast.parse((ROOT / page).read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in drawn
    ]
    assert not calls
