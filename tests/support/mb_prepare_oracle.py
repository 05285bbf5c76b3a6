"""Megatron-Bridge 0.6.2's own offline preparation and packed reader, as the oracle for ``advisor prepare``.

Real, from the unpacked wheel (see mb_sft_oracle.py for the datasets and the tokenizer they need):
megatron/bridge/data/packing/offline.py (``prepare_gpt_sft_packed_data``, ``tokenize_dataset``), algorithms.py,
parquet.py (``write_packed_parquet``, ``GPTSFTPackedParquetDataset``), packing/gpt_sft.py
(``GPTSFTPackedDataset``: its ``collate_fn``), paths.py, utils/safe_pickle.py, and the builder's
``build_gpt_sft_split`` (data/builders/gpt_sft.py), compiled from its own source with only the names it uses
(the module's other imports pull in Hugging Face sources and process groups, which preparing never touches).

mb_reference.MB_STUBS registers stand-ins for some of these modules (and modules built on them) for tests that need
only the writer; they are set aside here so the real classes load.
"""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path
from typing import Any

from tests.support import mb_sft_oracle

PACKING = (
    "megatron.bridge.utils.safe_pickle",
    "megatron.bridge.data.packing.paths",
    "megatron.bridge.data.packing.algorithms",
    "megatron.bridge.data.packing.gpt_sft",
    "megatron.bridge.data.packing.parquet",
    "megatron.bridge.data.packing.offline",
)


def missing_reason() -> str | None:
    return mb_sft_oracle.missing_reason()


@functools.cache
def modules() -> types.SimpleNamespace:
    """``.offline``, ``.parquet``, ``.algorithms``, ``.build_split`` (the builder's), ``.sft`` (mb_sft_oracle)."""
    sft = mb_sft_oracle.modules()
    from tests.support.mb_reference import load_function, load_module

    for name in PACKING:  # a stand-in, or a real module built on one: loaded again on the real classes
        if name in sys.modules:
            del sys.modules[name]
    stubs = mb_sft_oracle._stubs()
    loaded = {name: load_module(name, stubs=stubs) for name in PACKING}
    paths = loaded["megatron.bridge.data.packing.paths"]
    msc = sys.modules["megatron.core.msc_utils"].MultiStorageClientFeature
    build_split = load_function(
        "megatron/bridge/data/builders/gpt_sft.py",
        "build_gpt_sft_split",
        {
            "Path": Path,
            "Any": Any,
            "MegatronTokenizer": object,
            "MultiStorageClientFeature": msc,
            "is_packed_parquet_spec": paths.is_packed_parquet_spec,
            "resolve_packed_parquet_paths_with_retry": paths.resolve_packed_parquet_paths_with_retry,
            "print_rank_0": lambda *a, **k: None,
            "GPTSFTDataset": sft.gpt_sft.GPTSFTDataset,
            "GPTSFTChatDataset": sft.gpt_sft.GPTSFTChatDataset,
        },
    )
    return types.SimpleNamespace(
        offline=loaded["megatron.bridge.data.packing.offline"],
        parquet=loaded["megatron.bridge.data.packing.parquet"],
        algorithms=loaded["megatron.bridge.data.packing.algorithms"],
        build_split=build_split,
        sft=sft,
    )


def dataset_kwargs(fmt: str, loss_mode: str = "assistant") -> dict:
    """What ``normalize_gpt_sft_dataset_kwargs`` gives the builder for a local JSONL data set: nothing for the
    prompt-template default, the chat switches for ``ChatSFTPreprocessingConfig``."""
    if fmt == "chat":
        return {"chat": True, "use_hf_tokenizer_chat_template": True, "chat_loss_mode": loss_mode}
    return {}


def reader(
    spec: str, tokenizer, pack_size: int, metadata: str | None = None, pad_seq_to_mult: int = 1, fmt: str = "sft"
):
    """The training split's dataset as Megatron-Bridge builds it from a packed Parquet spec (a file, a glob or a
    folder): the builder's own ``build_gpt_sft_split`` gives ``GPTSFTPackedParquetDataset``."""
    return modules().build_split(
        spec,
        tokenizer=tokenizer,
        seq_length=pack_size,
        memmap_workers=1,
        seed=1234,
        packed_sequence_size=pack_size,
        pack_metadata_path=metadata,
        pad_cu_seqlens=False,
        pad_seq_to_mult=pad_seq_to_mult,
        dataset_kwargs=dataset_kwargs(fmt),
    )
