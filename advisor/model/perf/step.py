"""One training step on the busiest GPU: micro batches through the pipeline, then the data-parallel sync.

Alternatives: FLOPs / (GPUs x peak x MFU) (one efficiency for every layout, blind to communication, bubbles and LoRA) or
a discrete-event simulation of every kernel and message (more exact, far slower than a planner can afford).
Here: per-layer forward and backward phases (``kernels``, ``collectives``), exposed communication where Megatron
does not hide it, the pipeline's fill and drain, the gradient sync beyond the backward it overlaps, the optimizer.

Step = m x (slowest stage per micro batch) x straggler + (pp - 1)/vpp x (mean stage) + exposed pipeline sends
     + exposed data-parallel sync + optimizer, where m is the micro batches per data-parallel rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from advisor.model.memory import lora_parameters
from advisor.model.parameters import count_parameters, moe_layer_pattern, padded_vocab_size
from advisor.model.perf import collectives as cc
from advisor.model.perf.gemms import layer_gemms, output_gemm
from advisor.model.perf.hardware import Gpu, gpu_of
from advisor.model.perf.kernels import attention_seconds, gemm_seconds, stream_seconds
from advisor.plan import Plan

BF16 = 2
# Adam with FP32 master weights, per trainable parameter: read param, grad, m, v (16 B), write param, m, v (12 B),
# write the BF16 copy (2 B), grad-norm pass and zeroing (6 B) (Megatron-Core optimizer/optimizer.py, multi-tensor apply)
OPTIMIZER_BYTES = 36
# Megatron-Core DDP bucket: max(40M, 1M x DP) parameters (distributed/distributed_data_parallel_config.py); the last
# bucket's reduce-scatter starts when the backward ends, so it is never hidden
BUCKET_PARAMETERS = 40e6
# loss on the vocabulary-parallel logits (fused cross entropy): BF16 logits written, FP32 softmax read and written,
# the gradient written, bytes per logit over forward and backward
LOSS_BYTES_PER_LOGIT = 16


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """The fitted constants (``calibration``): everything else is a datasheet figure or a count."""

    gemm: float  # fraction of dense BF16 peak that large GEMMs sustain
    attention: float  # fraction of peak that flash attention sustains on long sequences
    tp_overlap: float  # share of TP communication hidden behind GEMMs with tp_comm_overlap on


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What a step runs: the mean micro batch (all CP ranks together, padding included) and how many."""

    tokens: float  # tokens per micro batch
    seqlen_squared_sum: float  # sum(s_i^2) per micro batch, the attention work the kernels run
    micro_batches: float  # per data-parallel rank and step
    straggler: float = 1.0  # slowest over mean data-parallel rank (the packs' real work, ``throughput``)


@dataclass(frozen=True, kw_only=True)
class Phase:
    """Seconds of one micro batch through a layer (or the output layer) on one GPU, by what they model."""

    gemm: float = 0.0
    attention: float = 0.0
    memory_bound: float = 0.0
    recompute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    moe_all_to_all: float = 0.0

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def __add__(self, other: Phase) -> Phase:
        return Phase(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __mul__(self, k: float) -> Phase:
        return Phase(**{f.name: getattr(self, f.name) * k for f in fields(self)})


@dataclass(frozen=True, kw_only=True)
class StepTime:
    step_seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)  # seconds per step; sums to step_seconds
    stage_seconds: float = 0.0  # one micro batch, forward and backward, through the slowest pipeline stage


def _elementwise_bytes(plan: Plan, moe: bool) -> float:
    """Bytes per token a layer's forward moves outside GEMMs and attention: two norms (read, write), two residual
    adds (two reads, a write), rotary on Q and K, the MLP activation (gated: two reads, a write) and, in MoE layers,
    the token permutation there and back. Norm, residual and permutation work is split by TP only with SP."""
    m, p = plan.model, plan.parallel
    h, q, kv, tp = m.hidden_size, m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups, p.tp
    f = (m.moe_ffn_hidden_size or m.ffn_hidden_size) if moe else m.ffn_hidden_size
    copies = m.moe_router_topk if moe else 1
    sequence = 4 * h + 6 * h + (4 * copies * h if moe else 0)
    split = 2 * (q + kv) + (3 if m.gated_linear_unit else 2) * f * copies
    return BF16 * (sequence / (tp if p.sp else 1) + split / tp)


