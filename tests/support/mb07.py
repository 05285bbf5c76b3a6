"""Megatron-Bridge's global-batch packing validation (commit 7bdc5ef4, the PR #6127 branch), run from its own source
as the oracle of advisor/advice/global_batch.py.

Megatron-Bridge's ``training/config.py`` imports the whole training stack, so, as ``mb_reference.load_function``
does for single functions, the methods needed are taken from the file with ``ast`` and compiled on their own:
``_validate_thd_per_token_loss_mode``, ``_validate_global_batch_packing``, ``_apply_global_batch_packing_padding``,
``get_data_parallel_size`` and the slice of ``validate`` from the packing switches to just before
``_enable_safe_hybridep_dispatch`` (mutual exclusion, the call of the checks, the alignment multiple). They run bound
to ``SimpleNamespace`` config objects built from the settings. ``global_batch_packing.py`` is imported whole (its
``probe_global_batch_packing_support`` checks the pinned Megatron-Core), and the Megatron-Core it probes is the
Megatron-LM oracle's real ``data_schedule`` (dev by default: the commit needs the dev scheduler API).

Stand-ins, none of which decides a refusal here: ``GPTSFTDatasetConfig`` is a class whose ``validate`` does nothing
(its file is not in the copies; its global-batch checks repeat the two of ``validate``: dataloader and exclusion);
the other dataset classes are never matched; the CUDA-graph helpers of the offline-packing block return nothing,
which cannot matter because "other packing" is offline packing with ``pad_cu_seqlens`` and ``pad_to_max_length``.

Megatron-Bridge raises at its first problem. ``mb07_refusals`` runs the methods twice: unchanged (the first message)
and with every ``raise`` statement turned into a call that collects the exception and goes on (every message, in
order; a check that reads a value an earlier one refused stops the run there, as ``max_seqlen_per_dp_cp_rank=None``
stops it at the capacity check, and ``mb07_collected`` says so), and checks that the two agree.

The copies are not in the repository (code obtained through the search tool stays out of commits): they are looked
for at ``ADVISOR_MB07_ORACLE``, ``../shared/oracles/megatron-bridge/7bdc5ef4/`` and
``.cache/oracle-megatron-bridge-7bdc5ef4/``, each holding ``src/megatron/bridge/training/`` and checked against the
SHA-256 below, so only byte-for-byte copies are run.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import math
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

from tests.support import ROOT, SHARED

COMMIT = "7bdc5ef4ba55e59a0e91d505849d83b32868bff6"
CONFIG = "src/megatron/bridge/training/config.py"
PACKING = "src/megatron/bridge/training/global_batch_packing.py"
SHA256 = {
    CONFIG: "4ba4733d4b72c227d7b83a7c1698eae835283c4146130ebaf4c409ef9f98c5f7",
    PACKING: "20642749d7c2f289eabcfdac3029a068bc7ea63e139ee163067205c83044e2a0",
}
PLACES = [
    Path(p)
    for p in (
        os.environ.get("ADVISOR_MB07_ORACLE"),
        SHARED / "oracles" / "megatron-bridge" / "7bdc5ef4",
        ROOT / ".cache" / "oracle-megatron-bridge-7bdc5ef4",
    )
    if p
]
METHODS = (
    "_validate_thd_per_token_loss_mode",
    "_validate_global_batch_packing",
    "_apply_global_batch_packing_padding",
    "get_data_parallel_size",
)
CHECKS = (  # the methods whose raises collect
    "_validate_thd_per_token_loss_mode",
    "_validate_global_batch_packing",
    "_apply_global_batch_packing_padding",
    "_packing_slice",
)
COLLECT = "__mb07_collect__"


# Optional beside them: the research helper's char-exact prefix of data/builders/gpt_sft.py at the same commit (the
# index holds 55,754 characters; the first 19,380 hold GPTSFTDatasetConfig), for the fields the GPT-SFT snippet sets
GPT_SFT_EXCERPT = "src/megatron/bridge/data/builders/gpt_sft.py.EXCERPT_chars_0-19380"
GPT_SFT_SHA256 = "1562213cdb47fbc8c0d71a1cf6d335c8126062cdcd31757143c54fdf59da08e8"


def oracle_root() -> Path | None:
    return next((p for p in PLACES if (p / CONFIG).is_file() and (p / PACKING).is_file()), None)


def missing_reason() -> str | None:
    """Why the oracle cannot run here, or None."""
    from tests.support.mlm_oracle import missing_reason as mlm_missing

    root = oracle_root()
    if root is None:
        return f"Megatron-Bridge {COMMIT[:8]} sources not found at any of {[str(p) for p in PLACES]}"
    for rel, digest in SHA256.items():
        if hashlib.sha256((root / rel).read_bytes()).hexdigest() != digest:
            return f"{root / rel} is not the byte-for-byte copy of Megatron-Bridge {COMMIT[:8]}"
    return mlm_missing("dev")


class _RaiseToCollect(ast.NodeTransformer):
    """``raise E`` -> ``__mb07_collect__(E)``: the check's own condition and message, and the run goes on."""

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        if node.exc is None:
            return node
        call = ast.Call(func=ast.Name(COLLECT, ast.Load()), args=[node.exc], keywords=[])
        return ast.copy_location(ast.Expr(call), node)


