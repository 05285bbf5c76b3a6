"""The plan file: model, parallel layout, training, packing, data and hardware, in YAML or JSON.

One schema for the CLI, the dashboard and exports. ``load_plan`` refuses an inconsistent plan with every problem
at once (one message each), so a user fixes them in one pass rather than one crash at a time.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from advisor.plan.presets import GPU_PRESETS, MODEL_PRESETS

TASKS = ("llm-sft", "vlm-sft", "pretrain")
PACKING_MODES = ("offline", "in-batch", "none", "auto")
RECOMPUTE = ("none", "selective", "full")
PEFT = ("none", "lora")
CP_COMM_TYPES = ("p2p", "a2a", "all_gather", "a2a+p2p")  # Transformer Engine spells all_gather with an underscore


class PlanError(ValueError):
    """An inconsistent plan: ``problems`` holds one message per problem."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    num_query_groups: int | None = None
    kv_channels: int | None = None
    gated_linear_unit: bool = True
    normalization: str = "RMSNorm"
    share_embeddings_and_output_weights: bool = False
    num_moe_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    moe_layer_freq: int | list[int] = 1
    vision: dict | None = None
    window_size: int | None = None  # sliding-window attention
    mtp_num_layers: int = 0  # multi-token prediction layers
    family: str = "gpt"
    approximated: str | None = None
    name: str = "custom"

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads


@dataclass(frozen=True, kw_only=True)
class ParallelSpec:
    gpus: int = 8
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: int | None = None
    sp: bool = False
    cp_comm_type: str = "p2p"
    hierarchical_cp_sizes: list[int] | None = None

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    task: str = "llm-sft"
    seq_length: int = 4096
    micro_batch_size: int = 1
    global_batch_size: int = 128
    recompute: str = "selective"
    distributed_optimizer: bool = True
    precision: str = "bf16"
    peft: str = "none"
    lora_rank: int = 16
    cuda_graphs: bool = False


@dataclass(frozen=True, kw_only=True)
class PackingSpec:
    mode: str = "auto"
    pack_size: int | None = None
    algorithm: str = "first_fit_shuffle"
    seed: int = 1234
    pad_seq_to_mult: int | None = None


@dataclass(frozen=True, kw_only=True)
class DataSpec:
    lengths: str | None = None
    column: str | None = None


@dataclass(frozen=True, kw_only=True)
class HardwareSpec:
    gpu: str = "H100-80GB"
    memory_gib: float | None = None
    bf16_tflops: float | None = None


