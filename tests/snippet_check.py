"""Run an exported snippet against one Megatron-Bridge version's real code, in its own process.

    ADVISOR_MB_VERSION=0.3.1 python -m tests.snippet_check TASK SNIPPET.py OVERRIDES.txt

Executes the snippet with ``cfg`` a recorder of attribute sets and the version's real ``PackedSequenceSpecs``
importable, then checks every attribute set on ``cfg.model``, ``cfg.train``, ``cfg.dataset`` and ``cfg.ddp``, and
every override key, against that version's dataclass fields (read from the wheels' source). Prints one JSON object.
"""

from __future__ import annotations

import json
import sys

from tests.conftest import MB_STUBS
from tests.mb_reference import ACTIVE, class_fields, load_module

VERSION = ACTIVE["megatron-bridge"]
CLASSES = {
    "0.6.2": {"model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
              "train": ("megatron.bridge.training.config", "TrainingConfig"),
              "ddp": ("megatron.bridge.training.config", "DistributedDataParallelConfig"),
              "dataset:llm-sft": ("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetConfig"),
              "dataset:vlm-sft": ("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig"),
              "dataset:pretrain": ("megatron.bridge.training.config", "GPTDatasetConfig"),
              "specs": ("megatron.bridge.data.packing.config", "PackedSequenceSpecs")},
    "0.3.1": {"model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
              "train": ("megatron.bridge.training.config", "TrainingConfig"),
              "ddp": ("megatron.bridge.training.config", "DistributedDataParallelConfig"),
              "dataset:llm-sft": ("megatron.bridge.training.config", "FinetuningDatasetConfig"),
              "dataset:vlm-sft": ("megatron.bridge.data.vlm_datasets.hf_provider", "HFDatasetConversationProvider"),
              "dataset:pretrain": ("megatron.bridge.training.config", "GPTDatasetConfig"),
              "specs": ("megatron.bridge.data.datasets.packed_sequence", "PackedSequenceSpecs")},
}[VERSION]
SPEC_FIELDS = {"offline_packing_specs", "packed_sequence_specs"}


class _Section:
    def __init__(self, name: str, log: list):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_log", log)

    def __setattr__(self, key, value):
        self._log.append((self._name, key, value))

    def __getattr__(self, key):
        if key == "dataset_kwargs":  # read-modify-write of a dict field the recipe may leave None
            return None
        raise AttributeError(f"cfg.{self._name}.{key} was read, not set")


def _load_specs_class():
    module, name = CLASSES["specs"]
    stubs = dict(MB_STUBS)
    stubs["megatron.bridge.data.datasets.sft"] = {"create_sft_dataset": None}
    specs_module = load_module(module, stubs=stubs)
    if VERSION.startswith("0.6"):  # what megatron/bridge/data/packing/__init__.py exports
        sys.modules["megatron.bridge.data.packing"].PackedSequenceSpecs = specs_module.PackedSequenceSpecs
    return getattr(specs_module, name)


def main() -> None:
    task, snippet_path, overrides_path = sys.argv[1:4]
    specs_cls = _load_specs_class()
    fields = {s: class_fields(*CLASSES[s]) for s in ("model", "train", "ddp")}
    fields["dataset"] = class_fields(*CLASSES[f"dataset:{task}"])
    spec_fields = class_fields(*CLASSES["specs"])
    log: list = []
    cfg = type("Cfg", (), {})()
    for section in ("model", "train", "dataset", "ddp"):
        setattr(cfg, section, _Section(section, log))
    exec(open(snippet_path).read(), {"cfg": cfg})  # noqa: S102 - the advisor's own export, under test
    unknown = [f"cfg.{s}.{k}" for s, k, _ in log if k not in fields[s]]
    specs = [v for _, k, v in log if k in SPEC_FIELDS]
    bad_overrides = []
    for line in open(overrides_path).read().split():
        key = line.split("=", 1)[0].split(".")
        ok = key[0] in fields and key[1] in fields[key[0]]
        if ok and len(key) == 3:
            ok = (key[1] in SPEC_FIELDS and key[2] in spec_fields) or key[1] == "dataset_kwargs"
        if not ok or len(key) > 3:
            bad_overrides.append(line)
    print(json.dumps({
        "version": VERSION, "set": [f"cfg.{s}.{k}" for s, k, _ in log], "unknown": unknown,
        "specs_class": f"{type(specs[0]).__module__}.{type(specs[0]).__name__}" if specs else None,
        "specs_is_real": bool(specs) and isinstance(specs[0], specs_cls),
        "specs": {k: getattr(specs[0], k) for k in ("packed_sequence_size", "pad_seq_to_mult", "pad_cu_seqlens")}
        if specs else None,
        "bad_overrides": bad_overrides,
    }, default=str))


if __name__ == "__main__":
    main()
