"""Parse exported Megatron-LM arguments with Megatron-LM's own parser, in its own process.

    python -m tests.support.mlm_args_check ARGV.json

``ARGV.json`` holds ``{"argv": [...], "world_size": N, "env": {...}}`` items (the arguments as the shell splits them).
Megatron-LM's ``arguments.py`` is the oracle's
(``../shared/oracles/megatron-lm/dev-d48bd6be``, see mlm_oracle.py); the parser builds most groups from
Megatron-Core's dataclasses (``ArgumentGroupFactory(TransformerConfig)``), so the rest of that commit's ``megatron``
tree must sit beside it: ``.cache/megatron-lm-d48bd6be`` (or ``ADVISOR_MLM_TREE``), made from a Megatron-LM clone with
``git archive d48bd6be megatron | tar -x -C .cache/megatron-lm-d48bd6be``. The packages' own ``__init__`` files run
(CPU torch is real); only the triton kernel module (``megatron.core.transformer.moe.ops.paged_stash``) is stubbed,
Python 3.11 gets ``typing.override`` from typing_extensions, and torch's CUDA capability queries answer the plan GPU's
(``validate_args`` asks them; ``WORLD_SIZE`` is the plan's GPUs, and no process group is needed). Prints one JSON
object per argument list: the parsed values the tests check, and what ``validate_args`` said.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

from tests.support import ROOT
from tests.support.mlm_oracle import folder

TREE = Path(os.environ.get("ADVISOR_MLM_TREE") or ROOT / ".cache" / "megatron-lm-d48bd6be")
STUBBED = {"megatron.core.transformer.moe.ops.paged_stash"}  # imports triton at module level
CHECKED = (
    "pipeline_model_parallel_layout",
    "mtp_num_layers",
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "kv_channels",
    "group_query_attention",
    "num_query_groups",
    "normalization",
    "layernorm_epsilon",
    "layernorm_zero_centered_gamma",
    "qk_layernorm",
    "swiglu",
    "squared_relu",
    "add_bias_linear",
    "add_qkv_bias",
    "position_embedding_type",
    "rotary_base",
    "rotary_percent",
    "use_rope_scaling",
    "rope_scaling_factor",
    "mrope_section",
    "untie_embeddings_and_output_weights",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_router_score_function",
    "moe_router_enable_expert_bias",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_topk_scaling_factor",
    "attention_dropout",
    "hidden_dropout",
    "bf16",
    "tokenizer_type",
    "tokenizer_model",
    "seq_length",
    "tensor_model_parallel_size",
    "context_parallel_size",
    "sft",
    "train_iters",
    "global_batch_size",
    "micro_batch_size",
    "sequence_parallel",
    "fp8",
    "fp8_recipe",
    "fp8_param_gather",
    "fp8_amax_history_len",
    "fp4",
    "fp4_recipe",
    "fp4_param_gather",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "window_size",
    "window_attn_skip_freq",
    "softmax_type",
    "quick_geglu",
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "overlap_moe_expert_parallel_comm",
    "cpu_offloading_num_layers",
    "recompute_granularity",
    "recompute_method",
    "recompute_num_layers",
)


def missing_reason() -> str | None:
    """Why the parser cannot load here, or None."""
    if not (folder("dev") / "megatron" / "training" / "arguments.py").is_file():
        return f"Megatron-LM oracle arguments.py not found under {folder('dev')}"
    if not (TREE / "megatron" / "core" / "transformer" / "transformer_config.py").is_file():
        return f"Megatron-LM d48bd6be tree not found at {TREE} (git archive d48bd6be megatron | tar -x -C {TREE})"
    return None


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name in STUBBED else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__getattr__ = lambda name: lambda *a, **k: None  # names it exports, never called when parsing
        return module

    def exec_module(self, module):
        pass


def _package(name: str, roots: list[Path], init: Path | None) -> None:
    parts = name.split(".")
    where = [str(r.joinpath(*parts)) for r in roots if r.joinpath(*parts).is_dir()]
    if init is None:
        module = types.ModuleType(name)
        module.__path__ = where
        sys.modules[name] = module
        return
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def load_arguments():
    """The oracle's megatron.training.arguments, over the commit's tree (the oracle's files first)."""
    import typing

    import typing_extensions

    typing.override = getattr(typing, "override", typing_extensions.override)  # 3.12's, used by the tree
    sys.meta_path.insert(0, _Stub())
    roots = [folder("dev"), TREE]
    _package("megatron", roots, None)
    _package("megatron.core", roots, TREE / "megatron" / "core" / "__init__.py")
    _package("megatron.training", roots, TREE / "megatron" / "training" / "__init__.py")
    return importlib.import_module("megatron.training.arguments")


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    argvs = json.loads(Path(sys.argv[1]).read_text())
    arguments = load_arguments()
    import torch

    results = []
    for item in argvs:
        # validate_args asks the GPU's compute capability (TP/CP connections, grouped GEMM, FSDP checks): the
        # plan's GPU (H100's 9.0 unless the item says)
        major, minor = item.get("capability", (9, 0))
        torch.cuda.get_device_capability = lambda *a, _c=(major, minor), **k: _c
        torch.cuda.get_device_properties = lambda *a, _m=major, _n=minor, **k: types.SimpleNamespace(
            major=_m, minor=_n, name="GPU"
        )
        sys.argv = ["pretrain_gpt.py", *item["argv"]]
        os.environ["WORLD_SIZE"] = str(item["world_size"])  # parse_args reads it, validate_args divides it
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(item.get("env", {}))
        args = arguments.parse_args()
        parsed = {k: getattr(args, k, None) for k in CHECKED}
        try:
            arguments.validate_args(args)
            validated = "ok"
        except Exception as e:  # noqa: BLE001 - reported to the test, which decides
            validated = f"{type(e).__name__}: {e}"
        parsed["vpp_after_validation"] = getattr(args, "virtual_pipeline_model_parallel_size", None)
        parsed["cpu_offloading_after_validation"] = getattr(args, "cpu_offloading", None)
        layout = getattr(args, "pipeline_model_parallel_layout", None)
        if isinstance(layout, str):  # what TransformerConfig checks when it is built: the layers the layout places
            from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

            try:
                PipelineParallelLayerLayout(layout, args.pipeline_model_parallel_size).validate_layer_layout(
                    args.num_layers, args.mtp_num_layers
                )
                parsed["layout_check"] = "ok"
            except Exception as e:  # noqa: BLE001 - reported to the test
                parsed["layout_check"] = f"{type(e).__name__}: {e}"
        results.append({"parsed": parsed, "validate_args": validated[:2000]})
    sys.stdout.write("\n" + json.dumps(results, default=str) + "\n")


if __name__ == "__main__":
    main()
