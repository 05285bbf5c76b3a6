"""What a training precision does to each tensor: the GEMMs' tensor-core format, the bytes a linear layer keeps of its
input, the HBM traffic of quantizing a GEMM operand, the weight copies, and the amax reductions a recipe needs.

Followed: Transformer Engine's recipes (transformer_engine/common/recipe/__init__.py: DelayedScaling keeps an amax
history and reduces amaxes over the amax-reduction group; Float8CurrentScaling computes each tensor's amax before
casting; Float8BlockScaling scales 1x128 activation and 128x128 weight blocks with FP32 scales; MXFP8BlockScaling
scales blocks of 32 with E8M0 scales and quantizes the rowwise and columnwise copies from the BF16 input;
NVFP4BlockScaling scales blocks of 16 with E4M3 scales under a per-tensor FP32 amax, 16x16 blocks for weights, random
Hadamard transforms on wgrad inputs) and Megatron-Bridge's mixed-precision recipes (training/mixed_precision.py:
tensorwise, delayed and mxfp8 keep FP8 parameters, fp8_param_gather; the blockwise "subchannel" recipe does not;
nvfp4 keeps FP4 parameters, fp4_param_gather). What stays BF16: attention (no fp8_dot_product_attention in any MB
recipe), the router, the output layer (Megatron's output_layer is outside Transformer Engine's autocast), norms,
activations, the residual stream, gradients and the communication of activations.

Alternatives: a constant FP8 speed-up (what the datasheets' 2x suggests: NVIDIA's own FP8 runs gain 1.3-1.5x) or a
kernel trace per recipe (needs the GPU). Here: the GEMMs at the format's peak and fitted efficiency, plus the casts'
bytes over HBM, which is where the 2x goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.plan import Plan

MXFP8_BLOCK = 32  # transformer_engine/pytorch/constants.py MXFP8_BLOCK_SCALING_SIZE (E8M0 scale, 1 byte)
NVFP4_BLOCK = 16  # NVFP4_BLOCK_SCALING_SIZE (E4M3 scale, 1 byte)
FP8_BLOCK = 128  # Float8BlockScaling: 1x128 (activations, gradients), 128x128 (weights), FP32 scales
# TE's GEMM shape check for FP8: leading dims divisible by 8, the last by 16 (pytorch/utils.py assert_dim_for_fp8_exec)
FP8_DIVISOR = 16


@dataclass(frozen=True, kw_only=True)
class Numerics:
    """
    >>> from advisor.plan import plan_from_dict
    >>> n = numerics_of(plan_from_dict({"model": "llama3.1-8b", "training": {"precision": "fp8"}}))
    >>> n.name, n.gemm, n.saved_input_bytes, n.quantize_bytes, n.amax_reduction
    ('fp8 tensorwise', 'fp8', 1.0, 6.0, 'tp')
    """

    name: str
    gemm: str  # tensor-core format of the linear layers' GEMMs: bf16, fp8 or fp4
    saved_input_bytes: float  # bytes per element a linear layer keeps of its input for the weight gradient
    quantize_bytes: float  # HBM bytes per element to quantize one GEMM input (amax pass, read, copies, scales)
    weight_bytes: float  # bytes per weight of the compute copy the parameter all-gather moves
    weight_copy_bytes: float  # bytes per weight kept beside it (transpose or columnwise copies, cached casts)
    amax_reduction: str  # none; tp: an amax all-reduce over TP before each sequence-parallel cast; step: one per
    # micro batch over the amax-reduction group (delayed scaling)
    divisor: int  # every GEMM dimension on a GPU must divide by it (1: BF16)
    mb_recipe: str  # Megatron-Bridge's mixed-precision recipe name (get_mixed_precision_config)

    @property
    def quantized(self) -> bool:
        return self.gemm != "bf16"


BF16 = Numerics(
    name="bf16",
    gemm="bf16",
    saved_input_bytes=2.0,
    quantize_bytes=0.0,
    weight_bytes=2.0,
    weight_copy_bytes=0.0,
    amax_reduction="none",
    divisor=1,
    mb_recipe="bf16_mixed",
)
_MX_SCALE = 1 / MXFP8_BLOCK
_FP4 = 0.5 + 1 / NVFP4_BLOCK  # E2M1 values and their E4M3 scales
NUMERICS: dict[str, Numerics] = {
    "bf16": BF16,
    # current scaling: amax pass (read 2), cast with transpose (read 2, write 1 + 1); FP8 parameters and their
    # transpose; sequence-parallel inputs need the amax of the whole tensor, reduced over TP
    "fp8 tensorwise": Numerics(
        name="fp8 tensorwise",
        gemm="fp8",
        saved_input_bytes=1.0,
        quantize_bytes=6.0,
        weight_bytes=1.0,
        weight_copy_bytes=1.0,
        amax_reduction="tp",
        divisor=FP8_DIVISOR,
        mb_recipe="bf16_with_fp8_current_scaling_mixed",
    ),
    # delayed scaling: the scale comes from the amax history, so one fused cast-transpose pass (read 2, write 2)
    "fp8 delayed": Numerics(
        name="fp8 delayed",
        gemm="fp8",
        saved_input_bytes=1.0,
        quantize_bytes=4.0,
        weight_bytes=1.0,
        weight_copy_bytes=1.0,
        amax_reduction="step",
        divisor=FP8_DIVISOR,
        mb_recipe="bf16_with_fp8_delayed_scaling_mixed",
    ),
    # blockwise: local FP32 scales per 128, no amax; BF16 parameters gathered, their FP8 copies cached (rowwise and
    # columnwise) across micro batches
    "fp8 blockwise": Numerics(
        name="fp8 blockwise",
        gemm="fp8",
        saved_input_bytes=1.0 + 4 / FP8_BLOCK,
        quantize_bytes=2.0 + 2 * (1.0 + 4 / FP8_BLOCK),
        weight_bytes=2.0,
        weight_copy_bytes=2.0,
        amax_reduction="none",
        divisor=FP8_DIVISOR,
        mb_recipe="bf16_with_fp8_subchannel_scaling_mixed",
    ),
    # MXFP8: rowwise and columnwise copies, each quantized from BF16, scales per 32 values, no amax
    "mxfp8": Numerics(
        name="mxfp8",
        gemm="fp8",
        saved_input_bytes=1.0 + _MX_SCALE,
        quantize_bytes=2.0 + 2 * (1.0 + _MX_SCALE),
        weight_bytes=1.0 + _MX_SCALE,
        weight_copy_bytes=1.0 + _MX_SCALE,
        amax_reduction="none",
        divisor=MXFP8_BLOCK,
        mb_recipe="bf16_with_mxfp8_mixed",
    ),
    # NVFP4: the per-tensor amax pass, then rowwise and columnwise FP4 copies with scales per 16
    "nvfp4": Numerics(
        name="nvfp4",
        gemm="fp4",
        saved_input_bytes=_FP4,
        quantize_bytes=2.0 + 2.0 + 2 * _FP4,
        weight_bytes=_FP4,
        weight_copy_bytes=_FP4,
        amax_reduction="tp",
        divisor=NVFP4_BLOCK,
        mb_recipe="bf16_with_nvfp4_mixed",
    ),
}


def numerics_of(plan: Plan) -> Numerics:
    """The plan's precision with its FP8 recipe (null: tensorwise, Megatron-Bridge's default fp8_recipe)."""
    t = plan.training
    if t.precision == "fp8":
        return NUMERICS[f"fp8 {t.fp8_recipe or 'tensorwise'}"]
    return NUMERICS[t.precision]


def quantized_widths(plan: Plan) -> dict[str, int]:
    """The GEMM widths one GPU runs in the plan's precision (inputs and outputs of the linear layers), by name, for
    the divisibility rule."""
    m, p = plan.model, plan.parallel
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups
    out = {
        "hidden_size": m.hidden_size,
        "qkv / tp": (q + 2 * kv) // p.tp,
        "query width / tp": q // p.tp,
        "ffn_hidden_size / tp": m.ffn_hidden_size // p.tp if not m.num_moe_experts else 0,
    }
    if m.num_moe_experts:
        f = m.moe_ffn_hidden_size or m.ffn_hidden_size
        out["moe_ffn_hidden_size / etp"] = f // p.etp
    return {k: v for k, v in out.items() if v}
