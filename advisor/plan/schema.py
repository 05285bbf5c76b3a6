"""The plan: model, parallel layout, training, packing, data and hardware, as one typed, frozen pydantic model.

Alternatives: a dict re-parsed wherever it is used (what this replaced: it lost a preset's overrides), or a
dataclass tree with a hand-written validator (it let ``sp: "maybe"`` through). Every field here has a type, a range,
a unit and a one-line description; ``python -m advisor schema`` prints the JSON Schema built from them.

Two things a reader must know:

- ``model`` keeps ``{preset, overrides}`` losslessly: ``{preset: llama3.1-8b, num_layers: 16}`` is a 16-layer
  Llama, and it is written back exactly so (only fields that differ from the preset are written).
- ``training.global_batch_size`` means what the target framework's own field means in the plan's mode:
  Megatron-Bridge's ``cfg.train.global_batch_size`` (**packs** under offline packing, samples otherwise) and
  Megatron-LM's ``--global-batch-size`` (sequences) under online packing. An MB user types their recipe's value
  and gets it back in the export. Samples per step are their own field, ``training.global_batch_samples``
  (exclusive with it), which offline packing turns into packs by the packing factor n (``global_batch_packs(n)``).
  Plan files carry ``version: 2``; an older file (samples in ``global_batch_size``) is read with the new meaning
  and a note (``Plan.notes``; the CHANGELOG has the old meaning).

>>> p = Plan.model_validate({"model": {"preset": "llama3.1-8b", "num_layers": 16}, "parallel": {"gpus": 8, "tp": 2}})
>>> p.model.num_layers, p.model.hidden_size, p.parallel.dp, p.to_dict()["model"]
(16, 4096, 4, {'preset': 'llama3.1-8b', 'num_layers': 16})
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import ErrorDetails

from advisor.errors import PlanError, excerpt
from advisor.limits import MAX_GPUS, MAX_PACK, MAX_TOKENS
from advisor.plan.gpus import unknown_gpu
from advisor.plan.pipeline_layout import RECIPE_LAYOUTS, layout_problems, layout_summary, parse_layout, recipe_layout
from advisor.plan.precisions import precision_problems
from advisor.plan.presets import GPU_PRESETS, MLA_PRESETS, MODEL_PRESETS, RECIPE_PIPELINE_SLOTS
from advisor.plan.versions import DEFAULT_VERSIONS, RELEASES, parse
from advisor.vocabulary import (
    SCHEDULED_MODES,
    Algorithm,
    CpCommType,
    DataFormat,
    Fp8Recipe,
    LoraTarget,
    MegatronLmBranch,
    MoeDispatcher,
    OnlineScheduler,
    PackingMode,
    Peft,
    Precision,
    Recompute,
    Task,
)

__all__ = ["MAX_GPUS", "MAX_PACK", "MAX_TOKENS", "Plan", "PlanError", "plan_from_dict"]

DEFAULT_GLOBAL_BATCH = 128  # Megatron-Bridge's SFT recipes' global_batch_size
VERSION: Final = 2  # plan files: 2 = global_batch_size in the framework's unit (packs under offline packing)
NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"  # names land in reports and scripts: letters, digits and ._+- only
SECTIONS = ("model", "parallel", "training", "packing", "data", "hardware", "versions")
# The SFT recipes' dataset seed, which seeds the offline packing shuffle: MB 0.6.2 recipes/utils/dataset_utils.py
# (_text_hf_dataset_config, seed=5678) and 0.3.1 recipes/utils/finetune_utils.py; the dataclass default is 1234
MB_RECIPE_SEED = 5678


def _int(lo: int, hi: int, doc: str, default: int | None = None):
    """An integer field in [lo, hi]; required when no default is given."""
    if default is None:
        return Field(ge=lo, le=hi, description=doc)
    return Field(default, ge=lo, le=hi, description=doc)


class _Section(BaseModel):
    # strict: "4096" is not a number and "false" is not a boolean (a truthy string once exported --sequence-parallel)
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, validate_default=True)


class VisionSpec(_Section):
    """A VLM's vision encoder (a ViT with a patch merger, Qwen2.5-VL style); counted in parameters and memory."""

    num_layers: int = _int(1, 1024, "encoder layers")
    hidden_size: int = _int(1, 1 << 16, "encoder width")
    num_attention_heads: int = _int(1, 1024, "encoder heads")
    ffn_hidden_size: int = _int(1, 1 << 18, "encoder MLP width")
    gated_linear_unit: bool = Field(True, description="gated MLP in the encoder")
    out_hidden_size: int | None = Field(None, ge=1, le=1 << 18, description="merger output width (the LLM's)")
    patch_size: int = _int(1, 1024, "patch side, pixels", 14)
    spatial_merge_size: int = _int(1, 64, "patches merged per side", 2)


class ModelSpec(_Section):
    """Architecture in Megatron TransformerConfig names; ``preset`` fills every field not given."""

    preset: str | None = Field(
        None, description="a preset name (see `python -m advisor schema`); the other fields override it"
    )
    hidden_size: int = _int(1, 1 << 18, "model width h")
    num_layers: int = _int(1, 4096, "transformer layers")
    num_attention_heads: int = _int(1, 4096, "query heads")
    ffn_hidden_size: int = _int(1, 1 << 20, "MLP inner width")
    vocab_size: int = _int(1, 1 << 24, "tokenizer vocabulary (padded to a multiple of 128 x TP as Megatron does)")
    num_query_groups: int | None = Field(None, ge=1, le=4096, description="KV heads (GQA); null = MHA")
    kv_channels: int | None = Field(None, ge=1, le=4096, description="head dimension; null = hidden/heads")
    gated_linear_unit: bool = Field(True, description="SwiGLU-style gated MLP")
    normalization: Literal["RMSNorm", "LayerNorm"] = Field("RMSNorm", description="normalization layer")
    share_embeddings_and_output_weights: bool = Field(False, description="tied input and output embeddings")
    num_moe_experts: int | None = Field(None, ge=1, le=4096, description="routed experts; null = dense")
    moe_router_topk: int = _int(1, 64, "experts per token", 2)
    moe_ffn_hidden_size: int | None = Field(None, ge=1, le=1 << 20, description="expert MLP width")
    moe_shared_expert_intermediate_size: int | None = Field(
        None, ge=1, le=1 << 20, description="shared expert MLP width"
    )
    moe_layer_freq: int | list[Annotated[int, Field(ge=0, le=1)]] = Field(
        1, description="1 = every layer MoE, k = every k-th, or a 0/1 list per layer"
    )
    # What Megatron-LM's arguments need to build the same network (Megatron-Bridge's bridges read them from the HF
    # config.json: models/llama/llama_bridge.py, qwen/qwen3_bridge.py, nemotron/nemotron_bridge.py, 0.6.2)
    position_embedding_type: Literal["rope", "mrope", "yarn", "learned_absolute", "none"] = Field(
        "rope", description="position embedding (mrope: Qwen2-VL's multimodal RoPE; yarn: YaRN-scaled RoPE)"
    )
    rotary_base: int = _int(1, 10**9, "RoPE base theta (HF rope_theta)", 10000)
    rotary_percent: float = Field(
        1.0, gt=0, le=1, description="share of head channels RoPE rotates (HF partial_rotary_factor)"
    )
    rope_scaling_factor: float | None = Field(
        None,
        ge=1,
        le=1024,
        description="RoPE scaling factor, Llama 3.x's or YaRN's (HF rope_scaling.factor); null = none",
    )
    mrope_section: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        None, max_length=4, description="mrope: channels per temporal/height/width section"
    )
    norm_epsilon: float = Field(1e-5, gt=0, le=0.1, description="normalization epsilon (HF rms_norm_eps/norm_eps)")
    layernorm_zero_centered_gamma: bool = Field(False, description="LayerNorm with 1 + gamma (Nemotron's LayerNorm1p)")
    activation: Literal["silu", "squared_relu", "gelu", "quick_gelu"] = Field(
        "silu", description="MLP activation (gated with gated_linear_unit: SwiGLU; quick_gelu: GPT-OSS's gated one)"
    )
    qk_layernorm: bool = Field(False, description="normalization of queries and keys (Qwen3)")
    add_bias_linear: bool = Field(False, description="biases in the linear layers")
    add_qkv_bias: bool = Field(False, description="biases in the QKV projection only (Qwen2)")
    moe_router_score_function: Literal["softmax", "sigmoid"] = Field("softmax", description="router scores")
    moe_router_enable_expert_bias: bool = Field(False, description="aux-loss-free expert bias (DeepSeek-V3)")
    moe_router_num_groups: int | None = Field(None, ge=1, le=4096, description="group-limited routing: groups")
    moe_router_group_topk: int | None = Field(
        None, ge=1, le=4096, description="group-limited routing: groups chosen per token"
    )
    moe_router_topk_scaling_factor: float | None = Field(
        None, gt=0, le=1e3, description="routed experts' output scale (DeepSeek-V3)"
    )
    vision: VisionSpec | None = Field(None, description="vision encoder (VLM presets)")
    window_size: int | None = Field(None, ge=1, le=MAX_TOKENS, description="sliding-window attention, tokens")
    window_attn_skip_freq: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="with window_size: every k-th layer "
        "attends fully (Megatron's window_attn_skip_freq); null = all windowed",
    )
    softmax_type: Literal["vanilla", "off-by-one", "learnable"] = Field(
        "vanilla", description="attention softmax; learnable = a learned sink logit per head (GPT-OSS)"
    )
    mtp_num_layers: int = _int(0, 16, "multi-token prediction layers", 0)
    family: str = Field("gpt", max_length=64, pattern=NAME, description="model family (some cannot pack: qwen3-omni)")
    approximated: str | None = Field(
        None, max_length=200, pattern=r"^[\w .,:;()+/-]*$", description="what a preset approximates (plain words)"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, raw: Any) -> Any:
        if isinstance(raw, str):
            raw = {"preset": raw}
        if isinstance(raw, dict) and raw.get("preset") is not None:
            name = raw["preset"]
            if not isinstance(name, str) or name not in MODEL_PRESETS:
                raise ValueError(f"unknown preset {str(name)[:40]!r} (presets: {', '.join(MODEL_PRESETS)})")
            raw = {**MODEL_PRESETS[name], **raw}
        return raw

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def name(self) -> str:
        return self.preset or "custom"

    def as_written(self) -> str | dict:
        """The preset name alone, ``{preset, overrides}``, or every field of a custom model."""
        values = self.model_dump(exclude={"preset"})
        if self.preset is None:
            return values
        base = ModelSpec(preset=self.preset).model_dump(exclude={"preset"})
        overrides = {k: v for k, v in values.items() if v != base[k]}
        return {"preset": self.preset, **overrides} if overrides else self.preset