def _cp_comm(plan: Plan, gpu: Gpu, tokens: float, attn_fwd: float, attn_bwd: float) -> tuple[float, float]:
    """Exposed seconds of the CP exchange in forward and backward, by Transformer Engine's cp_comm_type
    (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): p2p rings K/V around the CP
    ranks one step per rank, each send hidden behind the attention of the chunk already there; a2a (Ulysses) trades
    sequence for heads before and after attention, exposed; all_gather gathers K/V (and reduce-scatters dK/dV)."""
    m, p = plan.model, plan.parallel
    cp, tp = p.cp, p.tp
    if cp <= 1:
        return 0.0, 0.0
    kv_bytes = 2 * tokens * m.head_dim * m.query_groups / tp * BF16
    qkvo_bytes = tokens * m.head_dim * (2 * m.num_attention_heads + 2 * m.query_groups) / tp * BF16

    def ring(ranks: int, span: int, fwd: float, bwd: float) -> tuple[float, float]:
        link = gpu.link(span)
        steps = ranks - 1
        return (steps * max(0.0, cc.send(kv_bytes, link) - fwd / ranks),
                steps * max(0.0, cc.send(2 * kv_bytes, link) - bwd / ranks))

    if p.cp_comm_type == "p2p":
        return ring(cp, tp * cp, attn_fwd, attn_bwd)
    if p.cp_comm_type == "a2a":
        t = cc.all_to_all(qkvo_bytes, cp, gpu.link(tp * cp))
        return t, t
    if p.cp_comm_type == "all_gather":
        t = cc.all_gather(cp * kv_bytes, cp, gpu.link(tp * cp))
        return t, 2 * t
    a, b = (p.hierarchical_cp_sizes or [cp, 1])[:2]
    t = cc.all_to_all(qkvo_bytes, a, gpu.link(tp * a))
    fwd, bwd = ring(b, tp * cp, attn_fwd, attn_bwd) if b > 1 else (0.0, 0.0)
    return t + fwd, t + bwd


def _tp_comm(plan: Plan, gpu: Gpu, eff: Efficiency, tokens: float, moe: bool) -> tuple[float, float]:
    """Exposed TP seconds of one layer, forward and backward. Per TP region (attention; a dense MLP) forward runs an
    all-gather before the column-parallel GEMM and a reduce-scatter after the row-parallel one (TP without SP: two
    all-reduces, the same bytes); backward mirrors them and all-gathers the input again for the weight gradient
    (Transformer Engine keeps the sequence-parallel shard), so 1.5x, unless the weights are frozen. A MoE layer's
    MLP is outside TP: its experts all-gather their routed tokens over expert TP only (token_dispatcher.py)."""
    m, p, t = plan.model, plan.parallel, plan.training
    act = tokens * m.hidden_size * BF16
    bwd_share = 1.5 if t.peft != "lora" else 1.0
    fwd = 0.0
    if p.tp > 1:
        link = gpu.link(p.tp)
        regions = 1 if moe else 2
        fwd += regions * (cc.all_gather(act, p.tp, link) + cc.reduce_scatter(act, p.tp, link))
    if moe and p.etp > 1:
        routed = act / p.tp * m.moe_router_topk * p.etp
        fwd += cc.all_gather(routed, p.etp, gpu.link(p.etp)) + cc.reduce_scatter(routed, p.etp, gpu.link(p.etp))
    hidden = eff.tp_overlap if p.tp_comm_overlap else 0.0
    return fwd * (1 - hidden), fwd * bwd_share * (1 - hidden)


