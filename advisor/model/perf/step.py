"""One training step on the busiest GPU: micro batches through the pipeline, then the data-parallel sync.

Alternatives: FLOPs / (GPUs x peak x MFU) (one efficiency for every layout, blind to communication, bubbles and LoRA) or
a discrete-event simulation of every kernel and message (more exact, far slower than a planner can afford).
Here: per-layer forward and backward phases (``kernels``, ``collectives``), exposed communication where Megatron
does not hide it, the pipeline's fill and drain, the gradient sync beyond the backward it overlaps, the optimizer.

Step = m x (slowest stage per micro batch) x straggler + (pp - 1)/vpp x (mean stage) + exposed pipeline sends
     + exposed data-parallel sync + optimizer + the slowest GPU's lag, where m is the micro batches per
     data-parallel rank.

The slowest GPU's lag (``slowest_gpu``): GPUs of one model and SKU do not run at one speed (power management and
manufacturing: Sinha et al., "Not All GPUs Are Created Equal", SC22, arXiv 2208.11035, measured an 8 % average
spread between the GPUs of each of five clusters of thousands). The pipeline and the gradient sync couple every
GPU of a job to every other each step, so the step's computation runs at its slowest GPU's pace: the expected
maximum of N draws, ``GPU_SPEED_SPREAD`` x E[max of N standard normals] of the compute (1.4 % at 8 GPUs, 2.6 % at
128, 3.4 % at 2,048). This is what makes the published runs with the same work per GPU a little slower on more
GPUs (bench/calibrate.py --scaling).

Precision (``advisor.model.numerics``): the linear layers' GEMMs run at the format's peak and fitted efficiency, their
inputs and output gradients are cast first (``quantize``: bytes over HBM, plus the recipe's amax reductions), and the
weights are cast once a step; attention, the router and the output layer stay BF16. Megatron FSDP
(``parallel.fsdp``): each layer's parameters are all-gathered before its forward and again before its backward and
its gradients reduce-scattered after it, every micro batch, prefetched behind the neighbouring layer's compute
(Megatron-Core's megatron_fsdp); only what the compute cannot hide is exposed (``fsdp_comm``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from advisor import caches
from advisor.model.memory import activation_bytes_per_token_per_layer, lora_parameters, recomputed_share
from advisor.model.numerics import Numerics, numerics_of
from advisor.model.parameters import count_parameters, moe_layer_pattern, padded_vocab_size
from advisor.model.perf import collectives as cc
from advisor.model.perf.gemms import layer_gemms, output_gemm
from advisor.model.perf.hardware import Gpu, gpu_of
from advisor.model.perf.kernels import attention_seconds, gemm_seconds, stream_seconds
from advisor.model.perf.offload import offload_seconds
from advisor.plan import Plan
from advisor.plan.pipeline_layout import RankLayers, rank_layers

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
BLACKWELL_ULTRA = 10.3  # compute capability of B300 and GB300 (SM103)
# the GPU-to-GPU standard deviation of speed: an 8 % spread (Sinha et al. SC22) between the fastest and slowest of
# clusters of 4,000-27,000 GPUs is ~2 x 3.9 standard deviations of a normal sample that size
GPU_SPEED_SPREAD = 0.01
# the compute a slower GPU stretches (communication runs at the links' pace)
COMPUTE_TERMS = ("gemm", "attention", "memory_bound", "recompute", "quantize")


@functools.lru_cache(maxsize=64)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal draws], by quadrature of n x phi(x) x Phi(x)^(n-1).

    >>> [round(expected_max_normal(n), 3) for n in (1, 2, 8, 128, 2048)]
    [0.0, 0.564, 1.424, 2.595, 3.442]
    """
    if n <= 1:
        return 0.0
    x, pdf, cdf = _normal_grid()
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))


@functools.lru_cache(maxsize=1)
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The standard normal's density and distribution on [-8, 8], once: every n integrates over the same grid."""
    x = np.linspace(-8.0, 8.0, 16001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    grid = (x, np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi), cdf)
    for a in grid:  # shared by every caller: read-only
        a.flags.writeable = False
    return grid


