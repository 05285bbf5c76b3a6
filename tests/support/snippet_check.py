"""Run an exported snippet against one Megatron-Bridge version's real code, in its own process.

    ADVISOR_MB_VERSION=0.3.1 python -m tests.support.snippet_check TASK SNIPPET.py OVERRIDES.txt [specs|none]

``cfg`` is a recipe-like ConfigContainer: its sections hold a recipe's values (dataset seed 5678, dataset_kwargs,
and with ``specs`` the version's real ``PackedSequenceSpecs`` with a tokenizer name and, from 0.6, tokenizer
workers set, as a recipe leaves them; with ``none`` no specs) and record every attribute set. The snippet runs on
one such ``cfg``, the overrides are applied key by key (values read as YAML, as Hydra reads them) on another.
Every attribute set on ``cfg.model``, ``cfg.train``, ``cfg.dataset``, ``cfg.ddp`` and ``cfg.mixed_precision``, every
override key and every attribute of the final specs object is checked against that version's dataclass fields (read
from the wheels' source). A mixed-precision recipe the snippet asks ``get_mixed_precision_config`` for must be one
the version registers (training/mixed_precision.py, read with ``ast``): the stub module standing in for it records
the name. Prints one JSON object.
"""

from __future__ import annotations

import ast
import json
import sys
import types

from tests.support.mb_reference import ACTIVE, MB_STUBS, class_fields, load_module