def layer_phases(plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork, moe: bool) -> tuple[Phase, Phase]:
    """Forward and backward (recompute included) of one layer for the mean micro batch, on one GPU."""
    m, p, t = plan.model, plan.parallel, plan.training
    tokens = work.tokens / p.cp
    gemms = layer_gemms(plan, tokens, moe)
    fwd_gemm = sum(gemm_seconds(g.m, g.n, g.k, gpu, eff.gemm, g.count) for g in gemms)
    bwd_gemm = sum(gemm_seconds(g.m, g.k, g.n, gpu, eff.gemm, g.count)
                   + (gemm_seconds(g.k, g.n, g.m, gpu, eff.gemm, g.count) if g.trains else 0.0) for g in gemms)
    q_width = m.head_dim * m.num_attention_heads / p.tp
    attn_f, attn_b = attention_seconds(q_width, work.seqlen_squared_sum / p.cp, tokens, gpu, eff.attention)
    mem = stream_seconds(_elementwise_bytes(plan, moe) * tokens, gpu)
    tp_f, tp_b = _tp_comm(plan, gpu, eff, tokens, moe)
    cp_f, cp_b = _cp_comm(plan, gpu, tokens, attn_f, attn_b)
    a2a = 0.0
    if moe and p.ep > 1:
        routed = tokens / p.tp * m.moe_router_topk * m.hidden_size * BF16
        a2a = 2 * cc.all_to_all_spread(routed, p.ep, p.etp, gpu)  # dispatch and combine
    fwd = Phase(gemm=fwd_gemm, attention=attn_f, memory_bound=mem, tp_comm=tp_f, cp_comm=cp_f, moe_all_to_all=a2a)
    if t.recompute == "full":
        recompute = fwd.total  # the layer's forward runs again before its backward
    elif t.recompute == "selective":
        recompute = attn_f  # core attention recomputed (Megatron's selective default)
    else:
        recompute = 0.0
    bwd = Phase(gemm=bwd_gemm, attention=attn_b, memory_bound=2 * mem, tp_comm=tp_b, cp_comm=cp_b,
                moe_all_to_all=a2a, recompute=recompute)
    return fwd, bwd


def output_phases(plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork) -> tuple[Phase, Phase]:
    """The output layer and the loss on the last stage."""
    p = plan.parallel
    tokens = work.tokens / p.cp
    g = output_gemm(plan, tokens)
    logits = tokens * padded_vocab_size(plan.model.vocab_size, p.tp) / p.tp
    loss = stream_seconds(logits * LOSS_BYTES_PER_LOGIT / 2, gpu)
    tp = 0.0
    if p.tp > 1 and p.sp:
        tp = cc.all_gather(tokens * plan.model.hidden_size * BF16, p.tp, gpu.link(p.tp))
    fwd = Phase(gemm=gemm_seconds(g.m, g.n, g.k, gpu, eff.gemm), memory_bound=loss, tp_comm=tp)
    bwd = Phase(gemm=gemm_seconds(g.m, g.k, g.n, gpu, eff.gemm)
                + (gemm_seconds(g.k, g.n, g.m, gpu, eff.gemm) if g.trains else 0.0), memory_bound=loss, tp_comm=tp)
    return fwd, bwd


def _trainable_per_gpu(plan: Plan) -> tuple[float, float]:
    """Trainable parameters on the busiest GPU (the last stage: its layers and the output layer), split into those
    reduced over the data-parallel x CP group and the experts' (reduced over the expert data-parallel group)."""
    m, p, t = plan.model, plan.parallel, plan.training
    if t.peft == "lora":
        return lora_parameters(plan) / (p.pp * p.tp), 0.0
    c = count_parameters(m, p.tp)
    # the last stage holds the output layer; with one stage it holds the input embedding too (unless tied)
    tables = 2 if p.pp == 1 and not c.tied else 1
    dense = sum(c.dense_by_layer) / p.pp / p.tp + tables * c.embedding / p.tp
    return dense, c.routed / p.pp / (p.ep * p.etp)


