"""One registry per thing people add: a name of a packer, an export, a GPU or a page is compared with only in its
own registry module. A caller that must treat one differently reads a trait of its record (``PACKERS[a].solver``,
``EXPORTS[f].mock_lengths``), so adding a record never means finding the ``if name == ...`` elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from advisor.formats import EXPORTS
from advisor.packing.packers import PACKERS
from advisor.plan.gpus import GPUS
from advisor.ui.pages import PAGES
from advisor.vocabulary import Algorithm, ExportFormat

ROOT = Path(__file__).resolve().parents[2]

# (what, its names, the variable names a comparison with them is made on, the modules allowed to compare)
REGISTRIES = (
    ("packer", set(PACKERS), ("algorithm", "algo"), {"advisor/packing/packers.py"}),
    ("export", set(EXPORTS), ("fmt", "format", "export"), {"advisor/formats.py"}),
    ("GPU", {g.name for g in GPUS}, ("gpu", "system"), {"advisor/plan/gpus.py"}),
    ("page", {p.path for p in PAGES} | {p.title for p in PAGES}, ("page", "title"), {"advisor/ui/pages.py"}),
)


def _sources() -> list[Path]:
    return sorted([*ROOT.glob("advisor/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"])


def name_checks(source: str, names: set[str], variables: tuple[str, ...]) -> list[str]:
    """Comparisons (``==``, ``!=``, ``in``, ``not in``) of something named like ``variables`` with a literal name of
    ``names``, or a tuple of them.

    >>> name_checks("if cfg.algorithm == 'a': pass\\nif x == 'a': pass\\nok = algo in ('a', 'b')", {"a"}, ("algo",))
    ["line 1: cfg.algorithm == 'a'", "line 3: algo in ('a', 'b')"]
    """
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = {
            c.value
            for side in sides
            for c in ([side] if isinstance(side, ast.Constant) else getattr(side, "elts", []))
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        }
        named = any(v in ast.unparse(side).lower() for side in sides for v in variables)
        if literals & names and named:
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


@pytest.mark.parametrize("what, names, variables, allowed", REGISTRIES, ids=[r[0] for r in REGISTRIES])
def test_a_registered_name_is_compared_with_only_in_its_registry(what, names, variables, allowed):
    found = [
        f"{path.relative_to(ROOT)} {hit}"
        for path in _sources()
        if str(path.relative_to(ROOT)) not in allowed
        for hit in name_checks(path.read_text(), names, variables)
    ]
    assert not found, f"{what} names compared outside the registry (read a trait of the record instead): {found}"


def test_the_registries_and_the_vocabulary_name_the_same_things():
    assert set(PACKERS) == set(get_args(Algorithm))
    assert set(EXPORTS) == set(get_args(ExportFormat))
    assert len({g.name for g in GPUS}) == len(GPUS) and len({p.path for p in PAGES}) == len(PAGES)
