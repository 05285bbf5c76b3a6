"""Model FLOPs as Megatron-LM counts them, with the attention core three ways.

Followed: megatron/training/training.py ``num_floating_point_operations`` (Megatron-LM main; the same function
ships in megatron-core 0.19.2), the transformer branch without MLA, MTP or linear attention. Forward and two
backward GEMMs (x3), multiply-add (x2); the core attention term is ``6 q`` per layer times sum(L^2), the causal
half and the two matmuls folded in. Megatron-LM counts sum(L) and sum(L^2) from the real (unpadded) cu_seqlens.

The attention core of one packed micro batch costs, with P = sum(s_i) tokens:
  THD (variable-length kernels, what Megatron runs on packed data)  sum(s_i^2)
  block-masked dense (one P x P causal mask per pack)                (sum s_i)^2
  padded (no packing: each micro batch padded to its length L_b)     b * L_b^2
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.model.parameters import moe_layer_pattern, padded_vocab_size
from advisor.plan import ModelSpec


@dataclass(frozen=True, kw_only=True)
class FlopsCoefficients:
    """FLOPs = linear x tokens + core x sum(L^2) + window_core x min(sum(L^2), 2 w tokens), for one model: the last
    term is the sliding-window layers' attention (w tokens: a sequence of L > w tokens attends to about 2 w L of the
    L^2 scale, Megatron-Bridge training/utils/flop_utils.py), 0 without a window."""

    linear: float
    core: float
    window_core: float = 0.0
    window: int = 0

    def __call__(self, tokens, seqlen_squared_sum):
        return self.linear * tokens + self.attention(tokens, seqlen_squared_sum)

    def attention(self, tokens, seqlen_squared_sum):
        """The core attention term alone (numbers or numpy arrays)."""
        if not self.window:
            return self.core * seqlen_squared_sum
        windowed = np.minimum(seqlen_squared_sum, 2.0 * self.window * tokens)
        return self.core * seqlen_squared_sum + self.window_core * windowed


def flops_coefficients(model: ModelSpec, tp: int = 1) -> FlopsCoefficients:
    """Megatron-LM's ``transformer_flops`` split into its token-linear and sum(L^2) parts.

    >>> from advisor.plan import plan_from_dict
    >>> c = flops_coefficients(plan_from_dict({"model": "llama3.1-8b"}).model)
    >>> round(c.linear / 1e9, 2), round(c.core / 1e6, 3)   # per token, per squared token
    (45.03, 0.786)
    """
    h = model.hidden_size
    q = model.head_dim * model.num_attention_heads
    kv = model.head_dim * model.query_groups
    pattern = moe_layer_pattern(model)
    moe_layers = sum(pattern)
    dense_layers = len(pattern) - moe_layers
    ffn_expansion = 3 if model.gated_linear_unit else 2
    topk = model.moe_router_topk if model.num_moe_experts else 0
    moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    shared = model.moe_shared_expert_intermediate_size or 0
    vocab = padded_vocab_size(model.vocab_size, tp)
    mlp = h * (
        model.ffn_hidden_size * ffn_expansion * dense_layers
        + moe_ffn * topk * ffn_expansion * moe_layers
        + shared * ffn_expansion * moe_layers
    )
    attention = (h * (q + 2 * kv) + q * h) * len(pattern)
    # attention sinks (softmax_type learnable): one more logit per query and head, through the same softmax
    sinks = model.num_attention_heads * len(pattern) if model.softmax_type == "learnable" else 0
    linear = 3 * 2 * (mlp + attention + h * vocab + sinks)
    per_layer = 3 * 2 * q / 2 * 2
    windowed = 0
    if model.window_size:
        k = model.window_attn_skip_freq
        windowed = sum(1 for i in range(1, len(pattern) + 1) if not k or i % k)
    return FlopsCoefficients(
        linear=float(linear),
        core=float(per_layer * (len(pattern) - windowed)),
        window_core=float(per_layer * windowed),
        window=model.window_size or 0,
    )