VERSION = ACTIVE["megatron-bridge"]
CLASSES = {
    "0.6.2": {
        "mixed_precision": ("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),
        "comm_overlap": ("megatron.bridge.training.comm_overlap", "CommOverlapConfig"),
        "model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        "train": ("megatron.bridge.training.config", "TrainingConfig"),
        "ddp": ("megatron.bridge.training.config", "DistributedDataParallelConfig"),
        "dataset:llm-sft": ("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetConfig"),
        "dataset:vlm-sft": ("megatron.bridge.data.builders.direct_hf_sft", "DirectHFSFTDatasetConfig"),
        "dataset:pretrain": ("megatron.bridge.training.config", "GPTDatasetConfig"),
        "specs": ("megatron.bridge.data.packing.config", "PackedSequenceSpecs"),
        "peft": ("megatron.bridge.peft.lora", "LoRA"),
        "container": ("megatron.bridge.training.config", "ConfigContainer"),
    },
    "0.3.1": {
        "mixed_precision": ("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),
        "comm_overlap": ("megatron.bridge.training.comm_overlap", "CommOverlapConfig"),
        "model": ("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        "train": ("megatron.bridge.training.config", "TrainingConfig"),
        "ddp": ("megatron.bridge.training.config", "DistributedDataParallelConfig"),
        "dataset:llm-sft": ("megatron.bridge.training.config", "FinetuningDatasetConfig"),
        "dataset:vlm-sft": ("megatron.bridge.data.vlm_datasets.hf_provider", "HFDatasetConversationProvider"),
        "dataset:pretrain": ("megatron.bridge.training.config", "GPTDatasetConfig"),
        "specs": ("megatron.bridge.data.datasets.packed_sequence", "PackedSequenceSpecs"),
        "peft": ("megatron.bridge.peft.lora", "LoRA"),
        "container": ("megatron.bridge.training.config", "ConfigContainer"),
    },
}[VERSION]
SPEC_FIELDS = {"offline_packing_specs", "packed_sequence_specs"}


RECIPE_SPECS = {
    "0.6.2": {
        "packed_sequence_size": 2048,
        "tokenizer_model_name": "meta-llama/Llama-3.1-8B",
        "num_tokenizer_workers": 4,
    },
    "0.3.1": {"packed_sequence_size": 2048, "tokenizer_model_name": "meta-llama/Llama-3.1-8B"},
}[VERSION]
RECIPE_DATASET = {"seed": 5678, "dataset_kwargs": {"pad_to_max_length": True, "num_workers": 2}}


class _Section:
    """One section of the recipe's config: reads give the recipe's values, sets are recorded and kept."""

    def __init__(self, name: str, log: list, values: dict):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_values", dict(values))

    def __setattr__(self, key, value):
        self._log.append((self._name, key, value))
        self._values[key] = value

    def __getattr__(self, key):
        if key in self._values:
            return self._values[key]
        raise AttributeError(f"cfg.{self._name}.{key} was read, not set (the recipe-like config has no value)")


def registered_recipes() -> set[str]:
    """The mixed-precision recipe names the version registers: its functions decorated with ``@register``."""
    from tests.support.mb_reference import _roots

    for root in _roots():
        path = root / "megatron" / "bridge" / "training" / "mixed_precision.py"
        if path.is_file():
            tree = ast.parse(path.read_text())
            return {
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef)
                and any(isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list)
            }
    return set()


def _mixed_precision_stub(log: list, recipes: set[str]) -> None:
    """``megatron.bridge.training.mixed_precision`` for the snippet: ``get_mixed_precision_config`` checks the name
    and returns a recorded section (the real module imports torch and Megatron-Core)."""

    def get_mixed_precision_config(name):
        log.append(("mixed_precision", "<recipe>", name))
        if name.replace("-", "_") not in recipes:
            raise ValueError(f"unknown mixed-precision recipe {name!r}")
        return _Section("mixed_precision", log, {})

    module = types.ModuleType("megatron.bridge.training.mixed_precision")
    module.get_mixed_precision_config = get_mixed_precision_config
    for parent in ("megatron", "megatron.bridge", "megatron.bridge.training"):
        sys.modules.setdefault(parent, types.ModuleType(parent))
    sys.modules[module.__name__] = module


def _lora_stub(log: list) -> None:
    """``megatron.bridge.peft.lora`` for the snippet: ``LoRA()`` is a recorded section holding the class's default
    dim (the real module imports torch and Megatron-Core; its fields are checked from the source)."""
    module = types.ModuleType("megatron.bridge.peft.lora")
    module.LoRA = lambda: (log.append(("peft", "<created>", "LoRA")), _Section("peft", log, {"dim": 32}))[1]
    for parent in ("megatron", "megatron.bridge", "megatron.bridge.peft"):
        sys.modules.setdefault(parent, types.ModuleType(parent))
    sys.modules[module.__name__] = module


def _load_specs_class():
    module, name = CLASSES["specs"]
    stubs = dict(MB_STUBS)
    stubs["megatron.bridge.data.datasets.sft"] = {"create_sft_dataset": None}
    specs_module = load_module(module, stubs=stubs)
    if VERSION.startswith("0.6"):  # what megatron/bridge/data/packing/__init__.py exports
        sys.modules["megatron.bridge.data.packing"].PackedSequenceSpecs = specs_module.PackedSequenceSpecs
    return getattr(specs_module, name)


def recipe_config(task: str, specs_cls, with_specs: bool, log: list, lora: bool = False):
    """A recipe-like ConfigContainer whose dataset holds the recipe's seed, kwargs and (real) packing specs."""
    dataset = {k: (dict(v) if isinstance(v, dict) else v) for k, v in RECIPE_DATASET.items()}
    if task == "llm-sft":
        key = "offline_packing_specs" if VERSION.startswith("0.6") else "packed_sequence_specs"
        dataset[key] = specs_cls(**RECIPE_SPECS) if with_specs else None
        if VERSION.startswith("0.6"):
            dataset["enable_offline_packing"] = with_specs
    cfg = type("Cfg", (), {})()
    for section in ("model", "train", "ddp", "mixed_precision", "comm_overlap"):  # a MoE recipe has a comm overlap
        setattr(cfg, section, _Section(section, log, {}))
    cfg.dataset = _Section("dataset", log, dataset)
    cfg.peft = _Section("peft", log, {"dim": 32}) if lora else None  # a recipe made with peft="lora", or not
    return cfg


def _specs_of(cfg, spec_fields: set) -> dict | None:
    values = cfg.dataset._values
    specs = next((values[k] for k in SPEC_FIELDS if values.get(k) is not None), None)
    if specs is None:
        return None
    return {
        "class": f"{type(specs).__module__}.{type(specs).__name__}",
        "fields": {k: getattr(specs, k) for k in sorted(spec_fields)},
        "not_fields": sorted(set(vars(specs)) - spec_fields),
    }  # a typo sets a new attribute silently


def _apply_overrides(cfg, lines: list[str], fields: dict, spec_fields: set) -> tuple[list[str], list[str]]:
    """Each ``a.b[.c]=value`` on cfg, the value read as YAML (Hydra's grammar for these scalars and lists); returns
    the keys the version's dataclasses do not have, and the lines whose parent object the recipe lacks (a dotlist
    sets fields, it cannot create the specs object)."""
    import yaml

    bad, unapplied = [], []
    for line in lines:
        path, _, raw = line.partition("=")
        key = path.split(".")
        if key == ["peft"]:  # a top-level field of the ConfigContainer
            if path not in fields["container"]:
                bad.append(line)
            else:
                cfg.peft = yaml.safe_load(raw)
            continue
        if key[0] == "peft" and cfg.peft is None:
            (unapplied if len(key) == 2 and key[1] in fields["peft"] else bad).append(line)
            continue
        ok = len(key) in (2, 3) and key[0] in fields and key[1] in fields[key[0]]
        if ok and len(key) == 3:
            ok = (key[1] in SPEC_FIELDS and key[2] in spec_fields) or key[1] == "dataset_kwargs"
        if not ok:
            bad.append(line)
            continue
        value = yaml.safe_load(raw)
        section = getattr(cfg, key[0])
        if len(key) == 2:
            setattr(section, key[1], value)
        elif key[1] == "dataset_kwargs":
            section.dataset_kwargs[key[2]] = value
        elif getattr(section, key[1]) is None:
            unapplied.append(line)
        else:
            setattr(getattr(section, key[1]), key[2], value)  # on the recipe's own specs object
    return bad, unapplied


PACKING_FACTOR = 2.5  # the exports checked are written at this packing factor (offline: the global batch in packs)


def check_exports(plan, version: str, tmp_path, recipe: str = "specs", peft: str = "full", **size) -> dict:
    """The test's side: the plan's snippet and overrides for ``version`` at ``PACKING_FACTOR`` (``size`` passed on
    to both), checked by this module's ``main`` in a child process that loads that version's wheels; its JSON."""
    import os
    import subprocess

    from advisor.advice.exports import overrides, python_snippet
    from tests.support import ROOT

    (tmp_path / "s.py").write_text(python_snippet(plan, version, PACKING_FACTOR, **size))
    (tmp_path / "o.txt").write_text(overrides(plan, version, PACKING_FACTOR, **size))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.snippet_check", plan.training.task, str(tmp_path / "s.py")]
        + [str(tmp_path / "o.txt"), recipe, peft],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "ADVISOR_MB_VERSION": version},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    task, snippet_path, overrides_path = sys.argv[1:4]
    with_specs = (sys.argv[4] if len(sys.argv) > 4 else "specs") == "specs"
    lora = (sys.argv[5] if len(sys.argv) > 5 else "full") == "lora"  # the recipe was made with peft="lora"
    specs_cls = _load_specs_class()
    fields = {
        s: class_fields(*CLASSES[s])
        for s in ("model", "train", "ddp", "mixed_precision", "comm_overlap", "peft", "container")
    }
    fields["dataset"] = class_fields(*CLASSES[f"dataset:{task}"])
    spec_fields = class_fields(*CLASSES["specs"])
    log: list = []
    cfg = recipe_config(task, specs_cls, with_specs, log, lora)
    recipes = registered_recipes()
    _mixed_precision_stub(log, recipes)
    _lora_stub(log)
    exec(open(snippet_path).read(), {"cfg": cfg})  # noqa: S102 - the advisor's own export, under test
    top = sorted(k for k in vars(cfg) if k not in fields["container"])  # fields the snippet set on cfg itself
    unknown = [f"cfg.{s}.{k}" for s, k, _ in log if k not in ("<recipe>", "<created>") and k not in fields[s]]
    unknown += [f"cfg.{k}" for k in top]
    peft = cfg.peft if cfg.peft is None else dict(cfg.peft._values)
    specs = _specs_of(cfg, spec_fields)
    specs_obj = next((cfg.dataset._values[k] for k in SPEC_FIELDS if cfg.dataset._values.get(k) is not None), None)
    over_cfg = recipe_config(task, specs_cls, with_specs, [], lora)
    bad_overrides, unapplied = _apply_overrides(over_cfg, open(overrides_path).read().split(), fields, spec_fields)
    print(
        json.dumps(
            {
                "version": VERSION,
                "set": [f"cfg.{s}.{k}" for s, k, _ in log if k not in ("<recipe>", "<created>")],
                "unknown": unknown,
                "precision_recipes": [v for _, k, v in log if k == "<recipe>"],
                "recipes_registered": sorted(recipes),
                "mixed_precision": {k: v for s, k, v in log if s == "mixed_precision" and k != "<recipe>"},
                "specs_class": specs["class"] if specs else None,
                "specs_is_real": isinstance(specs_obj, specs_cls),
                "specs": specs["fields"] if specs else None,
                "specs_not_fields": specs["not_fields"] if specs else None,
                "recipe_specs": RECIPE_SPECS if with_specs else None,
                "dataset": {k: cfg.dataset._values.get(k) for k in ("seed", "dataset_kwargs")},
                "override_specs": (_specs_of(over_cfg, spec_fields) or {}).get("fields"),
                "override_dataset": {k: over_cfg.dataset._values.get(k) for k in ("seed", "dataset_kwargs")},
                "override_train": over_cfg.train._values,
                "bad_overrides": bad_overrides,
                "unapplied_overrides": unapplied,
                "peft": peft,
                "peft_created": any(k == "<created>" for _, k, _ in log),
                "override_peft": over_cfg.peft if over_cfg.peft is None else dict(over_cfg.peft._values),
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main()
