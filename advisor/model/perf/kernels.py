"""Seconds of one kernel on one GPU: a GEMM by its shape, causal flash attention by its work, streaming work by bytes.

Alternatives: one MFU for everything (the advisor's old model: blind to shapes, kernels and LoRA) or a measured
kernel database (needs the GPU). Here: rooflines with the two efficiencies of ``calibration`` and the shape
effects that need no fitting: GEMM wave quantization and the causal diagonal tiles of flash attention.
"""

from __future__ import annotations

import math

from advisor.model.perf.hardware import OPERAND_BYTES, Gpu

# Hopper/Blackwell BF16 GEMMs run 128 x 256 output tiles, one per SM at a time: a GEMM of 133 tiles on 132 SMs
# takes two waves, the second almost empty (why small or TP-split GEMMs run below the big ones' efficiency). For
# small GEMMs cuBLAS picks smaller tiles, which fill the SMs better but reuse each operand less: their rate is
# taken in proportion to the tile's arithmetic intensity m n / (m + n) (128 x 256: 85, 128 x 128: 64, 64 x 128: 43).
TILES = ((128, 256), (128, 128), (64, 128))
# flash attention computes the causal mask in 128 x 128 blocks: the blocks on the diagonal are computed whole, so
# a sequence of s tokens costs s^2/2 + 64 s, not s^2/2 (why short packed sequences run at lower efficiency)
ATTENTION_BLOCK = 128
# no kernel finishes faster than its launch and tail: what a tiny model (the trial's) is made of
KERNEL_FLOOR_SECONDS = 5e-6
# FlashAttention-2/3 backward runs five block matmuls (S and dP recomputed, dV, dK, dQ) where forward runs two
ATTENTION_BACKWARD_RATIO = 2.5


def tile_efficiency(m: float, n: float, sms: int, count: float = 1.0) -> float:
    """The best of the tile shapes: wave fill times the tile's operand reuse relative to the largest tile. A grouped
    GEMM (``count`` experts in one kernel) fills the waves with all its groups' tiles.

    >>> round(tile_efficiency(8192, 4096, 132), 3), round(tile_efficiency(183, 3072, 132), 3)
    (0.97, 0.273)
    """
    best = TILES[0][0] * TILES[0][1] / sum(TILES[0])
    return max(_waves(m, n, sms, tm, tn, count) * (tm * tn / (tm + tn)) / best for tm, tn in TILES)


def _waves(m: float, n: float, sms: int, tm: int, tn: int, count: float = 1.0) -> float:
    tiles = math.ceil(count) * math.ceil(m / tm) * math.ceil(n / tn)
    return tiles / (math.ceil(tiles / sms) * sms)


def gemm_seconds(
    m: float, n: float, k: float, gpu: Gpu, efficiency: float, count: float = 1.0, fmt: str = "bf16"
) -> float:
    """[m, k] x [k, n] with operands in ``fmt`` (bf16, fp8, fp4; the output in BF16), ``count`` of them in one
    grouped kernel (Megatron's grouped GEMM runs a rank's local experts together): compute at ``efficiency`` of
    the format's peak (times the tiles' efficiency) or moving the operands, whichever is slower, and never under
    one kernel launch.

    >>> from advisor.model.perf.hardware import gpu_of
    >>> from advisor.plan import plan_from_dict
    >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
    >>> round(gemm_seconds(8192, 4096, 4096, g, 0.7) * 1e3, 3)   # 275 GFLOP at 0.7 x 0.97 x 989 TFLOP/s
    0.409
    """
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    compute = count * 2.0 * m * n * k / (gpu.flops(fmt) * efficiency * tile_efficiency(m, n, gpu.sms, count))
    memory = count * (OPERAND_BYTES[fmt] * (m * k + k * n) + 2.0 * m * n) / gpu.hbm
    return max(compute, memory, KERNEL_FLOOR_SECONDS)