def _dp_sync(plan: Plan, gpu: Gpu, fwd_window: float, bwd_window: float) -> tuple[float, float]:
    """Exposed seconds of the gradient reduce-scatter (all-reduce without the distributed optimizer) and parameter
    all-gather, and the optimizer step. Megatron-Bridge's recipes overlap both with the last micro batch's backward and
    the first one's forward (overlap_grad_reduce, overlap_param_gather)."""
    p, t = plan.parallel, plan.training
    dense, routed = _trainable_per_gpu(plan)
    grad_bytes = 4 if t.grad_reduce_in_fp32 else BF16
    ranks = p.dp * p.cp
    expert_ranks = max(1, p.dp * p.cp * p.tp // (p.ep * p.etp))
    link = gpu.link(p.tp * p.cp * p.dp)
    if t.distributed_optimizer:
        grads = (cc.reduce_scatter(dense * grad_bytes, ranks, link)
                 + cc.reduce_scatter(routed * grad_bytes, expert_ranks, link))
        params = cc.all_gather(dense * BF16, ranks, link) + cc.all_gather(routed * BF16, expert_ranks, link)
        bucket = min(dense, max(BUCKET_PARAMETERS, 1e6 * ranks))
        tail = cc.reduce_scatter(bucket * grad_bytes, ranks, link)
        local = dense / ranks + routed / expert_ranks
    else:
        grads = cc.all_reduce(dense * grad_bytes, ranks, link) + cc.all_reduce(routed * grad_bytes, expert_ranks, link)
        params, local = 0.0, dense + routed
        tail = cc.all_reduce(min(dense, max(BUCKET_PARAMETERS, 1e6 * ranks)) * grad_bytes, ranks, link)
    # the last bucket starts only when the backward ends: exposed at least by its own transfer
    exposed = max(tail if ranks > 1 else 0.0, grads - bwd_window) + max(0.0, params - fwd_window)
    return exposed, stream_seconds(local * OPTIMIZER_BYTES, gpu)


def step_time(plan: Plan, work: StepWork, eff: Efficiency) -> StepTime:
    """Seconds per optimizer step and where they go.

    >>> from advisor.plan import plan_from_dict
    >>> from advisor.model.perf.calibration import EFFICIENCY
    >>> plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8}})
    >>> full = step_time(plan, StepWork(tokens=4096, seqlen_squared_sum=4096 ** 2, micro_batches=4), EFFICIENCY)
    >>> lora = step_time(plan.changed({"training": {"peft": "lora"}}),
    ...                  StepWork(tokens=4096, seqlen_squared_sum=4096 ** 2, micro_batches=4), EFFICIENCY)
    >>> 0.6 < lora.step_seconds / full.step_seconds < 0.8
    True
    """
    m, p = plan.model, plan.parallel
    gpu = gpu_of(plan)
    pattern = moe_layer_pattern(m)
    moe_share = sum(pattern) / len(pattern)
    dense_f, dense_b = layer_phases(plan, gpu, eff, work, moe=False) if moe_share < 1 else (Phase(), Phase())
    moe_f, moe_b = layer_phases(plan, gpu, eff, work, moe=True) if moe_share > 0 else (Phase(), Phase())
    layer_f = dense_f * (1 - moe_share) + moe_f * moe_share
    layer_b = dense_b * (1 - moe_share) + moe_b * moe_share
    head_f, head_b = output_phases(plan, gpu, eff, work)
    slots = (m.num_layers + p.pipeline_slots) / p.pp
    last_layers = slots - (1 if p.account_for_loss_in_pipeline_split else 0)
    mean_layers = m.num_layers / p.pp
    last_f, last_b = layer_f * last_layers + head_f, layer_b * last_layers + head_b
    first_layers = slots - (1 if p.account_for_embedding_in_pipeline_split else 0)
    first_f, first_b = layer_f * first_layers, layer_b * first_layers
    first = first_f + first_b
    last = last_f + last_b
    slowest = last if last.total >= first.total else first
    mean_stage = ((layer_f + layer_b) * mean_layers).total + (head_f + head_b).total / p.pp
    mb = work.micro_batches
    bubble = (p.pp - 1) / (p.vpp or 1) * mean_stage if p.pp > 1 else 0.0
    p2p = 0.0
    if p.pp > 1:
        act = work.tokens / p.cp / (p.tp if p.sp else 1) * m.hidden_size * BF16
        link = gpu.link(2 * p.tp * p.cp * p.dp)  # neighbouring stages are TP x CP x DP ranks apart
        # fill and drain cross every stage boundary once each way. In steady state each micro batch waits for a
        # send and a receive per virtual stage, unless overlapped: Megatron-Core's overlap_p2p_comm is off by
        # default; Megatron-Bridge's comm-overlap config (here: tp_comm_overlap) turns it on with VPP
        overlapped = bool(p.vpp) and p.tp_comm_overlap
        p2p = 2 * (p.pp - 1) * cc.send(act, link) + (0.0 if overlapped else 2 * mb * (p.vpp or 1) * cc.send(act, link))
    # Megatron-Core reduces gradients in buckets only where it is on the critical path: the first stage, after its
    # last backward (distributed_data_parallel.py turns bucketing off on later stages)
    windows = (first_f.total, first_b.total) if p.pp > 1 else (last_f.total, last_b.total)
    dp, optimizer = _dp_sync(plan, gpu, fwd_window=windows[0], bwd_window=windows[1])
    steady = slowest * mb
    breakdown = {f.name: getattr(steady, f.name) for f in fields(Phase)}
    breakdown.update(pp_bubble=bubble, pp_p2p=p2p, dp_comm=dp, optimizer=optimizer,
                     straggler=steady.total * (work.straggler - 1))
    return StepTime(step_seconds=sum(breakdown.values()), breakdown=breakdown, stage_seconds=slowest.total)
