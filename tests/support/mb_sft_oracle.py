"""Megatron-Bridge 0.6.2's real ``GPTSFTDataset`` and ``GPTSFTChatDataset``, as the oracle for advisor.data.tokenize.

The modules come from the unpacked wheels in ``.cache`` (see mb_reference.py; nothing is downloaded here: when a
wheel folder is missing the tests skip). Real: megatron/bridge/data/datasets/gpt_sft.py and utils.py,
sft_processing.py, conversation_processing.py, token_utils.py, training/tokenizers/tokenizer.py and config.py,
Megatron-Core's tokenizers package and Megatron-LM's ``TokenizerConfig``; torch (CPU), transformers and
sentencepiece are real too. Stubbed, because they pull in the training stack and none of their code shapes a
sample: HF ``datasets`` (only for ``hf_dataset=True``), ``megatron.core.msc_utils`` (remote storage off),
``megatron.core.utils`` (two logging/introspection helpers) and ``megatron.bridge.utils.common_utils`` (rank
helpers). The tokenizer is built as Megatron-Bridge builds it: ``build_tokenizer(TokenizerConfig(
tokenizer_type="HuggingFaceTokenizer", tokenizer_model=folder))``.

A data set is written as JSONL and read back through the class's own memory-mapped index, so ``ds[i]`` is
exactly what training and offline packing get.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import itertools
import json
import logging
import sys
import types
from pathlib import Path

from tests.support.mb_reference import CACHE, MB_VERSION, MCORE_VERSION

MB_ROOT = CACHE / f"megatron_bridge-{MB_VERSION}"
MCORE_ROOT = CACHE / f"megatron_core-{MCORE_VERSION}"
_counter = itertools.count()


def missing_reason() -> str | None:
    """Why the oracle cannot load here, or None."""
    for root in (MB_ROOT, MCORE_ROOT):
        if not (root / "megatron").is_dir():
            return f"unpacked wheel not found at {root} (tests/support/mb_reference.py fetches it)"
    for package in ("torch", "transformers", "sentencepiece"):
        try:
            __import__(package)
        except ImportError:
            return f"{package} is not installed: Megatron-Bridge's dataset and tokenizer code import it"
    return None


def _log_single_rank(logger, *args, rank=0, **kwargs):
    logger.log(*args, **kwargs)


def _accepts_parameter(func, name):
    return name in inspect.signature(func).parameters


def _quiet(*args, **kwargs):
    return None


def _stubs() -> dict[str, dict]:
    class MultiStorageClientFeature:  # remote storage off, as on a plain file system
        @staticmethod
        def is_enabled():
            return False

    stubs = {
        "megatron.core.msc_utils": {"MultiStorageClientFeature": MultiStorageClientFeature},
        "megatron.core.utils": {"log_single_rank": _log_single_rank, "accepts_parameter": _accepts_parameter},
        "megatron.bridge.utils.common_utils": {
            "get_local_rank_preinit": lambda: 0,
            "warn_rank_0": _quiet,
            "print_rank_0": _quiet,
            "get_rank_safe": lambda: 0,
        },
    }
    if importlib.util.find_spec("datasets") is None:  # HF datasets, when installed, is imported for real
        stubs["datasets"] = {"builder": types.SimpleNamespace(), "load_dataset": None}
    return stubs


REAL = (  # loaded for real; a stub another test registered under one of these names is set aside first
    "megatron.training.config.training_config",
    "megatron.core.tokenizers",
    "megatron.core.tokenizers.text.libraries",
    "megatron.core.tokenizers.text.models",
    "megatron.bridge.training.tokenizers.config",
    "megatron.bridge.training.tokenizers.tokenizer",
    "megatron.bridge.data.datasets.utils",
    "megatron.bridge.data.conversation_processing",
    "megatron.bridge.data.token_utils",
    "megatron.bridge.data.sft_processing",
    "megatron.bridge.data.datasets.gpt_sft",
)


@functools.cache
def modules() -> types.SimpleNamespace:
    """The real modules: ``.gpt_sft``, ``.sft_processing``, ``.tokenizer`` (Bridge's build_tokenizer),
    ``.config`` (Bridge's TokenizerConfig)."""
    reason = missing_reason()
    if reason:
        raise FileNotFoundError(reason)
    from tests.support.mb_reference import load_module

    for name in REAL:  # mb_reference.MB_STUBS registers bare stand-ins for some of these (no __file__)
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None) is None and not hasattr(module, "__path__"):
            del sys.modules[name]
    stubs = _stubs()
    training_config = load_module(REAL[0], stubs=stubs)
    # megatron/training/__init__.py imports the training loop: its config package is reached as a bare namespace
    # that carries just the class Bridge's TokenizerConfig extends
    sys.modules["megatron.training.config"].TokenizerConfig = training_config.TokenizerConfig
    loaded = {name: load_module(name, stubs=stubs) for name in REAL[1:]}
    stand_in = sys.modules.get("datasets")
    if stand_in is not None and not hasattr(stand_in, "__file__"):
        del sys.modules["datasets"]  # gpt_sft.py holds its stand-in; nothing else may mistake it for the package
    logging.getLogger("megatron.bridge.data.datasets.utils").setLevel(logging.ERROR)
    return types.SimpleNamespace(
        gpt_sft=loaded["megatron.bridge.data.datasets.gpt_sft"],
        sft_processing=loaded["megatron.bridge.data.sft_processing"],
        tokenizer=loaded["megatron.bridge.training.tokenizers.tokenizer"],
        config=loaded["megatron.bridge.training.tokenizers.config"],
    )


def build_mb_tokenizer(path: Path, *, include_special_tokens: bool = True, chat_template: str | None = None):
    """Megatron-Bridge's tokenizer for a local folder (``HuggingFaceTokenizer``) or ``.model`` file
    (``SentencePieceTokenizer``), through its own ``build_tokenizer``."""
    m = modules()
    path = Path(path)
    if path.suffix == ".model":
        config = m.config.TokenizerConfig(tokenizer_type="SentencePieceTokenizer", tokenizer_model=str(path))
    else:
        kwargs = {} if include_special_tokens else {"hf_tokenizer_kwargs": {"include_special_tokens": False}}
        config = m.config.TokenizerConfig(
            tokenizer_type="HuggingFaceTokenizer", tokenizer_model=str(path), chat_template=chat_template, **kwargs
        )
    return m.tokenizer.build_tokenizer(config)


def write_jsonl(records: list[dict], folder: Path) -> Path:
    """The records as a JSONL file of a fresh name in ``folder``."""
    path = Path(folder) / f"data-{next(_counter)}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def mb_dataset(path: Path, tokenizer, *, chat: bool = False, **kwargs):
    """``GPTSFTDataset`` (or ``GPTSFTChatDataset``) over a JSONL file, as the builder constructs it."""
    m = modules()
    cls = m.gpt_sft.GPTSFTChatDataset if chat else m.gpt_sft.GPTSFTDataset
    return cls(str(path), tokenizer, memmap_workers=1, index_mapping_dir=str(Path(path).parent), **kwargs)


def lengths_of(dataset) -> list[int | BaseException]:
    """``len(ds[i]["input_ids"])`` for each sample, or the exception Megatron-Bridge raised for it."""
    out: list[int | BaseException] = []
    for i in range(len(dataset)):
        try:
            out.append(len(dataset[i]["input_ids"]))
        except Exception as e:  # noqa: BLE001 - any failure of Bridge's code is the answer for that sample
            out.append(e)
    return out


def mb_lengths(
    records: list[dict], tokenizer, folder: Path, *, chat: bool = False, **kwargs
) -> list[int | BaseException]:
    """Megatron-Bridge's ``len(input_ids)`` per record (or its exception), the records written as JSONL."""
    return lengths_of(mb_dataset(write_jsonl(records, folder), tokenizer, chat=chat, **kwargs))