def attention_seconds(
    q_width: float,
    seqlen_squared_sum: float,
    tokens: float,
    gpu: Gpu,
    efficiency: float,
    ring: int = 1,
    window: int | None = None,
) -> tuple[float, float]:
    """Forward and backward seconds of causal variable-length attention (THD) over sum(s_i^2) on one GPU.

    ``q_width``: query heads x head dim on this GPU. Forward FLOPs 2 x q_width x sum(s^2): QK^T and PV, half of it
    under the causal mask; ``seqlen_squared_sum`` is this GPU's share of it. ``ring``: the ranks of a p2p CP ring
    (1 without one, and for a2a, which rebuilds whole sequences): the kernels then run on chunks of s / (2 ring)
    tokens, where the tiles' rounding costs more (``ring_tile_share``).

    >>> from advisor.model.perf.hardware import gpu_of
    >>> from advisor.plan import plan_from_dict
    >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
    >>> f, b = attention_seconds(4096, 8192.0 ** 2, 8192, g, 0.6)
    >>> round(f * 1e3, 3), round(b / f, 1)
    (0.941, 2.5)
    """
    if seqlen_squared_sum <= 0 or tokens <= 0:
        return 0.0, 0.0
    mean_length = seqlen_squared_sum / tokens  # work-weighted: long sequences carry the s^2 work
    if window:  # a sliding window: each query sees at most ``window`` keys, a band of about 2 x window x tokens
        seqlen_squared_sum = windowed_work(seqlen_squared_sum, tokens, window)
        mean_length = min(mean_length, window)
        ring = 1  # the band is what runs, whatever the chunking
    block = ring_tile_share(mean_length, ring)
    forward = max(KERNEL_FLOOR_SECONDS, 2.0 * q_width * seqlen_squared_sum / (gpu.peak * efficiency * block))
    return forward, ATTENTION_BACKWARD_RATIO * forward


def ring_tile_share(length: float, ring: int = 1) -> float:
    """The useful share of the tiles causal attention over a sequence of ``length`` tokens runs, on one rank of a
    p2p CP ring of ``ring`` ranks. Transformer Engine's load balance gives each rank chunks r and 2 ring - 1 - r of
    k = length / (2 ring) tokens (context_parallel.py, AttnFuncWithCPAndKVP2P): one step on its own two chunks, causal
    (2 k^2 useful, plus the diagonal tiles: 128 k), then ring - 1 steps of a 2k x k or k x 2k rectangle, whose edges
    round up to the 128-token tile (``_tiled``). Without a ring: (s^2/2) / (s^2/2 + 64 s).

    >>> round(ring_tile_share(8192), 4), round(ring_tile_share(131072, 16), 4), round(ring_tile_share(4096, 16), 3)
    (0.9846, 0.9775, 0.54)
    """
    ring = max(1, ring)
    k = length / (2 * ring)
    useful = 2 * ring * k * k
    return useful / (2 * k * k + ATTENTION_BLOCK * k + (ring - 1) * _tiled(2 * k) * _tiled(k))


def _tiled(tokens: float) -> float:
    """Tokens a rectangle's edge of ``tokens`` occupies in 128-token tiles: half a tile more on average, and never
    less than one tile (a chunk of 16 tokens still runs a whole tile)."""
    return max(ATTENTION_BLOCK, tokens + ATTENTION_BLOCK / 2)


def windowed_work(seqlen_squared_sum: float, tokens: float, window: int) -> float:
    """The sum(s^2) equivalent of causal attention under a sliding window of ``window`` tokens: a sequence of s > w
    tokens has w (w + 1) / 2 + (s - w) w causal pairs (Megatron-Bridge training/utils/flop_utils.py), about 2 w s
    of the s^2 scale; bounded by the unwindowed work.

    >>> windowed_work(4096.0 ** 2, 4096, 128) / 4096.0 ** 2
    0.0625
    """
    return min(seqlen_squared_sum, 2.0 * window * tokens)


def stream_seconds(num_bytes: float, gpu: Gpu) -> float:
    """Memory-bound work: norms, residual adds, activations, rotary, the loss; bytes over achievable HBM bandwidth."""
    return num_bytes / gpu.hbm
