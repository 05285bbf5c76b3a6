"""The trial's batches, one per way of running the same samples: a packed THD row (``packed_batch``, or its
block-masked dense twin) and padded BSHD rows (``padded_batch``), and the forward that gives a batch's loss sum and
loss-token count. Shared by the trial's phases (``run``) and its loss-weighting phase (``loss``).

Alternative: building batches inside each phase (what ``run.py`` did while it had one user of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from advisor.trial.model import token_loss


@dataclass(frozen=True, kw_only=True)
class Batch:
    tokens: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    positions: torch.Tensor
    cu_seqlens: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    real_tokens: int = 0
    attention_work: float = 0.0


def _mask(n: int, loss_from: int) -> np.ndarray:
    """A sample's loss mask over its n positions: labels from position ``loss_from`` on (the answer), none on the
    last position (its label would be the next sample's first token)."""
    m = np.zeros(n)
    m[loss_from : n - 1] = 1
    return m


def packed_batch(
    samples: list[np.ndarray], device, break_mask: bool = False, dense: bool = False, loss_from: list[int] | None = None
) -> Batch:
    """One THD row: tokens concatenated, positions restarting, labels shifted inside each sample only.
    ``loss_from``: per sample, the first position whose label carries loss (answer-only loss); 0 for all."""
    tokens = np.concatenate(samples)
    labels = np.concatenate([np.append(s[1:], 0) for s in samples])
    starts = loss_from or [0] * len(samples)
    loss_mask = np.concatenate([_mask(len(s), a) for s, a in zip(samples, starts, strict=True)])
    positions = np.concatenate([np.arange(len(s)) for s in samples])
    lens = [len(s) for s in samples]
    cu = np.concatenate([[0], np.cumsum(lens)])
    if break_mask:  # the bug: one causal mask over the whole row, samples see each other
        cu = np.array([0, cu[-1]])
    t = torch.tensor
    mask = None
    if dense:  # block-diagonal causal mask over the packed row: (sum s_i)^2 work
        doc = np.repeat(np.arange(len(lens)), lens)
        same = doc[:, None] == doc[None, :]
        mask = t(same & np.tril(np.ones((len(doc), len(doc)), bool)), device=device)[None, None]
    return Batch(
        tokens=t(tokens, device=device)[None],
        labels=t(labels, device=device)[None],
        loss_mask=t(loss_mask, device=device)[None],
        positions=t(positions, device=device)[None],
        cu_seqlens=t(cu, device=device),
        mask=mask,
        real_tokens=int(sum(lens) - len(lens)),
        attention_work=float(sum(n * n for n in lens)) if not dense else float(sum(lens)) ** 2,
    )


def padded_batch(samples: list[np.ndarray], device, loss_from: list[int] | None = None) -> Batch:
    """A micro batch of rows, each right-padded to the longest sample, with causal and key-padding masks
    (``loss_from`` as in ``packed_batch``)."""
    longest = max(len(s) for s in samples)
    n = len(samples)
    tokens = np.zeros((n, longest), np.int64)
    labels = np.zeros((n, longest), np.int64)
    loss_mask = np.zeros((n, longest))
    for i, s in enumerate(samples):
        tokens[i, : len(s)] = s
        labels[i, : len(s) - 1] = s[1:]
        loss_mask[i, : len(s)] = _mask(len(s), loss_from[i] if loss_from else 0)
    valid = np.arange(longest)[None, :] < np.array([len(s) for s in samples])[:, None]
    causal = np.tril(np.ones((longest, longest), bool))
    # padding queries attend to themselves only, so no row of the mask is empty (their loss is masked anyway)
    mask = (causal[None] & valid[:, None, :]) | np.eye(longest, dtype=bool)[None]
    t = torch.tensor
    return Batch(
        tokens=t(tokens, device=device),
        labels=t(labels, device=device),
        loss_mask=t(loss_mask, device=device),
        positions=t(np.tile(np.arange(longest), (n, 1)), device=device),
        mask=t(mask, device=device)[:, None],
        real_tokens=int(sum(len(s) - 1 for s in samples)),
        attention_work=float(n * longest * longest),
    )


def forward_loss(model, batch: Batch, mode: str):
    """(sum of the loss over the batch's loss tokens, how many there are), as masked_next_token_loss returns them."""
    logits = model(batch.tokens, batch.positions, mode, batch.cu_seqlens, batch.mask)
    return token_loss(logits, batch.labels, batch.loss_mask)
