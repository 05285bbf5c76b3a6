"""Which GPUs run which training precision: Transformer Engine's own checks, as plan problems naming the fields.

Followed: transformer_engine/pytorch/quantization.py (``_compute_fp8_support``: compute capability 8.9 or higher,
Ada needing CUDA 12.1; ``_compute_mxfp8_support``: 10.0 up to, not including, 12.0; ``_compute_nvfp4_support``: 10.0
or higher; ``_compute_fp8_block_scaling_support``: 9.0 or higher). Megatron-Core's ``fp8_recipe`` applies to FP8
only (megatron/core/transformer/transformer_config.py: fp8 and fp4 are exclusive, fp4_recipe nvfp4 is its own).

>>> print(precision_problems("mxfp8", None, "H100-80GB", 9.0)[0])  # doctest: +NORMALIZE_WHITESPACE
training.precision mxfp8 needs compute capability 10.0 or higher and below 12.0 (Blackwell; Transformer Engine
quantization.py); hardware.gpu H100-80GB has 9
>>> precision_problems("nvfp4", "delayed", "B200", 10.0)[0][:46]
'training.fp8_recipe delayed applies to precisi'
"""

from __future__ import annotations

MIN_COMPUTE_CAPABILITY = {"bf16": 8.0, "fp8": 8.9, "mxfp8": 10.0, "nvfp4": 10.0}
BELOW_COMPUTE_CAPABILITY = {"mxfp8": 12.0}  # "MXFP8 (for all gemm layouts) is not supported on 12.0+ yet"
BLOCKWISE_MIN = 9.0


def precision_problems(precision: str, fp8_recipe: str | None, gpu: str, compute_capability: float) -> list[str]:
    out = []
    low = MIN_COMPUTE_CAPABILITY[precision]
    high = BELOW_COMPUTE_CAPABILITY.get(precision)
    if compute_capability < low or (high is not None and compute_capability >= high):
        family = {8.9: "Ada, Hopper or Blackwell", 10.0: "Blackwell"}.get(low, "")
        out.append(
            f"training.precision {precision} needs compute capability {low} or higher"
            + (f" and below {high}" if high else "")
            + f" ({family}; Transformer Engine quantization.py); "
            f"hardware.gpu {gpu} has {compute_capability:g}"
        )
    if fp8_recipe is not None and precision != "fp8":
        out.append(
            f"training.fp8_recipe {fp8_recipe} applies to precision fp8 only ({precision} is its own "
            "recipe): leave it null"
        )
    if precision == "fp8" and fp8_recipe == "blockwise" and compute_capability < BLOCKWISE_MIN:
        out.append(
            f"training.fp8_recipe blockwise needs compute capability {BLOCKWISE_MIN} or higher (Transformer "
            f"Engine quantization.py); hardware.gpu {gpu} has {compute_capability:g}"
        )
    return out
