"""Parameter counts of a GPT-style model (and a VLM's vision encoder), whole and per GPU shard.

Followed: megatron/bridge/training/utils/theoretical_memory_utils.py (Megatron-Bridge 0.6.2, ``_count_parameters``
and the ``_*_on_most_loaded_shard`` helpers). The one departure, used only by the advisor's own estimate and
switched off for the Megatron-Bridge block: RMSNorm has no bias, so 2h norm parameters a layer, not 4h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from advisor.plan import ModelSpec

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128  # Megatron's default


def padded_vocab_size(vocab_size: int, tp: int, divisible_by: int = MAKE_VOCAB_SIZE_DIVISIBLE_BY) -> int:
    """Megatron pads the vocabulary to a multiple of 128 x TP.

    >>> padded_vocab_size(128256, 1), padded_vocab_size(151936, 8), padded_vocab_size(32000, 3)
    (128256, 152576, 32256)
    """
    multiple = divisible_by * tp
    return int(math.ceil(vocab_size / multiple) * multiple)


def moe_layer_pattern(model: ModelSpec) -> tuple[bool, ...]:
    if not model.num_moe_experts:
        return (False,) * model.num_layers
    freq = model.moe_layer_freq
    if isinstance(freq, int):
        return tuple(i % freq == 0 for i in range(model.num_layers))
    if len(freq) != model.num_layers:
        raise ValueError(f"moe_layer_freq has {len(freq)} entries for {model.num_layers} layers")
    return tuple(bool(x) for x in freq)


def ffn_factor(model: ModelSpec) -> float:
    """SwiGLU has three projections (h -> 2 ffn, ffn -> h), a plain MLP two."""
    return 3.0 if model.gated_linear_unit else 2.0


@dataclass(frozen=True, kw_only=True)
class ParameterCounts:
    dense_by_layer: tuple[float, ...]  # attention, norms and dense MLP or shared expert, per layer
    routed_by_layer: tuple[float, ...]  # routed experts, per layer
    final_norm: float
    embedding: float  # one embedding table (h x padded vocab)
    tied: bool
    vision: float

    @property
    def dense(self) -> float:
        return sum(self.dense_by_layer) + self.final_norm

    @property
    def routed(self) -> float:
        return sum(self.routed_by_layer)

    @property
    def embeddings(self) -> float:
        return self.embedding * (1 if self.tied else 2)

    @property
    def total(self) -> float:
        return self.dense + self.routed + self.embeddings + self.vision


def vision_parameters(vision) -> float:
    """A ViT encoder: per layer attention 4h^2 (+ biases), MLP 3 h f (gated) or 2 h f, two norms; plus the
    patch embedding (3 x 2 x p^2 x h for a 2-frame temporal patch) and the merger MLP into the LLM width."""
    if not vision:
        return 0.0
    h, f, layers = vision.hidden_size, vision.ffn_hidden_size, vision.num_layers
    mlp = (3 if vision.gated_linear_unit else 2) * h * f
    per_layer = 4 * h * h + 4 * h + mlp + 4 * h
    patch = vision.patch_size
    merge = vision.spatial_merge_size**2
    patch_embed = 3 * 2 * patch * patch * h
    merger = (h * merge) ** 2 + h * merge * (vision.out_hidden_size or h)
    return float(layers * per_layer + patch_embed + merger)


def count_parameters(model: ModelSpec, tp: int = 1, megatron_bridge: bool = False) -> ParameterCounts:
    """Parameters by part. ``megatron_bridge=True`` counts exactly as Megatron-Bridge 0.6.2 does (4h of norms a
    layer whatever the norm, and no vision encoder).

    >>> from advisor.plan import plan_from_dict
    >>> c = count_parameters(plan_from_dict({"model": "llama3.1-8b"}).model)
    >>> round(c.total / 1e9, 2)
    8.03
    """
    h = model.hidden_size
    n, g = model.num_attention_heads, model.query_groups
    q_ratio = model.head_dim * n / h
    attention = 2 * h * h * ((1 + g / n) * q_ratio) + (n if model.softmax_type == "learnable" else 0)  # + sinks
    norms = 4 * h if megatron_bridge or model.normalization == "LayerNorm" else 2 * h
    factor = ffn_factor(model)
    dense_mlp = factor * h * model.ffn_hidden_size
    shared = factor * h * (model.moe_shared_expert_intermediate_size or 0)
    routed = factor * h * (model.moe_ffn_hidden_size or model.ffn_hidden_size) * (model.num_moe_experts or 0)
    pattern = moe_layer_pattern(model)
    return ParameterCounts(
        dense_by_layer=tuple(attention + norms + (shared if moe else dense_mlp) for moe in pattern),
        routed_by_layer=tuple(routed if moe else 0.0 for moe in pattern),
        final_norm=2 * h if megatron_bridge or model.normalization == "LayerNorm" else h,
        embedding=float(h * padded_vocab_size(model.vocab_size, tp)),
        tied=model.share_embeddings_and_output_weights,
        vision=0.0 if megatron_bridge else vision_parameters(model.vision),
    )
