"""The GEMMs of one transformer layer and of the output layer on one GPU, by shape, and which ones train.

Alternatives: FLOPs per token (Megatron-LM's ``num_floating_point_operations``: right in total, blind to shape and
to frozen weights) or traced kernels (needs the model on a GPU). Here: the shapes Megatron-Core's column- and
row-parallel linears run (megatron/core/tensor_parallel/layers.py), split by TP, experts by EP and ETP, and
LoRA's adapters on its target_modules (Megatron-Bridge peft/lora.py: linear_qkv, linear_proj, linear_fc1 and
linear_fc2 by default).

Each GEMM runs three times in training: forward [m, k] x [k, n], the activation gradient (dgrad, [m, n] x [n, k])
and the weight gradient (wgrad, [k, m] x [m, n]). A frozen weight (LoRA's base model) skips its wgrad: that is
LoRA's saving, a third of the GEMM work, not more, since dgrad must still flow to the adapters below.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.model.parameters import padded_vocab_size
from advisor.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Gemm:
    """
    >>> Gemm(name="fc2", m=4096, n=4096, k=14336, trains=False).flops(wgrad=False)
    962072674304.0
    """

    name: str
    m: float  # tokens
    n: float  # output width
    k: float  # input width
    trains: bool  # its weight gets a gradient (False: frozen under LoRA)
    count: float = 1.0  # identical GEMMs (local experts)
    quantized: bool = True  # runs in the plan's precision (Transformer Engine's linears); False: BF16 (the router,
    # LoRA's adapters, the output layer)

    def flops(self, wgrad: bool = True) -> float:
        """Forward and dgrad, plus wgrad when the weight trains and ``wgrad``: 2 m n k each."""
        passes = 2 + (1 if self.trains and wgrad else 0)
        return passes * 2.0 * self.m * self.n * self.k * self.count


def layer_gemms(plan: Plan, tokens: float, moe: bool) -> list[Gemm]:
    """One layer's GEMMs on one GPU for a micro batch of ``tokens`` tokens on this CP rank.

    >>> from advisor.plan import plan_from_dict
    >>> [g.name for g in layer_gemms(plan_from_dict({"model": "llama3.1-8b"}), 4096, moe=False)]
    ['linear_qkv', 'linear_proj', 'linear_fc1', 'linear_fc2']
    """
    m, p, t = plan.model, plan.parallel, plan.training
    h, q, kv, tp = m.hidden_size, m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups, p.tp
    up = 2 if m.gated_linear_unit else 1
    base = t.peft != "lora"
    out = [
        Gemm(name="linear_qkv", m=tokens, n=(q + 2 * kv) / tp, k=h, trains=base),
        Gemm(name="linear_proj", m=tokens, n=h, k=q / tp, trains=base),
    ]
    experts = m.num_moe_experts
    if moe and experts:  # a model without experts has no MoE layer (moe_layer_pattern)
        f = m.moe_ffn_hidden_size or m.ffn_hidden_size
        local = experts / p.ep
        # megatron/core/transformer/moe/token_dispatcher.py (alltoall): a rank routes its sequence-parallel share
        # (tokens / TP), all-to-alls it over EP, then all-gathers over expert TP: balanced routing gives each local
        # expert tokens / TP x topk x EP x ETP / experts rows, each expert's width split by ETP
        shard = tokens / tp
        per_expert = shard * m.moe_router_topk * p.ep * p.etp / experts
        out += [
            Gemm(name="router", m=shard, n=experts, k=h, trains=base, quantized=False),
            Gemm(name="expert_fc1", m=per_expert, n=up * f / p.etp, k=h, trains=base, count=local),
            Gemm(name="expert_fc2", m=per_expert, n=h, k=f / p.etp, trains=base, count=local),
        ]
        if m.moe_shared_expert_intermediate_size:
            fs = m.moe_shared_expert_intermediate_size
            out += [
                Gemm(name="shared_fc1", m=tokens, n=up * fs / tp, k=h, trains=base),
                Gemm(name="shared_fc2", m=tokens, n=h, k=fs / tp, trains=base),
            ]
    else:
        f = m.ffn_hidden_size
        out += [
            Gemm(name="linear_fc1", m=tokens, n=up * f / tp, k=h, trains=base),
            Gemm(name="linear_fc2", m=tokens, n=h, k=f / tp, trains=base),
        ]
    if t.peft == "lora":
        out += lora_gemms(out, t.lora_rank, tp, t.lora_targets)
    return out


# the GEMMs each of LoRA's target_modules names: Megatron-Bridge matches by the module's own name, which MoE experts
# and shared experts share with the dense MLP's
LORA_TARGETS = {
    "linear_qkv": ("linear_qkv",),
    "linear_proj": ("linear_proj",),
    "linear_fc1": ("linear_fc1", "expert_fc1", "shared_fc1"),
    "linear_fc2": ("linear_fc2", "expert_fc2", "shared_fc2"),
}


COLUMN_PARALLEL = ("linear_qkv", "linear_fc1", "expert_fc1", "shared_fc1")


def lora_gemms(base: list[Gemm], rank: int, tp: int, targets=tuple(LORA_TARGETS)) -> list[Gemm]:
    """Adapters A (in -> r) and B (r -> out) beside each targeted linear; they train. Megatron-Bridge shards both
    (peft/lora.py, LoRAMerge): beside a column-parallel linear A is [r/TP, in] and B [out/TP, r]; beside a
    row-parallel one A is [r, in/TP] and B [out/TP, r]."""
    out = []
    adapted = {name for target in targets for name in LORA_TARGETS[target]}
    for g in base:
        if g.name not in adapted:
            continue
        column = g.name in COLUMN_PARALLEL
        out += [
            Gemm(
                name=f"{g.name}_lora_a",
                m=g.m,
                n=rank / tp if column else rank,
                k=g.k,
                trains=True,
                count=g.count,
                quantized=False,
            ),
            Gemm(
                name=f"{g.name}_lora_b",
                m=g.m,
                n=g.n if column else g.n / tp,
                k=rank,
                trains=True,
                count=g.count,
                quantized=False,
            ),
        ]
    return out


def output_gemm(plan: Plan, tokens: float) -> Gemm:
    """The output layer (vocabulary projection) on the last pipeline stage, split over TP; frozen under LoRA."""
    m, p = plan.model, plan.parallel
    vocab = padded_vocab_size(m.vocab_size, p.tp)
    return Gemm(
        name="output_layer",
        m=tokens,
        n=vocab / p.tp,
        k=m.hidden_size,
        trains=plan.training.peft != "lora",
        quantized=False,
    )