caches.listed("the expected maximum of n normal draws (the slowest of n GPUs)", expected_max_normal)
caches.listed("the standard normal on the grid the expected maximum integrates over", _normal_grid)


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """The fitted constants (``calibration``): everything else is a datasheet figure or a count."""

    gemm: float  # fraction of the dense peak (BF16 or FP8) that large GEMMs sustain, Hopper and before
    attention: float  # fraction of peak that flash attention sustains on long sequences (Hopper and before)
    tp_overlap: float  # share of TP communication hidden behind GEMMs with tp_comm_overlap on
    gemm_blackwell: float = 0.0  # the same on Blackwell (compute capability 10), whose datasheet peaks are boost
    # clocks a 1,000-1,400 W part does not hold under dense GEMMs; 0: as ``gemm``
    gemm_fp4: float = 0.0  # fraction of dense FP4 peak that large NVFP4 GEMMs sustain; 0: as FP8
    attention_blackwell: float = 0.0  # flash attention on Blackwell (compute capability 10); 0: as ``attention``
    attention_ultra: float = 0.0  # flash attention on Blackwell Ultra (10.3); 0: as ``attention``
    grouped: float = 1.0  # a rank's local experts in one grouped GEMM run at this share of a dense GEMM's efficiency
    expert_overhead_ms: float = 0.0  # milliseconds per local expert, MoE layer and micro batch, forward and
    # backward, beyond the kernels' work: Transformer Engine's GroupedLinear launches one GEMM (and one cast in FP8)
    # per local expert (general_grouped_gemm: a cuBLAS call per GEMM), after the dispatcher's host synchronisation on
    # the tokens per expert has drained the launch queue

    def gemm_for(self, fmt: str, gpu: Gpu | None = None) -> float:
        """The GEMM efficiency of a tensor-core format (BF16 and FP8 share one) on ``gpu``'s architecture."""
        base = self.gemm_blackwell or self.gemm if gpu is not None and gpu.compute_capability >= 10 else self.gemm
        return self.gemm_fp4 or base if fmt == "fp4" else base

    def attention_for(self, gpu: Gpu) -> float:
        """Blackwell (10.0) doubled the tensor cores' throughput per SM over Hopper but kept 16 exponentials per
        clock and SM, so softmax stalls its attention kernels (``attention_blackwell``); Blackwell Ultra (10.3)
        doubles the exponentials too ("Making Softmax More Efficient with NVIDIA Blackwell Ultra", NVIDIA technical
        blog, 2026), which restores Hopper's balance of matrix to exponential work (``attention_ultra``: the kernel
        benchmarks' Hopper figure; Hopper's own is fitted on long-context runs of older kernels)."""
        if gpu.compute_capability >= BLACKWELL_ULTRA:
            return self.attention_ultra or self.attention
        return (self.attention_blackwell or self.attention) if gpu.compute_capability >= 10 else self.attention


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What a step runs: the mean micro batch (all CP ranks together, padding included) and how many."""

    tokens: float  # tokens per micro batch
    seqlen_squared_sum: float  # sum(s_i^2) per micro batch, the attention work the kernels run
    micro_batches: float  # per data-parallel rank and step
    straggler: float = 1.0  # slowest over mean data-parallel rank (the packs' real work, ``throughput``)
    # dynamic CP: the CP group sizes the scheduler forms at run time, each as (share of the ranks' micro batches,
    # group size g, mean tokens per rank, mean sum(s^2) per rank, both over g); empty: every micro batch on the
    # layout's CP group (static CP)
    cp_groups: tuple[tuple[float, int, float, float], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Phase:
    """Seconds of one micro batch through a layer (or the output layer) on one GPU, by what they model."""

    gemm: float = 0.0
    attention: float = 0.0
    memory_bound: float = 0.0
    recompute: float = 0.0
    quantize: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0
    moe_all_to_all: float = 0.0
    moe_dispatch: float = 0.0
    fsdp_comm: float = 0.0
    offload: float = 0.0

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
    the token permutation there and back. Norm, residual and permutation work is split by TP only with SP. The flex
    dispatcher's kernels (DeepEP, HybridEP) write the tokens they receive in expert order and combine them back in
    place: no separate permutation pass (megatron/core/transformer/moe/token_dispatcher.py, MoEFlexTokenDispatcher)."""
    m, p = plan.model, plan.parallel
    h, q, kv, tp = m.hidden_size, m.head_dim * m.num_attention_heads, m.head_dim * m.query_groups, p.tp
    f = (m.moe_ffn_hidden_size or m.ffn_hidden_size) if moe else m.ffn_hidden_size
    copies = m.moe_router_topk if moe else 1
    permute = moe and p.moe_dispatcher == "alltoall"
    sequence = 4 * h + 6 * h + (4 * copies * h if permute else 0)
    split = 2 * (q + kv) + (3 if m.gated_linear_unit else 2) * f * copies
    return BF16 * (sequence / (tp if p.sp else 1) + split / tp)


