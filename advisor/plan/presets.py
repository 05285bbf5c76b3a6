"""Published architecture numbers of common models, and GPU memory and dense bf16 peak.

Model fields use Megatron's TransformerConfig names. Sources: the models' Hugging Face ``config.json`` files and
papers (Llama 3 herd paper, Qwen3 and Qwen2.5-VL reports, Mixtral paper, Nemotron-4 340B report, DeepSeek-V3
report; Kimi-K2's and Llama 2's config.json). DeepSeek-V3's and Kimi-K2's multi-latent attention is approximated
as MHA (128 and 64 heads of 192/128 channels: the real KV cache is far smaller; weights are within a few %).
Grok-1's gated GELU MLP is counted as SwiGLU.
"""

from __future__ import annotations

from advisor.plan.gpus import GPUS

_LLAMA3_VOCAB = 128256
_QWEN_VOCAB = 151936
# Beyond the sizes: what Megatron-LM needs to build the same network, from the same config.json files (rope_theta,
# rope_scaling, rms_norm_eps / norm_eps, partial_rotary_factor, attention_bias) and Megatron-Bridge 0.6.2's bridges
# (models/llama/llama_bridge.py: Llama 3.1 RoPE scaling factor 8; qwen/qwen3_bridge.py and qwen3_moe_bridge.py:
# qk_layernorm, no biases; qwen/qwen2_bridge.py: QKV bias; nemotron/nemotron_bridge.py: LayerNorm with
# zero-centred gamma, squared ReLU, no biases). Every preset has no linear biases and untied embeddings.
_LLAMA31 = dict(rotary_base=500000, rope_scaling_factor=8.0, norm_epsilon=1e-5)
_QWEN3 = dict(rotary_base=1000000, norm_epsilon=1e-6, qk_layernorm=True)
_NEMOTRON4 = dict(
    rotary_base=10000,
    rotary_percent=0.5,
    norm_epsilon=1e-5,
    layernorm_zero_centered_gamma=True,
    activation="squared_relu",
)

MODEL_PRESETS: dict[str, dict] = {
    "llama3.1-8b": dict(
        hidden_size=4096,
        num_layers=32,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=_LLAMA3_VOCAB,
        kv_channels=128,
        **_LLAMA31,
    ),
    "llama3.1-70b": dict(
        hidden_size=8192,
        num_layers=80,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        vocab_size=_LLAMA3_VOCAB,
        kv_channels=128,
        **_LLAMA31,
    ),
    "llama3.1-405b": dict(
        hidden_size=16384,
        num_layers=126,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        vocab_size=_LLAMA3_VOCAB,
        kv_channels=128,
        **_LLAMA31,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        num_layers=36,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=12288,
        vocab_size=_QWEN_VOCAB,
        kv_channels=128,
        **_QWEN3,
    ),
    "qwen3-32b": dict(
        hidden_size=5120,
        num_layers=64,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=25600,
        vocab_size=_QWEN_VOCAB,
        kv_channels=128,
        **_QWEN3,
    ),
    "qwen3-30b-a3b": dict(
        hidden_size=2048,
        num_layers=48,
        num_attention_heads=32,
        num_query_groups=4,
        ffn_hidden_size=6144,
        vocab_size=_QWEN_VOCAB,
        kv_channels=128,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=768,
        **_QWEN3,
    ),
    # Qwen/Qwen3-235B-A22B config.json: 94 layers, 64 query and 4 KV heads of 128, 128 experts of 1536, top 8
    "qwen3-235b-a22b": dict(
        hidden_size=4096,
        num_layers=94,
        num_attention_heads=64,
        num_query_groups=4,
        ffn_hidden_size=12288,
        vocab_size=_QWEN_VOCAB,
        kv_channels=128,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=1536,
        **_QWEN3,
    ),
    # openai/gpt-oss-120b config.json (36 layers alternating sliding_attention, window 128, and full attention; 64
    # query and 8 KV heads of 64; 128 experts of 2880, top 4; attention sinks; YaRN factor 32 on rope_theta 150000)
    # as Megatron-Bridge 0.6.2 models/gpt_oss/gpt_oss_bridge.py builds it: window (127, 0) with
    # window_attn_skip_freq 2, softmax_type learnable, linear biases, gated quick-GELU
    "gpt-oss-120b": dict(
        hidden_size=2880,
        num_layers=36,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=2880,
        vocab_size=201088,
        kv_channels=64,
        num_moe_experts=128,
        moe_router_topk=4,
        moe_ffn_hidden_size=2880,
        rotary_base=150000,
        norm_epsilon=1e-5,
        position_embedding_type="yarn",
        rope_scaling_factor=32.0,
        add_bias_linear=True,
        activation="quick_gelu",
        window_size=128,
        window_attn_skip_freq=2,
        softmax_type="learnable",
        approximated="biases left out of the parameter count; the offset and clamp of the gated "
        "quick-GELU and the YaRN original length left to the recipe",
    ),
    "mixtral-8x7b": dict(
        hidden_size=4096,
        num_layers=32,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=32000,
        kv_channels=128,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=14336,
        rotary_base=1000000,
        norm_epsilon=1e-5,
    ),
    "nemotron4-15b": dict(
        hidden_size=6144,
        num_layers=32,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=24576,
        vocab_size=256000,
        kv_channels=128,
        gated_linear_unit=False,
        normalization="LayerNorm",
        **_NEMOTRON4,
    ),
    "nemotron4-340b": dict(
        hidden_size=18432,
        num_layers=96,
        num_attention_heads=96,
        num_query_groups=8,
        ffn_hidden_size=73728,
        vocab_size=256000,
        kv_channels=192,
        gated_linear_unit=False,
        normalization="LayerNorm",
        **_NEMOTRON4,
    ),
    "grok1-314b": dict(
        hidden_size=6144,
        num_layers=64,
        num_attention_heads=48,
        num_query_groups=8,
        ffn_hidden_size=32768,
        vocab_size=131072,
        kv_channels=128,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=32768,
        rotary_base=10000,
        norm_epsilon=1e-5,
        approximated="gated GELU MLP as SwiGLU",
    ),
    "deepseek-v3": dict(
        hidden_size=7168,
        num_layers=61,
        num_attention_heads=128,
        num_query_groups=128,
        ffn_hidden_size=18432,
        vocab_size=129280,
        kv_channels=192,
        num_moe_experts=256,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_layer_freq=[0] * 3 + [1] * 58,
        rotary_base=10000,
        norm_epsilon=1e-6,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        moe_router_topk_scaling_factor=2.5,
        approximated="multi-latent attention as MHA, without YaRN RoPE scaling",
    ),
    # moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3's architecture with 64 heads, 384 experts of 2048 (top 8,
    # one shared), one dense layer first, no MTP layer, sigmoid routing over one group (Megatron-Bridge 0.6.2
    # models/kimi/kimi_bridge.py builds it so)
    "kimi-k2": dict(
        hidden_size=7168,
        num_layers=61,
        num_attention_heads=64,
        num_query_groups=64,
        ffn_hidden_size=18432,
        vocab_size=163840,
        kv_channels=192,
        num_moe_experts=384,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_layer_freq=[0] + [1] * 60,
        rotary_base=50000,
        norm_epsilon=1e-6,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=2.827,
        approximated="multi-latent attention as MHA, without YaRN RoPE scaling",
    ),
    # meta-llama/Llama-2-70b-hf config.json (Megatron-Bridge's Llama 2 70B LoRA recipe, the MLPerf workload)
    "llama2-70b": dict(
        hidden_size=8192,
        num_layers=80,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        vocab_size=32000,
        kv_channels=128,
        rotary_base=10000,
        norm_epsilon=1e-5,
    ),
    # NeMo's long-sequence table runs it with CP up to 1M tokens (docs/source/performance/performance_long_sequence.md)
    "llama2-7b": dict(
        hidden_size=4096,
        num_layers=32,
        num_attention_heads=32,
        num_query_groups=32,
        ffn_hidden_size=11008,
        vocab_size=32000,
        kv_channels=128,
        rotary_base=10000,
        norm_epsilon=1e-5,
    ),
    "qwen2.5-vl-7b": dict(
        hidden_size=3584,
        num_layers=28,
        num_attention_heads=28,
        num_query_groups=4,
        ffn_hidden_size=18944,
        vocab_size=152064,
        kv_channels=128,
        add_qkv_bias=True,
        position_embedding_type="mrope",
        mrope_section=[16, 24, 24],
        rotary_base=1000000,
        norm_epsilon=1e-6,
        vision=dict(
            num_layers=32,
            hidden_size=1280,
            num_attention_heads=16,
            ffn_hidden_size=3420,
            gated_linear_unit=True,
            out_hidden_size=3584,
            patch_size=14,
            spatial_merge_size=2,
        ),
    ),
}

