"""How many estimates (the expensive analysis step) each dashboard page runs on first load and on a rerun with
unchanged inputs. Run from a checkout: ``python bench/bench_analyses.py``; it works on older trees too (the estimate
lived at ``advisor.estimate`` before the engine was split by concern), so before/after come from the same script.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

PAGES = ["pages/1_Packing.py", "pages/2_Memory_and_FLOPs.py", "pages/3_Recommendations.py"]


def _estimate_module():
    for name in ("advisor.model.estimate", "advisor.estimate"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no estimate module")


def count(page: str) -> tuple[int, int]:
    module = _estimate_module()
    real = module.estimate
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    patches = [mock.patch.object(module, "estimate", counted)]
    for name, mod in list(sys.modules.items()):  # modules that imported the function by name
        if name.startswith("advisor") and getattr(mod, "estimate", None) is real and mod is not module:
            patches.append(mock.patch.object(mod, "estimate", counted))
    for p in patches:
        p.start()
    try:
        at = AppTest.from_file(str(ROOT / page), default_timeout=600).run()
        first = len(calls)
        at.run()
        return first, len(calls) - first
    finally:
        for p in patches:
            p.stop()


if __name__ == "__main__":
    import advisor  # noqa: F401  - load the package so its modules are patched

    for mod in (
        "advisor.cli",
        "advisor.ui.state",
        "advisor.dashboard",
        "advisor.search",
        "advisor.advice.search",
        "advisor.analysis",
    ):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    print(f"{'page':<32} {'first load':>10} {'rerun':>6}   (estimates run; tree {ROOT})")
    for page in PAGES:
        first, rerun = count(page)
        print(f"{page:<32} {first:>10} {rerun:>6}")