def _cp_comm(
    plan: Plan, gpu: Gpu, tokens: float, attn_fwd: float, attn_bwd: float, cp: int | None = None
) -> tuple[float, float]:
    """Exposed seconds of the CP exchange in forward and backward, by Transformer Engine's cp_comm_type
    (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): p2p rings K/V around the CP
    ranks one step per rank, each send hidden behind the attention of the chunk already there; a2a (Ulysses) trades
    sequence for heads before and after attention, exposed; all_gather gathers K/V (and reduce-scatters dK/dV).
    ``cp``: the group's size when it is not the layout's (dynamic CP's runtime groups, of ``tokens`` per rank); its
    ranks are taken as contiguous in the DP x CP order (TP ranks apart), so a group of g spans TP x g GPUs: inside
    one NVLink domain when that is at most the domain, else its ring crosses the network (each GPU's NIC share)."""
    m, p = plan.model, plan.parallel
    cp, tp = cp or p.cp, p.tp
    if cp <= 1:
        return 0.0, 0.0
    kv_bytes = 2 * tokens * m.head_dim * m.query_groups / tp * BF16
    qkvo_bytes = tokens * m.head_dim * (2 * m.num_attention_heads + 2 * m.query_groups) / tp * BF16

    def ring(ranks: int, span: int, fwd: float, bwd: float) -> tuple[float, float]:
        link = gpu.link(span)
        steps = ranks - 1
        return (
            steps * max(0.0, cc.send(kv_bytes, link) - fwd / ranks),
            steps * max(0.0, cc.send(2 * kv_bytes, link) - bwd / ranks),
        )

    if p.cp_comm_type == "p2p" or (p.cp_comm_type == "a2a+p2p" and cp != p.cp):
        return ring(cp, tp * cp, attn_fwd, attn_bwd)
    if p.cp_comm_type == "a2a":
        t = cc.all_to_all_spread(qkvo_bytes, cp, tp, gpu)
        return t, t
    if p.cp_comm_type == "all_gather":
        t = cc.all_gather(cp * kv_bytes, cp, gpu.ring(cp, tp))
        return t, 2 * t
    a, b = (p.hierarchical_cp_sizes or [cp, 1])[:2]
    t = cc.all_to_all_spread(qkvo_bytes, a, tp, gpu)
    fwd, bwd = ring(b, tp * cp, attn_fwd, attn_bwd) if b > 1 else (0.0, 0.0)
    return t + fwd, t + bwd


def _dynamic_cp_comm(plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork, q_width: float) -> tuple[float, float]:
    """Dynamic CP's exchange for the mean micro batch: each runtime group size g's ring (``_cp_comm`` at g, its own
    tokens per rank and the attention that hides each send) weighted by the share of the ranks' micro batches that
    run on such a group (Megatron-Core's dynamic CP creates a process group per power-of-two size and passes the
    micro batch's to Transformer Engine: FIELD_2026-11 section 2.3)."""
    fwd = bwd = 0.0
    for share, g, tokens, work_sq in work.cp_groups:
        if g <= 1 or share <= 0:
            continue
        alone = replace(work, tokens=tokens * plan.parallel.cp, seqlen_squared_sum=work_sq * plan.parallel.cp)
        attn_f, attn_b = _attention(plan, gpu, eff, alone, q_width, tokens)
        f, b = _cp_comm(plan, gpu, tokens, attn_f, attn_b, cp=g)
        fwd, bwd = fwd + share * f, bwd + share * b
    return fwd, bwd


def _tp_comm(plan: Plan, gpu: Gpu, eff: Efficiency, tokens: float, moe: bool, num: Numerics) -> tuple[float, float]:
    """Exposed TP seconds of one layer, forward and backward. Per TP region (attention; a dense MLP) forward runs an
    all-gather before the column-parallel GEMM and a reduce-scatter after the row-parallel one (TP without SP: two
    all-reduces, the same bytes); backward mirrors them and all-gathers the input again for the weight gradient
    (Transformer Engine keeps the sequence-parallel shard), so 1.5x, unless the weights are frozen. A MoE layer's
    MLP is outside TP: its experts all-gather their routed tokens over expert TP only (token_dispatcher.py). In FP8
    and FP4 Transformer Engine casts the sequence-parallel input before gathering it, so the gathers move the
    quantized bytes; the reduce-scatters stay BF16."""
    m, p, t = plan.model, plan.parallel, plan.training
    act = tokens * m.hidden_size * BF16
    gathered = act * num.saved_input_bytes / BF16 if p.sp else act
    bwd_share = 1.5 if t.peft != "lora" else 1.0
    fwd = 0.0
    if p.tp > 1:
        link = gpu.ring(p.tp)
        regions = 1 if moe else 2
        fwd += regions * (cc.all_gather(gathered, p.tp, link) + cc.reduce_scatter(act, p.tp, link))
    if moe and p.etp > 1:
        routed = act / p.tp * m.moe_router_topk * p.etp
        fwd += cc.all_gather(routed, p.etp, gpu.ring(p.etp)) + cc.reduce_scatter(routed, p.etp, gpu.ring(p.etp))
    hidden = eff.tp_overlap if p.tp_comm_overlap else 0.0
    return fwd * (1 - hidden), fwd * bwd_share * (1 - hidden)


