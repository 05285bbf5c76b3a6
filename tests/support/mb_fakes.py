"""Stand-ins for the parts of Megatron-Bridge's data pipeline that need a real tokenizer and text."""

from __future__ import annotations

import types

import numpy as np


class FakeTokenizer(types.SimpleNamespace):
    pass


def fake_sft_builder(lengths: np.ndarray, truncate: bool = True):
    """A dataset builder for ``prepare_gpt_sft_packed_data`` that yields samples of the given token counts.

    It stands in for GPTSFTDataset only where a real tokenizer and text would be needed: each sample is
    ``input_ids`` of its length (token i = i, so packs can be checked), cut at the ``seq_length`` the
    pipeline asks for, as GPTSFTDataset truncates to its max length. ``truncate=False`` stands in for
    GPTSFTChatDataset, whose ``_process_example`` (``_chat_preprocess``) never cuts (Megatron-Bridge 0.6.2
    data/datasets/gpt_sft.py).
    """

    def build(path, *, tokenizer, seq_length, pad_seq_to_mult=None, dataset_kwargs=None, **_):
        class Dataset(list):
            pass

        def kept(n) -> int:
            return min(int(n), seq_length) if truncate else int(n)

        ds = Dataset({"input_ids": list(range(kept(n))), "loss_mask": [1] * kept(n)} for n in lengths)
        ds.tokenizer = FakeTokenizer(eod=0)
        ds.pad_seq_length_to_mult = (dataset_kwargs or {}).get("pad_seq_length_to_mult", 16)
        return ds

    return build
