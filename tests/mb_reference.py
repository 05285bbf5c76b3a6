"""Load single pure modules of Megatron-Bridge's published wheel, as the oracle for tests and benchmarks.

Megatron-Bridge cannot be pip-installed without CUDA, and ``import megatron.bridge`` runs model registration
that needs Transformer Engine. So the wheel is fetched with ``pip download --no-deps`` into an ignored cache
folder, unpacked, and only the modules asked for are imported, with their parent packages registered as bare
namespaces so no ``__init__.py`` of Megatron-Bridge ever runs.

    >>> algorithms = load_module("megatron.bridge.data.packing.algorithms")
    >>> algorithms.create_packing_strategy([0, 2, 1], 4, "first_fit_decreasing")[1]["packing_factor"]
    3.0
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

MB_VERSION = "0.6.2"
CACHE = Path(os.environ.get("ADVISOR_CACHE", Path(__file__).resolve().parent.parent / ".cache"))


def wheel_root(version: str = MB_VERSION) -> Path:
    """Download (once) and unpack the Megatron-Bridge wheel; return the folder holding ``megatron/``."""
    root = CACHE / f"megatron_bridge-{version}"
    if (root / "megatron" / "bridge").is_dir():
        return root
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"megatron_bridge-{version}-*.whl"))
    if not found:
        # The wheel declares Requires-Python >=3.12; --python-version lets pip on 3.11 fetch it too.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.12", "-q", "-d", str(wheels), f"megatron-bridge=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(f"megatron_bridge-{version}-*.whl"))
    tmp = root.with_suffix(".tmp")
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(tmp)
    tmp.rename(root)
    return root


def _register_namespace(name: str, path: Path) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [str(path)]  # a bare namespace: submodules import, __init__.py never runs
    sys.modules[name] = module


def load_module(dotted: str, version: str = MB_VERSION, stubs: dict[str, dict] | None = None):
    """Import one pure Megatron-Bridge module by dotted name without running any package ``__init__``.

    ``stubs`` maps module names to attributes for imports the module makes but the test does not exercise
    (for example a GPU-only helper); each becomes a small module with just those attributes.
    """
    root = wheel_root(version)
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        _register_namespace(name, root.joinpath(*parts[:i]))
    for name, attrs in (stubs or {}).items():
        parts = name.split(".")
        for i in range(1, len(parts)):  # parents of a stub are bare namespaces too (never their __init__)
            _register_namespace(".".join(parts[:i]), root.joinpath(*parts[:i]))
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub
    return importlib.import_module(dotted)