def layer_phases(plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork, moe: bool) -> tuple[Phase, Phase]:
    """Forward and backward (recompute included) of one layer for the mean micro batch, on one GPU."""
    m, p, t = plan.model, plan.parallel, plan.training
    num = numerics_of(plan)
    tokens = work.tokens / p.cp
    gemms = layer_gemms(plan, tokens, moe)

    def run(g, mm, nn, kk) -> float:
        fmt = num.gemm if g.quantized else "bf16"
        grouped = eff.grouped if g.name.startswith("expert_") and g.count > 1 else 1.0  # a grouped kernel
        return gemm_seconds(mm, nn, kk, gpu, eff.gemm_for(fmt, gpu) * grouped, g.count, fmt)

    fwd_gemm = sum(run(g, g.m, g.n, g.k) for g in gemms)
    bwd_gemm = sum(run(g, g.m, g.k, g.n) + (run(g, g.k, g.n, g.m) if g.trains else 0.0) for g in gemms)
    # casts: each quantized GEMM's input in forward, its output gradient in backward (rowwise and columnwise copies)
    cast = [g for g in gemms if g.quantized and num.quantized]
    q_fwd = stream_seconds(num.quantize_bytes * sum(g.count * g.m * g.k for g in cast), gpu)
    q_bwd = stream_seconds(num.quantize_bytes * sum(g.count * g.m * g.n for g in cast), gpu)
    if num.amax_reduction == "tp" and p.tp > 1 and p.sp:  # the amax of a sequence-parallel input, over TP
        regions = 1 if moe else 2
        q_fwd += regions * gpu.small_all_reduce(p.tp)
        q_bwd += regions * gpu.small_all_reduce(p.tp)
    q_width = m.head_dim * m.num_attention_heads / p.tp
    attn_f, attn_b = _attention(plan, gpu, eff, work, q_width, tokens)
    mem = stream_seconds(_elementwise_bytes(plan, moe) * tokens, gpu)
    tp_f, tp_b = _tp_comm(plan, gpu, eff, tokens, moe, num)
    cp_f, cp_b = (
        _cp_comm(plan, gpu, tokens, attn_f, attn_b)
        if not work.cp_groups
        else _dynamic_cp_comm(plan, gpu, eff, work, q_width)
    )
    a2a = 0.0
    if moe and p.ep > 1:
        routed = tokens / p.tp * m.moe_router_topk * m.hidden_size * BF16
        a2a = 2 * cc.all_to_all_spread(routed, p.ep, p.etp, gpu)  # dispatch and combine
    dispatch = _moe_overhead(plan, eff) / 3 if moe else 0.0  # a third in forward, two in backward, as the work
    fwd = Phase(
        gemm=fwd_gemm,
        attention=attn_f,
        memory_bound=mem,
        quantize=q_fwd,
        tp_comm=tp_f,
        cp_comm=cp_f,
        moe_all_to_all=a2a,
        moe_dispatch=dispatch,
    )
    if t.recompute == "full":  # the layer's forward runs again before its backward, in every layer or the block's
        recompute = fwd.total * recomputed_share(plan)
    elif t.recompute == "selective":
        recompute = attn_f  # core attention recomputed (Megatron's selective default)
    else:
        recompute = 0.0
    bwd = Phase(
        gemm=bwd_gemm,
        attention=attn_b,
        memory_bound=2 * mem,
        quantize=q_bwd,
        tp_comm=tp_b,
        cp_comm=cp_b,
        moe_all_to_all=a2a,
        moe_dispatch=2 * dispatch,
        recompute=recompute,
    )
    if moe and p.moe_a2a_overlap and a2a:
        experts = [g for g in gemms if g.name.startswith("expert_")]
        mlp_fwd = sum(run(g, g.m, g.n, g.k) for g in experts)
        mlp_bwd = sum(run(g, g.m, g.k, g.n) + (run(g, g.k, g.n, g.m) if g.trains else 0.0) for g in experts)
        fwd, bwd = _a2a_overlap(fwd, bwd, mlp_fwd, mlp_bwd)
    if p.fsdp:
        fwd, bwd = _fsdp_layer(plan, gpu, num, fwd, bwd, moe)
    return fwd, bwd


def _moe_overhead(plan: Plan, eff: Efficiency) -> float:
    """The fixed seconds of a MoE layer per micro batch beyond its kernels' work, forward and backward: a cost per
    local expert (num_moe_experts / EP), whatever the tokens."""
    return eff.expert_overhead_ms * 1e-3 * (plan.model.num_moe_experts or 0) / plan.parallel.ep


def _a2a_overlap(fwd: Phase, bwd: Phase, mlp_fwd: float, mlp_bwd: float) -> tuple[Phase, Phase]:
    """Megatron-Core's EP all-to-all overlap (overlap_moe_expert_parallel_comm): in the steady 1F1B state one micro
    batch's forward layer and another's backward layer run together, each all-to-all on a communication stream
    behind one compute block of the other (models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan
    .run): the backward's combine behind the forward's attention, the forward's dispatch behind the backward's
    experts, the backward's dispatch behind the forward's experts, the forward's combine behind the backward's
    attention. Each is exposed only where it outlasts its block (``mlp_*``: the experts' GEMMs; attention: the rest
    of the layer's compute)."""
    half_f, half_b = fwd.moe_all_to_all / 2, bwd.moe_all_to_all / 2
    attn_f = fwd.total - fwd.moe_all_to_all - fwd.moe_dispatch - mlp_fwd
    attn_b = bwd.total - bwd.moe_all_to_all - bwd.moe_dispatch - mlp_bwd
    exposed_f = max(0.0, half_f - mlp_bwd) + max(0.0, half_f - attn_b)
    exposed_b = max(0.0, half_b - attn_f) + max(0.0, half_b - mlp_fwd)
    return replace(fwd, moe_all_to_all=exposed_f), replace(bwd, moe_all_to_all=exposed_b)


