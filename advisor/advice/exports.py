"""Exports of a plan, with every setting its rules derive filled in: a Megatron-Bridge Python snippet (both API
generations), command-line overrides, Megatron-LM arguments with a mock-data file of the user's lengths, where the
packed files will go, the plan file, and a Markdown report.

API generations (Megatron-Bridge): up to 0.5.x ``PackedSequenceSpecs`` lives in
``megatron.bridge.data.datasets.packed_sequence`` and is set as ``cfg.dataset.packed_sequence_specs``; VLM
in-batch packing is ``pack_sequences_in_batch``. From 0.6.0 it lives in ``megatron.bridge.data.packing`` and
offline packing is ``enable_offline_packing`` with ``offline_packing_specs``; in-batch is ``enable_in_batch_packing``.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from advisor.data.lengths import LengthHistogram
from advisor.data.prepared import find_prepared
from advisor.model.numerics import numerics_of
from advisor.packing.online.from_plan import dataset_order
from advisor.plan import Plan
from advisor.plan.pipeline_layout import RECIPE_LAYOUTS, layout_string
from advisor.plan.presets import HF_REPOS, PROVIDER_MTP_LAYERS

DEFAULT_MB_VERSION = "0.6.2"
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})\.(\d{1,4})", re.ASCII)


def _version(v: str) -> tuple[int, int]:
    """MAJOR.MINOR.PATCH and nothing else: the version is written into the snippet's comment, so it is data.

    >>> _version("0.6.2")
    (0, 6)
    """
    match = _VERSION.fullmatch(v) if isinstance(v, str) else None
    if match is None:
        raise ValueError(f"Megatron-Bridge version {str(v)[:40]!r}: give it as MAJOR.MINOR.PATCH, e.g. 0.6.2")
    return int(match.group(1)), int(match.group(2))


def new_packing_api(version: str) -> bool:
    return _version(version) >= (0, 6)


def global_batch_api(version: str) -> bool:
    """Megatron-Bridge 0.7's data set switches: global-batch packing and GPT-SFT in-batch packing."""
    return _version(version) >= (0, 7)


