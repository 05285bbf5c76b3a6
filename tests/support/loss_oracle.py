"""Each loss token's gradient weight through Megatron-Bridge's and Megatron-Core's own code, by autograd.

Per micro batch and CP rank: the wheels' ``_get_batch_on_this_cp_rank_per_sequence_balancing`` (Megatron-Core
utils.py) cuts the sequence (a BSHD row; in THD each sample on its own, which is what Transformer Engine's
``thd_get_partitioned_indices`` does per document, Megatron-Core's docstring of
``_get_batch_on_this_cp_rank_per_document_balancing``), Megatron-Bridge's ``masked_next_token_loss`` (losses.py)
reduces it and Megatron-Core's ``forward_step_calc_loss`` (pipeline_parallel/schedules.py) scales it. The per-token
losses are leaves, so d(objective)/d(loss_t) is token t's weight. Only the cross-rank step is stated here, from
distributed_data_parallel.py (``gradient_scaling_factor`` 1 / (DP x CP) before a sum) and finalize_model_grads.py
(with per-token loss, a sum scaled by 1 / N, N all-reduced over DP x CP): the functions holding them need a
process group and the whole model.
"""

from __future__ import annotations

import sys
import types
from functools import partial

import numpy as np
import torch

from advisor.model.loss_weights import Steps
from tests.support.mb_reference import _register_namespace, _roots, load_function

_CACHE: dict = {}


class _Group:
    def __init__(self, size: int, rank: int):
        self.size, self.rank = size, rank


def _torch_with_group():
    """torch, with ``torch.distributed.get_world_size/get_rank`` answering from a ``_Group`` (one process stands in
    for every CP rank)."""
    dist = types.SimpleNamespace(get_world_size=lambda g: g.size, get_rank=lambda g: g.rank)
    return types.SimpleNamespace(
        **{k: getattr(torch, k) for k in ("zeros", "int64", "tensor", "cat")}, distributed=dist
    )


def functions():
    """(masked_next_token_loss, forward_step_calc_loss, per-sequence CP partition) from the wheels."""
    if _CACHE:
        return _CACHE["f"]
    _register_namespace("megatron", _roots())
    for name in ("megatron.core", "megatron.core.transformer"):
        _register_namespace(name, _roots())
    mtp = "megatron.core.transformer.multi_token_prediction"  # imported by forward_step_calc_loss, used with MTP only
    if mtp not in sys.modules:
        sys.modules[mtp] = types.SimpleNamespace(MTPLossAutoScaler=None)
    loss = load_function(
        "megatron/bridge/training/losses.py",
        "masked_next_token_loss",
        {"torch": torch, "Tuple": tuple, "partial": partial, "get_rerun_state_machine": lambda: None},
    )
    variant = load_function(
        "megatron/core/pipeline_parallel/schedules.py", "_get_experimental_attention_variant_loss_scale_func"
    )
    calc = load_function(
        "megatron/core/pipeline_parallel/schedules.py",
        "forward_step_calc_loss",
        {"torch": torch, "parallel_state": None, "_get_experimental_attention_variant_loss_scale_func": variant},
    )
    cut = load_function(
        "megatron/core/utils.py", "_get_batch_on_this_cp_rank_per_sequence_balancing", {"torch": _torch_with_group()}
    )
    _CACHE["f"] = (loss, calc, cut)
    return _CACHE["f"]


def _sequences(steps: Steps, samples: np.ndarray, thd: bool) -> list[tuple[int, int, int, int]]:
    """(sample, offset in the row, length, row) of each sample of one micro batch: THD one row of samples each of
    its own length; BSHD a row per sample, of the micro batch's row length."""
    out, offset = [], 0
    for r, i in enumerate(samples):
        n = int(steps.seq_length[i])
        out.append((int(i), offset if thd else 0, n, 0 if thd else r))
        offset += n if thd else 0
    return out


