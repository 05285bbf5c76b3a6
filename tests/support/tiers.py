"""The test tiers: what of a parametrized check runs in the fast tier (``pytest -m "not slow"``)."""

from __future__ import annotations

import pytest


def slow_after(values, fast: int = 1) -> list:
    """Values for ``pytest.mark.parametrize``: the first ``fast`` run in the fast tier (``-m "not slow"``), the
    others, the same check on more inputs, only in the full suite."""
    return [
        v if i < fast else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow)
        for i, v in enumerate(values)
    ]
