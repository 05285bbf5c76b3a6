"""The dashboard's pages, in the order a newcomer visits them: one record each, read by ``app.py`` (its
``st.navigation``), the tour (which page a step opens) and the tests (every page is run and explained). Adding a page
is one record here and its file in ``pages/``.

>>> [p.title for p in PAGES][:3], sum(p.default for p in PAGES)
(['Tour: start here', 'Data and plan', 'Packing'], 1)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PageSpec:
    path: str  # the script, from the repository root
    title: str  # the navigation's label (and the link a visitor clicks)
    icon: str  # a Material Symbols name, as st.Page takes it
    default: bool = False  # the page the bare address opens


PAGES: tuple[PageSpec, ...] = (
    PageSpec(path="pages/5_Tour.py", title="Tour: start here", icon=":material/school:"),
    PageSpec(path="pages/0_Data_and_plan.py", title="Data and plan", icon=":material/dataset:", default=True),
    PageSpec(path="pages/1_Packing.py", title="Packing", icon=":material/view_week:"),
    PageSpec(path="pages/6_Online_packing.py", title="Online packing", icon=":material/view_timeline:"),
    PageSpec(path="pages/2_Memory_and_FLOPs.py", title="Memory and FLOPs", icon=":material/memory:"),
    PageSpec(path="pages/3_Recommendations.py", title="Recommendations", icon=":material/checklist:"),
    PageSpec(path="pages/4_Trial.py", title="Trial", icon=":material/science:"),
)


def page_paths() -> list[str]:
    return [p.path for p in PAGES]