def oracle_weights(steps: Steps, per_token_loss: bool, *, data_parallel: int = 1, thd: bool = True) -> np.ndarray:
    """Each sample's summed gradient weight, (samples, CP) per rank, through the wheels' code. ``data_parallel``
    divides each step's micro batches into DP ranks of M each (M = K / DP). Spans must be whole numbers."""
    loss_fn, calc, cut = functions()
    config = types.SimpleNamespace(calculate_per_token_loss=per_token_loss, timers=None, mtp_num_layers=None)
    c = steps.cp
    out = np.zeros((steps.loss_end.size, c))
    for step in range(steps.num_steps):
        mbs = np.flatnonzero(steps.step_of_micro_batch == step)
        k = int(steps.micro_batches_per_step[step])
        assert k % data_parallel == 0
        m = k // data_parallel  # num_microbatches of each DP rank
        leaves, outputs, total_tokens = [], [], 0
        for mb in mbs:
            samples = np.flatnonzero(steps.micro_batch == mb)
            seqs = _sequences(steps, samples, thd)
            width = sum(n for _, _, n, _ in seqs) if thd else max((n for _, _, n, _ in seqs), default=0)
            rows = 1 if thd else len(seqs)
            mask = torch.zeros(rows, width)
            owner = torch.full((rows, width), -1, dtype=torch.int64)
            for i, off, _, row in seqs:
                a, b = int(steps.loss_start[i]), int(steps.loss_end[i])
                mask[row, off + a : off + b] = 1
                owner[row, off : off + int(steps.seq_length[i])] = i
            losses = torch.rand(rows, width, dtype=torch.float64, requires_grad=True)
            leaves.append((losses, owner))
            for rank in range(c):
                group = _Group(c, rank)
                if thd:  # per document: each sample's slice cut on its own
                    parts = [cut({"m": mask[:, o : o + n], "l": losses[:, o : o + n]}, group) for _, o, n, _ in seqs]
                    sliced = {k2: torch.cat([p[k2] for p in parts], dim=1) for k2 in ("m", "l")}
                else:
                    sliced = cut({"m": mask, "l": losses}, group)
                output, num_tokens = calc(
                    None,
                    sliced["l"],
                    partial(loss_fn, sliced["m"], check_for_nan_in_loss=False),
                    config,
                    None,
                    False,
                    m,
                    [],
                    cp_group_size=c,
                    is_last_stage=True,
                )
                outputs.append(output)
                total_tokens += int(num_tokens)
        # the DP x CP gradient reduction (module docstring): every rank's backward summed, then scaled
        scale = 1.0 / max(total_tokens, 1) if per_token_loss else 1.0 / (data_parallel * c)
        objective = torch.stack([o.reshape(()) for o in outputs]).sum() * scale
        objective.backward()
        for losses, owner in leaves:
            for rank_of_token, grads, who in _ranked(losses.grad, owner, c, cut, thd, steps):
                out[who, rank_of_token] += grads
    return out


def _ranked(grad, owner, c, cut, thd, steps):
    """(CP rank, summed weight, sample) triples: the rank holding each token found by cutting the owner map the
    same way as the losses."""
    for rank in range(c):
        group = _Group(c, rank)
        if thd:
            starts = np.flatnonzero(np.r_[True, owner[0, 1:].numpy() != owner[0, :-1].numpy()])
            ends = np.r_[starts[1:], owner.shape[1]]
            parts = [cut({"o": owner[:, a:b], "g": grad[:, a:b]}, group) for a, b in zip(starts, ends, strict=True)]
            sliced = {k: torch.cat([p[k] for p in parts], dim=1) for k in ("o", "g")}
        else:
            sliced = cut({"o": owner, "g": grad}, group)
        o, g = sliced["o"].reshape(-1).numpy(), sliced["g"].reshape(-1).numpy()
        keep = o >= 0
        sums = np.bincount(o[keep], weights=g[keep], minlength=steps.loss_end.size)
        for i in np.flatnonzero(sums):
            yield rank, sums[i], i