# what the global-batch fields are checked against (tests/unit/advice/test_global_batch_export.py reads the copy of
# its config.py with ast): the PR #6127 branch, as no snapshot here carries the v0.7.0/v0.7.1 tag commits
GLOBAL_BATCH_SOURCE = "7bdc5ef4"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Attribute settings per ConfigContainer section, and the PackedSequenceSpecs fields (if offline packing)."""

    model: dict
    train: dict
    dataset: dict
    ddp: dict
    specs: dict | None
    mode: str
    mixed_precision: dict | None = None  # the MixedPrecisionConfig fields the plan's precision sets (None: BF16)
    precision_recipe: str | None = None  # Megatron-Bridge's recipe name for it (get_mixed_precision_config)
    comm_overlap: dict = field(default_factory=dict)  # CommOverlapConfig fields (the EP all-to-all overlap)
    # what the plan trains, on the recipe's cfg.peft (ConfigContainer.peft): LoRA's dim (megatron/bridge/peft/lora.py
    # LoRA), "off" for every weight (a LoRA recipe's adapters would change the memory and time estimated), or None
    # (pre-training: left to the recipe)
    peft: int | str | None = None
    lora_targets: list | None = None  # LoRA's target_modules with LoRA, else None


# Plan model fields that are Megatron provider / TransformerConfig fields of the same name (checked against the wheels
# by tests/snippet_check.py); RENAMED ones have another name there. activation (a callable there) and mrope_section
# (not a GPTModelProvider field) are left to the recipe.
ARCHITECTURE_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "gated_linear_unit",
    "normalization",
    "share_embeddings_and_output_weights",
    "vocab_size",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "position_embedding_type",
    "rotary_base",
    "rotary_percent",
    "norm_epsilon",
    "layernorm_zero_centered_gamma",
    "qk_layernorm",
    "add_bias_linear",
    "add_qkv_bias",
    "moe_router_score_function",
    "moe_router_enable_expert_bias",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_router_topk_scaling_factor",
    "mtp_num_layers",
)
RENAMED = {"norm_epsilon": "layernorm_epsilon"}  # megatron/core/transformer/transformer_config.py


def architecture(plan: Plan) -> dict:
    """The model fields the recipe must change: a preset's overrides (the recipe is the preset's), or every field of
    a custom model, so a 16-layer override of a 32-layer preset is trained with 16 layers."""
    m = plan.model
    written = m.as_written()
    if isinstance(written, str):
        return {}
    fields = written if m.preset is not None else m.model_dump()
    return {RENAMED.get(k, k): fields[k] for k in ARCHITECTURE_FIELDS if k in fields and fields[k] is not None}


def train_iters(epochs: float | None, items: int | None, global_batch: int) -> int | None:
    """Optimizer steps for ``training.epochs``: ceil(epochs x items / global batch), the items and the batch in the
    same unit (packs with Megatron-Bridge's offline packing, else samples); None without epochs or items.

    >>> train_iters(2, 401, 26)  # 802 packs at 26 a step
    31
    """
    if not epochs or not items:
        return None
    return max(1, math.ceil(epochs * items / global_batch))


def recompute_method(plan: Plan) -> tuple[str | None, int | None]:
    """Megatron-Core's recompute_method and recompute_num_layers for the plan: with full recompute every layer
    (uniform, one layer a unit) or the first N of each pipeline chunk (block); none otherwise."""
    t = plan.training
    if t.recompute != "full":
        return None, None
    return ("uniform", 1) if t.recompute_num_layers is None else ("block", t.recompute_num_layers)


def derived_settings(
    plan: Plan,
    version: str = DEFAULT_MB_VERSION,
    packing_factor: float | None = None,
    *,
    num_samples: int | None = None,
    num_packs: int | None = None,
) -> Settings:
    """What the plan and its rules set: layout, loss and DDP settings under CP, batch sizes, packing, CUDA graphs.
    Nothing else: the recipe keeps its packing seed unless the plan sets one, and its train_iters unless the plan
    gives epochs and the data's size (``num_samples``, and ``num_packs`` with offline packing) is known.

    With offline packing Megatron-Bridge's global batch counts packs: the plan's global_batch_size, or its
    global_batch_samples over the packing factor n of the data (``Plan.global_batch_packs``, which needs n).
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    mode = plan.packing_mode
    _version(version)
    if mode == "online":
        raise ValueError(
            "online packing is Megatron-LM's scheduler (--sequence-packing-scheduler); Megatron-Bridge "
            "has no such option: export --format megatron-lm"
        )
    if mode == "in-batch" and t.task == "llm-sft" and not global_batch_api(version):
        raise ValueError(
            f"in-batch packing of LLM SFT data (GPTSFTDatasetConfig.enable_in_batch_packing) needs Megatron-Bridge "
            f"0.7.0 or later; the export targets {version}, whose in-batch packing is VLM-only: set "
            "versions.megatron_bridge to 0.7.1 (export --megatron-bridge-version 0.7.1), or pack offline"
        )
    if mode == "global-batch" and not global_batch_api(version):
        raise ValueError(
            f"global-batch packing (dataset.enable_global_batch_packing) needs Megatron-Bridge 0.7.0 or later; the "
            f"export targets {version}: set versions.megatron_bridge to 0.7.1 (export --megatron-bridge-version "
            "0.7.1), or pack offline"
        )
    if mode == "offline" and not packing_factor and plan.batch_in_packs is None:
        raise ValueError(
            "offline packing: Megatron-Bridge's global_batch_size counts packs, which needs the data's "
            "packing factor; give the lengths (--lengths or the plan's data.lengths)"
        )
    sft = t.task != "pretrain"
    model: dict[str, Any] = {
        "tensor_model_parallel_size": p.tp,
        "pipeline_model_parallel_size": p.pp,
        "context_parallel_size": p.cp,
        "expert_model_parallel_size": p.ep,
        "expert_tensor_parallel_size": p.etp,
        "sequence_parallel": p.sp,
        "seq_length": t.seq_length,
    }
    if p.vpp is not None:
        model["virtual_pipeline_model_parallel_size"] = p.vpp
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(p, flag):
            model[flag] = True
    preset = plan.model.preset
    if plan.pipeline_stages is not None:  # the recipe's own would go stale when pp or vpp are overridden
        model["pipeline_model_parallel_layout"] = layout_string(plan.pipeline_stages)
    elif preset in RECIPE_LAYOUTS:  # the recipe set one for its own pipeline: the even split here
        model["pipeline_model_parallel_layout"] = None
    if plan.pipeline_stages is not None or (preset is not None and PROVIDER_MTP_LAYERS.get(preset)):
        # the MTP layers the estimate and the layout count (Megatron-Core checks the layout's m against them); the
        # DeepSeek-V3 provider builds one from its checkpoint's config, which the plan may not
        model["mtp_num_layers"] = plan.model.mtp_num_layers or None
    if p.tp_comm_overlap:
        model["tp_comm_overlap"] = True
    if plan.model.num_moe_experts:  # the dispatcher the estimate models (TransformerConfig's default is allgather)
        if p.moe_dispatcher == "alltoall":
            model["moe_token_dispatcher_type"] = "alltoall"
        else:
            model.update(
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend=p.moe_dispatcher.removeprefix("flex_")
            )
    comm_overlap: dict[str, bool] = {}
    if p.moe_a2a_overlap:  # as Megatron-Bridge's performance scripts turn it on (utils/overrides.py
        # _set_moe_a2a_overlap_overrides): on the comm-overlap config, which sets the model's at setup
        comm_overlap.update(overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)
        model["moe_shared_expert_overlap"] = False  # Megatron-Core asserts it off with the overlap
    if p.cp > 1:
        model["cp_comm_type"] = p.cp_comm_type
        if p.cp_comm_type == "a2a+p2p":
            model["hierarchical_context_parallel_sizes"] = list(p.hierarchical_cp_sizes or [])
        if sft:
            model["calculate_per_token_loss"] = True  # ConfigContainer.validate asserts it for SFT with CP > 1
    if t.calculate_per_token_loss:  # the plan's own choice (advisor/model/loss_weights.py: what it changes)
        model["calculate_per_token_loss"] = True
    model.update(architecture(plan))
    model["recompute_granularity"] = None if t.recompute == "none" else t.recompute
    # both None beside selective recompute, which Megatron-Core requires and a recipe may have set otherwise
    # (Megatron-Bridge's Qwen3 recipes)
    model["recompute_method"], model["recompute_num_layers"] = recompute_method(plan)
    if t.cpu_offloading_num_layers:  # activations only, as Megatron-Bridge's GB200/GB300 perf recipes set it
        # and no CUDA graphs, which Megatron-Core refuses beside it (a recipe may have set some)
        model.update(
            cpu_offloading=True,
            cpu_offloading_num_layers=t.cpu_offloading_num_layers,
            cpu_offloading_weights=False,
            cuda_graph_impl="none",
        )
    ddp: dict[str, Any] = {"use_distributed_optimizer": t.distributed_optimizer}
    if p.cp > 1 and sft:
        ddp["average_in_collective"] = False  # same assertion: a CP rank with all tokens masked would give NaN
    elif plan.average_in_collective:
        ddp["average_in_collective"] = True
    train: dict[str, Any] = {
        "micro_batch_size": t.micro_batch_size,  # 1 under offline packing: the plan refuses any other
        "global_batch_size": plan.global_batch_packs(packing_factor) if mode == "offline" else plan.requested_samples,
    }
    if mode == "offline" and not num_packs and num_samples and packing_factor:
        num_packs = round(num_samples / packing_factor)
    iters = train_iters(t.epochs, num_packs if mode == "offline" else num_samples, train["global_batch_size"])
    if iters is not None:
        train["train_iters"] = iters
    dataset: dict = {"seq_length": t.seq_length}
    if mode == "offline" and k.seed is not None:
        # the packing shuffle's seed, GPTSFTDatasetConfig.seed; left out, the recipe's (5678, which the advisor then
        # simulates: Plan.packing_seed) stays (only the SFT config has the field)
        dataset["seed"] = k.seed
    specs: dict[str, Any] | None = None
    if mode == "offline":
        specs = {"packed_sequence_size": plan.pack_size, "pad_seq_to_mult": plan.pad_seq_to_mult}
        if t.cuda_graphs:
            specs["pad_cu_seqlens"] = True
        prepared = find_prepared(plan.data.lengths, plan.pack_size)
        if prepared is not None:  # a folder `advisor prepare` wrote: Megatron-Bridge trains on it as it is
            specs["packed_train_data_path"] = prepared.train
            if prepared.validation is not None:
                specs["packed_val_data_path"] = prepared.validation
            specs["packed_metadata_path"] = prepared.metadata
        if new_packing_api(version):
            dataset["enable_offline_packing"] = True
            if plan.pack_size < t.seq_length:
                specs["max_single_sequence_length"] = k.pack_size
    elif mode == "in-batch":
        dataset["enable_in_batch_packing" if new_packing_api(version) else "pack_sequences_in_batch"] = True
        if t.task == "llm-sft":  # GPT-SFT (0.7): not GPT-SFT's default "batch" loader, which validate refuses;
            # in_batch_packing_pad_to_multiple_of is left out, as validate sets it to the CP/SP multiple
            dataset["dataloader_type"] = "single"
    elif mode == "global-batch":
        # 7bdc5ef4 training/config.py _validate_global_batch_packing and _validate_thd_per_token_loss_mode; the
        # alignment multiple (global_batch_packing_pad_to_multiple_of) is left out: validate sets it itself
        dataset.update(enable_global_batch_packing=True, dataloader_type="single")
        if k.fold_alignment_padding:
            dataset["fold_alignment_padding"] = True
        model.update(
            max_seqlen_per_dp_cp_rank=k.max_seqlen_per_dp_cp_rank or -(-t.seq_length // p.cp),
            sequence_packing_scheduler=k.scheduler,
            dynamic_context_parallel=plan.dynamic_cp,
            calculate_per_token_loss=True,
        )
        if plan.dynamic_cp:
            model["min_dynamic_context_parallel_size"] = 1
        ddp["average_in_collective"] = False
    if mode != "none" and (t.cuda_graphs or p.pp > 1 or p.ep > 1):
        dataset["dataset_kwargs"] = {"pad_to_max_length": True}  # CUDA graphs replay fixed shapes
    if p.fsdp:  # Megatron-Bridge's perf recipes (llama3_70b on GB200/GB300): ZeRO-3 sharding, not DDP's no_shard
        ddp.update(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    num = numerics_of(plan)
    mixed = dict(RECIPE_FIELDS[num.name]) if num.quantized else None
    if mixed is not None and not new_packing_api(version):  # 0.3.1's MixedPrecisionConfig has no fp4_param_gather
        mixed.pop("fp4_param_gather", None)
    if mixed is not None and not t.grad_reduce_in_fp32:
        mixed["grad_reduce_in_fp32"] = False
    peft = t.lora_rank if t.peft == "lora" else None if t.task == "pretrain" else "off"
    return Settings(
        model=model,
        train=train,
        dataset=dataset,
        ddp=ddp,
        specs=specs,
        mode=mode,
        comm_overlap=comm_overlap,
        mixed_precision=mixed,
        precision_recipe=num.mb_recipe if num.quantized else None,
        peft=peft,
        lora_targets=list(t.lora_targets) if t.peft == "lora" else None,
    )


# The MixedPrecisionConfig fields each of Megatron-Bridge's recipes sets (training/mixed_precision.py, 0.3.1 to 0.6.2):
# bf16_with_fp8_current_scaling_mixed, bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_subchannel_scaling_mixed,
# bf16_with_mxfp8_mixed, bf16_with_nvfp4_mixed. Current scaling keeps the first and last layer in BF16 unless told
# otherwise; Megatron-Bridge's performance recipes (perf_recipes/_common.py _perf_precision) turn that off, and the
# advisor's estimate runs every layer in FP8, so the export does too.
RECIPE_FIELDS: dict[str, dict] = {
    "fp8 tensorwise": {
        "fp8": "hybrid",
        "fp8_recipe": "tensorwise",
        "fp8_param_gather": True,
        "first_last_layers_bf16": False,
    },
    "fp8 delayed": {
        "fp8": "hybrid",
        "fp8_recipe": "delayed",
        "fp8_margin": 0,
        "fp8_amax_history_len": 1024,
        "fp8_amax_compute_algo": "max",
        "fp8_param_gather": True,
    },
    "fp8 blockwise": {"fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": False},
    "mxfp8": {
        "fp8": "e4m3",
        "fp8_recipe": "mxfp8",
        "fp8_param_gather": True,
        "reuse_grad_buf_for_mxfp8_param_ag": True,
    },
    "nvfp4": {"fp4": "e2m1", "fp4_recipe": "nvfp4", "fp8_param_gather": False, "fp4_param_gather": True},
}


def _py(value) -> str:
    return repr(value)


def python_snippet(
    plan: Plan,
    version: str = DEFAULT_MB_VERSION,
    packing_factor: float | None = None,
    *,
    num_samples: int | None = None,
    num_packs: int | None = None,
) -> str:
    """Python that edits a recipe's ``ConfigContainer`` named ``cfg``, importing what it uses. Every value is
    written with ``repr`` and the model name only in a comment, so no plan text can become code. The packing
    specs are set field by field on the recipe's own object, so its other fields (tokenizer name, paths, workers)
    stay; the object is created only where the recipe has none."""
    s = derived_settings(plan, version, packing_factor, num_samples=num_samples, num_packs=num_packs)
    new = new_packing_api(version)
    lines = [
        f"# Sequence packing advisor: settings for Megatron-Bridge {version}, model {_comment(plan.model_name)}, "
        f"{plan.parallel.gpus} GPUs.",
        "# Apply to the ConfigContainer your recipe returns (cfg = recipe(...)).",
    ]
    if s.mode == "global-batch":
        lines += [
            f"# Global-batch packing as Megatron-Bridge {GLOBAL_BATCH_SOURCE} validates it (the PR #6127 branch, with "
            "dynamic CP): the",
            "# v0.7.0/v0.7.1 tag commits are not reachable here, so check these fields against your checkout.",
            "# ConfigContainer.validate sets dataset.global_batch_packing_pad_to_multiple_of itself "
            f"({plan.pad_seq_to_mult} for this",
            "# layout); the global batch counts samples.",
        ]
    if s.specs is not None:
        module = "megatron.bridge.data.packing" if new else "megatron.bridge.data.datasets.packed_sequence"
        lines.append(f"from {module} import PackedSequenceSpecs")
    if s.mixed_precision is not None:
        lines.append("from megatron.bridge.training.mixed_precision import get_mixed_precision_config")
    lines.append("")
    for section, values in (("model", s.model), ("train", s.train), ("ddp", s.ddp), ("dataset", s.dataset)):
        for name, value in values.items():
            if name == "dataset_kwargs":
                lines.append(
                    "cfg.dataset.dataset_kwargs = {**(cfg.dataset.dataset_kwargs or {}), 'pad_to_max_length': True}"
                )
                continue
            line = f"cfg.{section}.{name} = {_py(value)}"
            if section == "train" and name == "global_batch_size":  # the batch in both units, as every output says
                line += f"  # {plan.batch_text(packing_factor)}"
            lines.append(line)
    if s.specs is not None:
        target = "cfg.dataset." + ("offline_packing_specs" if new else "packed_sequence_specs")
        lines += [f"if {target} is None:  # the recipe packs nothing yet", f"    {target} = PackedSequenceSpecs()"]
        lines += [f"{target}.{k} = {_py(v)}" for k, v in s.specs.items()]
    if s.comm_overlap:
        lines += [
            "if cfg.comm_overlap is None:  # the recipe has no comm-overlap config yet",
            "    from megatron.bridge.training.comm_overlap import CommOverlapConfig",
            f"    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap={_py(plan.parallel.tp_comm_overlap)})",
        ]
        lines += [f"cfg.comm_overlap.{k} = {_py(v)}" for k, v in s.comm_overlap.items()]
    if isinstance(s.peft, int):  # a full fine-tuning recipe gets Megatron-Bridge's LoRA, on the plan's targets
        lines += [
            "from megatron.bridge.peft.lora import LoRA",
            "if cfg.peft is None:  # the plan trains LoRA adapters; the recipe fine-tunes every weight",
            "    cfg.peft = LoRA()",
            f"cfg.peft.dim = {_py(s.peft)}",
            f"cfg.peft.target_modules = {_py(s.lora_targets)}",
        ]
    elif s.peft == "off":
        lines.append("cfg.peft = None  # the plan fine-tunes every weight (no LoRA adapters)")
    if plan.training.epochs and "train_iters" not in s.train:
        lines.append("# training.epochs: give the lengths (--lengths or data.lengths) to have train_iters written")
    if s.mixed_precision is not None:
        lines.append(f"cfg.mixed_precision = get_mixed_precision_config({_py(s.precision_recipe)})")
        recipe = RECIPE_FIELDS[numerics_of(plan).name]
        lines += [
            f"cfg.mixed_precision.{k} = {_py(v)}"
            for k, v in s.mixed_precision.items()
            if k not in recipe or k == "first_last_layers_bf16"
        ]
    elif not plan.training.grad_reduce_in_fp32:
        # MixedPrecisionConfig.setup copies its grad_reduce_in_fp32 onto cfg.ddp, so cfg.ddp alone would be undone
        lines += [
            "# the plan reduces gradients in BF16: on the recipe's MixedPrecisionConfig (a name such as",
            "# 'bf16_mixed' first through get_mixed_precision_config) set grad_reduce_in_fp32 = False",
        ]
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return repr(text)[1:-1].replace("\n", " ")


def overrides(
    plan: Plan,
    version: str = DEFAULT_MB_VERSION,
    packing_factor: float | None = None,
    *,
    num_samples: int | None = None,
    num_packs: int | None = None,
) -> str:
    """The same settings as OmegaConf dotlist overrides for Megatron-Bridge recipe scripts, one per line (each sets
    one field, so the recipe's other packing-spec fields stay; the recipe must have the specs object, and for a LoRA
    plan its LoRA: a recipe made with peft="lora")."""
    s = derived_settings(plan, version, packing_factor, num_samples=num_samples, num_packs=num_packs)
    out = []
    for section, values in (("model", s.model), ("train", s.train), ("ddp", s.ddp), ("dataset", s.dataset)):
        for name, value in values.items():
            if name == "dataset_kwargs":
                out.append("dataset.dataset_kwargs.pad_to_max_length=true")
                continue
            out.append(f"{section}.{name}={_dotlist(value)}")
    if s.specs is not None:
        target = "offline_packing_specs" if new_packing_api(version) else "packed_sequence_specs"
        out += [f"dataset.{target}.{k}={_dotlist(v)}" for k, v in s.specs.items()]
    if s.mixed_precision is not None:  # the named recipe's fields, on the recipe's MixedPrecisionConfig object
        out += [f"mixed_precision.{k}={_dotlist(v)}" for k, v in s.mixed_precision.items()]
    out += [f"comm_overlap.{k}={_dotlist(v)}" for k, v in s.comm_overlap.items()]  # the recipe's comm-overlap config
    if isinstance(s.peft, int):  # on the LoRA recipe's own LoRA object (a dotlist cannot create one)
        out += [f"peft.dim={s.peft}", f"peft.target_modules={_dotlist(s.lora_targets)}"]
    elif s.peft == "off":
        out.append("peft=null")
    return "\n".join(out) + "\n"


def _dotlist(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def mock_lengths_csv(hist: LengthHistogram, seed: int = 1234) -> str:
    """The lengths one per line, under a header line that Megatron-LM's pandas reader drops (``mode: file``), in
    the data set's order: a per-sample file's own, a histogram's shuffled with ``seed`` (the packing seed). The
    online scheduler packs in this order, which is what the advisor simulates (a sorted file would put every short
    sample in the first steps)."""
    return "length\n" + "\n".join(str(v) for v in dataset_order(hist, seed).tolist()) + "\n"


MAX_CONNECTIONS = "export CUDA_DEVICE_MAX_CONNECTIONS=1"


def _flag(name: str, value) -> str:
    """One ``--name value`` argument; floats without a trailing ``.0`` noise (1e-05 stays exact for argparse)."""
    return f"--{name} {value!r}" if isinstance(value, float) else f"--{name} {value}"


def mlm_architecture(plan: Plan) -> list[str]:
    """The Megatron-LM arguments that build the plan's network, beyond the sizes Megatron-LM's defaults would get
    wrong (megatron/training/arguments.py, dev d48bd6be: learned absolute positions, LayerNorm, biases, dropout 0.1,
    FP32): RoPE with its base, share and Llama 3.1 scaling, normalization and epsilon, activation, biases, QK norm,
    untied embeddings, MoE router and expert sizes, dropout 0, BF16 and the tokenizer.

    >>> from advisor.plan import plan_from_dict
    >>> args = mlm_architecture(plan_from_dict({"model": "qwen3-8b"}))
    >>> [a for a in args if "rotary" in a or "norm" in a]
    ['--normalization RMSNorm', '--norm-epsilon 1e-06', '--qk-layernorm', '--rotary-base 1000000']
    """
    m = plan.model
    if m.gated_linear_unit and m.activation not in ("silu", "quick_gelu"):
        raise ValueError(
            f"model.activation {m.activation} with gated_linear_unit: Megatron-LM has only --swiglu "
            "and --quick-geglu among gated MLPs"
        )
    if not m.gated_linear_unit and m.activation == "silu":
        raise ValueError(
            "model.activation silu without gated_linear_unit: Megatron-LM has no plain SiLU MLP "
            "(--swiglu, --squared-relu, or GELU by default)"
        )
    args = [
        f"--num-layers {m.num_layers}",
        f"--hidden-size {m.hidden_size}",
        f"--ffn-hidden-size {m.ffn_hidden_size}",
        f"--num-attention-heads {m.num_attention_heads}",
        f"--kv-channels {m.head_dim}",
    ]
    if m.query_groups != m.num_attention_heads:
        args += ["--group-query-attention", f"--num-query-groups {m.query_groups}"]
    if m.mtp_num_layers:
        args.append(f"--mtp-num-layers {m.mtp_num_layers}")
    args += [f"--normalization {m.normalization}", _flag("norm-epsilon", m.norm_epsilon)]
    if m.layernorm_zero_centered_gamma:
        args.append("--apply-layernorm-1p")
    if m.qk_layernorm:
        args.append("--qk-layernorm")
    args.append(
        {"silu": "--swiglu", "squared_relu": "--squared-relu", "gelu": "", "quick_gelu": "--quick-geglu"}[m.activation]
    )
    if not m.add_bias_linear:
        args.append("--disable-bias-linear")
    if m.add_qkv_bias:
        args.append("--add-qkv-bias")
    args.append(f"--position-embedding-type {m.position_embedding_type}")
    if m.position_embedding_type in ("rope", "mrope", "yarn"):
        args.append(f"--rotary-base {m.rotary_base}")
        if m.rotary_percent != 1:
            args.append(_flag("rotary-percent", m.rotary_percent))
        if m.rope_scaling_factor and m.position_embedding_type == "yarn":
            args.append(_flag("rotary-scaling-factor", m.rope_scaling_factor))
        elif m.rope_scaling_factor:
            args += ["--use-rope-scaling", _flag("rope-scaling-factor", m.rope_scaling_factor)]
        if m.position_embedding_type == "mrope" and m.mrope_section:
            args.append("--mrope-section " + " ".join(map(str, m.mrope_section)))
    if m.window_size:  # Megatron's window is (left, right) tokens besides the query's own: W tokens = (W - 1, 0)
        args.append(f"--window-size {m.window_size - 1},0")
        if m.window_attn_skip_freq:
            args.append(f"--window-attn-skip-freq {m.window_attn_skip_freq}")
    if m.softmax_type != "vanilla":
        args.append(f"--softmax-type {m.softmax_type}")
    if not m.share_embeddings_and_output_weights:
        args.append("--untie-embeddings-and-output-weights")
    if m.num_moe_experts:
        args += [f"--num-experts {m.num_moe_experts}", f"--moe-router-topk {m.moe_router_topk}"]
        if m.moe_ffn_hidden_size:
            args.append(f"--moe-ffn-hidden-size {m.moe_ffn_hidden_size}")
        if m.moe_shared_expert_intermediate_size:
            args.append(f"--moe-shared-expert-intermediate-size {m.moe_shared_expert_intermediate_size}")
        if m.moe_layer_freq != 1:
            freq = m.moe_layer_freq
            args.append(
                "--moe-layer-freq " + (shlex.quote(str(freq).replace(" ", "")) if isinstance(freq, list) else str(freq))
            )
        if m.moe_router_score_function != "softmax":
            args.append(f"--moe-router-score-function {m.moe_router_score_function}")
        if m.moe_router_enable_expert_bias:
            args.append("--moe-router-enable-expert-bias")
        if m.moe_router_num_groups:
            args.append(f"--moe-router-num-groups {m.moe_router_num_groups}")
        if m.moe_router_group_topk:
            args.append(f"--moe-router-group-topk {m.moe_router_group_topk}")
        if m.moe_router_topk_scaling_factor:
            args.append(_flag("moe-router-topk-scaling-factor", m.moe_router_topk_scaling_factor))
    args += [
        "--attention-dropout 0",
        "--hidden-dropout 0",
        "--bf16",
        "--tokenizer-type HuggingFaceTokenizer",
        f"--tokenizer-model {_tokenizer_placeholder(m.preset)}",
    ]
    return [a for a in args if a]


def mlm_precision(plan: Plan) -> list[str]:
    """Megatron-LM's FP8 / FP4 arguments for the plan's precision, as Megatron-Bridge's recipe of the same name sets
    them (``RECIPE_FIELDS``): --fp8-format (hybrid, or e4m3 for MXFP8) and --fp8-recipe, or --fp4-format e2m1 with
    --fp4-recipe nvfp4; the parameters kept and gathered in the low precision where the recipe does (Megatron-LM
    allows that only with the distributed optimizer or FSDP). megatron/core/transformer/transformer_config.py.

    >>> from advisor.plan import plan_from_dict
    >>> mlm_precision(plan_from_dict({"model": "llama3.1-8b", "training": {"precision": "fp8"}}))
    ['--fp8-format hybrid', '--fp8-recipe tensorwise', '--fp8-param-gather']
    """
    num = numerics_of(plan)
    if not num.quantized:
        return []
    f = RECIPE_FIELDS[num.name]
    sharded = plan.training.distributed_optimizer or plan.parallel.fsdp
    if "fp4" in f:
        return [f"--fp4-format {f['fp4']}", f"--fp4-recipe {f['fp4_recipe']}"] + (
            ["--fp4-param-gather"] if sharded and f["fp4_param_gather"] else []
        )
    args = [f"--fp8-format {f['fp8']}", f"--fp8-recipe {f['fp8_recipe']}"]
    if "fp8_amax_history_len" in f:
        args += [
            f"--fp8-amax-history-len {f['fp8_amax_history_len']}",
            f"--fp8-amax-compute-algo {f['fp8_amax_compute_algo']}",
        ]
    if sharded and f["fp8_param_gather"]:
        args.append("--fp8-param-gather")
        if f.get("reuse_grad_buf_for_mxfp8_param_ag") and not plan.parallel.fsdp:
            args.append("--reuse-grad-buf-for-mxfp8-param-ag")
    return args


def _tokenizer_placeholder(preset: str | None) -> str:
    """A shell parameter: the preset's Hugging Face repository unless TOKENIZER_MODEL is set, else required."""
    repo = HF_REPOS.get(preset or "")
    if repo:
        return f'"${{TOKENIZER_MODEL:-{repo}}}"'
    return '"${TOKENIZER_MODEL:?set TOKENIZER_MODEL to the tokenizer path or Hugging Face name}"'


def megatron_lm_args(
    plan: Plan, mock_lengths: str | None = None, *, num_samples: int | None = None, packing_factor: float | None = None
) -> str:
    """Megatron-LM arguments for the same layout and packing, training the plan's model (``mlm_architecture``) on
    the user's data: SFT reads ``--data-path`` (a JSONL of ``{"messages": [...]}``, dev's
    ``megatron/training/datasets/sft_dataset.py`` SFTLowLevelDataset), left as a required shell parameter. Only with
    ``mock_lengths`` (the file ``export --lengths-csv`` writes) does it train on Megatron-LM's mock SFT data of the
    user's lengths instead, naming that file. ``--train-iters`` for the plan's epochs over ``num_samples``.

    Online packing: dev's ``--sequence-packing-scheduler`` (model_parallel_config.py) with its buffer; main has the
    scheduler but no option to turn it on, so an online plan on main is refused here.
    """
    p, t, k = plan.parallel, plan.training, plan.packing
    if plan.packing_mode == "online" and k.megatron_lm == "main":
        raise ValueError(
            "Megatron-LM main d98e8a64 has no --sequence-packing-scheduler (its training loop never "
            "calls the scheduler): set packing.megatron_lm to dev"
        )
    mbs = 1 if plan.packing_mode == "offline" else t.micro_batch_size
    # Megatron-LM's global batch counts samples (its online packing too) and must divide by micro batch x DP
    # (megatron/core/num_microbatches_calculator.py asserts it at start-up)
    unit = mbs * p.dp
    # a plan counting Megatron-Bridge's packs trains on packs x n samples: Megatron-LM counts those
    per_step = plan.effective_samples_per_step(packing_factor) or plan.training.global_batch_size
    if not plan.requested_samples and per_step is None:
        raise ValueError("the plan's global batch is in packs: the Megatron-LM export needs the data's packing factor")
    asked = plan.requested_samples or round(per_step or 0)
    gbs = max(unit, round(asked / unit) * unit)
    head = (
        [f"# global batch {asked} samples rounded to {gbs}, a multiple of micro batch x DP = {unit}"]
        if gbs != asked
        else []
    )
    if t.peft == "lora":  # the plan's estimate is LoRA's; say so rather than hand over a silently different run
        head.append(
            "# LoRA: Megatron-LM's pretrain_gpt.py has no LoRA; these arguments train every weight (the "
            "advisor's estimate is for LoRA: use the Megatron-Bridge export for it)"
        )
    blackwell = plan.hardware.table["compute_capability"] >= 10
    if (p.tp > 1 or p.cp > 1) and not blackwell and not p.fsdp:  # validate_args asserts it below Blackwell
        head.append(f"# {MAX_CONNECTIONS}: Megatron-LM refuses TP or CP > 1 without it (before Blackwell)")
    args = [
        f"--tensor-model-parallel-size {p.tp}",
        f"--pipeline-model-parallel-size {p.pp}",
        f"--context-parallel-size {p.cp}",
        f"--expert-model-parallel-size {p.ep}",
        f"--micro-batch-size {mbs}",
        f"--global-batch-size {gbs}",
        f"--seq-length {t.seq_length}",
        f"--max-position-embeddings {t.seq_length}",
        *mlm_architecture(plan),
    ]
    iters = train_iters(t.epochs, num_samples, gbs)  # Megatron-LM's global batch counts samples in every mode
    if iters is not None:
        args.append(f"--train-iters {iters}")
    if plan.pipeline_stages is not None:  # sets the virtual pipeline itself (arguments.py: one or the other)
        args.append(f"--pipeline-model-parallel-layout '{layout_string(plan.pipeline_stages)}'")
    elif p.vpp:
        args.append(
            f"--num-layers-per-virtual-pipeline-stage {(plan.model.num_layers + p.pipeline_slots) // (p.pp * p.vpp)}"
        )
    if p.account_for_embedding_in_pipeline_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if p.account_for_loss_in_pipeline_split:
        args.append("--account-for-loss-in-pipeline-split")
    if p.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if p.sp:
        args.append("--sequence-parallel")
    if plan.model.num_moe_experts:  # the dispatcher the estimate models; Megatron-Core's default is allgather
        if p.moe_dispatcher == "alltoall":
            args.append("--moe-token-dispatcher-type alltoall")
        else:
            args += [
                "--moe-token-dispatcher-type flex",
                f"--moe-flex-dispatcher-backend {p.moe_dispatcher.removeprefix('flex_')}",
            ]
    if p.moe_a2a_overlap:  # Megatron-Bridge's performance recipes add --delay-wgrad-compute (TE >= 2.8 with
        # --overlap-grad-reduce): left to the user
        args.append("--overlap-moe-expert-parallel-comm")
    if p.cp > 1:
        args.append(f"--cp-comm-type {p.cp_comm_type}")
        if p.cp_comm_type == "a2a+p2p":
            args.append("--hierarchical-context-parallel-sizes " + " ".join(map(str, p.hierarchical_cp_sizes or [])))
        args.append("--calculate-per-token-loss")
    elif t.calculate_per_token_loss:
        args.append("--calculate-per-token-loss")
    if plan.average_in_collective and "--calculate-per-token-loss" not in args:  # Megatron-Core refuses the two
        args.append("--ddp-average-in-collective")
    if t.seq_length > 65536 or p.cp > 1:
        args.append("--no-create-attention-mask-in-dataloader")
    if t.recompute == "selective":
        args.append("--recompute-granularity selective")
    elif t.recompute == "full":
        method, layers = recompute_method(plan)
        args += ["--recompute-granularity full", f"--recompute-method {method}", f"--recompute-num-layers {layers}"]
    if t.cpu_offloading_num_layers:  # validate_args turns cpu_offloading on from the count
        args.append(f"--cpu-offloading-num-layers {t.cpu_offloading_num_layers}")
    if t.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if p.fsdp:  # Megatron FSDP asserts the fsdp_dtensor checkpoint format; ZeRO-3 as Megatron-Bridge's recipes run it
        args += [
            "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy optim_grads_params",
            "--ckpt-format fsdp_dtensor",
        ]
    args += mlm_precision(plan)
    if not t.grad_reduce_in_fp32:
        args.append("--grad-reduce-in-bf16")
    if plan.scheduled:  # global-batch packing runs the same scheduler, with Megatron-Bridge's cap
        args.append(f"--sequence-packing-scheduler {k.scheduler}")
        if k.scheduler == "default_dynamic_cp":
            args.append("--dynamic-context-parallel")
        cap = k.max_seqlen_per_dp_cp_rank
        if cap is None and plan.packing_mode == "global-batch":
            cap = -(-t.seq_length // p.cp)
        if cap is not None:
            args.append(f"--max-seqlen-per-dp-cp-rank {cap}")
        if "--calculate-per-token-loss" not in args:
            args.append("--calculate-per-token-loss")  # dynamic CP asserts it; packed THD loss is per token
    if mock_lengths is not None and t.task == "pretrain":
        raise ValueError(
            "mock lengths (--lengths-csv) are Megatron-LM's mock SFT data: a pre-training plan reads "
            "--data-path, or Megatron-LM's own --mock-data"
        )
    if mock_lengths is not None:
        mock = json.dumps({"mode": "file", "path": mock_lengths})
        head.append(
            f"# mock data, as asked: Megatron-LM's mock SFT samples of your lengths, read from {mock_lengths} "
            "(written beside these arguments); drop --mock-data and give --data-path to train on your data"
        )
        args += ["--sft", "--mock-data", f"--sft-mock-dataset-config-json {shlex.quote(mock)}"]
    elif t.task != "pretrain":
        head.append(
            "# DATA_PATH: your SFT data, a JSONL of {\"messages\": [{\"role\": ..., \"content\": ...}]} per "
            "line (Megatron-LM's SFTDataset); the launch stops until it is set"
        )
        args += ["--sft", '--data-path "${DATA_PATH:?set DATA_PATH to your SFT JSONL (messages per line)}"']
    else:
        head.append(
            "# DATA_PATH: your pre-training data's prefix (a Megatron indexed dataset, preprocess_data.py); "
            "the launch stops until it is set"
        )
        args.append('--data-path "${DATA_PATH:?set DATA_PATH to your indexed dataset prefix}"')
    return "".join(line + "\n" for line in head) + " \\\n  ".join(args) + "\n"


def packed_paths(
    plan: Plan,
    version: str = DEFAULT_MB_VERSION,
    tokenizer: str = "meta-llama/Llama-3.1-8B",
    dataset_root: str = "<dataset_root>",
    packing_factor: float | None = 1.0,
) -> str:
    """Where Megatron-Bridge writes the packed files and metadata, by version (the layout changed twice).

    0.3.x: ``packed/{tokenizer}_pad_seq_to_mult{N}/training_{size}.npy``; 0.4-0.5: Parquet ``.idx.parquet``;
    0.6: a folder suffixed ``_sft_{fingerprint}`` (12 hex digits of the dataset settings' hash).
    """
    s = derived_settings(plan, version, packing_factor)
    if s.specs is None:
        return "No offline packing in this plan: Megatron-Bridge writes no packed files.\n"
    if "packed_train_data_path" in s.specs:
        return "The plan's data is a prepared folder; Megatron-Bridge trains on it as it is:\n" + "".join(
            f"{k}: {v}\n" for k, v in s.specs.items() if k.startswith("packed_") and k.endswith("path")
        )
    prepare = (
        "Or write them yourself, faster and packed as the plan says (then point data.lengths at OUT):\n  "
        + prepare_command(plan)
        + "\n"
    )
    size, mult = s.specs["packed_sequence_size"], s.specs["pad_seq_to_mult"]
    name = tokenizer.replace("/", "--")
    major, minor = _version(version)
    if (major, minor) >= (0, 6):
        folder = f"{name}_pad_seq_to_mult{mult}_sft_<fingerprint>"
        ext = ".idx.parquet"
    elif (major, minor) >= (0, 4):
        folder, ext = f"{name}_pad_seq_to_mult{mult}", ".idx.parquet"
    else:
        folder, ext = f"{name}_pad_seq_to_mult{mult}", ".npy"
    base = f"{dataset_root}/packed/{folder}"
    return (
        f"tokenizer_model_name = {tokenizer!r}  (set it on the PackedSequenceSpecs so the folder name is stable)\n"
        f"train:    {base}/training_{size}{ext}\n"
        f"val:      {base}/validation_{size}{ext}\n"
        f"metadata: {base}/{size}_metadata.jsonl  (one JSON list, one dict per split)\n"
        + (
            "<fingerprint> is the first 12 hex digits of a hash of the dataset settings "
            "(data/builders/gpt_sft.py _packing_fingerprint).\n"
            if (major, minor) >= (0, 6)
            else ""
        )
        + prepare
    )


def prepare_command(plan: Plan, data: str = "DATA.jsonl", tokenizer: str = "TOKENIZER_DIR", out: str = "OUT") -> str:
    """The ``advisor prepare`` command that writes the plan's packed data (its pack size, algorithm, seed, padding
    multiple and data format); the data, tokenizer and output folder are the user's.

    >>> from advisor.plan import plan_from_dict
    >>> prepare_command(plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 4096}}))
    'python -m advisor prepare DATA.jsonl --tokenizer TOKENIZER_DIR --format sft --pack-size 4096 \
--algorithm first_fit_shuffle --seed 5678 -o OUT'
    """
    k = plan.packing
    parts = [
        "python -m advisor prepare",
        shlex.quote(data),
        "--tokenizer",
        shlex.quote(tokenizer),
        "--format",
        plan.data.format,
        "--pack-size",
        str(plan.pack_size),
        "--algorithm",
        k.algorithm,
        "--seed",
        str(plan.packing_seed),
    ]
    if plan.pad_seq_to_mult > 1:
        parts += ["--pad-seq-to-mult", str(plan.pad_seq_to_mult)]
    return " ".join(parts + ["-o", shlex.quote(out)])


def markdown_report(
    plan: Plan, findings: list, est=None, search_result=None, packing_factor: float | None = None
) -> str:
    """Findings and estimates in one page for a review."""
    p, t = plan.parallel, plan.training
    lines = [
        f"# Packing plan: {_comment(plan.model_name)}",
        "",
        f"- Layout: {p.gpus} x {plan.hardware.gpu}, TP {p.tp}, PP {p.pp}, CP {p.cp}, EP {p.ep}, DP {p.dp}, "
        f"SP {'on' if p.sp else 'off'}",
        f"- Training: {t.task}, seq_length {t.seq_length}, micro batch {t.micro_batch_size}, global batch "
        f"{plan.batch_text(packing_factor)}, recompute {t.recompute}",
        f"- Packing: {plan.packing_mode}",
        "",
    ]
    if est is not None:
        m, f, tm = est.memory, est.flops, est.time
        lines += ["## Estimates", "", "| component | GiB |", "| --- | ---: |"]
        lines += [f"| {k} | {v / 2**30:.2f} |" for k, v in m.breakdown.items()]
        lines += [
            f"| **total** ({'fits' if m.fits else 'does not fit'} in {m.capacity / 2**30:.1f}) | "
            f"**{m.total / 2**30:.2f}** |",
            "",
            f"Megatron-Bridge's own estimate: {m.megatron_bridge.total_bytes / 2**30:.2f} GiB.",
            "",
            f"- Step {tm.step_seconds:.3f} s, {tm.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, "
            f"straggler x{tm.straggler_factor:.2f}, epoch {tm.epoch_seconds / 3600:.2f} h",
            f"- FLOPs per step {f.model_per_step:.3e} on real tokens, {f.padding_waste:.1%} spent on padding",
            "",
        ]
        if est.packing is not None:
            lines += ["Megatron-Bridge packing metadata:", "", "```json", json.dumps(est.packing.metadata), "```", ""]
    lines += ["## Findings", ""]
    if not findings:
        lines.append("None.")
    for fd in findings:
        lines.append(f"- **{fd.severity}** `{fd.id}`: {fd.message}. {fd.reason} _Source: {fd.source}_")
    if search_result is not None and search_result.best:
        lines += [
            "",
            "## Best candidates",
            "",
            "| plan | TP | CP | pack size | packs/step | ≈ samples/step | GiB | tokens/s/GPU | why |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for label, c in [("yours", search_result.baseline)] + [
            (f"#{i + 1}", c) for i, c in enumerate(search_result.best)
        ]:
            s = c.summary()
            gib = f"{s['memory_gib']:.1f}" if s["memory_gib"] is not None else "-"
            eff = s["effective_samples_per_step"]
            eff = f"{eff:,.0f}" if eff is not None else "-"
            lines.append(
                f"| {label} | {s['tp']} | {s['cp']} | {s['pack_size'] or c.plan.packing_mode} | "
                f"{s['global_batch_packs'] or '-'} | "
                f"{eff} | {gib} | {s['tokens_per_second_per_gpu']:,.0f} | {s['why']} |"
            )
    return "\n".join(lines) + "\n"