@dataclass(frozen=True, kw_only=True)
class Plan:
    model: ModelSpec
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    packing: PackingSpec = field(default_factory=PackingSpec)
    data: DataSpec = field(default_factory=DataSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    model_name: str = "custom"

    def to_dict(self) -> dict:
        """The plan as written to a file: a preset model stays a name."""
        out = asdict(self)
        out["model"] = self.model_name if self.model_name in MODEL_PRESETS else _model_fields(self.model)
        out.pop("model_name")
        return out


def _model_fields(model: ModelSpec) -> dict:
    return {f.name: getattr(model, f.name) for f in fields(model) if f.name != "name"}


def _build(cls, raw, section: str, problems: list[str]):
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        problems.append(f"{section}: expected a mapping, got {type(raw).__name__}")
        return None
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        problems.append(f"{section}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**{k: v for k, v in raw.items() if k in known})
    except TypeError as e:
        problems.append(f"{section}: {e}")
        return None


def plan_from_dict(raw: dict, source: str = "plan") -> Plan:
    """Build and check a plan; every problem found is reported together in one ``PlanError``.

    >>> p = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 16, "tp": 2, "cp": 2}})
    >>> p.parallel.dp, p.model.num_query_groups
    (4, 8)
    >>> plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 6, "tp": 4}})
    Traceback (most recent call last):
    ...
    advisor.plan.schema.PlanError: plan: 1 problem(s):
      - parallel: gpus 6 is not divisible by tp*pp*cp = 4
    """
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise PlanError(source, [f"expected a mapping with sections model, parallel, …; got {type(raw).__name__}"])
    unknown = sorted(set(raw) - {"model", "parallel", "training", "packing", "data", "hardware"})
    if unknown:
        problems.append(f"unknown section(s) {', '.join(unknown)}")
    model_raw = raw.get("model")
    model_name = "custom"
    model = None
    if isinstance(model_raw, str):
        if model_raw not in MODEL_PRESETS:
            problems.append(f"model: unknown preset {model_raw!r}; presets: {', '.join(MODEL_PRESETS)}")
        else:
            model_name = model_raw
            model = ModelSpec(**MODEL_PRESETS[model_raw], name=model_raw)
    elif isinstance(model_raw, dict) and "preset" in model_raw:
        name = model_raw["preset"]
        if name not in MODEL_PRESETS:
            problems.append(f"model: unknown preset {name!r}; presets: {', '.join(MODEL_PRESETS)}")
        else:
            model_name = name
            overrides = {k: v for k, v in model_raw.items() if k != "preset"}
            model = _build(ModelSpec, {**MODEL_PRESETS[name], **overrides, "name": name}, "model", problems)
    elif model_raw is None:
        problems.append("model: missing (a preset name, or hidden_size, num_layers, … fields)")
    else:
        model = _build(ModelSpec, model_raw, "model", problems)
    parallel = _build(ParallelSpec, raw.get("parallel"), "parallel", problems)
    training = _build(TrainingSpec, raw.get("training"), "training", problems)
    packing = _build(PackingSpec, raw.get("packing"), "packing", problems)
    data = _build(DataSpec, raw.get("data"), "data", problems)
    hardware = _build(HardwareSpec, raw.get("hardware"), "hardware", problems)
    if hardware is not None and hardware.gpu not in GPU_PRESETS and (hardware.memory_gib is None or
                                                                     hardware.bf16_tflops is None):
        problems.append(f"hardware: unknown gpu {hardware.gpu!r}; presets: {', '.join(GPU_PRESETS)} "
                        "(or give memory_gib and bf16_tflops)")
    if None not in (model, parallel, training, packing):
        problems += _consistency(model, parallel, training, packing)
    if problems:
        raise PlanError(source, problems)
    return Plan(model=model, parallel=parallel, training=training, packing=packing, data=data, hardware=hardware,
                model_name=model_name)


def _consistency(model: ModelSpec, par: ParallelSpec, tr: TrainingSpec, pk: PackingSpec) -> list[str]:
    """Megatron's divisibility rules and the enumerations; one message per broken rule."""
    out = []
    for name in ("gpus", "tp", "pp", "cp", "ep", "etp"):
        if not isinstance(getattr(par, name), int) or getattr(par, name) < 1:
            out.append(f"parallel: {name} must be a positive integer, got {getattr(par, name)!r}")
    if out:
        return out
    mp = par.tp * par.pp * par.cp
    if par.gpus % mp:
        out.append(f"parallel: gpus {par.gpus} is not divisible by tp*pp*cp = {mp}")
    if model.num_attention_heads % par.tp:
        out.append(f"model: num_attention_heads {model.num_attention_heads} is not divisible by tp {par.tp}")
    if model.query_groups % par.tp:
        out.append(f"model: num_query_groups {model.query_groups} is not divisible by tp {par.tp}")
    stages = par.pp * (par.vpp or 1)
    if model.num_layers % stages:
        out.append(f"model: num_layers {model.num_layers} is not divisible by pp*vpp = {stages}")
    if par.vpp is not None and par.pp == 1:
        out.append("parallel: vpp needs pp > 1")
    if par.gpus % mp == 0:
        dp = par.dp
        if tr.global_batch_size % (tr.micro_batch_size * dp):
            out.append(f"training: global_batch_size {tr.global_batch_size} is not divisible by "
                       f"micro_batch_size*dp = {tr.micro_batch_size}*{dp}")
    if model.num_moe_experts:
        if model.num_moe_experts % par.ep:
            out.append(f"model: num_moe_experts {model.num_moe_experts} is not divisible by ep {par.ep}")
    elif par.ep > 1:
        out.append("parallel: ep > 1 needs a MoE model (num_moe_experts)")
    if par.cp_comm_type not in CP_COMM_TYPES:
        out.append(f"parallel: cp_comm_type {par.cp_comm_type!r} is not one of {', '.join(CP_COMM_TYPES)}")
    elif par.cp_comm_type == "a2a+p2p" and (not par.hierarchical_cp_sizes or
                                           math.prod(par.hierarchical_cp_sizes) != par.cp):
        out.append(f"parallel: cp_comm_type a2a+p2p needs hierarchical_cp_sizes whose product is cp {par.cp}")
    for section, value, allowed in (("training.task", tr.task, TASKS), ("packing.mode", pk.mode, PACKING_MODES),
                                    ("training.recompute", tr.recompute, RECOMPUTE), ("training.peft", tr.peft, PEFT)):
        if value not in allowed:
            out.append(f"{section}: {value!r} is not one of {', '.join(allowed)}")
    if tr.seq_length < 1 or tr.micro_batch_size < 1 or tr.global_batch_size < 1:
        out.append("training: seq_length, micro_batch_size and global_batch_size must be positive")
    return out


def load_plan(path) -> Plan:
    """Read a YAML or JSON plan file (``yaml.safe_load``: no objects are ever constructed from the file)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise PlanError(str(path), [f"cannot be read: {e.strerror}"]) from None
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise PlanError(str(path), [f"is not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {e}"]) \
            from None
    return plan_from_dict(raw, str(path))


def dump_plan(plan: Plan, fmt: str = "yaml") -> str:
    data = plan.to_dict()
    return json.dumps(data, indent=2) if fmt == "json" else yaml.safe_dump(data, sort_keys=False)
