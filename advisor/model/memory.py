"""Memory per GPU: the advisor's packing-aware breakdown, and Megatron-Bridge's own theoretical estimate.

Megatron-Bridge 0.6.2's ``estimate_training_memory`` (training/utils/theoretical_memory_utils.py) is the number
its training log prints; ``megatron_bridge_memory`` reproduces it exactly, so users can match it with their
logs. The advisor's own estimate differs where Megatron-Bridge's formula does not look: the tokens a micro batch
really holds (a pack, a packed in-batch micro batch, or a padded batch), recompute other than selective, no
sequence parallelism, the logits and loss buffers, the last pipeline stage, LoRA, a VLM's vision encoder, and a
fixed overhead for the CUDA context, communication buffers and fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.model.numerics import numerics_of
from advisor.model.parameters import count_parameters, moe_layer_pattern, padded_vocab_size
from advisor.plan import Plan
from advisor.plan.pipeline_layout import rank_layers

GIB = 1024**3
DEFAULT_OVERHEAD_GIB = 3.0  # CUDA context (~0.5-1 GiB), NCCL buffers (~1-2 GiB), allocator fragmentation
# GPU memory one more NCCL communicator reserves once it has run a collective: an assumption, not a measurement.
# NCCL's documented default NCCL_BUFFSIZE is 4 MiB per channel and peer for the Simple protocol (LL128 and LL add
# about as much again); a ring's two peers over the 16 or so channels NCCL opens on NVLink on Hopper give
# 16 x 2 x 8 MiB = 256 MiB. The layout's own communicators are in ``DEFAULT_OVERHEAD_GIB``; dynamic CP adds its own
DYNAMIC_CP_COMMUNICATOR_BYTES = 256 * 1024**2


@dataclass(frozen=True, kw_only=True)
class MegatronBridgeMemory:
    weight_and_optimizer_bytes: float
    activation_bytes: float
    printed_in_log: bool  # the log prints activations only with sequence parallel and selective recompute

    @property
    def total_bytes(self) -> float:
        return self.weight_and_optimizer_bytes + self.activation_bytes


def _ffn_activation_ratio(plan: Plan) -> float:
    """Megatron-Bridge's MoE-aware MLP width over h: (dense ffn + moe (moe_ffn topk + shared)) / (layers h)."""
    m = plan.model
    pattern = moe_layer_pattern(m)
    moe_layers = sum(pattern)
    dense = (len(pattern) - moe_layers) * m.ffn_hidden_size
    moe = (
        moe_layers
        * (
            (m.moe_ffn_hidden_size or m.ffn_hidden_size) * m.moe_router_topk
            + (m.moe_shared_expert_intermediate_size or 0)
        )
        if m.num_moe_experts
        else 0
    )
    return (dense + moe) / (len(pattern) * m.hidden_size)


def _bytes_per_parameter(distributed_optimizer: bool, shard: int) -> float:
    return 6.0 + 12.0 / max(1, shard) if distributed_optimizer else 18.0


