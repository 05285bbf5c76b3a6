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

from tests.support import ROOT

MB_VERSION = "0.6.2"
MCORE_VERSION = "0.19.2"  # the newest megatron-core wheel; megatron-bridge 0.6.2 requires megatron-core unpinned
MCORE_FOR = {"0.6.2": "0.19.2", "0.3.1": "0.16.1"}  # 0.3.1 requires megatron-core >=0.15, <0.17
# which wheels load_module reads: tests of another version set these in their own process
ACTIVE = {"megatron-bridge": os.environ.get("ADVISOR_MB_VERSION", MB_VERSION)}
ACTIVE["megatron-core"] = MCORE_FOR.get(ACTIVE["megatron-bridge"], MCORE_VERSION)
CACHE = Path(os.environ.get("ADVISOR_CACHE", ROOT / ".cache"))


def _msc_stub():
    class MultiStorageClientFeature:  # Megatron-Core's switch for remote storage: off, as on a plain file system
        @staticmethod
        def is_enabled():
            return False

    return {"MultiStorageClientFeature": MultiStorageClientFeature}


# stand-ins for the modules Megatron-Bridge's packing and data modules import but a test never needs (``stubs=``)
MB_STUBS = {
    "megatron.core.msc_utils": _msc_stub(),
    "megatron.bridge.training.tokenizers.tokenizer": {"MegatronTokenizer": object},
    "megatron.bridge.data.datasets.gpt_sft": {"GPTSFTDataset": object},
    "megatron.bridge.data.packing.gpt_sft": {"GPTSFTPackedDataset": object},
}


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
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--platform",
                "manylinux_2_28_x86_64",
                "--platform",
                "any",
                "-q",
                "-d",
                str(wheels),
                f"{package}=={version}",
            ],
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
    return [
        wheel_root("megatron-bridge", ACTIVE["megatron-bridge"]),
        wheel_root("megatron-core", ACTIVE["megatron-core"]),
    ]


def class_fields(module: str, name: str, _seen: set | None = None, roots: list[Path] | None = None) -> set[str]:
    """The annotated fields of a dataclass and of its bases, read from the wheels' source with ``ast``.

    Bases are followed through the file's imports (and through packages that re-export them), so
    ``GPTModelProvider`` gathers Megatron-Core's ``TransformerConfig`` and ``ModelParallelConfig`` fields.
    ``roots``: the source trees to look in, first match first (default: the active wheels).
    """
    import ast

    seen = _seen if _seen is not None else set()
    if (module, name) in seen:
        return set()
    seen.add((module, name))
    for root in roots if roots is not None else _roots():
        base = root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                break
        else:
            continue
        break
    else:
        return set()
    tree = ast.parse(path.read_text())
    imports = {}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from ..x import y
                parts = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                source = ".".join(parts)
            else:
                source = node.module
            for alias in node.names:
                imports[alias.asname or alias.name] = (source, alias.name)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:  # re-exported from another module
        return class_fields(*imports[name], seen, roots) if name in imports else set()
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    fields |= {
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef)  # properties with a setter
        and any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in n.decorator_list)
    }
    for b in cls.bases:
        b = b.value if isinstance(b, ast.Subscript) else b
        base_name = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
        if base_name in imports:
            fields |= class_fields(*imports[base_name], seen, roots)
        elif base_name and any(isinstance(n, ast.ClassDef) and n.name == base_name for n in tree.body):
            fields |= class_fields(module, base_name, seen, roots)
    return fields


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