class ParallelSpec(_Section):
    gpus: int = _int(1, MAX_GPUS, "GPUs in the job", 8)
    tp: int = _int(1, 1024, "tensor parallel size", 1)
    pp: int = _int(1, 1024, "pipeline parallel size", 1)
    cp: int = _int(1, 1024, "context parallel size", 1)
    ep: int = _int(1, 4096, "expert parallel size (MoE)", 1)
    etp: int = _int(1, 1024, "expert tensor parallel size (MoE)", 1)
    vpp: int | None = Field(None, ge=1, le=1024, description="virtual pipeline stages per rank; needs pp > 1")
    sp: bool = Field(False, description="sequence parallelism (with TP > 1)")
    cp_comm_type: CpCommType = Field("p2p", description="how CP ranks exchange K/V (Transformer Engine)")
    hierarchical_cp_sizes: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        None, max_length=4, description="for a2a+p2p: [a2a size, p2p size], multiplying to cp"
    )
    account_for_embedding_in_pipeline_split: bool = Field(
        False, description="the input embedding takes a layer's place on the first pipeline stage (Megatron)"
    )
    account_for_loss_in_pipeline_split: bool = Field(
        False, description="the output layer and loss take a layer's place on the last pipeline stage (Megatron)"
    )
    tp_comm_overlap: bool = Field(
        False,
        description="overlap TP communication with GEMMs (Transformer Engine "
        "userbuffers; needs sp; Megatron-Bridge's default is off)",
    )
    moe_dispatcher: MoeDispatcher = Field(
        "alltoall",
        description=(
            "MoE token dispatcher (Megatron-Core moe_token_dispatcher_type): alltoall (NCCL all-to-all, permutation "
            "as separate kernels) or flex with the DeepEP or HybridEP backend (moe_flex_dispatcher_backend: "
            "communication kernels that permute while they send)"
        ),
    )
    moe_a2a_overlap: bool = Field(
        False,
        description=(
            "overlap the expert-parallel all-to-all with the other micro batch's compute (Megatron-Core "
            "overlap_moe_expert_parallel_comm, with delay_wgrad_compute): needs ep > 1, vpp when pp > 1, and no full "
            "recompute"
        ),
    )
    fsdp: bool = Field(
        False,
        description="Megatron FSDP (use_megatron_fsdp): weights, gradients and optimizer "
        "state sharded over DP x CP, gathered layer by layer",
    )
    pipeline_layout: str | list[list[Annotated[str, Field(max_length=16)]]] | None = Field(
        None,
        max_length=2000,
        description=(
            "which layers each pipeline stage holds (Megatron-Core pipeline_model_parallel_layout): a string such as "
            "'Et*3|(t*4|)*14tmL' (E embedding, t decoder layer, m MTP layer, L loss; | between stages, *n repeats) "
            "or a list of lists of layer names; stages = pp x vpp. Null: Megatron-Bridge's recipe layout where its "
            "recipe sets one (DeepSeek-V3, Kimi-K2), else the even split"
        ),
    )

    @property
    def dp(self) -> int:
        """Data-parallel size: GPUs / (TP x PP x CP)."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def pipeline_slots(self) -> int:
        """What pp x vpp must divide: the layers, plus one for the embedding and one for the loss where they are
        accounted for (megatron/training/arguments.py)."""
        return int(self.account_for_embedding_in_pipeline_split) + int(self.account_for_loss_in_pipeline_split)


class TrainingSpec(_Section):
    task: Task = Field("llm-sft", description="what is trained")
    seq_length: int = _int(1, MAX_TOKENS, "sequence length, tokens (samples longer are truncated)", 4096)
    micro_batch_size: int = _int(1, 4096, "rows per micro batch (1 with offline packing: a row is a pack)", 1)
    global_batch_size: int | None = Field(
        None,
        ge=1,
        le=1 << 24,
        description=(
            "the framework's global batch, as its config writes it: Megatron-Bridge's cfg.train.global_batch_size "
            "(PACKS per step under offline packing, a multiple of DP; samples otherwise), Megatron-LM's "
            "--global-batch-size (sequences) under online packing; exclusive with global_batch_samples; 128 when "
            "neither is given"
        ),
    )
    global_batch_samples: int | None = Field(
        None,
        ge=1,
        le=1 << 24,
        description=(
            "SAMPLES per optimizer step, as an unpacked run counts them; under offline packing the export writes "
            "samples / n packs, rounded to DP (so the samples trained differ a little: estimate's "
            "plan.effective_samples_per_step); exclusive with global_batch_size"
        ),
    )
    recompute: Recompute = Field("selective", description="activation recompute")
    recompute_num_layers: int | None = Field(
        None,
        ge=1,
        le=1 << 20,
        description=(
            "with recompute full: Megatron-Core's block method, only the first N layers of each pipeline chunk "
            "recomputed (Megatron-Bridge's performance recipes' recompute_num_layers); null: every layer (uniform)"
        ),
    )
    distributed_optimizer: bool = Field(True, description="shard optimizer state over DP")
    grad_reduce_in_fp32: bool = Field(
        True,
        description="reduce gradients in FP32 (Megatron-Bridge bf16_mixed's "
        "default; performance recipes turn it off: half the bytes)",
    )
    precision: Precision = Field(
        "bf16",
        description="precision of the linear layers' GEMMs (attention stays BF16; mxfp8 and nvfp4 need Blackwell)",
    )
    fp8_recipe: Fp8Recipe | None = Field(
        None, description="precision fp8 only: FP8 scaling (null = tensorwise, current scaling)"
    )
    peft: Peft = Field("none", description="parameter-efficient fine-tuning")
    lora_rank: int = _int(1, 4096, "LoRA rank (Megatron-Bridge's LoRA dim, default 32)", 32)
    lora_targets: list[LoraTarget] = Field(
        default_factory=lambda: list(get_args(LoraTarget)),
        min_length=1,
        max_length=4,
        description=(
            "linear layers LoRA adapts (Megatron-Bridge LoRA target_modules; its default: all four; the performance "
            "scripts of Megatron-Bridge and NeMo adapt linear_qkv only); linear_fc1/fc2 include MoE experts'"
        ),
    )
    cuda_graphs: bool = Field(False, description="CUDA graphs (fixed shapes: packs padded to full length)")
    cpu_offloading_num_layers: int = _int(
        0,
        1 << 20,
        (
            "layers whose saved activations go to host memory in forward and come back for backward (Megatron-Core "
            "cpu_offloading_num_layers, Megatron-Bridge's GB200/GB300 FSDP recipes): fewer than the layers, pp 1, no "
            "recompute, and CUDA graphs only over the full iteration"
        ),
        0,
    )
    dataloader_seconds_per_sample: float | None = Field(
        None,
        gt=0,
        le=3600,
        description=(
            "seconds one data-loader worker spends on a sample when samples are tokenized on the fly: 1 / the "
            "records/s per worker that python -m advisor tokenize measures (its records_per_second_per_worker), or "
            "a trial's; the loader then bounds the step at samples per DP rank x this / dataloader_workers (not under "
            "offline packing, whose data is tokenized when it is packed); none: the loader keeps up (pre-tokenized "
            "data)"
        ),
    )
    dataloader_workers: int = _int(
        1,
        1024,
        "data-loader worker processes per DP rank (Megatron-Bridge DataloaderConfig.num_workers, 2 in 0.6.2)",
        2,
    )
    epochs: float | None = Field(
        None,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="passes over the data; the exports turn it into train_iters (null: the recipe's train_iters)",
    )
    # Megatron-Core's names and defaults (transformer_config.py calculate_per_token_loss, DistributedDataParallelConfig
    # average_in_collective); Megatron-Bridge 0.6.2 recipes/common.py _sft_common keeps both defaults
    calculate_per_token_loss: bool = Field(
        False,
        description=(
            "every supervised token of the global batch weighs 1/N in the gradient (False: each micro batch's loss is "
            "averaged over its own loss tokens, so packing changes the weights); "
            "the export sets it with CP > 1 in SFT, "
            "as Megatron-Bridge requires"
        ),
    )
    average_in_collective: bool = Field(
        False,
        description=(
            "DDP averages gradients inside the collective (ReduceOp.AVG) instead of scaling by 1/DP first: the same "
            "weights; Megatron-Core refuses it with calculate_per_token_loss"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _one_batch_unit(cls, raw: Any) -> Any:
        """The batch in one unit: global_batch_size (the framework's) or global_batch_samples, not both; neither
        is the default global_batch_size of 128."""
        if raw is None:
            raw = {}
        if isinstance(raw, dict):
            size, samples = raw.get("global_batch_size"), raw.get("global_batch_samples")
            if size is not None and samples is not None:
                raise ValueError(
                    "give the batch in one unit: global_batch_size (the framework's: packs under "
                    "offline packing, samples otherwise) or global_batch_samples (samples per step), "
                    "not both"
                )
            if size is None and samples is None:
                raw = {**raw, "global_batch_size": DEFAULT_GLOBAL_BATCH}
        return raw


class PackingSpec(_Section):
    mode: PackingMode = Field(
        "auto",
        description="auto: offline for LLM SFT, in-batch for VLM SFT, none for pre-training; online: "
        "Megatron-LM's THD packing scheduler (--sequence-packing-scheduler); global-batch: Megatron-Bridge 0.7's "
        "global-batch packing (dataset.enable_global_batch_packing), the same Megatron-Core schedulers run by "
        "Megatron-Bridge, for SFT and pre-training",
    )
    pack_size: int | None = Field(
        None, ge=1, le=MAX_PACK, description="packed_sequence_size, tokens; null = seq_length"
    )
    algorithm: Algorithm = Field(
        "first_fit_shuffle", description="packing algorithm (the first two are Megatron-Bridge's)"
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=2**32 - 1,
        description="packing shuffle seed (the dataset config's seed); null = the recipe's, 5678",
    )
    pad_seq_to_mult: int | None = Field(
        None, ge=1, le=65536, description="pad each sequence to a multiple of this; null = the CP/SP rule"
    )
    # the scheduled modes (online: Megatron-LM; global-batch: Megatron-Bridge 0.7): which commit's scheduler (online
    # only), which scheduler, and the per-rank buffer
    megatron_lm: MegatronLmBranch = Field(
        "dev", description="online: Megatron-LM branch whose scheduler runs (main d98e8a64 has it but does not call it)"
    )
    scheduler: OnlineScheduler = Field(
        "dp_balanced",
        description="online and global-batch: the packing scheduler (Megatron-LM --sequence-packing-scheduler, "
        "Megatron-Bridge model.sequence_packing_scheduler); default_dynamic_cp = dynamic CP (Megatron-LM dev)",
    )
    max_seqlen_per_dp_cp_rank: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="online and global-batch: tokens a DP x CP rank holds per micro batch; null = Megatron-LM's "
        "default (online); global-batch needs it set (Megatron-Bridge derives none; seq_length / CP is simulated "
        "until it is)",
    )
    fold_alignment_padding: bool = Field(
        False,
        description="global-batch: each sequence's alignment padding is reported as part of it (still loss-masked), "
        "so packed bins carry no padding between sequences (Megatron-Bridge dataset.fold_alignment_padding; "
        "FlashAttention-only head sizes >= 256 need it); token counts do not change",
    )


class DataSpec(_Section):
    lengths: str | None = Field(
        None, max_length=4096, description="lengths file; a relative path is read from the plan file's folder"
    )
    column: str | None = Field(None, max_length=256, description="column or field holding the lengths")
    format: DataFormat = Field(
        "sft",
        description="what the lengths are (python -m advisor tokenize records it): sft = GPTSFTDataset, "
        "which truncates to the max length; chat = GPTSFTChatDataset, which does not, so offline "
        "packing skips samples longer than the pack (create_hist)",
    )


class HardwareSpec(_Section):
    gpu: str = Field(
        "H100-80GB",
        max_length=64,
        pattern=NAME,
        description=f"GPU preset: {', '.join(GPU_PRESETS)}, or a name with memory_gib and bf16_tflops",
    )
    memory_gib: float | None = Field(None, gt=0, le=65536, allow_inf_nan=False, description="GPU memory, GiB")
    bf16_tflops: float | None = Field(None, gt=0, le=1e6, allow_inf_nan=False, description="dense BF16 peak, TFLOP/s")

    @property
    def capacity_gib(self) -> float:
        return self.memory_gib or GPU_PRESETS[self.gpu]["memory_gib"]

    @property
    def peak_tflops(self) -> float:
        return self.bf16_tflops or GPU_PRESETS[self.gpu]["bf16_tflops"]

    @property
    def table(self) -> dict:
        """The GPU's row of the hardware table; a GPU not in it gets H100's bandwidths and SM count. A BF16 peak
        given in the plan scales the row's FP8 and FP4 peaks with it (the tensor cores' ratios stay the row's)."""
        row = dict(GPU_PRESETS.get(self.gpu, GPU_PRESETS["H100-80GB"]))
        scale = self.peak_tflops / row["bf16_tflops"]
        row.update({k: row[k] * scale for k in ("fp8_tflops", "fp4_tflops") if row.get(k)})
        row.update(memory_gib=self.capacity_gib, bf16_tflops=self.peak_tflops)
        return row


class VersionsSpec(_Section):
    """The releases the run uses: the exports write for them and the pre-flight checks name the known traps of
    exactly these (advisor/advice/traps.py). Defaults: the newest of each on the package index."""

    megatron_bridge: str = Field(
        DEFAULT_VERSIONS["megatron_bridge"],
        description=f"Megatron-Bridge release (known: {', '.join(RELEASES['megatron_bridge'])})",
    )
    megatron_core: str = Field(
        DEFAULT_VERSIONS["megatron_core"],
        description=f"Megatron-Core release (known: {', '.join(RELEASES['megatron_core'])})",
    )
    transformer_engine: str = Field(
        DEFAULT_VERSIONS["transformer_engine"],
        description=f"Transformer Engine release (known: {', '.join(RELEASES['transformer_engine'])})",
    )

    @field_validator("megatron_bridge", "megatron_core", "transformer_engine")
    @classmethod
    def _release(cls, v: str) -> str:
        parse(v)  # MAJOR.MINOR[.PATCH], digits only: a version is compared, and written into exports' comments
        return v


class Plan(_Section):
    """A training plan. Derived settings are properties; changes are new plans (``changed``)."""

    version: Literal[2] = Field(
        VERSION,
        description="plan file format: 2 = training.global_batch_size in the "
        "framework's unit (files without it are version 1, read with a note)",
    )
    model: ModelSpec = Field(description="a preset name, {preset, overrides}, or every architecture field")
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    packing: PackingSpec = Field(default_factory=PackingSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    hardware: HardwareSpec = Field(default_factory=HardwareSpec)
    versions: VersionsSpec = Field(default_factory=VersionsSpec)
    # what reading the file changed or means now (an older version's fields), for every surface to say once;
    # not part of the plan: never written, and a changed plan starts without them
    notes: SkipJsonSchema[tuple[str, ...]] = Field((), exclude=True)

    def _fields(self) -> tuple:
        return tuple(v for k, v in self.__dict__.items() if k != "notes")

    def __eq__(self, other: object) -> bool:  # the same plan whatever was said when it was read
        return isinstance(other, Plan) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self.model_dump_json())  # notes are excluded from the dump

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        problems = consistency_problems(self.model, self.parallel, self.training, self.packing, self.hardware)
        if problems:
            raise ValueError(_SEPARATOR.join(problems))
        return self

    # --------------------------------------------------------------------------------------------- derived
    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def pipeline_stages(self) -> tuple[tuple[str, ...], ...] | None:
        """The layers of each pipeline stage where a layout sets them (the plan's or its recipe's), else None."""
        layout = stages_of(self.model, self.parallel)
        return None if isinstance(layout, str) else layout

    def pipeline_layout_summary(self) -> dict | None:
        """The layout where one places the layers (the plan's, or its recipe's, said which): its string and each
        rank's layers; None with the even split."""
        if self.pipeline_stages is None:
            return None
        p = self.parallel
        source = (
            "the plan's"
            if p.pipeline_layout is not None
            else (f"Megatron-Bridge's {self.model.preset} recipe layout for PP {p.pp} x VP {p.vpp or 1}")
        )
        return {**layout_summary(self.pipeline_stages, p.pp), "source": source}

    @property
    def packing_mode(self) -> str:
        """``auto`` resolved: offline packing for LLM SFT, in-batch for VLM SFT, none for pre-training."""
        return resolved_mode(self.packing.mode, self.training.task)

    @property
    def pack_size(self) -> int:
        return self.packing.pack_size or self.training.seq_length

    @property
    def scheduled(self) -> bool:
        """Whether a Megatron-Core scheduler packs each global batch while training (online, global-batch)."""
        return self.packing_mode in SCHEDULED_MODES

    @property
    def dynamic_cp(self) -> bool:
        """Dynamic context parallelism: a scheduled mode with the default_dynamic_cp scheduler."""
        return self.scheduled and self.packing.scheduler == "default_dynamic_cp"

    @property
    def collate_padding_multiple(self) -> int:
        """lcm(2 CP if CP > 1, CP TP if sequence parallel and TP > 1): Megatron-Bridge 0.6's CP/SP multiple
        (training/config.py ``ConfigContainer.validate``). Older docs said 2 CP TP (the product); 0.3.1 recipes
        used 2 CP; Megatron-LM dev's SFT dataset pads to (2 CP) TP. Under global-batch packing the multiple
        ``validate`` pushes to the data set (``global_batch_multiple``: 2·DP·CP-based under dynamic CP).

        >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "cp": 2},
        ...                     "packing": {"mode": "global-batch", "scheduler": "default_dynamic_cp"}})
        >>> p.collate_padding_multiple, p.changed({"packing": {"mode": "offline"}}).collate_padding_multiple
        (32, 4)
        """
        if self.packing_mode == "global-batch":
            return global_batch_multiple(self.parallel, self.dynamic_cp)
        return collate_multiple(self.parallel)

    @property
    def offline_pad_seq_to_mult(self) -> int:
        """The ``PackedSequenceSpecs.pad_seq_to_mult`` Megatron-Bridge's SFT recipes set: 1 without CP, 2 CP with
        CP, lcm(2 CP, CP TP) with CP and sequence parallelism (followed: MB 0.6.2 recipes/common.py ``_sft_common``
        sets 1, recipes/llama/h100/llama3.py sets 2 CP when CP > 1, recipes/qwen/h100/qwen3.py's 32K TP 4 CP 2 SP
        recipe sets 8; skills/mbridge-perf-sequence-packing/SKILL.md). Without CP no sequence is split, so none is
        padded (a few 0.6.2 recipes, moonlight_16b and qwen3_moe with TP 4 and SP, pin 4: set
        ``packing.pad_seq_to_mult`` to follow them).

        >>> plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "tp": 2, "sp": True}}).pad_seq_to_mult
        1
        """
        return offline_multiple(self.parallel)

    @property
    def pad_seq_to_mult(self) -> int:
        """The multiple every packed sequence is padded to: the plan's, else with offline packing the recipes'
        (``offline_pad_seq_to_mult``: the packing the advisor simulates is the one the exported config produces),
        else the CP/SP collate rule ``ConfigContainer.validate`` applies to in-batch packing. Under global-batch
        packing always the multiple Megatron-Bridge sets itself (the plan's is not used, as online packing does
        not use it either): ``global_batch_packing_pad_to_multiple_of`` for GPT-SFT, and for pre-training the
        divisor Megatron-LM's VarlenDataset derives from the layout Megatron-Bridge records on the data set
        (``varlen_multiple``, a product where the SFT rule takes an lcm)."""
        if self.packing_mode == "global-batch":
            if self.training.task == "pretrain":
                return varlen_multiple(self.parallel, self.dynamic_cp)
            return self.collate_padding_multiple
        if self.packing.pad_seq_to_mult:
            return self.packing.pad_seq_to_mult
        return self.offline_pad_seq_to_mult if self.packing_mode == "offline" else self.collate_padding_multiple

    @property
    def pads_between_sequences(self) -> bool:
        """Whether the packed rows carry padding between their sequences (THD ``cu_seqlens_padded`` differing from
        ``cu_seqlens``: what Megatron-Core's ``pad_between_seqs`` says once derived from the real boundaries,
        Megatron-LM #7417), which decides the attention backends allowed: FlashAttention rejects it, the only one
        that trains head_dim >= 256 on some stacks. Offline and in-batch packing: whenever sequences are padded to
        a multiple above 1; online: as dev's SFT data set pads (main's lengths are taken as given); global-batch:
        likewise, unless ``packing.fold_alignment_padding`` reports the padding as part of each sequence (token
        counts unchanged, no padding between sequences). Unpacked plans: never.

        >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "cp": 2},
        ...                     "packing": {"mode": "global-batch"}})
        >>> p.pads_between_sequences, p.changed({"packing": {"fold_alignment_padding": True}}).pads_between_sequences
        (True, False)
        """
        mode, k = self.packing_mode, self.packing
        if mode == "online":
            return k.megatron_lm == "dev" and varlen_multiple(self.parallel, self.dynamic_cp) > 1
        if mode == "global-batch" and k.fold_alignment_padding:
            return False
        return mode in ("offline", "in-batch", "global-batch") and self.pad_seq_to_mult > 1

    @property
    def packing_seed(self) -> int:
        """The packing shuffle's seed: the plan's, else the recipes' dataset seed (``MB_RECIPE_SEED``)."""
        return MB_RECIPE_SEED if self.packing.seed is None else self.packing.seed

    @property
    def dp(self) -> int:
        return self.parallel.dp

    @property
    def per_token_loss_forced(self) -> str | None:
        """Why the run computes per-token loss whatever ``training.calculate_per_token_loss`` says, or None: the
        exports set it for SFT with CP > 1 (Megatron-Bridge's ConfigContainer.validate asserts it) and for online
        packing (Megatron-LM's --calculate-per-token-loss with --sequence-packing-scheduler).

        >>> plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8, "cp": 2}}).per_token_loss_forced
        'CP > 1 in SFT: Megatron-Bridge requires calculate_per_token_loss (the export sets it)'
        """
        if self.parallel.cp > 1 and self.training.task != "pretrain":
            return "CP > 1 in SFT: Megatron-Bridge requires calculate_per_token_loss (the export sets it)"
        if self.packing_mode == "online":
            return "online packing: the Megatron-LM export passes --calculate-per-token-loss"
        if self.packing_mode == "global-batch":
            return "global-batch packing: Megatron-Bridge requires calculate_per_token_loss (the export sets it)"
        return None

    @property
    def per_token_loss(self) -> bool:
        """calculate_per_token_loss as the run will have it: the plan's, or forced on (``per_token_loss_forced``)."""
        return self.training.calculate_per_token_loss or self.per_token_loss_forced is not None

    @property
    def average_in_collective(self) -> bool:
        """average_in_collective as the run will have it: the plan's, except where per-token loss is forced (the
        export then writes False, as Megatron-Bridge asserts for SFT with CP > 1)."""
        return self.training.average_in_collective and self.per_token_loss_forced is None

    @property
    def batch_in_packs(self) -> int | None:
        """The plan's global batch in packs, when it gives one: global_batch_size under offline packing."""
        return self.training.global_batch_size if self.packing_mode == "offline" else None

    @property
    def requested_samples(self) -> int | None:
        """The samples per step the plan asks for: global_batch_samples, or global_batch_size where the framework
        counts samples (every mode but offline); None when an offline plan gives packs."""
        t = self.training
        if t.global_batch_samples is not None:
            return t.global_batch_samples
        return None if self.packing_mode == "offline" else t.global_batch_size

    @property
    def batch_in_samples(self) -> int:
        """``requested_samples`` where the plan has them, as every plan has but an offline one giving packs
        (ValueError for that one: its samples per step need the packing factor n, ``effective_samples_per_step``).

        >>> plan_from_dict({"model": "llama3.1-8b", "packing": {"mode": "none"}}).batch_in_samples
        128
        """
        if self.requested_samples is None:
            raise ValueError("an offline plan giving packs has no samples per step without its packing factor n")
        return self.requested_samples

    @property
    def batch_unit(self) -> Literal["packs", "samples"]:
        """The unit the framework's global batch counts in the plan's mode."""
        return "packs" if self.packing_mode == "offline" else "samples"

    def global_batch_packs(self, packing_factor: float | None) -> int:
        """Megatron-Bridge's ``global_batch_size`` with offline packing: the plan's global_batch_size (packs), or
        global_batch_samples divided by the packing factor n, rounded to a multiple of DP and at least DP
        (Megatron-Bridge docs, packed sequences).

        >>> plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_samples": 64}}).global_batch_packs(2.11)
        32
        >>> plan_from_dict({"model": "llama3.1-8b", "training": {"global_batch_size": 8}}).global_batch_packs(2.11)
        8
        """
        if self.batch_in_packs is not None:
            return self.batch_in_packs
        if not packing_factor:
            raise ValueError("the global batch in packs needs the data's packing factor n")
        dp = self.dp
        return max(dp, round(self.batch_in_samples / packing_factor / dp) * dp)

    def effective_samples_per_step(self, packing_factor: float | None) -> float | None:
        """The samples an optimizer step really trains on: packs x n with offline packing (the packs are rounded to
        DP, so this differs from the requested samples), the plan's samples otherwise; None when offline packing
        has no packing factor yet.

        >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16},
        ...                     "training": {"global_batch_samples": 128}})
        >>> p.global_batch_packs(6.87), round(p.effective_samples_per_step(6.87), 1)
        (16, 109.9)
        """
        if self.packing_mode != "offline":
            return float(self.batch_in_samples)
        if not packing_factor:
            return None
        return self.global_batch_packs(packing_factor) * packing_factor

    def batch_text(self, packing_factor: float | None) -> str:
        """The batch in both units, as every page, CLI text and export says it.

        >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16},
        ...                     "training": {"global_batch_samples": 128}})
        >>> p.batch_text(6.87)
        '16 packs ≈ 110 samples per step (128 samples requested)'
        >>> p.changed({"training": {"global_batch_size": 128}}).batch_text(6.87)
        '128 packs ≈ 879 samples per step'
        """
        if self.packing_mode != "offline":
            return f"{self.requested_samples:,} samples per step"
        if not packing_factor:
            return (
                f"{self.batch_in_packs:,} packs per step"
                if self.batch_in_packs is not None
                else f"{self.requested_samples:,} samples per step"
            )
        text = (
            f"{self.global_batch_packs(packing_factor):,} packs ≈ "
            f"{self.effective_samples_per_step(packing_factor):,.0f} samples per step"
        )
        if self.requested_samples is not None:
            text += f" ({self.requested_samples:,} samples requested)"
        return text

    def micro_batches_per_step(self, packing_factor: float | None = None) -> int:
        """Micro batches each DP rank runs per step (packs with offline packing, given n)."""
        if self.packing_mode == "offline" and (packing_factor or self.batch_in_packs is not None):
            return self.global_batch_packs(packing_factor) // self.dp
        samples = self.requested_samples or self.training.global_batch_samples or 1
        return max(1, samples // (self.training.micro_batch_size * self.dp))

    # --------------------------------------------------------------------------------------------- changes
    def changed(self, changes: dict) -> Plan:
        """A new plan with ``{section: {field: value}}`` merged in and validated again (raises ``PlanError``).
        Changing the model's preset starts from the new preset (overrides given with it kept, old ones dropped).

        >>> p = plan_from_dict({"model": "llama3.1-8b"})
        >>> p.changed({"model": {"mtp_num_layers": 0}, "parallel": {"tp": 2}}).parallel.tp
        2
        """
        raw = self.to_dict()
        for section, values in changes.items():
            if section == "model" and isinstance(values, dict):
                current = raw["model"] if isinstance(raw["model"], dict) else {"preset": raw["model"]}
                if values.get("preset", current.get("preset")) != current.get("preset"):
                    raw["model"] = values  # another preset: the old model's overrides do not carry over
                else:
                    raw["model"] = {**current, **values}
            elif isinstance(values, dict) and isinstance(raw.get(section), dict):
                if section == "training":  # the batch has one unit: setting one clears the other
                    for unit, other in (
                        ("global_batch_size", "global_batch_samples"),
                        ("global_batch_samples", "global_batch_size"),
                    ):
                        if values.get(unit) is not None and other not in values:
                            values = {**values, other: None}
                raw[section] = {**raw[section], **values}
            else:
                raw[section] = values
        training = changes.get("training")
        if not isinstance(training, dict):
            training = {}
        if not {"global_batch_size", "global_batch_samples"} & set(training):
            raw = self._batch_across_modes(raw)
        recipe = tuple(n for n in self.notes if n.startswith(RECIPE_NOTE))  # flags recipe_pipeline set, and why
        anew = self._recipe_slots_anew(raw, changes, derived=bool(recipe))
        if anew:  # left out: recipe_pipeline decides them for the new stages, with its own note
            raw = {**raw, "parallel": {k: v for k, v in raw["parallel"].items() if k not in PIPELINE_SLOT_FIELDS}}
        plan = plan_from_dict(raw, "changed plan")
        if recipe and not anew and plan.parallel.pipeline_slots:  # the same stages and flags: the same why
            plan = plan.model_copy(update={"notes": (*plan.notes, *recipe)})
        return plan

    def _recipe_slots_anew(self, raw: dict, changes: dict, derived: bool) -> bool:
        """Whether the change should leave the account_for_* flags to ``recipe_pipeline``: it changes the
        pipeline's stages (PP, VPP, the model), says nothing of those flags, and this plan's flags are the defaults
        or were set by ``recipe_pipeline`` (``derived``). Without this, ``to_dict`` writes them and they would read
        as the user's choice (PP 2 to PP 8 x VP 4 on Qwen3 235B-A22B was refused)."""
        given = changes.get("parallel")
        parallel: dict = given if isinstance(given, dict) else {}
        staged = bool({"pp", "vpp"} & set(parallel)) or "model" in changes
        if not staged or set(PIPELINE_SLOT_FIELDS) & set(parallel) or not isinstance(raw.get("parallel"), dict):
            return False
        return derived or not self.parallel.pipeline_slots  # else flags the plan's reader set: kept

    def _batch_across_modes(self, raw: dict) -> dict:
        """global_batch_size changes unit with the packing mode (packs offline, samples otherwise): a change of mode
        that says nothing of the batch keeps its meaning. Samples into offline packing become global_batch_samples;
        packs out of it cannot become samples without the data's n, so that change is refused, saying what to give.

        >>> p = plan_from_dict({"version": 2, "model": "llama3.1-8b", "packing": {"mode": "none"},
        ...                     "training": {"global_batch_size": 64}})
        >>> p.changed({"packing": {"mode": "offline"}}).training.global_batch_samples
        64
        """
        was, now = self.packing_mode == "offline", _mode_of(raw) == "offline"
        t = raw.get("training")
        if was == now or not isinstance(t, dict) or t.get("global_batch_size") is None:
            return raw
        if now:  # samples stay samples: Megatron-Bridge's packs are derived from them by n
            return {**raw, "training": {**t, "global_batch_samples": t["global_batch_size"], "global_batch_size": None}}
        raise PlanError(
            "changed plan",
            [
                f"packing mode {_mode_of(raw)} counts the global batch in samples, and the plan gives "
                f"training.global_batch_size {t['global_batch_size']} packs (offline packing's unit): give "
                "training.global_batch_samples (about packs x n) with the change"
            ],
        )

    def to_dict(self) -> dict:
        """The plan as written to a file: JSON types only, a preset model as ``{preset, overrides}``."""
        out = self.model_dump(mode="json")
        out["model"] = self.model.as_written()
        return out


def stages_of(model: ModelSpec, parallel: ParallelSpec) -> tuple[tuple[str, ...], ...] | str | None:
    """The pipeline's stages by layout: the plan's own, else the one Megatron-Bridge's recipe for the preset sets at
    this pp and vpp (``pipeline_layout.recipe_layout``, without account_for_* flags), else None (the even split);
    why the plan's own cannot be read, as a message."""
    p = parallel
    layout = p.pipeline_layout
    if (
        layout is None
        and not p.pipeline_slots
        and model.preset in MODEL_PRESETS
        and model.num_layers == MODEL_PRESETS[model.preset]["num_layers"]
    ):  # the recipe's map is for its layers
        layout = recipe_layout(model.preset, p.pp, p.vpp, model.mtp_num_layers)
    if layout is None:
        return None
    try:
        return parse_layout(layout)
    except ValueError as e:
        return str(e)


def consistency_problems(
    model: ModelSpec | None,
    parallel: ParallelSpec | None,
    training: TrainingSpec | None,
    packing: PackingSpec | None,
    hardware: HardwareSpec | None,
) -> list[str]:
    """Megatron's divisibility rules within and across sections, one message per broken rule, each naming its
    fields. A section that did not validate is None and the rules that need it are skipped, so one pass reports
    every problem that can be seen."""
    m, p, t, k = model, parallel, training, packing
    out = []
    if m is not None:
        if m.kv_channels is None and m.hidden_size % m.num_attention_heads:
            out.append(
                f"model.hidden_size {m.hidden_size} is not divisible by num_attention_heads "
                f"{m.num_attention_heads} (give kv_channels, the head dimension)"
            )
        if m.num_attention_heads % m.query_groups:
            out.append(
                f"model.num_query_groups {m.query_groups} must divide model.num_attention_heads {m.num_attention_heads}"
            )
        if isinstance(m.moe_layer_freq, list) and len(m.moe_layer_freq) != m.num_layers:
            out.append(f"model.moe_layer_freq has {len(m.moe_layer_freq)} entries for {m.num_layers} layers")
    if p is not None:
        mp = p.tp * p.pp * p.cp
        if p.gpus % mp:
            out.append(f"parallel.gpus {p.gpus} is not divisible by tp*pp*cp = {mp}")
        if p.vpp is not None and p.pp == 1:
            out.append("parallel.vpp needs pp > 1")
        if p.tp_comm_overlap and not (p.sp and p.tp > 1):  # Megatron-Bridge CommOverlapConfig turns it off
            out.append("parallel.tp_comm_overlap needs tp > 1 and sp (sequence parallelism)")
        if p.moe_a2a_overlap and p.ep == 1:  # Megatron-Core transformer_config.py __post_init__
            out.append("parallel.moe_a2a_overlap needs expert parallelism (ep > 1)")
        if p.moe_a2a_overlap and p.pp > 1 and p.vpp is None:
            out.append("parallel.moe_a2a_overlap with pp > 1 needs a virtual pipeline (parallel.vpp)")
        if p.cp_comm_type == "a2a+p2p" and (not p.hierarchical_cp_sizes or math.prod(p.hierarchical_cp_sizes) != p.cp):
            out.append(f"parallel.cp_comm_type a2a+p2p needs hierarchical_cp_sizes whose product is cp {p.cp}")
    unknown = (
        hardware is not None
        and hardware.gpu not in GPU_PRESETS
        and (hardware.memory_gib is None or hardware.bf16_tflops is None)
    )
    if unknown and hardware is not None:
        out.append(f"hardware.gpu: {unknown_gpu(hardware.gpu)} (or give memory_gib and bf16_tflops for another GPU)")
    if hardware is not None and t is not None and not unknown:
        out += precision_problems(t.precision, t.fp8_recipe, hardware.gpu, hardware.table["compute_capability"])
    if p is not None and t is not None and p.moe_a2a_overlap and t.recompute == "full":  # Megatron-Core asserts it
        out.append("parallel.moe_a2a_overlap cannot run with training.recompute full")
    if t is not None and t.recompute_num_layers is not None and t.recompute != "full":  # Megatron-Core refuses it
        out.append(f"training.recompute_num_layers needs training.recompute full, not {t.recompute}")
    if t is not None and len(set(t.lora_targets)) != len(t.lora_targets):
        out.append(f"training.lora_targets lists a layer twice: {t.lora_targets}")
    out += _settings_that_do_nothing(m, p, t)
    if t is not None and t.peft == "lora" and t.task == "pretrain":  # ConfigContainer.validate asserts a checkpoint
        out.append("training.peft lora fine-tunes a pretrained model: set training.task to llm-sft or vlm-sft")
    if t is not None and t.cpu_offloading_num_layers:  # megatron/core/transformer/transformer_config.py refuses these
        n = t.cpu_offloading_num_layers
        if m is not None and n >= m.num_layers:
            out.append(
                f"training.cpu_offloading_num_layers {n} must be below model.num_layers {m.num_layers}: "
                "Megatron-Core offloads only layers less than the layer count"
            )
        if p is not None and p.pp > 1:
            out.append(
                f"training.cpu_offloading_num_layers needs parallel.pp 1, not {p.pp}: Megatron-Core does not "
                "offload with pipeline parallelism"
            )
        if t.recompute != "none":
            out.append(
                f"training.cpu_offloading_num_layers needs training.recompute none, not {t.recompute}: "
                "Megatron-Core does not offload with activation recompute"
            )
        if t.cuda_graphs:  # 0.16.1 refuses every cuda_graph_impl with it, 0.19.2 all but full_iteration
            out.append(
                "training.cpu_offloading_num_layers cannot run with training.cuda_graphs: Megatron-Core "
                "refuses CUDA graphs with CPU offloading (only whole-iteration graphs from 0.19)"
            )
        if p is not None and p.moe_a2a_overlap:
            out.append(
                "training.cpu_offloading_num_layers cannot run with parallel.moe_a2a_overlap: the overlapped "
                "schedule runs the layers outside the block's offload context "
                "(megatron/core/models/common/model_chunk_schedule_plan.py), so nothing would be offloaded"
            )
    if p is not None and t is not None and p.fsdp and not t.distributed_optimizer:  # MB and MLM force it on
        out.append("parallel.fsdp shards the optimizer state: training.distributed_optimizer must be true")
    if m is not None and p is not None:
        if m.num_attention_heads % p.tp:
            out.append(f"model.num_attention_heads {m.num_attention_heads} is not divisible by parallel.tp {p.tp}")
        if m.query_groups % p.tp:
            out.append(f"model.num_query_groups {m.query_groups} is not divisible by parallel.tp {p.tp}")
        stages = p.pp * (p.vpp or 1)
        layout = stages_of(m, p)
        if isinstance(layout, str):
            out.append(f"parallel.pipeline_layout: {layout}")
        elif layout is not None:
            if p.pipeline_slots:  # megatron/core/transformer/transformer_config.py refuses both
                out.append(
                    "parallel.pipeline_layout places the embedding and the loss itself: set "
                    "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split false"
                )
            out += [
                f"parallel.pipeline_layout {x}"
                for x in layout_problems(layout, p.pp, p.vpp, m.num_layers, m.mtp_num_layers)
            ]
        elif (m.num_layers + p.pipeline_slots) % stages:
            extra = f" + {p.pipeline_slots} (embedding/loss)" if p.pipeline_slots else ""
            known = RECIPE_LAYOUTS.get(m.preset or "")
            recipe = (
                (
                    f"; Megatron-Bridge's {m.preset} recipe has layouts for PP x VP "
                    f"{', '.join(f'{a} x {b}' for a, b in sorted(known))}"
                )
                if known
                else ""
            )
            out.append(
                f"model.num_layers {m.num_layers}{extra} is not divisible by pp*vpp = {stages} (Megatron "
                "can count the embedding and the loss as layers: parallel.account_for_embedding_in_pipeline"
                f"_split, account_for_loss_in_pipeline_split; or give parallel.pipeline_layout{recipe})"
            )
        if m.num_moe_experts:
            if m.num_moe_experts % p.ep:
                out.append(f"model.num_moe_experts {m.num_moe_experts} is not divisible by parallel.ep {p.ep}")
            if p.gpus % (p.ep * p.etp * p.pp):  # megatron/core/parallel_state.py: the expert data-parallel group
                out.append(f"parallel.gpus {p.gpus} is not divisible by ep*etp*pp = {p.ep * p.etp * p.pp}")
        elif p.ep > 1:
            out.append("parallel.ep > 1 needs a MoE model (model.num_moe_experts)")
        if not m.num_moe_experts and p.moe_dispatcher != "alltoall":
            out.append(f"parallel.moe_dispatcher {p.moe_dispatcher} needs a MoE model (model.num_moe_experts)")
    if p is not None and t is not None and k is not None and p.gpus % (p.tp * p.pp * p.cp) == 0:
        offline = resolved_mode(k.mode, t.task) == "offline"
        if k.mode == "online":
            if t.task != "llm-sft":
                out.append(
                    f"packing.mode online is Megatron-LM's SFT packing: training.task must be llm-sft, not {t.task}"
                )
            if k.scheduler == "default_dynamic_cp" and k.megatron_lm != "dev":
                out.append(
                    "packing.scheduler default_dynamic_cp exists on Megatron-LM dev only (packing.megatron_lm: dev)"
                )
        if k.mode == "global-batch":
            if t.task == "vlm-sft":  # 7bdc5ef4 validate l.1289: only these data sets yield unpacked samples
                out.append(
                    "packing.mode global-batch packs text data sets (Megatron-Bridge's GPTSFTDatasetConfig or "
                    "GPTDatasetConfig yield the unpacked samples it needs): training.task must be llm-sft or "
                    "pretrain, not vlm-sft"
                )
            if k.megatron_lm != "dev":  # a setting the run would not have
                out.append(
                    "packing.megatron_lm applies to online packing: global-batch packing runs the Megatron-Core "
                    "scheduler Megatron-Bridge pins, simulated at Megatron-LM dev (the API Megatron-Bridge 7bdc5ef4 "
                    "validates against); set it to dev"
                )
        if k.mode in SCHEDULED_MODES:
            ranks = p.cp if k.scheduler == "dp_balanced" else p.cp * p.dp
            buffer = ranks * (k.max_seqlen_per_dp_cp_rank or 0)
            # Megatron-LM dev arguments.py asserts it, Megatron-Bridge 7bdc5ef4 validate l.1351 refuses it
            if k.max_seqlen_per_dp_cp_rank is not None and buffer < t.seq_length:
                who = "Megatron-LM refuses a buffer" if k.mode == "online" else "Megatron-Bridge refuses a bin"
                out.append(
                    f"packing.max_seqlen_per_dp_cp_rank {k.max_seqlen_per_dp_cp_rank} x "
                    f"{'CP' if k.scheduler == 'dp_balanced' else 'DP x CP'} = {buffer} is below "
                    f"training.seq_length {t.seq_length}: {who} smaller than a sequence (set it to at least "
                    f"{-(-t.seq_length // ranks)})"
                )
        if k.fold_alignment_padding and k.mode != "global-batch":  # the field exists on global-batch's path only
            out.append(
                "packing.fold_alignment_padding applies to global-batch packing only (Megatron-Bridge folds the "
                f"padding of the samples it yields unpacked): with packing.mode {k.mode} it would do nothing"
            )
        pack = k.pack_size or t.seq_length
        if offline and t.micro_batch_size != 1:  # Megatron-Bridge ConfigContainer.validate refuses it
            mbs = t.micro_batch_size
            equal = [f"training.micro_batch_size 1, packing.pack_size {pack * mbs}"]
            if t.global_batch_size is not None:
                equal.append(
                    f"training.global_batch_size {max(p.dp, t.global_batch_size // mbs // p.dp * p.dp)} (packs)"
                )
            out.append(
                f"training.micro_batch_size {mbs} under offline packing: Megatron-Bridge refuses micro "
                f"batches of packs (a pack already holds several samples); its own equivalent, the same "
                f"tokens per step: {', '.join(equal)}"
            )
        if offline and k.pack_size is not None and k.pack_size > t.seq_length:
            out.append(
                f"packing.pack_size {k.pack_size} is longer than training.seq_length {t.seq_length}: the "
                "model is built for seq_length tokens a row (Megatron-Bridge's model.seq_length) and a pack "
                f"is one row; set training.seq_length {k.pack_size}, or leave pack_size null to follow "
                "seq_length"
            )
        longest = min(t.seq_length, pack)
        if k.pad_seq_to_mult is not None and k.pad_seq_to_mult > longest:  # Megatron-Bridge offline.py refuses it
            out.append(
                f"packing.pad_seq_to_mult {k.pad_seq_to_mult} is larger than the longest sequence a pack "
                f"holds ({longest}): every sample would be cut to nothing"
            )
        elif k.pad_seq_to_mult is None and offline and (derived := offline_multiple(p)) > longest:
            # the recipes' multiple under CP (Plan.offline_pad_seq_to_mult): a pack shorter than it holds nothing
            out.append(
                f"packing.pack_size {pack} is shorter than the multiple CP {p.cp} pads every sequence to "
                f"({derived}, Megatron-Bridge's recipes' pad_seq_to_mult): no sample fits a pack"
            )
        if offline and k.pack_size is None and t.seq_length > MAX_PACK:
            out.append(
                f"packing.pack_size: offline packing is simulated for packs up to {MAX_PACK:,} tokens; "
                f"training.seq_length {t.seq_length:,} needs an explicit, smaller pack_size"
            )
        given = "global_batch_size" if t.global_batch_size is not None else "global_batch_samples"
        batch = t.global_batch_size if t.global_batch_size is not None else t.global_batch_samples
        if offline and t.global_batch_size is not None and t.global_batch_size % p.dp:
            out.append(
                f"training.global_batch_size {t.global_batch_size} packs is not a multiple of dp {p.dp} "
                "(under offline packing Megatron-Bridge's global_batch_size counts packs, micro batches of 1 "
                "on every DP rank)"
            )
        elif not offline and batch is not None and batch % (t.micro_batch_size * p.dp):
            out.append(
                f"training.{given} {batch} is not divisible by micro_batch_size*dp = {t.micro_batch_size}*{p.dp}"
            )
    return out


def _settings_that_do_nothing(m: ModelSpec | None, p: ParallelSpec | None, t: TrainingSpec | None) -> list[str]:
    """What the frameworks refuse or silently ignore, refused here with one message naming the field: a setting the
    run would not have is a plan that says one thing and trains another."""
    out = []
    if p is not None and p.sp and p.tp == 1:  # megatron/core/model_parallel_config.py __post_init__ raises
        out.append(
            "parallel.sp needs tp > 1: Megatron-Core refuses sequence parallelism without tensor "
            "parallelism at start-up (set sp false, or tp > 1)"
        )
    if m is not None and p is not None and p.etp > 1 and not m.num_moe_experts:
        out.append(
            f"parallel.etp {p.etp} splits MoE experts; {m.name} is a dense model (no num_moe_experts): set etp 1"
        )
    # a plan file writes every field, so "given" is "not the default": LoRA's rank or targets changed from
    # Megatron-Bridge's defaults say the user meant LoRA
    lora_default = {"lora_rank": 32, "lora_targets": list(get_args(LoraTarget))}
    if t is not None and t.peft != "lora":
        given = [k for k, v in lora_default.items() if getattr(t, k) != v]
        if given:
            out.append(
                f"training.{given[0]} sets LoRA, and training.peft is {t.peft}: it would do nothing (set "
                "peft lora, or drop it)"
            )
    if (
        t is not None
        and m is not None
        and t.peft == "lora"
        and "linear_qkv" in t.lora_targets
        and t.lora_targets != lora_default["lora_targets"]
        and m.preset in MLA_PRESETS
    ):
        out.append(
            f"training.lora_targets: {m.preset}'s multi-latent attention has no linear_qkv (its projections "
            "are linear_q_down_proj, linear_q_up_proj, linear_kv_down_proj and linear_kv_up_proj); target "
            "linear_proj, linear_fc1 and linear_fc2"
        )
    if t is not None and m is not None and t.task == "vlm-sft" and m.vision is None:
        out.append(
            f"training.task vlm-sft needs a vision encoder; {m.name} is a text model (model.vision is "
            "empty): use llm-sft, or a VLM preset such as qwen2.5-vl-7b"
        )
    return out


def _name(part) -> str:
    """A field name as a message shows it: a hostile key is cut to 40 characters and escaped."""
    text = str(part)
    return text if len(text) <= 40 and text.isprintable() else excerpt(text)


# Joins a validator's several problems into one ValueError and splits them again: a control character, because a
# value the user typed may hold any printable text ("; " once split one unknown preset into two problems), and
# excerpt() escapes control characters in every value a message quotes.
_SEPARATOR = "\x1f"


def _problem(err: ErrorDetails, section: str = "") -> str:
    path = ".".join([section] * bool(section) + [_name(x) for x in err["loc"]])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] in ("extra_forbidden",):
        return f"{path}: unknown field"
    if err["type"] in ("value_error", "assertion_error") or not path:
        return "\n".join(f"{path}: {m}" if path else m for m in msg.split(_SEPARATOR))
    return f"{path}: {msg} (got {excerpt(err.get('input'))})"


def plan_from_dict(raw: Any, source: str = "plan") -> Plan:
    """Build and check a plan; every problem is reported together in one ``PlanError`` naming each field.

    >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "tp": 2, "cp": 2}})
    >>> p.parallel.dp, p.model.num_query_groups
    (4, 8)
    >>> plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 6, "tp": 4}, "training": {"seq_length": "4k"}})
    Traceback (most recent call last):
    ...
    advisor.errors.PlanError: plan: 2 problem(s):
      - training.seq_length: Input should be a valid integer (got '4k')
      - parallel.gpus 6 is not divisible by tp*pp*cp = 4
    """
    if not isinstance(raw, dict):
        raise PlanError(source, [f"expected a mapping with sections {', '.join(SECTIONS)}; got {type(raw).__name__}"])
    if "model" not in raw or raw["model"] is None:
        raise PlanError(
            source, ["model: missing (a preset name, {preset: ..., overrides}, or hidden_size, num_layers, ... fields)"]
        )
    raw, notes, problems = migrate(raw)
    problems += [f"{_name(name)}: unknown section" for name in list(raw)[:20] if name not in (*SECTIONS, "version")]
    sections: dict[str, Any] = {}
    for name, cls in SECTION_TYPES.items():
        value = raw.get(name)
        if value is None and name != "model":
            sections[name] = cls()
            continue
        try:
            sections[name] = cls.model_validate(value)
        except ValidationError as e:
            problems += [line for err in e.errors(include_url=False) for line in _problem(err, name).split("\n")]
            sections[name] = None
        except RecursionError:
            problems.append(f"{name}: nested too deeply")
            sections[name] = None
    notes += recipe_pipeline(raw.get("parallel"), sections)
    problems += consistency_problems(*(sections[n] for n in ("model", "parallel", "training", "packing", "hardware")))
    if problems:
        raise PlanError(source, list(dict.fromkeys(problems)))
    return Plan.model_construct(**sections, version=VERSION, notes=tuple(notes))  # checked: no second validation


PIPELINE_SLOT_FIELDS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
RECIPE_NOTE = "parallel.account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split set true"


def recipe_pipeline(given: Any, sections: dict[str, Any]) -> list[str]:
    """Megatron-Bridge's recipe placement for a preset whose recipes count the embedding and the loss as pipeline
    layers (``presets.RECIPE_PIPELINE_SLOTS``): where the plan sets neither flag nor a layout and its PP x VP stages
    divide the layers only with those two slots, both flags are set in ``sections`` and the note says so; else
    nothing changes. Why: Qwen3 235B-A22B's 94 layers divide by none of its recipes' PP x VP (8 x 4, 4 x 12, ...),
    which Megatron-Bridge runs with the flags its recipes set.

    >>> from advisor.plan.schema import ModelSpec, ParallelSpec
    >>> s = {"model": ModelSpec.model_validate("qwen3-235b-a22b"),
    ...      "parallel": ParallelSpec(gpus=256, tp=2, pp=8, vpp=4, ep=32)}
    >>> recipe_pipeline({"pp": 8, "vpp": 4}, s)[0][:60], s["parallel"].pipeline_slots
    ('parallel.account_for_embedding_in_pipeline_split and account', 2)
    """
    m, p = sections.get("model"), sections.get("parallel")
    if m is None or p is None or p.pp <= 1 or p.pipeline_layout is not None:
        return []
    if isinstance(given, dict) and any(k in given for k in PIPELINE_SLOT_FIELDS):
        return []  # the user's own choice, kept
    source = RECIPE_PIPELINE_SLOTS.get(m.preset or "")
    if source is None or m.num_layers != MODEL_PRESETS[m.preset]["num_layers"]:
        return []
    stages = p.pp * (p.vpp or 1)
    if m.num_layers % stages == 0 or (m.num_layers + 2) % stages:
        return []
    sections["parallel"] = p.model_copy(update=dict.fromkeys(PIPELINE_SLOT_FIELDS, True))
    return [
        f"{RECIPE_NOTE}, as "
        f"Megatron-Bridge's {m.preset} recipes set them ({source}): {m.num_layers} layers divide by no "
        f"{stages} stages (PP {p.pp} x VP {p.vpp or 1}); with the embedding and the loss as layers, "
        f"{(m.num_layers + 2) // stages} a stage"
    ]


def collate_multiple(p: ParallelSpec) -> int:
    """lcm(2 CP if CP > 1, CP TP if sequence parallel and TP > 1): ``Plan.collate_padding_multiple`` of a layout.

    >>> collate_multiple(ParallelSpec(gpus=16, tp=2, cp=2, sp=True)), collate_multiple(ParallelSpec(gpus=8))
    (4, 1)
    """
    return math.lcm(2 * p.cp if p.cp > 1 else 1, p.cp * p.tp if p.sp and p.tp > 1 else 1)


def global_batch_multiple(p: ParallelSpec, dynamic_cp: bool) -> int:
    """The alignment multiple Megatron-Bridge's ``validate`` computes under global-batch packing (7bdc5ef4
    training/config.py l.1527-1539) and pushes to the data set: lcm(2·CP (1 without CP), CP·TP with SP and TP > 1),
    2·DP·CP in place of 2·CP under dynamic CP (a sequence may run on any group of the DP x CP pool). advisor/advice/
    global_batch.py's ``global_batch_padding_multiple`` is this, checked against Megatron-Bridge's own code.

    >>> global_batch_multiple(ParallelSpec(gpus=16, cp=2, tp=2, sp=True), False)
    4
    >>> global_batch_multiple(ParallelSpec(gpus=16, cp=2, tp=2, sp=True), True)
    16
    """
    return multiple_of_layout(dp=p.dp, cp=p.cp, tp=p.tp, sp=p.sp, dynamic_cp=dynamic_cp)


def multiple_of_layout(*, dp: int, cp: int, tp: int, sp: bool, dynamic_cp: bool) -> int:
    """``global_batch_multiple`` from the sizes alone."""
    cp_multiple = 2 * dp * cp if dynamic_cp else (2 * cp if cp > 1 else 1)
    return math.lcm(cp_multiple, cp * tp if sp and tp > 1 else 1)


def varlen_multiple(p: ParallelSpec, dynamic_cp: bool) -> int:
    """The divisor Megatron-LM dev's SFT-family data sets pad to (``SFTDataset._calculate_padding_divisor``: 2·CP,
    or 2·DP·CP under dynamic CP, times TP with sequence parallelism), which Megatron-Bridge's pre-training path
    (GPTDatasetConfig, VarlenDataset) gets from the layout its ``_apply_global_batch_packing_padding`` records.

    >>> varlen_multiple(ParallelSpec(gpus=16, cp=2, tp=2, sp=True), False)
    8
    """
    cp_pad = 2 * p.dp * p.cp if dynamic_cp else (2 * p.cp if p.cp > 1 else 1)
    return cp_pad * (p.tp if p.sp else 1)


def offline_multiple(p: ParallelSpec) -> int:
    """The recipes' offline ``pad_seq_to_mult`` of a layout (``Plan.offline_pad_seq_to_mult``): 1 without CP."""
    return 1 if p.cp == 1 else collate_multiple(p)


AUTO_MODE = {"llm-sft": "offline", "vlm-sft": "in-batch", "pretrain": "none"}  # packing.mode auto, by task


def resolved_mode(mode: str, task: str) -> str:
    """``packing.mode`` with ``auto`` resolved by the task (an unknown task: none), the one place it is decided.

    >>> resolved_mode("auto", "llm-sft"), resolved_mode("auto", "vlm-sft"), resolved_mode("online", "pretrain")
    ('offline', 'in-batch', 'online')
    """
    return AUTO_MODE.get(task, "none") if mode == "auto" else mode


def _mode_of(raw: dict) -> str:
    """The packing mode a raw plan resolves to (``Plan.packing_mode``), read before it is validated."""
    packing, training = raw.get("packing"), raw.get("training")
    packing = packing if isinstance(packing, dict) else {}
    training = training if isinstance(training, dict) else {}
    return resolved_mode(str(packing.get("mode", "auto")), str(training.get("task", "llm-sft")))


def migrate(raw: dict) -> tuple[dict, list[str], list[str]]:
    """A plan of an older file version in this version's terms: (raw, notes, problems).

    Version 1 (no ``version`` key) counted samples in ``training.global_batch_size`` and packs in
    ``training.global_batch_packs``. Its ``global_batch_packs`` is version 2's ``global_batch_size`` under offline
    packing; its ``global_batch_size`` under offline packing is read with the new meaning (packs, as
    Megatron-Bridge's field and an MB user's recipe value mean it), with a note saying so and how to give samples.

    >>> raw, notes, _ = migrate({"model": "llama3.1-8b", "training": {"global_batch_size": 128}})
    >>> raw["version"], raw["training"], notes[0][:60]
    (2, {'global_batch_size': 128}, 'training.global_batch_size 128 is read as Megatron-Bridge re')
    """
    version = raw.get("version", 1)
    if version == VERSION:
        return raw, [], []
    if version != 1:
        return raw, [], [f"version: {excerpt(version)} is not a plan file version this advisor reads (1 or 2)"]
    raw = {**raw, "version": VERSION}
    training = raw.get("training")
    if not isinstance(training, dict):
        return raw, [], []
    notes: list[str] = []
    offline = _mode_of(raw) == "offline"
    if "global_batch_packs" in training:
        packs = training["global_batch_packs"]
        training = {k: v for k, v in training.items() if k != "global_batch_packs"}
        if packs is not None:
            if training.get("global_batch_size") is not None:
                return (
                    raw,
                    [],
                    [
                        "training: give the batch in one unit: global_batch_size (samples in a version-1 "
                        "plan) or global_batch_packs, not both"
                    ],
                )
            if not offline:
                return (
                    raw,
                    [],
                    [
                        f"training.global_batch_packs counts the packs of offline packing; packing mode "
                        f"{_mode_of(raw)} counts samples: give training.global_batch_size"
                    ],
                )
            training["global_batch_size"] = packs
            notes.append(
                f"training.global_batch_packs {excerpt(packs)} is written training.global_batch_size now "
                "(plan files of version 2: the framework's own global batch, packs under offline packing)"
            )
    elif offline and training.get("global_batch_size") is not None:
        gbs = training["global_batch_size"]
        notes.append(
            f"training.global_batch_size {excerpt(gbs)} is read as Megatron-Bridge reads it under offline "
            f"packing: {excerpt(gbs)} packs per step (about n times as many samples). This file has no "
            f"version, and before version 2 it meant samples: to ask for samples, write training."
            f"global_batch_samples: {excerpt(gbs)} (and version: 2 to silence this note; see the CHANGELOG)"
        )
    raw["training"] = training
    return raw, notes, []


SECTION_TYPES: dict[str, type[_Section]] = {
    "model": ModelSpec,
    "parallel": ParallelSpec,
    "training": TrainingSpec,
    "packing": PackingSpec,
    "data": DataSpec,
    "hardware": HardwareSpec,
    "versions": VersionsSpec,
}


def json_schema() -> dict:
    """The plan's JSON Schema (for editors: ``# yaml-language-server: $schema=plan.schema.json``)."""
    schema = Plan.model_json_schema()
    schema["title"] = "Sequence packing advisor plan"
    schema["description"] = (
        "training.global_batch_size is the framework's global batch (Megatron-Bridge's: packs "
        "under offline packing, samples otherwise; training.global_batch_samples counts "
        "samples); model is a preset name, "
        "{preset, overrides} or every field. Presets: " + ", ".join(MODEL_PRESETS)
    )
    return schema