def _attention(
    plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork, q_width: float, tokens: float
) -> tuple[float, float]:
    """Flash attention of one layer, the mean over full and sliding-window layers (window_attn_skip_freq k: every
    k-th layer attends fully, Megatron-Core's transformer_config.py); a learnable softmax offset (attention sinks)
    adds one logit per query and head, nothing measurable."""
    m, p = plan.model, plan.parallel
    efficiency = eff.attention_for(gpu)
    full = attention_seconds(q_width, work.seqlen_squared_sum / p.cp, tokens, gpu, efficiency, ring=_ring_ranks(plan))
    if not m.window_size:
        return full
    windowed = attention_seconds(q_width, work.seqlen_squared_sum / p.cp, tokens, gpu, efficiency, window=m.window_size)
    share = windowed_layer_share(m)
    (windowed_f, windowed_b), (full_f, full_b) = windowed, full
    return share * windowed_f + (1 - share) * full_f, share * windowed_b + (1 - share) * full_b


def _ring_ranks(plan: Plan) -> int:
    """The ranks of the p2p ring the attention kernels run their chunks on: CP for p2p, the ring part of a2a+p2p;
    none for a2a (whole sequences after the exchange) and all_gather (each rank's two query chunks run against the
    whole gathered K/V, two kernels, not ring steps of chunk rectangles). Dynamic CP's groups are mostly smaller
    than the layout's: taken as the layout's, the bound on the chunking."""
    p = plan.parallel
    if p.cp <= 1 or p.cp_comm_type in ("a2a", "all_gather"):
        return 1
    if p.cp_comm_type == "a2a+p2p":
        return (p.hierarchical_cp_sizes or [p.cp, 1])[1]
    return p.cp


def windowed_layer_share(model) -> float:
    """The share of layers under the sliding window: all of them, or all but every k-th with window_attn_skip_freq
    k (layer i, counted from 1, attends fully when i % k == 0)."""
    if not model.window_size:
        return 0.0
    k = model.window_attn_skip_freq
    if not k:
        return 1.0
    return sum(1 for i in range(1, model.num_layers + 1) if i % k) / model.num_layers


def _layer_parameters(plan: Plan, moe: bool) -> tuple[float, float]:
    """One layer's parameters on one GPU before FSDP sharding: (dense, over TP; routed experts, over EP x ETP)."""
    m, p = plan.model, plan.parallel
    c = count_parameters(m, p.tp)
    pattern = moe_layer_pattern(m)
    picks = [i for i, x in enumerate(pattern) if x == moe] or [0]
    dense = sum(c.dense_by_layer[i] for i in picks) / len(picks) / p.tp
    routed = sum(c.routed_by_layer[i] for i in picks) / len(picks) / (p.ep * p.etp)
    return dense, routed


