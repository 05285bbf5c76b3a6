"""Which dataset samples a global batch holds, in the order the scheduler numbers them (global ids).

Followed: megatron/training/datasets/data_samplers.py ``MegatronPretrainingSampler`` (sequential, drop_last) and
data_schedule_utils.py ``_get_global_seqlens_and_ids``; the alternative, ``--dataloader-type cyclic``, shuffles
within buckets and is refused by dynamic CP, so it is not modelled.
"""

from __future__ import annotations

import numpy as np


def global_id_positions(*, global_batch_size: int, micro_batch_size: int, dp: int) -> np.ndarray:
    """Position within the global batch (0..GBS-1) of each global id.

    The sampler hands out the global batch in slices of MBS x DP consecutive indices, DP rank d taking
    ``[d*MBS, (d+1)*MBS)`` of each slice (``get_start_end_idx``); every rank's loader yields its micro batches
    as lists (the identity collate), which ``get_batch_and_global_seqlens`` flattens and
    ``_get_global_seqlens_and_ids`` all-gathers in DP rank order: so global ids run DP rank, then micro batch,
    then slot.

    >>> global_id_positions(global_batch_size=8, micro_batch_size=2, dp=2).tolist()
    [0, 1, 4, 5, 2, 3, 6, 7]
    """
    nmb = global_batch_size // (micro_batch_size * dp)
    pos = np.arange(nmb * dp * micro_batch_size, dtype=np.int64).reshape(nmb, dp, micro_batch_size)
    return pos.transpose(1, 0, 2).ravel()


def dp_rank_of_global_id(*, global_batch_size: int, dp: int) -> np.ndarray:
    """The DP rank that loaded each global id (every rank loads GBS/DP samples, in one run of ids).

    >>> dp_rank_of_global_id(global_batch_size=6, dp=3).tolist()
    [0, 0, 1, 1, 2, 2]
    """
    return np.repeat(np.arange(dp, dtype=np.int64), global_batch_size // dp)


def sample_indices(
    num_samples: int,
    *,
    steps: int,
    global_batch_size: int,
    micro_batch_size: int,
    dp: int,
    first_step: int = 0,
    step_ids: np.ndarray | None = None,
) -> np.ndarray:
    """Dataset index of every global id of every step, shape ``(steps, GBS)``.

    Step g consumes samples ``g*GBS .. (g+1)*GBS - 1`` (consumed_samples grows by GBS a step); past the end the
    dataset wraps (``SFTDataset.__getitem__`` reads ``indices[idx % len(indices)]``).

    ``step_ids`` (increasing) picks the steps instead of ``first_step .. first_step + steps - 1``: a scale model
    of a long run simulates a spread of its steps, each exactly as the real run would see it.

    >>> sample_indices(5, steps=2, global_batch_size=4, micro_batch_size=1, dp=2).tolist()
    [[0, 2, 1, 3], [4, 1, 0, 2]]
    >>> sample_indices(12, steps=1, global_batch_size=4, micro_batch_size=1, dp=2, step_ids=np.array([2])).tolist()
    [[8, 10, 9, 11]]
    """
    pos = global_id_positions(global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, dp=dp)
    if step_ids is None:
        step_ids = np.arange(first_step, first_step + steps, dtype=np.int64)
    starts = (np.asarray(step_ids, dtype=np.int64) * global_batch_size)[:, None]
    index = starts + pos[None, :]
    if step_ids.size and (int(step_ids[-1]) + 1) * global_batch_size > num_samples:  # only a run past the end wraps
        index %= num_samples
    return index


def steps_in_epoch(num_samples: int, global_batch_size: int) -> int:
    """Whole global batches in one pass over the data (the sampler drops the last partial one).

    >>> steps_in_epoch(1000, 64)
    15
    """
    return num_samples // global_batch_size
