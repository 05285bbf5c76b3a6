"""The names the plan, the engine, the command line and the pages share: one ``Literal`` per concept, read with
``typing.get_args`` wherever a tuple is needed (as torchtitan's configs do), so a name is typed exactly once.

Kept apart from the plan's pydantic model so the lower layers (packing, the tokenizer's engine) and the command
line's parser use them without importing pydantic (``advisor pack`` of a small file starts in well under a second).

>>> get_args(Algorithm)[:2] == MEGATRON_BRIDGE_ALGORITHMS
True
"""

from __future__ import annotations

from typing import Literal, get_args

Task = Literal["llm-sft", "vlm-sft", "pretrain"]
PackingMode = Literal["offline", "in-batch", "online", "global-batch", "none", "auto"]
# the modes whose packs a Megatron-Core scheduler forms per global batch while training: Megatron-LM's online packing
# (--sequence-packing-scheduler) and Megatron-Bridge 0.7's global-batch packing (dataset.enable_global_batch_packing,
# which runs the same schedulers through wrap_data_iterator)
SCHEDULED_MODES: tuple[PackingMode, ...] = ("online", "global-batch")
Recompute = Literal["none", "selective", "full"]
Peft = Literal["none", "lora"]
# the linear layers LoRA adapts (Megatron-Bridge peft/lora.py target_modules; linear_fc1/fc2 match MoE experts' too)
LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
# Megatron-Core moe_token_dispatcher_type "alltoall", or "flex" with moe_flex_dispatcher_backend deepep or hybridep
MoeDispatcher = Literal["alltoall", "flex_deepep", "flex_hybridep"]
CpCommType = Literal["p2p", "a2a", "all_gather", "a2a+p2p"]  # Transformer Engine spells all_gather with an underscore
# the packing algorithms: the first two are Megatron-Bridge's own (reproduced exactly), the others the advisor's;
# advisor/packing/packers.py refuses to import unless its records are exactly these
Algorithm = Literal[
    "first_fit_shuffle", "first_fit_decreasing", "best_fit_decreasing", "shortest_pack_first", "column_generation"
]
MEGATRON_BRIDGE_ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)[:2]
# prepare_gpt_sft_packed_data's default (Megatron-Bridge 0.6.2 data/packing/offline.py); the builder passes no other
MB_DEFAULT_ALGORITHM: Algorithm = "first_fit_shuffle"
MegatronLmBranch = Literal["main", "dev"]
OnlineScheduler = Literal["dp_balanced", "default_dynamic_cp"]  # Megatron-LM's --sequence-packing-scheduler
# every export: Megatron-Bridge (python snippet, CLI overrides, packed data paths), Megatron-LM arguments, the plan
# itself, a report, and the trial's launch scripts; advisor/analysis.py EXPORTS gives each its file and language
ExportFormat = Literal["python", "overrides", "megatron-lm", "paths", "plan", "markdown", "torchrun", "slurm"]
# training precision of the linear layers' GEMMs (Transformer Engine recipes: fp8 = Float8CurrentScaling, DelayedScaling
# or Float8BlockScaling by Fp8Recipe; mxfp8 = MXFP8BlockScaling; nvfp4 = NVFP4BlockScaling), and Megatron-Core's
# fp8_recipe names for fp8 (megatron/core/transformer/transformer_config.py)
Precision = Literal["bf16", "fp8", "mxfp8", "nvfp4"]
Fp8Recipe = Literal["tensorwise", "delayed", "blockwise"]
DataFormat = Literal["sft", "chat"]  # GPTSFTDataset (truncates) and GPTSFTChatDataset (skips overlong samples)