def _fsdp_layer(plan: Plan, gpu: Gpu, num: Numerics, fwd: Phase, bwd: Phase, moe: bool) -> tuple[Phase, Phase]:
    """Megatron FSDP (optim_grads_params) around one layer, per micro batch: all-gather its parameters (in the
    precision's compute copy: FP8 with fp8_param_gather) before forward and again before backward, reduce-scatter
    its gradients after backward, over the DP x CP ranks (experts over their data-parallel group); each is
    prefetched behind the neighbouring layer's compute, so only the excess is exposed."""
    p, t = plan.parallel, plan.training
    dense, routed = _layer_parameters(plan, moe)
    ranks = p.dp * p.cp
    expert_ranks = max(1, p.dp * p.cp * p.tp // (p.ep * p.etp))
    link, expert_link = gpu.ring(ranks, p.tp), gpu.ring(expert_ranks, p.ep * p.etp)
    grad_bytes = 4 if t.grad_reduce_in_fp32 else BF16
    trains = t.peft != "lora"
    gather = cc.all_gather(dense * num.weight_bytes, ranks, link) + cc.all_gather(
        routed * num.weight_bytes, expert_ranks, expert_link
    )
    scatter = (
        (
            cc.reduce_scatter(dense * grad_bytes, ranks, link)
            + cc.reduce_scatter(routed * grad_bytes, expert_ranks, expert_link)
        )
        if trains
        else 0.0
    )
    busy_f = fwd.total
    busy_b = bwd.total
    return (
        fwd + Phase(fsdp_comm=max(0.0, gather - busy_f)),
        bwd + Phase(fsdp_comm=max(0.0, gather + scatter - busy_b)),
    )


def output_phases(plan: Plan, gpu: Gpu, eff: Efficiency, work: StepWork) -> tuple[Phase, Phase]:
    """The output layer and the loss on the last stage."""
    p = plan.parallel
    tokens = work.tokens / p.cp
    g = output_gemm(plan, tokens)
    logits = tokens * padded_vocab_size(plan.model.vocab_size, p.tp) / p.tp
    loss = stream_seconds(logits * LOSS_BYTES_PER_LOGIT / 2, gpu)
    tp = 0.0
    if p.tp > 1 and p.sp:
        tp = cc.all_gather(tokens * plan.model.hidden_size * BF16, p.tp, gpu.ring(p.tp))
    e = eff.gemm_for("bf16", gpu)
    fwd = Phase(gemm=gemm_seconds(g.m, g.n, g.k, gpu, e), memory_bound=loss, tp_comm=tp)
    bwd = Phase(
        gemm=gemm_seconds(g.m, g.k, g.n, gpu, e) + (gemm_seconds(g.k, g.n, g.m, gpu, e) if g.trains else 0.0),
        memory_bound=loss,
        tp_comm=tp,
    )
    return fwd, bwd


def _trainable_per_gpu(plan: Plan, frozen: bool = False) -> tuple[float, float]:
    """Trainable parameters on the busiest GPU (the last stage: its layers and the output layer), split into those
    reduced over the data-parallel x CP group and the experts' (reduced over the expert data-parallel group);
    ``frozen``: every parameter there, LoRA's frozen base included."""
    m, p, t = plan.model, plan.parallel, plan.training
    if t.peft == "lora" and not frozen:
        return lora_parameters(plan) / (p.pp * p.tp), 0.0
    c = count_parameters(m, p.tp)
    # the last stage holds the output layer; with one stage it holds the input embedding too (unless tied)
    tables = 2 if p.pp == 1 and not c.tied else 1
    dense = sum(c.dense_by_layer) / p.pp / p.tp + tables * c.embedding / p.tp
    return dense, c.routed / p.pp / (p.ep * p.etp)


def _dp_sync(plan: Plan, gpu: Gpu, num: Numerics, fwd_window: float, bwd_window: float) -> tuple[float, float, float]:
    """Exposed seconds of the gradient reduce-scatter (all-reduce without the distributed optimizer) and parameter
    all-gather, the optimizer step, and the weights' cast to the precision's compute copy. Megatron-Bridge's recipes
    overlap both with the last micro batch's backward and the first one's forward (overlap_grad_reduce,
    overlap_param_gather); the parameters are gathered in their compute precision (fp8_param_gather). Under Megatron
    FSDP the gathers and reduce-scatters run layer by layer (``_fsdp_layer``): here only the first layer's gather
    and the last one's reduce-scatter, which nothing hides."""
    p, t = plan.parallel, plan.training
    dense, routed = _trainable_per_gpu(plan)
    # the cast of the weights, once a step: of the local shard where the optimizer keeps quantized parameters
    # (fp8/fp4_param_gather), of every weight on the GPU where Transformer Engine caches its casts (blockwise)
    stored = sum(_trainable_per_gpu(plan, frozen=True))
    shard = p.dp * p.cp if (t.distributed_optimizer or p.fsdp) else 1
    cast = 0.0
    if num.quantized:
        cast = stream_seconds(num.quantize_bytes * (stored / shard if num.weight_bytes < BF16 else stored), gpu)
    grad_bytes = 4 if t.grad_reduce_in_fp32 else BF16
    ranks = p.dp * p.cp
    expert_ranks = max(1, p.dp * p.cp * p.tp // (p.ep * p.etp))
    # the DP x CP group holds the ranks of one TP rank (TP apart); the expert data-parallel group the ranks of one
    # EP x expert-TP position (megatron/core/parallel_state.py rank order tp-cp-ep-dp-pp)
    link = gpu.ring(ranks, p.tp)
    expert_link = gpu.ring(expert_ranks, p.ep * p.etp)
    if t.distributed_optimizer:
        grads = cc.reduce_scatter(dense * grad_bytes, ranks, link) + cc.reduce_scatter(
            routed * grad_bytes, expert_ranks, expert_link
        )
        params = cc.all_gather(dense * num.weight_bytes, ranks, link) + cc.all_gather(
            routed * num.weight_bytes, expert_ranks, expert_link
        )
        bucket = min(dense, max(BUCKET_PARAMETERS, 1e6 * ranks))
        tail = cc.reduce_scatter(bucket * grad_bytes, ranks, link)
        local = dense / ranks + routed / expert_ranks
    else:
        grads = cc.all_reduce(dense * grad_bytes, ranks, link) + cc.all_reduce(
            routed * grad_bytes, expert_ranks, expert_link
        )
        params, local = 0.0, dense + routed
        tail = cc.all_reduce(min(dense, max(BUCKET_PARAMETERS, 1e6 * ranks)) * grad_bytes, ranks, link)
    if p.fsdp:  # the rest of FSDP's traffic is in the layers' phases
        layer, layer_routed = _layer_parameters(plan, moe=any(moe_layer_pattern(plan.model)))
        first = cc.all_gather(layer * num.weight_bytes, ranks, link) + cc.all_gather(
            layer_routed * num.weight_bytes, expert_ranks, expert_link
        )
        last = cc.reduce_scatter(layer * grad_bytes, ranks, link) if t.peft != "lora" else 0.0
        return first + last, stream_seconds((dense / ranks + routed / expert_ranks) * OPTIMIZER_BYTES, gpu), cast
    # the last bucket starts only when the backward ends: exposed at least by its own transfer
    exposed = max(tail if ranks > 1 else 0.0, grads - bwd_window) + max(0.0, params - fwd_window)
    return exposed, stream_seconds(local * OPTIMIZER_BYTES, gpu), cast


def _offload(plan: Plan, gpu: Gpu, work: StepWork, forward: float, backward: float) -> Phase:
    """The copies of CPU offloading (pp 1) the layers' compute does not hide, per micro batch: each offloaded layer's
    saved activations out over the host link in forward and back in backward (``offload``)."""
    layer_bytes = activation_bytes_per_token_per_layer(plan) * work.tokens / plan.parallel.cp
    copy = layer_bytes / gpu.host.bandwidth + gpu.host.latency
    fwd, bwd = offload_seconds(plan.model.num_layers, plan.training.cpu_offloading_num_layers, forward, backward, copy)
    return Phase(offload=fwd + bwd)


def _rank_phases(
    rank: RankLayers,
    pattern: tuple[bool, ...],
    dense: tuple[Phase, Phase],
    moe: tuple[Phase, Phase],
    head: tuple[Phase, Phase],
    mtp_layers: int,
) -> tuple[Phase, Phase]:
    """Forward and backward of one micro batch through a pipeline rank's layers by layout: its decoder layers
    (dense or MoE by ``moe_layer_freq``), each MTP layer it holds, and on the last rank the output layer once for
    the model and once per MTP layer (Megatron-Core multi_token_prediction.py: each MTP layer's hidden states go
    through the shared output layer and its loss in the post-process, ``process_mtp_loss``)."""
    n_moe = sum(1 for i in rank.decoders if pattern[i])
    n_dense = len(rank.decoders) - n_moe
    mtp = _mtp_layer(pattern, dense, moe)
    heads = 1 + mtp_layers if rank.loss else 0

    def one(k: int) -> Phase:
        return dense[k] * n_dense + moe[k] * n_moe + mtp[k] * rank.mtp + head[k] * heads

    return one(0), one(1)


def _mtp_layer(pattern: tuple[bool, ...], dense: tuple[Phase, Phase], moe: tuple[Phase, Phase]) -> tuple[Phase, Phase]:
    """An MTP layer's forward and backward: a transformer layer of the last decoder layer's kind (Megatron-Core
    builds the MTP block from the decoder's last layer spec)."""
    return moe if pattern[-1] else dense


def _boundary_spans(stride: int, pp: int, domain: int) -> list[int]:
    """Per pipeline boundary, a span ``Gpu.link`` reads: ``stride`` (the pair stays on NVLink) where no pair of the
    two neighbouring stages (blocks of ``stride`` GPUs, one stride apart) crosses an NVLink domain, else one wider
    than the domain. A pair (g, g + stride) crosses iff a multiple of the domain lies in (g, g + stride].

    >>> [s > 8 for s in _boundary_spans(4, 4, 8)]   # TP x CP x DP = 4: stages 0-1 on one node, 2-3 on the next
    [False, True, False]
    >>> [s > 8 for s in _boundary_spans(8, 3, 8)]   # a stage fills a node: every boundary on the network
    [True, True]
    """
    out = []
    for b in range(1, pp):
        lo, hi = (b - 1) * stride, (b + 1) * stride - 1  # pairs (g, g + stride) for g in stage b - 1
        crosses = stride >= domain or hi // domain > lo // domain
        out.append(domain + 1 if crosses else stride)
    return out


def pipeline_bubble(pp: int, vpp: int | None, stage_seconds: float) -> float:
    """Seconds a 1F1B step spends filling and draining the pipeline beyond its micro batches' own work:
    (pp - 1) / vpp of one micro batch's forward and backward through a stage (``stage_seconds``, all its model
    chunks). Megatron-Core's order (the warm-up counts of ``get_pp_rank_microbatches`` and the interleaved
    ``get_schedule_table``), event-simulated without send latency, takes exactly m x stage + this
    (tests/oracle/test_pipeline_schedule.py; bench/bench_pipeline_latency.py adds the sends).

    >>> pipeline_bubble(4, None, 1.0), pipeline_bubble(4, 5, 1.0), pipeline_bubble(1, None, 1.0)
    (3.0, 0.6, 0.0)
    """
    return (pp - 1) / (vpp or 1) * stage_seconds if pp > 1 else 0.0


def step_time(plan: Plan, work: StepWork, eff: Efficiency) -> StepTime:
    """Seconds per optimizer step and where they go.

    >>> from advisor.plan import plan_from_dict
    >>> from advisor.model.perf.calibration import EFFICIENCY
    >>> plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8}})
    >>> full = step_time(plan, StepWork(tokens=4096, seqlen_squared_sum=4096 ** 2, micro_batches=4), EFFICIENCY)
    >>> lora = step_time(plan.changed({"training": {"peft": "lora"}}),
    ...                  StepWork(tokens=4096, seqlen_squared_sum=4096 ** 2, micro_batches=4), EFFICIENCY)
    >>> 0.6 < lora.step_seconds / full.step_seconds < 0.85
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
    stages = plan.pipeline_stages
    if stages is not None:
        ranks = [
            _rank_phases(r, pattern, (dense_f, dense_b), (moe_f, moe_b), (head_f, head_b), m.mtp_num_layers)
            for r in rank_layers(stages, p.pp)
        ]
        (first_f, first_b), (last_f, last_b) = ranks[0], ranks[-1]
        totals = [f + b for f, b in ranks]
        slowest = max(totals, key=lambda x: x.total)
        mean_stage = sum(x.total for x in totals) / p.pp
    else:
        slots = (m.num_layers + p.pipeline_slots) / p.pp
        last_layers = slots - (1 if p.account_for_loss_in_pipeline_split else 0)
        mean_layers = m.num_layers / p.pp
        # Megatron-Core builds the MTP layers on the last stage, each with its own pass through the output layer
        kind_f, kind_b = _mtp_layer(pattern, (dense_f, dense_b), (moe_f, moe_b))
        mtp_f, mtp_b = (kind_f + head_f) * m.mtp_num_layers, (kind_b + head_b) * m.mtp_num_layers
        last_f, last_b = layer_f * last_layers + head_f + mtp_f, layer_b * last_layers + head_b + mtp_b
        first_layers = slots - (1 if p.account_for_embedding_in_pipeline_split else 0)
        first_f, first_b = layer_f * first_layers, layer_b * first_layers
        first = first_f + first_b
        last = last_f + last_b
        slowest = last if last.total >= first.total else first
        mean_stage = ((layer_f + layer_b) * mean_layers).total + (head_f + head_b + mtp_f + mtp_b).total / p.pp
    if plan.training.cpu_offloading_num_layers and p.pp == 1:
        slowest = slowest + _offload(plan, gpu, work, layer_f.total, layer_b.total)
    mb = work.micro_batches
    bubble = pipeline_bubble(p.pp, p.vpp, mean_stage)
    p2p = 0.0
    if p.pp > 1:
        act = work.tokens / p.cp / (p.tp if p.sp else 1) * m.hidden_size * BF16
        # neighbouring stages are TP x CP x DP ranks apart (a stage is a block of that many GPUs): a pipeline wider
        # than one NVLink domain has a boundary on the network (every one once a stage fills a domain), and in
        # steady state the stages keep the pace of the slowest boundary
        spans = _boundary_spans(p.tp * p.cp * p.dp, p.pp, gpu.domain)
        link = gpu.link(max(spans))
        # fill and drain cross every stage boundary once each way, each on its own link. In steady state each micro
        # batch waits for a send and a receive per virtual stage, unless overlapped: Megatron-Core's
        # overlap_p2p_comm is off by default; Megatron-Bridge's comm-overlap config (here: tp_comm_overlap) turns
        # it on with VPP
        overlapped = bool(p.vpp) and p.tp_comm_overlap
        fill = sum(cc.send(act, gpu.link(span)) for span in spans)
        p2p = 2 * fill + (0.0 if overlapped else 2 * mb * (p.vpp or 1) * cc.send(act, link))
    # Megatron-Core reduces gradients in buckets only where it is on the critical path: the first stage, after its
    # last backward (distributed_data_parallel.py turns bucketing off on later stages)
    windows = (first_f.total, first_b.total) if p.pp > 1 else (last_f.total, last_b.total)
    num = numerics_of(plan)
    dp, optimizer, cast = _dp_sync(plan, gpu, num, fwd_window=windows[0], bwd_window=windows[1])
    if num.amax_reduction == "step":  # delayed scaling: the amaxes reduced once a micro batch over DP x TP x CP
        cast += mb * gpu.small_all_reduce(p.dp * p.cp * p.tp)
    steady = slowest * mb
    breakdown = {f.name: getattr(steady, f.name) for f in fields(Phase)}
    breakdown["quantize"] += cast
    breakdown.update(
        pp_bubble=bubble, pp_p2p=p2p, dp_comm=dp, optimizer=optimizer, straggler=steady.total * (work.straggler - 1)
    )
    # the GPU's own work, in the steady state and in the bubble's share of it (not the step's casts and amax
    # reductions added above, nor the MoE dispatch's host-side overhead)
    own = sum(getattr(steady, k) for k in COMPUTE_TERMS)
    compute = own * work.straggler + (bubble * own / steady.total if steady.total > 0 else 0.0)
    breakdown["slowest_gpu"] = GPU_SPEED_SPREAD * expected_max_normal(p.gpus) * compute
    return StepTime(step_seconds=sum(breakdown.values()), breakdown=breakdown, stage_seconds=slowest.total)
