"""A small GPT-style decoder for the trial job: RMSNorm, RoPE, GQA attention, SwiGLU MLP, untied head.

One model, three ways to run a batch (the alternatives the plan chooses between):
  packed (THD)     samples concatenated in one row; attention kept inside each sample by its cu_seqlens
  padded (BSHD)    samples in rows of a micro batch, right-padded, causal attention with a key-padding mask
  block-masked     the packed row with one dense (sum s_i)^2 mask that is block-diagonal and causal
The CUDA path is the same code on another device and dtype; flash-attn's varlen kernel is used when it is
importable there (never imported on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class TrialModelConfig:
    """The plan's head dimension, GQA ratio and MLP shape, scaled down in layers and width."""

    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 1
    head_dim: int = 64
    ffn_hidden_size: int = 704
    vocab_size: int = 512
    rope_base: float = 10000.0

    @property
    def hidden_size(self) -> int:
        return self.num_heads * self.head_dim


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(torch.autograd.Function):
    """SwiGLU that keeps only its input for backward, as Megatron's fused bias_swiglu does."""

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        with torch.enable_grad():
            y = y.detach().requires_grad_()
            gate, up = y.chunk(2, dim=-1)
            (F.silu(gate) * up).backward(grad)
        return y.grad


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding of x [..., tokens, heads, dim] at the given positions (restarting per sample)."""
    dim = x.shape[-1]
    freqs = base ** (-torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim)
    angles = positions.to(torch.float32)[..., None] * freqs  # [..., tokens, dim/2]
    cos, sin = angles.cos()[..., None, :].to(x.dtype), angles.sin()[..., None, :].to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def _flash_varlen():
    """flash-attn's variable-length kernel when it can be used (CUDA only); never imported on the CPU."""
    if not torch.cuda.is_available():
        return None
    try:
        from flash_attn import flash_attn_varlen_func  # noqa: PLC0415 - optional, GPU only
    except ImportError:
        return None
    return flash_attn_varlen_func


def packed_attention_note(device_type: str, samples_per_pack: float, num_layers: int) -> str:
    """What the packed (THD) way's attention runs on this device, to read its speed-up by.

    >>> "one causal SDPA call per sample" in packed_attention_note("cpu", 3.0, 2)
    True
    """
    if device_type == "cuda" and _flash_varlen() is not None:
        return "packed attention ran flash-attn's varlen kernel: one call per pack, bounded by cu_seqlens"
    where = "the CPU" if device_type == "cpu" else "this GPU (flash-attn is not installed)"
    return (
        f"on {where} the packed way's attention is a Python loop over each pack's samples, one causal SDPA call "
        f"per sample (here {samples_per_pack:.1f} samples a pack, x {num_layers} layers, forward and backward), "
        "while padded and block-masked make one masked SDPA call per micro batch; the work is the same "
        "sum(s_i^2) as flash-attn's varlen kernel, but not the cost per call, and the small model's matmuls "
        "dominate the step. This speed-up says little about a GPU's varlen flash attention: run the trial "
        "on the GPU node for that"
    )


class Attention(nn.Module):
    def __init__(self, cfg: TrialModelConfig):
        super().__init__()
        self.cfg = cfg
        kv = cfg.num_kv_heads * cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, cfg.hidden_size + 2 * kv, bias=False)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x, positions, mode: str, cu_seqlens=None, mask=None):
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(
            [cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim], dim=-1
        )
        q = rope(q.view(b, t, cfg.num_heads, cfg.head_dim), positions, cfg.rope_base)
        k = rope(k.view(b, t, cfg.num_kv_heads, cfg.head_dim), positions, cfg.rope_base)
        v = v.view(b, t, cfg.num_kv_heads, cfg.head_dim)
        rep = cfg.num_heads // cfg.num_kv_heads
        if mode == "packed":
            varlen = _flash_varlen()
            if varlen is not None and x.is_cuda:
                lens = cu_seqlens.diff()
                out = varlen(
                    q[0], k[0], v[0], cu_seqlens.int(), cu_seqlens.int(), int(lens.max()), int(lens.max()), causal=True
                )[None]
            else:  # one causal attention per sample: the work is sum(s_i^2), as a varlen kernel's
                outs = []
                for a, z in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):
                    qs, ks, vs = (u[:, a:z].transpose(1, 2) for u in (q, k, v))
                    outs.append(
                        F.scaled_dot_product_attention(
                            qs, ks.repeat_interleave(rep, 1), vs.repeat_interleave(rep, 1), is_causal=True
                        )
                    )
                out = torch.cat(outs, dim=2).transpose(1, 2)
        else:  # padded rows or the block-masked packed row: one dense masked attention
            qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            out = F.scaled_dot_product_attention(
                qs, ks.repeat_interleave(rep, 1), vs.repeat_interleave(rep, 1), attn_mask=mask
            ).transpose(1, 2)
        return self.proj(out.reshape(b, t, cfg.hidden_size))


class Block(nn.Module):
    def __init__(self, cfg: TrialModelConfig):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(cfg.hidden_size), RMSNorm(cfg.hidden_size)
        self.attn = Attention(cfg)
        self.up = nn.Linear(cfg.hidden_size, 2 * cfg.ffn_hidden_size, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x, positions, mode, cu_seqlens=None, mask=None):
        x = x + self.attn(self.norm1(x), positions, mode, cu_seqlens, mask)
        return x + self.down(SwiGLU.apply(self.up(self.norm2(x))))


class TrialGPT(nn.Module):
    def __init__(self, cfg: TrialModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, positions, mode: str, cu_seqlens=None, mask=None):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions, mode, cu_seqlens, mask)
        return self.head(self.norm(x))


def token_loss(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of cross-entropy over the tokens whose loss_mask is 1, and how many there are."""
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), reduction="none")
    mask = loss_mask.reshape(-1).to(losses.dtype)
    return (losses * mask).sum(), int(mask.sum().item())