def _packing_slice(validate: ast.FunctionDef) -> ast.FunctionDef:
    """``validate`` from ``enable_in_batch_packing = ...`` to just before ``_enable_safe_hybridep_dispatch(...)``,
    returning ``collate_padding_multiple``."""
    body = validate.body
    start = next(
        i
        for i, s in enumerate(body)
        if isinstance(s, ast.Assign) and getattr(s.targets[0], "id", "") == "enable_in_batch_packing"
    )
    stop = next(
        i
        for i, s in enumerate(body)
        if isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and getattr(s.value.func, "id", "") == "_enable_safe_hybridep_dispatch"
    )
    returned = ast.Return(ast.Name("collate_padding_multiple", ast.Load()))
    fn = ast.FunctionDef(
        name="_packing_slice",
        args=validate.args,
        body=[*body[start:stop], returned],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    return ast.fix_missing_locations(ast.copy_location(fn, body[start]))


class GPTSFTDatasetConfig(NS):
    """The isinstance target; its own ``validate`` (data/builders/gpt_sft.py) is not in the copies."""

    def validate(self) -> None:
        pass


class _Never:  # dataset classes the settings never are
    pass


@functools.cache
def _scope(collect: bool) -> dict:
    """The methods compiled from the copy of config.py, in one namespace (collecting raises or not)."""
    root = oracle_root()
    assert root is not None, missing_reason()
    path = root / CONFIG
    tree = ast.parse(path.read_text())
    container = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ConfigContainer")
    methods = {n.name: n for n in container.body if isinstance(n, ast.FunctionDef)}
    nodes = [methods[name] for name in METHODS] + [_packing_slice(methods["validate"])]
    if collect:
        nodes = [_RaiseToCollect().visit(n) if n.name in CHECKS else n for n in nodes]
        nodes = [ast.fix_missing_locations(n) for n in nodes]
    scope: dict = {
        "math": math,
        "GPTSFTDatasetConfig": GPTSFTDatasetConfig,
        **{
            name: _Never
            for name in (
                "GPTDatasetConfig",
                "DirectHFSFTDatasetConfig",
                "EnergonDatasetConfig",
                "MockVLMSFTDatasetConfig",
            )
        },
        "cuda_graph_module_names": lambda model: [],
        "is_full_iteration_cuda_graph": lambda model: False,
    }
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102 - MB's own code
    return scope


@functools.cache
def _packing_module() -> types.ModuleType:
    """global_batch_packing.py imported whole (torch, logging), kept out of sys.modules."""
    root = oracle_root()
    assert root is not None, missing_reason()
    spec = importlib.util.spec_from_file_location("megatron.bridge.training.global_batch_packing", root / PACKING)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _modules(mcore: str):
    """The two modules the checks import by name, for the call only: the copy's global_batch_packing and the
    Megatron-LM oracle's data_schedule at ``mcore`` (``dev`` or ``main``)."""
    from tests.support.mlm_oracle import load

    entries = {
        "megatron.bridge.training.global_batch_packing": _packing_module(),
        "megatron.core.datasets.data_schedule": load(mcore).data_schedule,
    }
    saved = {name: sys.modules.get(name) for name in entries}
    sys.modules.update(entries)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _container(s) -> NS:
    """Megatron-Bridge's config objects, as far as the checks read them, from a settings record (the attributes of
    advisor.advice.global_batch.GlobalBatchSettings)."""
    other = bool(s.other_packing_enabled)
    model = NS(
        sequence_packing_scheduler=None,  # validation derives it from dynamic_context_parallel
        dynamic_context_parallel=s.dynamic_cp,
        min_dynamic_context_parallel_size=s.min_dynamic_cp_size,
        max_seqlen_per_dp_cp_rank=s.max_seqlen_per_dp_cp_rank,
        context_parallel_size=s.cp,
        tensor_model_parallel_size=s.tp,
        pipeline_model_parallel_size=s.pp,
        virtual_pipeline_model_parallel_size=s.vpp,
        sequence_parallel=s.sp,
        seq_length=s.seq_length,
        calculate_per_token_loss=s.calculate_per_token_loss,
        cuda_graph_impl="transformer_engine" if s.cuda_graphs else "none",
        is_hybrid_model=s.mamba_hybrid,
    )
    dataset = GPTSFTDatasetConfig(
        seq_length=s.seq_length,
        dataloader_type=s.dataloader_type,
        enable_global_batch_packing=True,
        yields_unpacked_samples=True,
        global_batch_packing_pad_to_multiple_of=1,
        fold_alignment_padding=False,
        enable_in_batch_packing=False,
        in_batch_packing_pad_to_multiple_of=1,
        enable_offline_packing=other,
        offline_packing_specs=NS(packed_sequence_size=s.seq_length, pad_cu_seqlens=True) if other else None,
        dataset_kwargs={"pad_to_max_length": True} if other else None,
    )
    config = NS(
        model=model,
        dataset=dataset,
        train=NS(micro_batch_size=s.micro_batch_size),
        ddp=NS(average_in_collective=s.average_in_collective, use_megatron_fsdp=s.megatron_fsdp),
        dist=NS(use_decentralized_pg=s.use_decentralized_pg, eval_context_parallel_size=None),
    )
    return config


def _run(s, *, collect: bool, mcore: str) -> tuple[list[str], NS, int | None, bool]:
    """(messages, the config objects after the run, the collate padding multiple or None when refused, whether a
    check that read a value an earlier one refused stopped the collecting run)."""
    scope = _scope(collect)
    scope["get_world_size_safe"] = lambda: s.dp * s.tp * s.pp * s.cp
    messages: list[str] = []
    scope[COLLECT] = lambda exc: messages.append(str(exc))
    config = _container(s)
    for name in (*METHODS, "_packing_slice"):
        setattr(config, name, types.MethodType(scope[name], config))
    multiple, stopped = None, False
    with _modules(mcore):
        try:
            multiple = config._packing_slice()
        except ValueError as e:
            if collect:
                raise
            messages.append(str(e))
        except (TypeError, AttributeError):
            if not (collect and messages):  # otherwise a later check read a value an earlier one refused
                raise
            stopped = True
    return messages, config, None if messages else multiple, stopped


def mb07_first_refusal(s, *, mcore: str = "dev") -> str | None:
    """The message Megatron-Bridge's unchanged code raises on these settings, or None when it accepts them."""
    messages, _, _, _ = _run(s, collect=False, mcore=mcore)
    return messages[0] if messages else None


def mb07_collected(s, *, mcore: str = "dev") -> tuple[list[str], bool]:
    """Every message Megatron-Bridge's checks give on these settings, in its order (empty: accepted), and whether
    the run stopped before its last check (a check read a value an earlier one refused: the checks after it
    were not run)."""
    messages, _, _, stopped = _run(s, collect=True, mcore=mcore)
    first = mb07_first_refusal(s, mcore=mcore)
    if (messages[0] if messages else None) != first:
        raise AssertionError(f"the collecting run {messages} disagrees with Megatron-Bridge's own refusal {first!r}")
    return messages, stopped


def mb07_refusals(s, *, mcore: str = "dev") -> list[str]:
    """Every message Megatron-Bridge's checks give on these settings, in its order; empty: accepted."""
    return mb07_collected(s, mcore=mcore)[0]


def mb07_padding_multiple(s, *, mcore: str = "dev") -> int:
    """``dataset.global_batch_packing_pad_to_multiple_of`` as Megatron-Bridge's ``validate`` sets it (ValueError
    when it refuses the settings)."""
    messages, config, multiple, _ = _run(s, collect=False, mcore=mcore)
    if messages:
        raise ValueError(messages[0])
    pushed = config.dataset.global_batch_packing_pad_to_multiple_of
    assert pushed == multiple == config.dataset.in_batch_packing_pad_to_multiple_of, (pushed, multiple)
    return pushed


def _source_roots() -> list[Path]:
    """Where a 0.7 config class and its bases are read, first match first: the copy of 7bdc5ef4 (training/config.py),
    Megatron-LM dev (the scheduler fields of ModelParallelConfig), then the 0.6.2 and Megatron-Core 0.19.2 wheels for
    the bases 7bdc5ef4 leaves as they were (data/base.py DataloaderConfig, TransformerConfig, TrainingConfig)."""
    from tests.support.mb_reference import MB_VERSION, MCORE_VERSION, wheel_root
    from tests.support.mlm_oracle import folder

    root = oracle_root()
    assert root is not None, missing_reason()
    return [
        root / "src",
        folder("dev"),
        wheel_root("megatron-bridge", MB_VERSION),
        wheel_root("megatron-core", MCORE_VERSION),
    ]


def config_fields(module: str, name: str) -> set[str]:
    """A dataclass's fields and its bases', read with ``ast`` from the 0.7 sources (``_source_roots``)."""
    from tests.support.mb_reference import class_fields

    return class_fields(module, name, roots=_source_roots())


def gpt_sft_fields() -> set[str] | None:
    """GPTSFTDatasetConfig's fields at 7bdc5ef4 (with DataloaderConfig's), from the excerpt of gpt_sft.py; None
    where the excerpt is not beside the copy (or not the checked one)."""
    root = oracle_root()
    path = root / GPT_SFT_EXCERPT if root is not None else None
    if path is None or not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != GPT_SFT_SHA256:
        return None
    text = path.read_text()
    tree = ast.parse(text[: text.index("\ndef resolve_gpt_sft_preprocessing")])  # whole statements only
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPTSFTDatasetConfig")
    own = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return own | config_fields("megatron.bridge.data.base", "DataloaderConfig")
