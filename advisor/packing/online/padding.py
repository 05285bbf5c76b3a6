"""Each sample's length as the scheduler sees it (``padded_seq_len``): the SFT dataset's padding and truncation.

Followed: megatron/training/datasets/sft_dataset.py (``SFTDataset.__getitem__`` at both commits,
``_calculate_padding_divisor`` and ``MockSFTDataset.__getitem__`` on dev); Megatron-Bridge 7bdc5ef4's GPT-SFT data
set under global-batch packing (``gpt_sft``: datasets/gpt_sft.py ``_collate_unpacked_rows`` and data/packing/
global_batch.py ``build_unpacked_sequence_sample``, its multiple from training/config.py ``validate``); the
alternative, a custom dataset that returns per-sample dicts with its own ``padded_seq_len``, is
``dataset="custom"``: lengths pass through unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def padding_divisor(
    *,
    commit: str,
    dataset: str,
    cp: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    dp: int = 1,
    dynamic_cp: bool = False,
) -> int:
    """The multiple every sequence is padded to.

    main (``SFTDataset.__getitem__``): 2·CP when CP > 1, else 1. dev (``_calculate_padding_divisor``): 2·CP when
    CP > 1 (2·DP·CP under dynamic CP, even at CP 1), times ``sequence_parallel_size`` when it is above 0, which
    pretrain_gpt.py sets to TP x sequence_parallel. A custom dataset: 1.

    >>> padding_divisor(commit="main", dataset="sft", cp=4, tp=8, sequence_parallel=True)
    8
    >>> padding_divisor(commit="dev", dataset="mock_sft", cp=4, tp=8, sequence_parallel=True)
    64
    >>> padding_divisor(commit="dev", dataset="mock_sft", cp=1, dp=4, dynamic_cp=True)
    8

    Megatron-Bridge's GPT-SFT data set (``gpt_sft``) pads to the multiple its ``validate`` computes: lcm(2·CP,
    CP·TP with SP), 2·DP·CP in place of 2·CP under dynamic CP.

    >>> padding_divisor(commit="dev", dataset="gpt_sft", cp=4, tp=8, sequence_parallel=True)
    32
    """
    if dataset == "custom":
        return 1
    if dataset == "gpt_sft":  # Megatron-Bridge's lcm (advisor/plan/schema.py global_batch_multiple: the same rule)
        cp_multiple = 2 * dp * cp if dynamic_cp else (2 * cp if cp > 1 else 1)
        return math.lcm(cp_multiple, cp * tp if sequence_parallel and tp > 1 else 1)
    if commit == "main":
        return 2 * cp if cp > 1 else 1  # main d98e8a64 SFTDataset.__getitem__: pad_granularity
    cp_pad = dp * cp * 2 if dynamic_cp else (2 * cp if cp > 1 else 1)  # dev _calculate_padding_divisor
    sp_size = tp * int(sequence_parallel)  # pretrain_gpt.py: sequence_parallel_size
    return cp_pad * (sp_size if sp_size > 0 else 1)


@dataclass(frozen=True, kw_only=True)
class PaddedLengths:
    """Per dataset sample: the length the scheduler packs (``padded``) and the tokens of data in it (``real``)."""

    padded: np.ndarray
    real: np.ndarray
    divisor: int
    truncated_samples: int
    truncated_tokens: int


def padded_lengths(lengths: np.ndarray, *, seq_length: int, divisor: int, dataset: str) -> PaddedLengths:
    """Apply a dataset's truncation and padding to sample lengths (kept in their order).

    ``mock_sft`` (dev ``MockSFTDataset``): a sample of length L is L-1 tokens plus EOD, cut to ``seq_length``
    (at least the EOD survives), then padded up to the divisor; the result may exceed ``seq_length`` when
    ``seq_length`` is not a multiple of the divisor. ``sft`` (``SFTDataset``, one conversation a line): the
    conversation is padded to the divisor, cut to ``seq_length``, and the line's last sequence is then padded up
    to ``seq_length`` (cu_seqlens[-1] = pack_length), so every sample reaches the scheduler at ``seq_length``.
    ``gpt_sft`` (Megatron-Bridge's GPTSFTDataset, global-batch packing): a sample of L input ids, cut to
    ``seq_length`` ids by the data set, trains on its shifted tokens (``input_ids[:-1]``, labels
    ``input_ids[1:]``): min(L, seq_length) - 1, as offline packing counts them, padded up to the divisor (at
    least one token: an empty sample is refused there).

    >>> p = padded_lengths(np.array([5, 9, 0]), seq_length=8, divisor=4, dataset="mock_sft")
    >>> p.padded.tolist(), p.real.tolist(), p.truncated_tokens
    ([8, 8, 4], [5, 8, 1], 1)
    >>> padded_lengths(np.array([5, 9]), seq_length=8, divisor=4, dataset="sft").padded.tolist()
    [8, 8]
    >>> p = padded_lengths(np.array([5, 9, 10]), seq_length=8, divisor=4, dataset="gpt_sft")
    >>> p.padded.tolist(), p.real.tolist(), p.truncated_samples, p.truncated_tokens
    ([4, 8, 8], [4, 7, 7], 2, 3)
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if dataset == "custom":
        return PaddedLengths(padded=lengths, real=lengths, divisor=divisor, truncated_samples=0, truncated_tokens=0)
    wanted = wanted_tokens(lengths, dataset)
    if dataset == "gpt_sft":
        real = np.maximum(np.minimum(lengths, seq_length) - 1, 1)
        padded = real if divisor == 1 else (real + (divisor - 1)) // divisor * divisor
    elif dataset == "mock_sft":
        real = np.clip(lengths, 1, seq_length)  # arange(1, L) + [eod], cut to pack_length
        padded = real if divisor == 1 else (real + (divisor - 1)) // divisor * divisor
    else:  # sft: the tail padding fills the line to pack_length
        real = np.minimum(lengths, seq_length)
        padded = np.full(lengths.shape, seq_length, dtype=np.int64)
    cut_per = wanted - real
    long = cut_per > 0
    count = int(np.count_nonzero(long))
    cut = int(cut_per[long].sum())
    return PaddedLengths(padded=padded, real=real, divisor=divisor, truncated_samples=count, truncated_tokens=cut)


def wanted_tokens(lengths: np.ndarray, dataset: str) -> np.ndarray:
    """The tokens a sample of each length would train on before truncation: L, or L-1 shifted tokens (at least
    one) in Megatron-Bridge's GPT-SFT data set.

    >>> wanted_tokens(np.array([0, 1, 5]), "gpt_sft").tolist(), wanted_tokens(np.array([0, 5]), "mock_sft").tolist()
    ([1, 1, 4], [0, 5])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.maximum(lengths - 1, 1) if dataset == "gpt_sft" else lengths
