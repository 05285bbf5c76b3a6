"""The framework releases a plan runs on: the ones the advisor knows (with the date each was released), the default
a plan gets, and how two are compared. The alternative, one "latest" assumed everywhere, cannot say "this trains
wrong on yours": the known traps (``advisor/advice/traps.py``) are fixed in some releases and not in others.

>>> older("0.4.2", "0.5.0"), older("2.17.1", "2.18"), older("0.6.2", "0.6.2")
(True, True, False)
"""

from __future__ import annotations

import re
from typing import Literal

Package = Literal["megatron_bridge", "megatron_core", "transformer_engine"]
PACKAGE_NAMES: dict[Package, str] = {
    "megatron_bridge": "Megatron-Bridge",
    "megatron_core": "Megatron-Core",
    "transformer_engine": "Transformer Engine",
}
# releases the advisor knows, oldest first, with their dates (GitHub releases and tags, the package index; read
# 2026-11-28). Megatron-Bridge 0.7.x is on GitHub only (no wheel on the package index).
RELEASES: dict[Package, dict[str, str]] = {
    "megatron_bridge": {
        "0.3.1": "2026-03",
        "0.4.2": "2026-05-28",
        "0.5.0": "2026-06-16",
        "0.5.1": "2026-07",
        "0.6.0": "2026-08",
        "0.6.2": "2026-09-18",
        "0.7.0": "2026-10-30",
        "0.7.1": "2026-11-20",
    },
    "megatron_core": {
        "0.16.1": "2026-03",
        "0.17.1": "2026-05",
        "0.18.0": "2026-06-22",
        "0.19.0": "2026-07",
        "0.19.2": "2026-09-18",
        "0.20.0": "2026-11",
    },
    "transformer_engine": {
        "2.16": "2026-06",
        "2.17.1": "2026-07",
        "2.18": "2026-08-14",
        "2.19": "2026-09",
        "2.20.2": "2026-10",
    },
}
# what a plan runs on unless it says: the newest release of each on the package index (pip install gives these),
# which is what the exports are checked against (Megatron-Bridge 0.7.x is not installable from it)
DEFAULT_VERSIONS: dict[Package, str] = {
    "megatron_bridge": "0.6.2",
    "megatron_core": "0.19.2",
    "transformer_engine": "2.20.2",
}
VERSION_PATTERN = r"^\d{1,4}\.\d{1,4}(\.\d{1,4})?$"
_VERSION = re.compile(VERSION_PATTERN, re.ASCII)


def parse(version: str) -> tuple[int, int, int]:
    """MAJOR.MINOR[.PATCH] as a tuple (a missing patch is 0).

    >>> parse("2.18"), parse("0.6.2")
    ((2, 18, 0), (0, 6, 2))
    """
    if not isinstance(version, str) or not _VERSION.match(version):
        raise ValueError(f"version {str(version)[:40]!r}: give MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 0.6.2")
    parts = [int(x) for x in version.split(".")]
    return parts[0], parts[1], parts[2] if len(parts) > 2 else 0


def older(version: str, than: str) -> bool:
    """Whether ``version`` is a release before ``than``."""
    return parse(version) < parse(than)


def known(package: Package, version: str) -> bool:
    return version in RELEASES[package]
