"""Load single pure modules of Megatron-Bridge's (and Megatron-Core's) published wheels, as oracles for tests
and benchmarks.

Megatron-Bridge cannot be pip-installed without CUDA, and ``import megatron.bridge`` runs model registration
that needs Transformer Engine. So the wheels are fetched with ``pip download --no-deps`` into an ignored cache
folder, unpacked, and only the modules asked for are imported, with their parent packages registered as bare
namespaces so no ``__init__.py`` of either project ever runs. Both wheels share the ``megatron`` namespace.

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
MCORE_VERSION = "0.19.2"  # the newest megatron-core wheel; megatron-bridge 0.6.2 requires megatron-core unpinned
CACHE = Path(os.environ.get("ADVISOR_CACHE", Path(__file__).resolve().parent.parent / ".cache"))


def wheel_root(package: str = "megatron-bridge", version: str = MB_VERSION) -> Path:
    """Download (once) and unpack a wheel; return the folder holding its ``megatron/``."""
    stem = package.replace("-", "_")
    root = CACHE / f"{stem}-{version}"
    if (root / "megatron").is_dir():
        return root
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        # The wheels declare Requires-Python >=3.12 (megatron-core's is cp312): --python-version lets pip on
        # 3.11 fetch them too; nothing is installed.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
             "--platform", "manylinux_2_28_x86_64", "--platform", "any", "-q", "-d", str(wheels),
             f"{package}=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    tmp = root.with_suffix(f".tmp{os.getpid()}")
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(tmp)
    try:
        tmp.rename(root)
    except OSError:  # another process got there first
        pass
    return root


def _roots() -> list[Path]:
    return [wheel_root("megatron-bridge", MB_VERSION), wheel_root("megatron-core", MCORE_VERSION)]


def _register_namespace(name: str, roots: list[Path]) -> None:
    if name in sys.modules:
        return
    parts = name.split(".")
    module = types.ModuleType(name)
    # a bare namespace: submodules import from any wheel that has the folder, and no __init__.py ever runs
    module.__path__ = [str(r.joinpath(*parts)) for r in roots if r.joinpath(*parts).is_dir()]
    sys.modules[name] = module


def load_module(dotted: str, stubs: dict[str, dict] | None = None):
    """Import one pure module by dotted name without running any package ``__init__``.

    ``stubs`` maps module names to attributes for imports the module makes but the test does not exercise
    (a storage switch, a tokenizer type); each becomes a small module with just those attributes.
    """
    roots = _roots()
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        _register_namespace(".".join(parts[:i]), roots)
    for name, attrs in (stubs or {}).items():
        stub_parts = name.split(".")
        for i in range(1, len(stub_parts)):
            _register_namespace(".".join(stub_parts[:i]), roots)
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub
    return importlib.import_module(dotted)


def load_function(relative_path: str, name: str, namespace: dict | None = None):
    """One top-level function from a wheel's source file, compiled on its own.

    For a module whose imports cannot run here (Megatron-LM's training.py pulls in the whole training stack):
    the function's own source text, taken with ``ast`` from the unpacked wheel, is compiled and executed with
    only the names it needs supplied in ``namespace``. Nothing is re-typed; the code run is the wheel's.
    """
    import ast

    for root in _roots():
        path = root / relative_path
        if path.is_file():
            break
    else:
        raise FileNotFoundError(relative_path)
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    module = ast.Module(body=[node], type_ignores=[])
    scope = dict(namespace or {})
    exec(compile(module, str(path), "exec"), scope)  # noqa: S102 - the published wheel's own code
    return scope[name]
