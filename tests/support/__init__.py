"""What the tests share: the repository's folders, generated inputs, runners, and the loaders of the real
Megatron-Bridge and Megatron-LM code the oracle tests compare with.

Every path a test computes starts from ``ROOT`` here, never from its own file's place in ``tests/``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/support/__init__.py -> tests/support -> tests
SAMPLE = ROOT / "sample_data"
FIXTURES = ROOT / "tests" / "fixtures"
SCREENSHOTS = ROOT / "tests" / "screenshots"  # the browser tests' screenshots and logs (ignored by git)
SHARED = ROOT.parent / "shared"  # beside the checkout: Megatron-LM's trees (oracles/) and big data (data/)