def _expert_shard(plan: Plan) -> int:
    p = plan.parallel
    return max(1, p.dp * p.tp * p.cp // max(1, p.ep * p.etp))


def megatron_bridge_memory(plan: Plan, num_microbatches: int | None = None) -> MegatronBridgeMemory:
    """Megatron-Bridge 0.6.2's ``estimate_training_memory`` for this plan (even pipeline stages).

    Its formula takes ``seq_length`` x ``micro_batch_size`` tokens, whatever packing does, and assumes sequence
    parallelism and selective recompute whatever is set.
    """
    m, p, t = plan.model, plan.parallel, plan.training
    counts = count_parameters(m, p.tp, megatron_bridge=True)
    h, s, b = m.hidden_size, t.seq_length, t.micro_batch_size
    # weights and optimizer (_dense_parameters_on_most_loaded_shard, _bytes_per_parameter)
    embedding_shard = counts.embedding / p.tp
    if not counts.tied and p.pp == 1:
        embedding_shard += counts.embedding / p.tp
    dense = counts.dense / (p.pp * p.tp) + embedding_shard
    weight_opt = dense * _bytes_per_parameter(t.distributed_optimizer, p.dp * p.cp)
    if counts.routed > 0:
        routed = counts.routed / (p.pp * p.ep * p.etp)
        weight_opt += routed * _bytes_per_parameter(t.distributed_optimizer, _expert_shard(plan))
    # activations (_compute_activation_memory_bytes: Korthikanti et al. 2022, Table 2, first stage)
    act = s * b * h * (18 + 4 * _ffn_activation_ratio(plan)) * m.num_layers
    act += 8 * s * b * p.pp + s * b * h * p.pp
    if p.vpp is not None:
        act *= 1 + (p.pp - 1) / (p.pp * p.vpp)
    elif p.pp > 1 and num_microbatches is not None:
        act *= min(1, num_microbatches / p.pp)
    if p.pp == 1:
        act += s * b * h * 4 * (1 + padded_vocab_size(m.vocab_size, p.tp) / h)
    act /= p.tp * p.cp
    return MegatronBridgeMemory(
        weight_and_optimizer_bytes=weight_opt, activation_bytes=act, printed_in_log=p.sp and t.recompute == "selective"
    )


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Bytes on the most loaded GPU, by component; ``stage`` says which pipeline stage that is."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    overhead: float
    stage: str
    tokens_per_micro_batch: int
    capacity: float
    megatron_bridge: MegatronBridgeMemory
    differences: tuple[str, ...]
    offloaded: float = 0.0  # activations held in host memory (training.cpu_offloading_num_layers), not on the GPU
    communicators: float = 0.0  # dynamic CP's NCCL communicators, one per runtime group size (``dynamic_cp_groups``)

    @property
    def breakdown(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "logits_and_loss": self.logits,
            "overhead": self.overhead,
        } | ({"communicators": self.communicators} if self.communicators else {})

    @property
    def total(self) -> float:
        return sum(self.breakdown.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


def dynamic_cp_group_sizes(pool: int) -> tuple[int, ...]:
    """The runtime CP group sizes above one that dynamic CP creates a communicator for on every rank of a DP x CP
    pool of ``pool`` ranks: each power of two below the pool and the pool itself (Megatron-Core dev's
    default_dynamic_cp: singleton, power-of-two and full groups, FIELD_2026-11 sections 1.3 and 2.3).

    >>> dynamic_cp_group_sizes(16), dynamic_cp_group_sizes(12), dynamic_cp_group_sizes(1)
    ((2, 4, 8, 16), (2, 4, 8, 12), ())
    """
    sizes, g = [], 2
    while g < pool:
        sizes.append(g)
        g *= 2
    return (*sizes, pool) if pool > 1 else ()


def activation_bytes_per_token_per_layer(plan: Plan) -> float:
    """Bytes a layer keeps for backward per token, on one GPU (before CP), averaged over dense and MoE layers.

    Counted tensor by tensor for a pre-norm layer in bf16 with flash attention and no dropout (SFT recipes set
    dropout 0), the way Korthikanti et al. (2022, Table 2) count, but with GQA and SwiGLU:
    norm inputs 2 x 2h; QKV input 2h; q, k, v 2(q + 2kv); attention output (= projection input) 2q;
    MLP input 2h (per routed copy for MoE); MLP: SwiGLU with Megatron's fused ``bias_swiglu`` keeps the FC1
    output 2 x 2F and the FC2 input 2F (6F), a plain MLP 4F, F = the MLP width a token goes through
    (topk x moe_ffn + shared for MoE). Selective recompute and none keep the same here: with flash attention
    there is no s^2 score tensor to recompute. Sequence parallelism splits everything over TP; without it the
    norm and projection inputs (8h) stay whole on every TP rank. Full recompute keeps each layer's input (2h).
    Megatron-Bridge's own formula, h (18 + 4F/h), is the same count for GeLU MHA with dropout masks.
    In FP8, MXFP8 and NVFP4 the four linear layers keep the quantized copy of their input (QKV input, attention
    output, MLP input, FC2 input: ``Numerics.saved_input_bytes`` instead of 2 bytes an element); attention's q, k, v
    and the gated MLP's FC1 output stay BF16 (advisor/model/numerics.py).
    """
    m, p, t = plan.model, plan.parallel, plan.training
    h, tp = m.hidden_size, p.tp
    x = numerics_of(plan).saved_input_bytes
    if t.recompute == "full":
        kept = 2 * h / (tp if p.sp else 1)
        share = recomputed_share(plan)
        if share >= 1:
            return kept
        return share * kept + (1 - share) * activation_bytes_per_token_per_layer(_with(plan, recompute="selective"))
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups
    mlp_factor = 6 if m.gated_linear_unit else 4
    pattern = moe_layer_pattern(m)
    total = 0.0
    for moe in pattern:
        if moe:
            width = (m.moe_ffn_hidden_size or m.ffn_hidden_size) * m.moe_router_topk + (
                m.moe_shared_expert_intermediate_size or 0
            )
            mlp_in = x * h * m.moe_router_topk
        else:
            width, mlp_in = m.ffn_hidden_size, x * h
        whole = 2 * h + x * h + 2 * h + x * h  # norm inputs, QKV input, MLP-norm output (= MLP input, dense)
        split = 2 * (q + 2 * kv) + x * q + (mlp_in - x * h) + (mlp_factor - 2 + x) * width
        total += (whole + split) / tp if (p.sp or tp == 1) else whole + split / tp
    return total / len(pattern)


def recomputed_share(plan: Plan) -> float:
    """The share of layers full recompute rebuilds: every one with Megatron-Core's uniform method (what the exports
    write), the first ``recompute_num_layers`` of each pipeline chunk with the block method
    (megatron/core/transformer/transformer_block.py, _checkpointed_forward).

    >>> from advisor.plan import plan_from_dict
    >>> recomputed_share(plan_from_dict({"model": "llama3.1-70b", "parallel": {"gpus": 8, "pp": 4, "vpp": 5},
    ...                                  "training": {"recompute": "full", "recompute_num_layers": 1}}))
    0.25
    """
    t, p = plan.training, plan.parallel
    if t.recompute != "full":
        return 0.0
    if t.recompute_num_layers is None:
        return 1.0
    per_chunk = plan.model.num_layers / (p.pp * (p.vpp or 1))
    return min(1.0, t.recompute_num_layers / per_chunk)


def lora_parameters(plan: Plan) -> float:
    """LoRA adapters of rank r on the plan's target layers (all four projections by default): r (in + out) each.
    A MoE layer's routed experts share one adapter (Megatron-Bridge's LoRA on grouped experts), its shared experts
    have their own; dense layers of a MoE model (moe_layer_freq) have the dense MLP's width."""
    m, t = plan.model, plan.training
    h, q, kv = m.hidden_size, m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups
    gate = 2 if m.gated_linear_unit else 1

    def mlp(ffn: float) -> dict:
        return {"linear_fc1": h + gate * ffn, "linear_fc2": ffn + h}

    attention = {"linear_qkv": h + q + 2 * kv, "linear_proj": q + h}
    total = 0.0
    for moe in moe_layer_pattern(m):
        widths = (
            [attention, mlp(m.ffn_hidden_size)]
            if not moe
            else [attention, mlp(m.moe_ffn_hidden_size or m.ffn_hidden_size)]
            + ([mlp(m.moe_shared_expert_intermediate_size)] if m.moe_shared_expert_intermediate_size else [])
        )
        total += sum(w.get(x, 0) for w in widths for x in t.lora_targets)
    return t.lora_rank * total


def estimate_memory(
    plan: Plan,
    tokens_per_micro_batch: int,
    num_microbatches: int,
    overhead_bytes: float = DEFAULT_OVERHEAD_GIB * GIB,
    capacity_bytes: float = float("inf"),
) -> MemoryEstimate:
    """The advisor's estimate for the most loaded GPU (the first or the last pipeline stage, whichever is larger).

    ``tokens_per_micro_batch``: what one micro batch really holds on the data-parallel rank (a pack for offline
    packing; the largest packed micro batch for in-batch packing; micro batch x padded length without packing;
    under dynamic CP the busiest rank's tokens / its group's size, times CP, which the scheduler's cap
    max_seqlen_per_dp_cp_rank bounds). Dynamic CP adds its communicators (``DYNAMIC_CP_COMMUNICATOR_BYTES`` each).
    """
    m, p, t = plan.model, plan.parallel, plan.training
    counts = count_parameters(m, p.tp)
    layers_per_stage = m.num_layers / p.pp
    dense_layers = counts.dense / p.pp / p.tp  # norms and attention per stage share the same 1/pp
    routed = counts.routed / (p.pp * p.ep * p.etp)
    emb = counts.embedding / p.tp
    vision = counts.vision / p.tp
    first = dense_layers + emb + vision + (emb if (p.pp == 1 and not counts.tied) else 0)
    last = dense_layers + (emb if not counts.tied or p.pp > 1 else 0)
    tokens = tokens_per_micro_batch / p.cp
    per_layer = activation_bytes_per_token_per_layer(plan) * tokens
    if p.vpp is not None:
        in_flight = 1 + (p.pp - 1) / (p.pp * p.vpp)
        first_in_flight = in_flight * p.pp
    else:
        first_in_flight = min(num_microbatches, p.pp)
    working = 0.0
    # one layer's full set is rebuilt at a time during backward; with the block method the chunk's later layers,
    # stored whole, have freed theirs by the time backward reaches the recomputed first ones
    if t.recompute == "full" and recomputed_share(plan) >= 1:
        working = tokens * activation_bytes_per_token_per_layer(_with(plan, recompute="selective"))
    embed_acts = tokens * (8 + m.hidden_size)
    # CPU offloading (pp 1 only): Transformer Engine's default synchronizer holds the offloaded layers' activations
    # until the last of them is copied out, so the peak on the GPU is (layers - offloaded) layers' worth
    # (transformer_engine/pytorch/cpu_offload.py, DefaultOffloadSynchronizer)
    offloaded = min(t.cpu_offloading_num_layers, layers_per_stage)
    resident = layers_per_stage - offloaded
    act_first = (per_layer * resident + embed_acts) * first_in_flight + working
    act_last = per_layer * resident + working
    vocab_shard = padded_vocab_size(m.vocab_size, p.tp) / p.tp
    logits = tokens * vocab_shard * 6  # bf16 logits + fp32 softmax kept by the vocab-parallel cross entropy
    stages: dict[str, tuple[float, ...]] = {
        "first": (first, act_first, logits if p.pp == 1 else 0.0, routed, dense_layers),
        "last": (last, act_last, logits, routed, dense_layers),
    }
    if m.mtp_num_layers:
        # MTP layers: on the last stage (the only one with pp 1), each a layer of the last layer's kind with its own
        # logits; a later stage with MTP layers builds its own copy of the embedding (Megatron-Core gpt_model.py:
        # pre_process or mtp_process)
        mtp = m.mtp_num_layers
        mtp_dense = mtp * counts.dense_by_layer[-1] / p.tp
        extra = (
            mtp_dense + (emb if p.pp > 1 else 0.0),
            per_layer * mtp,
            logits * mtp,
            mtp * counts.routed_by_layer[-1] / (p.ep * p.etp),
            mtp_dense,
        )
        holder = "last" if p.pp > 1 else "first"
        stages[holder] = tuple(a + b for a, b in zip(stages[holder], extra, strict=True))
    layout = plan.pipeline_stages
    if layout is not None:
        stages = _ranks_by_layout(plan, layout, counts, per_layer, embed_acts, logits, working, num_microbatches)
    name = max(
        stages,
        key=lambda k: sum(_state_split(plan, stages[k][0], stages[k][3], stages[k][4])) + stages[k][1] + stages[k][2],
    )
    params, act, lg, routed, dense_layers = stages[name]
    w, g, o = _state_split(plan, params, routed, dense_layers)
    mb = megatron_bridge_memory(plan, num_microbatches)
    return MemoryEstimate(
        weights=w,
        gradients=g,
        optimizer=o,
        activations=act,
        logits=lg,
        overhead=overhead_bytes,
        stage=name if p.pp > 1 else "only",
        tokens_per_micro_batch=int(tokens_per_micro_batch),
        capacity=capacity_bytes,
        megatron_bridge=mb,
        differences=_differences(plan, tokens_per_micro_batch),
        offloaded=per_layer * offloaded,
        communicators=(
            len(dynamic_cp_group_sizes(p.dp * p.cp)) * DYNAMIC_CP_COMMUNICATOR_BYTES if plan.dynamic_cp else 0.0
        ),
    )


def _ranks_by_layout(
    plan: Plan,
    layout: tuple[tuple[str, ...], ...],
    counts,
    per_layer: float,
    embed_acts: float,
    logits: float,
    working: float,
    num_microbatches: int,
) -> dict[str, tuple[float, ...]]:
    """Each pipeline rank's (parameters, activations, logits, routed parameters, layer parameters) when a layout
    (``Plan.pipeline_stages``) places the layers. A rank keeps activations for the micro batches in flight in
    Megatron-Core's 1F1B schedule: pp - r on rank r, interleaved 2 (pp - r - 1) + (vpp - 1) pp + 1 virtual stages'
    worth (one more with the EP all-to-all overlap; schedules.py ``get_pp_rank_microbatches``), at most all of them;
    an MTP layer counts as one more layer of the last layer's kind, its logits on the last rank."""
    m, p = plan.model, plan.parallel
    vpp = p.vpp or 1
    emb = counts.embedding / p.tp
    out: dict[str, tuple[float, ...]] = {}
    for r, rank in enumerate(rank_layers(layout, p.pp)):
        ids = [*rank.decoders, *[m.num_layers - 1] * rank.mtp]
        layers = sum(counts.dense_by_layer[i] for i in ids) / p.tp
        routed = sum(counts.routed_by_layer[i] for i in ids) / (p.ep * p.etp)
        params = (
            layers
            + (emb + counts.vision / p.tp if rank.embedding else 0.0)
            + (emb if rank.loss and (p.pp > 1 or not counts.tied) else 0.0)
            + (emb if rank.mtp and not rank.embedding else 0.0)
        )  # an MTP rank's own embedding (gpt_model.py)
        # warm-up micro batches (schedules.py get_pp_rank_microbatches), plus the one being computed; one more
        # with the EP all-to-all overlap
        warm = 2 * (p.pp - r - 1) + (vpp - 1) * p.pp + int(p.moe_a2a_overlap) + 1 if vpp > 1 else p.pp - r
        in_flight = min(warm, num_microbatches * vpp) / vpp
        act = (per_layer * len(ids) + (embed_acts if rank.embedding else 0.0)) * in_flight + working
        name = "first" if r == 0 else "last" if r == p.pp - 1 else f"middle rank {r}"
        # the MTP layers' logits are the post-process's, on the last rank (process_mtp_loss)
        out[name] = (params, act, logits * (1 + m.mtp_num_layers) if rank.loss else 0.0, routed, layers)
    return out


def _with(plan: Plan, **training) -> Plan:
    return plan.model_copy(update={"training": plan.training.model_copy(update=training)})


def _state_split(plan: Plan, dense: float, routed: float, layers: float | None = None) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of ``dense`` parameters (of which ``layers`` are the transformer layers'
    linear weights, the rest embeddings and the vision encoder) and ``routed`` expert parameters on one GPU.

    Weights: BF16, except the layers' linear weights in FP8 or FP4, which keep the precision's compute copy and its
    transpose or columnwise copy (``Numerics.weight_bytes`` + ``weight_copy_bytes``: FP8 parameters with
    fp8_param_gather; blockwise keeps BF16 parameters and caches their FP8 casts). Gradients: the DDP buffer's dtype,
    FP32 with grad_reduce_in_fp32, else the parameters' BF16 (Megatron-Core distributed_data_parallel.py). FP32
    master weights and two Adam moments, 12 bytes, sharded over DP x CP (experts over their own data-parallel group)
    with the distributed optimizer. Megatron FSDP (optim_grads_params) shards weights and gradients too, and holds
    two layers' gathered parameters and one layer's gradients whole (fsdp_double_buffer). LoRA freezes the base:
    only the adapters have gradients and optimizer states."""
    t, p, m = plan.training, plan.parallel, plan.model
    num = numerics_of(plan)
    layers = dense if layers is None else min(layers, dense)
    dense_shard = p.dp * p.cp if (t.distributed_optimizer or p.fsdp) else 1
    expert_shard = _expert_shard(plan) if (t.distributed_optimizer or p.fsdp) else 1
    grad = 4 if t.grad_reduce_in_fp32 else 2
    kept = num.weight_bytes + num.weight_copy_bytes  # bytes a quantized weight takes
    if p.fsdp:
        counts = count_parameters(m, p.tp)
        biggest = max(
            d / p.tp + r / (p.ep * p.etp) for d, r in zip(counts.dense_by_layer, counts.routed_by_layer, strict=True)
        )
        weights = (
            (2 * (dense - layers) + num.weight_bytes * layers) / dense_shard
            + num.weight_bytes * routed / expert_shard
            + 2 * biggest * kept
        )
        trainable = (dense / dense_shard + routed / expert_shard) if t.peft != "lora" else 0.0
        gradients = grad * trainable + grad * biggest * (t.peft != "lora")
    else:
        weights = 2 * (dense - layers) + kept * (layers + routed)
        gradients = grad * (dense + routed)
    if t.peft == "lora":
        adapters = lora_parameters(plan) / (p.pp * p.tp)
        return weights + 2 * adapters, grad * adapters, 12 * adapters / dense_shard
    return weights, gradients, 12 * dense / dense_shard + 12 * routed / expert_shard


def _differences(plan: Plan, tokens: int) -> tuple[str, ...]:
    p, t, m = plan.parallel, plan.training, plan.model
    out = []
    mb_tokens = t.seq_length * t.micro_batch_size
    if tokens != mb_tokens:
        out.append(
            f"Megatron-Bridge counts seq_length x micro_batch_size = {mb_tokens:,} tokens a micro batch; "
            f"this plan's micro batches hold {tokens:,}."
        )
    if not p.sp and p.tp > 1:
        out.append(
            "Megatron-Bridge assumes sequence parallelism; without it norms and dropout masks are not split over TP."
        )
    if t.recompute != "selective":
        out.append(f"Megatron-Bridge assumes selective recompute; this plan uses {t.recompute!r}.")
    if t.peft == "lora":
        out.append("Megatron-Bridge counts gradients and optimizer states for every weight; LoRA freezes the base.")
    if t.cpu_offloading_num_layers:
        out.append(
            f"Megatron-Bridge counts every layer's activations on the GPU; CPU offloading keeps "
            f"{t.cpu_offloading_num_layers} layers' in host memory."
        )
    if m.vision:
        out.append("Megatron-Bridge leaves out the vision encoder.")
    if m.normalization != "LayerNorm":
        out.append("Megatron-Bridge counts 4h norm parameters a layer; RMSNorm has 2h.")
    out.append(
        "Megatron-Bridge leaves out the logits and loss buffers beyond 4 bytes per vocabulary entry, the "
        "last pipeline stage, the CUDA context, communication buffers and fragmentation."
    )
    if p.pp > 1:
        out.append(
            "With pipeline parallelism the advisor checks both the first stage (embeddings, PP micro batches "
            "in flight) and the last (output layer, logits) and reports the larger."
        )
    return tuple(out)
