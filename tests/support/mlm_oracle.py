"""Load Megatron-LM's sequence-packing sources (main d98e8a64 and dev d48bd6be) unchanged, as oracles.

The files sit in ``../shared/oracles/megatron-lm/<commit>/`` (or where ``ADVISOR_MLM_ORACLE`` points). Each commit
is imported into its own module tree: while it loads, any ``megatron`` modules already imported (the
Megatron-Bridge wheel's, see mb_reference.py) are set aside, the parent packages are registered as bare namespaces
over the commit's folder, and only the heavy siblings are stubbed; afterwards the commit's modules move under the
alias ``_mlm_<commit>`` and the earlier ones come back. So both commits and the wheels coexist in one pytest run.
The real classes (``DpBalancedScheduler``, ``DefaultDynamicCPScheduler``, ``SFTDataset``, ``MockSFTDataset``,
``wrap_data_iterator``...) run as written; torch (CPU) is real, and the tests patch its CUDA and collective calls.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import types
from pathlib import Path

from tests.support import SHARED

ORACLE_ROOT = Path(os.environ.get("ADVISOR_MLM_ORACLE") or SHARED / "oracles" / "megatron-lm")
FOLDERS = {"main": "main-d98e8a64", "dev": "dev-d48bd6be"}
MODULES = (
    "megatron.core.datasets.data_schedule",
    "megatron.core.datasets.data_schedule_utils",
    "megatron.training.datasets.sft_dataset",
)


def folder(commit: str) -> Path:
    return ORACLE_ROOT / FOLDERS[commit]


def missing_reason(commit: str) -> str | None:
    """Why the oracle of ``commit`` cannot load, or None."""
    path = folder(commit)
    if not (path / "megatron" / "core" / "datasets" / "data_schedule.py").is_file():
        return f"Megatron-LM oracle sources not found at {path}"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed: the Megatron-LM oracle imports it"
    return None


class RerunDataIterator:
    """megatron.core.rerun_state_machine's wrapper, reduced to iteration."""

    def __init__(self, iterable):
        self.iterable = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.iterable)


class ProcessGroup:
    """A process group seen from one rank: its size and this rank's place in it."""

    def __init__(self, size: int, rank: int = 0):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def pg_collection(*, dp: int = 1, cp: int = 1, dp_rank: int = 0, cp_rank: int = 0, tp: int = 1, pp: int = 1):
    """ProcessGroupCollection's fields as the schedulers read them (TP and PP rank 0)."""
    return types.SimpleNamespace(
        dp=ProcessGroup(dp, dp_rank),
        dp_cp=ProcessGroup(dp * cp, dp_rank * cp + cp_rank),
        tp=ProcessGroup(tp),
        pp=ProcessGroup(pp),
        cp=ProcessGroup(cp, cp_rank),
    )


def _unavailable(name):
    def fail(*args, **kwargs):
        raise NotImplementedError(f"{name} is stubbed in the oracle: the tests do not exercise it")

    return fail


class _Stub:
    def __init__(self, *args, **kwargs):
        pass


STUBS = {
    "megatron.core.parallel_state": {},
    "megatron.core.rerun_state_machine": {"RerunDataIterator": RerunDataIterator},
    "megatron.core.extensions.transformer_engine": {
        "get_thd_partitioned_indices": _unavailable("get_thd_partitioned_indices")
    },
    "megatron.core.packed_seq_params": {
        "PackedSeqParams": _Stub,
        **{
            name: _unavailable(name)
            for name in (
                "extend_thd_padding_before_cp_slice",
                "get_thd_padding_kwargs",
                "pad_sequence_for_thd",
                "resolve_thd_tail_padding_policy",
            )
        },
    },
    "megatron.core.process_groups_config": {"ProcessGroupCollection": _Stub},
    "megatron.core.transformer.multi_token_prediction": {"mtp_on_this_rank": lambda *a, **k: False},
    "megatron.core.datasets.gpt_dataset": {"GPTDatasetConfig": _Stub},
    "megatron.core.datasets.indexed_dataset": {"IndexedDataset": _Stub},
    "megatron.core.datasets.megatron_dataset": {"LowLevelDataset": object, "MegatronDataset": _Stub},
    "megatron.core.datasets.utils": {"Split": _Stub},
    "megatron.training.datasets.utils": {"load_json_arg": _unavailable("load_json_arg")},
}


def _is_megatron(name: str) -> bool:
    return name == "megatron" or name.startswith("megatron.")


def _namespace(name: str, root: Path) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    path = root.joinpath(*name.split("."))
    module.__path__ = [str(path)] if path.is_dir() else []  # a bare namespace: no __init__.py ever runs
    sys.modules[name] = module


@functools.cache
def load(commit: str) -> types.SimpleNamespace:
    """The commit's modules: ``.data_schedule``, ``.data_schedule_utils``, ``.sft_dataset``."""
    reason = missing_reason(commit)
    if reason:
        raise FileNotFoundError(reason)
    root = folder(commit)
    saved = {k: sys.modules.pop(k) for k in [k for k in sys.modules if _is_megatron(k)]}
    try:
        for name in sorted(
            {".".join(m.split(".")[:i]) for m in list(MODULES) + list(STUBS) for i in range(1, len(m.split(".")))}
        ):
            _namespace(name, root)
        for name, attrs in STUBS.items():
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub
        loaded = {m.rsplit(".", 1)[1]: importlib.import_module(m) for m in MODULES}
    finally:
        for k in [k for k in sys.modules if _is_megatron(k)]:
            sys.modules[f"_mlm_{commit}.{k}"] = sys.modules.pop(k)
        sys.modules.update(saved)
    return types.SimpleNamespace(commit=commit, **loaded)