# The GPU table as the plan reads it (name -> figures) and its sources: views of the registry (advisor.plan.gpus)
GPU_PRESETS: dict[str, dict] = {g.name: g.row() for g in GPUS}
GPU_SOURCES: dict[str, str] = {g.name: g.source for g in GPUS}

# Multi-latent attention (DeepSeek-V3's, Kimi-K2's): no fused linear_qkv, so LoRA cannot target it (its projections
# are linear_q_down_proj/linear_q_up_proj/linear_kv_down_proj/linear_kv_up_proj in Megatron-Core's MLA layer)
MLA_PRESETS = frozenset({"deepseek-v3", "kimi-k2"})

# Presets whose Megatron-Bridge recipes count the input embedding and the loss as pipeline layers
# (account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split true): 126 + 2 and 94 + 2 layers
# then divide by their recipes' PP x VP. A plan of one of them whose stages divide only that way gets both flags,
# with a note (``plan_from_dict``), rather than a refusal of a layout Megatron-Bridge runs.
RECIPE_PIPELINE_SLOTS: dict[str, str] = {
    "llama3.1-405b": "recipes/llama/llama3.py, the 405B recipes",
    "qwen3-235b-a22b": "recipes/qwen/qwen3_moe.py, 'Pipeline split accounting (required for 235B model)'",
}

# MTP layers Megatron-Bridge's provider builds from the checkpoint's config (num_nextn_predict_layers;
# models/deepseek/deepseek_v3_bridge.py) where the preset leaves them out: the exports set the plan's count
PROVIDER_MTP_LAYERS: dict[str, int] = {"deepseek-v3": 1}

# Each preset's Hugging Face repository, whose tokenizer Megatron-LM's HuggingFaceTokenizer loads (the Megatron-LM
# export writes it as the default of a TOKENIZER_MODEL placeholder); presets without one get a required placeholder
HF_REPOS: dict[str, str] = {
    "llama3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama3.1-405b": "meta-llama/Llama-3.1-405B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "nemotron4-340b": "nvidia/Nemotron-4-340B-Base",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "qwen2.5-vl-7b": "Qwen/Qwen2.5-VL-7B-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
}
