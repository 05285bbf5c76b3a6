"""The dashboard's plan-bound controls: every widget that edits the plan, keyed and reconciled with the plan here.

Alternatives: a widget per page created with ``value=plan.x`` and no key (what this replaced), or session keys kept
beside the plan and copied back and forth by each page. The trap the first one hides: Streamlit derives an unkeyed
widget's identity from its arguments, ``value`` included, so once an edit changed the plan the widget was a new one,
and the browser's next edit went to the old identity and was dropped: 8→16 applied, 16→32 snapped back, 32→64 applied
(issue 19). AppTest sets values by the widget's current identity, so its tests passed.

Here the plan is the one source of truth. Each control has a fixed session key; before a page draws it the plan's
value is written into that key (``current``), and the widget's ``on_change`` (``apply``) turns the edit into plan
changes. A refused edit keeps the plan and its message, and the key is reset to the plan's value, so the control never
shows what the plan is not. Nothing here imports Streamlit: the widget kinds are names the page frame draws.

>>> from advisor.ui.samples import default_plan
>>> state = {"plan": default_plan()}
>>> state[CONTROLS["parallel.gpus"].key] = 16
>>> apply(state, "parallel.gpus"), state["plan"].parallel.gpus
(True, 16)
>>> state[CONTROLS["parallel.gpus"].key] = 6  # not divisible by TP x PP x CP = 4 with TP 2 and CP 2, say
>>> state["plan"] = state["plan"].changed({"parallel": {"tp": 2, "cp": 2}})
>>> apply(state, "parallel.gpus"), state["plan"].parallel.gpus, state[CONTROLS["parallel.gpus"].key]
(False, 16, 16)
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from advisor.plan import PlanError
from advisor.plan.presets import GPU_PRESETS, MODEL_PRESETS
from advisor.plan.versions import RELEASES, Package
from advisor.ui.samples import MAX_DASHBOARD_PACK, MAX_GPUS, PACK_SIZE_STEP
from advisor.ui.state import analysis_of, set_plan
from advisor.vocabulary import Algorithm, DataFormat, Precision, Recompute

Kind = Literal["number", "select", "toggle", "radio"]
BATCH_UNITS = ("packs", "samples")  # packs first: Megatron-Bridge's own unit under offline packing


@dataclass(frozen=True, kw_only=True)
class Control:
    """One plan-bound widget: how to read the plan's value and how an edit changes the plan."""

    name: str  # "parallel.gpus"
    label: str
    kind: Kind
    help: str  # a key of advisor/ui/explain.py HELP
    read: Callable[[MutableMapping], Any]  # session state -> the value the widget shows
    write: Callable[[MutableMapping, Any], dict]  # session state, edited value -> {section: {field: value}}
    options: Callable[[MutableMapping], list] | None = None
    lo: int | None = None
    hi: int | None = None
    step: int | None = None

    @property
    def key(self) -> str:
        return f"plan.{self.name}"


def _field(section: str, name: str) -> tuple[Callable, Callable]:
    return (lambda s: getattr(getattr(s["plan"], section), name), lambda s, v: {section: {name: v}})


def _number(name: str, label: str, help: str, lo: int, hi: int, step: int | None = None, read=None) -> Control:
    section, field = name.split(".")
    default_read, write = _field(section, field)
    read = read or default_read
    return Control(
        name=name,
        label=label,
        kind="number",
        help=help,
        lo=lo,
        hi=hi,
        step=step,
        read=lambda s: min(hi, max(lo, int(read(s)))),
        write=lambda s, v: write(s, int(v)),
    )


def _model_options(state) -> list[str]:
    plan = state["plan"]
    return list(MODEL_PRESETS) + ([] if plan.model.preset else ["custom"])


def _model_write(state, value) -> dict:
    return {} if value == "custom" else {"model": {"preset": value}}


def _packing_factor(state) -> float | None:
    try:
        return analysis_of(state).packing_factor
    except (ValueError, PlanError):
        return None


def _batch_unit(state) -> str:
    return "packs" if state["plan"].batch_in_packs is not None else "samples"


def _batch_unit_options(state) -> list[str]:
    return list(BATCH_UNITS) if state["plan"].packing_mode == "offline" else ["samples"]


def _batch_unit_write(state, unit) -> dict:
    """Switching the unit keeps the step's work: samples become the packs Megatron-Bridge would run (packs x n back)."""
    plan = state["plan"]
    if unit == _batch_unit(state):
        return {}
    n = _packing_factor(state)
    if unit == "packs":
        return {"training": {"global_batch_size": plan.global_batch_packs(n) if n else plan.dp}}
    samples = plan.effective_samples_per_step(n) or plan.batch_in_packs
    return {"training": {"global_batch_samples": max(1, round(samples))}}


def _batch_read(state) -> int:
    t = state["plan"].training
    return t.global_batch_size if t.global_batch_size is not None else t.global_batch_samples


def _batch_write(state, value) -> dict:
    # packs is Megatron-Bridge's own global_batch_size (offline packing); samples are global_batch_samples, except
    # where the framework itself counts samples (every other mode), whose global_batch_size they are
    plan = state["plan"]
    field = (
        "global_batch_size"
        if _batch_unit(state) == "packs" or plan.packing_mode != "offline"
        else "global_batch_samples"
    )
    return {"training": {field: int(value)}}


def _seq_length_write(state, value) -> dict:
    """seq_length, with the pack following it: a pack pinned at the old seq_length was the same as following it, so
    it is unpinned (the user never chose a different pack); a pack pinned elsewhere stays, and the plan refuses a
    pack longer than the new seq_length on this page."""
    plan = state["plan"]
    out: dict = {"training": {"seq_length": int(value)}}
    if plan.packing.pack_size is not None and plan.packing.pack_size == plan.training.seq_length:
        out["packing"] = {"pack_size": None}
    return out


def _pack_size_write(state, value) -> dict:
    plan = state["plan"]
    return {} if int(value) == min(plan.pack_size, MAX_DASHBOARD_PACK) else {"packing": {"pack_size": int(value)}}


def _pad_write(state, value) -> dict:
    # the effective multiple (the CP/SP rule's when the plan leaves it null) is shown; only an edit sets it
    return {} if int(value) == state["plan"].pad_seq_to_mult else {"packing": {"pad_seq_to_mult": int(value)}}


def _precision_write(state, value) -> dict:
    """Another precision drops an FP8 recipe, which applies to fp8 only (the plan refuses it elsewhere)."""
    t = state["plan"].training
    return {"training": {"precision": value, "fp8_recipe": t.fp8_recipe if value == "fp8" else None}}


def _recompute_write(state, value) -> dict:
    """Another recompute drops a block size, which applies to full recompute only (the plan refuses it elsewhere)."""
    t = state["plan"].training
    return {
        "training": {"recompute": value, "recompute_num_layers": t.recompute_num_layers if value == "full" else None}
    }


def _recompute_options(state) -> list[str]:
    return list(get_args(Recompute))


def _model_field(name: str) -> Control:
    def read(state) -> int:
        m = state["plan"].model
        return int(getattr(m, name) or (m.query_groups if name == "num_query_groups" else m.head_dim))

    return _number(f"model.{name}", name, "custom_model", 1, 1 << 20, read=read)


# the Memory & FLOPs page's controls, three rows, with widths so every name reads in full at 1280-1440 px: what
# runs, on what; the layout; the step (names, relative column widths or None for equal)
MEMORY_PAGE_ROWS: tuple[tuple[tuple[str, ...], tuple[int, ...] | None], ...] = (
    (("model.preset", "hardware.gpu", "training.precision", "training.recompute", "parallel.gpus"), (3, 2, 2, 2, 2)),
    (
        (
            "parallel.tp",
            "parallel.pp",
            "parallel.vpp",
            "parallel.cp",
            "parallel.ep",
            "parallel.sp",
            "parallel.fsdp",
            "training.cpu_offloading_num_layers",
        ),
        None,
    ),
    (("training.seq_length", "training.micro_batch_size", "training.batch_unit", "training.batch"), None),
)
CUSTOM_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "kv_channels",
)


def _version(package: Package, label: str) -> Control:
    """A release the plan runs on: the known ones, and the plan's own where it names another."""
    read = lambda s: getattr(s["plan"].versions, package)  # noqa: E731
    return Control(
        name=f"versions.{package}",
        label=label,
        kind="select",
        help=f"version_{package}",
        read=read,
        write=lambda s, v: {"versions": {package: v}},
        options=lambda s: list(dict.fromkeys([*reversed(RELEASES[package]), read(s)])),
    )


_ALL = [
    _version("megatron_bridge", "Megatron-Bridge"),
    _version("megatron_core", "Megatron-Core"),
    _version("transformer_engine", "Transformer Engine"),
    Control(
        name="model.preset",
        label="Model",
        kind="select",
        help="model",
        read=lambda s: s["plan"].model.preset or "custom",
        write=_model_write,
        options=_model_options,
    ),
    *[_model_field(k) for k in CUSTOM_FIELDS],
    Control(
        name="hardware.gpu",
        label="GPU",
        kind="select",
        help="gpu",
        read=lambda s: s["plan"].hardware.gpu,
        write=lambda s, v: {"hardware": {"gpu": v}},
        options=lambda s: list(dict.fromkeys([*GPU_PRESETS, s["plan"].hardware.gpu])),
    ),
    _number("parallel.gpus", "GPUs", "gpus", 1, MAX_GPUS),
    _number("parallel.tp", "TP", "tp", 1, 1024),
    _number("parallel.pp", "PP", "pp", 1, 1024),
    _number("parallel.cp", "CP", "cp", 1, 1024),
    Control(
        name="parallel.vpp",
        label="VP",
        kind="number",
        help="vpp",
        lo=1,
        hi=1024,
        read=lambda s: s["plan"].parallel.vpp or 1,
        write=lambda s, v: {"parallel": {"vpp": None if int(v) == 1 else int(v)}},
    ),
    _number("parallel.ep", "EP", "ep", 1, 4096),
    Control(
        name="parallel.sp",
        label="SP",
        kind="toggle",
        help="sp",
        read=lambda s: s["plan"].parallel.sp,
        write=lambda s, v: {"parallel": {"sp": bool(v)}},
    ),
    _number("training.micro_batch_size", "micro batch", "micro_batch", 1, 4096),
    Control(
        name="training.seq_length",
        label="seq_length",
        kind="number",
        help="seq_length",
        lo=16,
        hi=1 << 20,
        step=1024,
        read=lambda s: min(1 << 20, max(16, s["plan"].training.seq_length)),
        write=_seq_length_write,
    ),
    Control(
        name="training.recompute",
        label="recompute",
        kind="select",
        help="recompute",
        read=lambda s: s["plan"].training.recompute,
        write=_recompute_write,
        options=_recompute_options,
    ),
    Control(
        name="training.precision",
        label="precision",
        kind="select",
        help="precision",
        read=lambda s: s["plan"].training.precision,
        write=_precision_write,
        options=lambda s: list(get_args(Precision)),
    ),
    Control(
        name="parallel.fsdp",
        label="FSDP",
        kind="toggle",
        help="fsdp",
        read=lambda s: s["plan"].parallel.fsdp,
        write=lambda s, v: {"parallel": {"fsdp": bool(v)}},
    ),
    _number("training.cpu_offloading_num_layers", "offloaded layers", "cpu_offload", 0, 1 << 20),
    Control(
        name="training.batch_unit",
        label="global batch counts",
        kind="radio",
        help="batch_unit",
        read=_batch_unit,
        write=_batch_unit_write,
        options=_batch_unit_options,
    ),
    Control(
        name="training.batch",
        label="global batch",
        kind="number",
        help="global_batch",
        lo=1,
        hi=1 << 24,
        read=_batch_read,
        write=_batch_write,
    ),
    Control(
        name="data.format",
        label="data format",
        kind="radio",
        help="data_format",
        read=lambda s: s["plan"].data.format,
        write=lambda s, v: {"data": {"format": v}},
        options=lambda s: list(get_args(DataFormat)),
    ),
    Control(
        name="packing.algorithm",
        label="Algorithm",
        kind="select",
        help="algorithm",
        read=lambda s: s["plan"].packing.algorithm,
        write=lambda s, v: {"packing": {"algorithm": v}},
        options=lambda s: list(get_args(Algorithm)),
    ),
    Control(
        name="packing.pack_size",
        label="Pack size",
        kind="number",
        help="pack_size",
        lo=16,
        hi=MAX_DASHBOARD_PACK,
        step=PACK_SIZE_STEP,
        read=lambda s: max(16, min(s["plan"].pack_size, MAX_DASHBOARD_PACK)),
        write=_pack_size_write,
    ),
    Control(
        name="packing.pad_seq_to_mult",
        label="pad_seq_to_mult",
        kind="number",
        help="pad_seq_to_mult",
        lo=1,
        hi=65536,
        read=lambda s: s["plan"].pad_seq_to_mult,
        write=_pad_write,
    ),
]
CONTROLS: dict[str, Control] = {c.name: c for c in _ALL}


def current(state: MutableMapping, name: str) -> Any:
    """The value control ``name`` shows: the plan's, written into the widget's key (call before drawing it)."""
    control = CONTROLS[name]
    value = control.read(state)
    state[control.key] = value
    return value


def options(state: MutableMapping, name: str) -> list:
    control = CONTROLS[name]
    return control.options(state) if control.options is not None else []


def apply(state: MutableMapping, name: str) -> bool:
    """A widget's ``on_change``: the edit in its key becomes plan changes; a refused one keeps the plan (and the
    message in ``plan_error``) and puts the plan's value back into the key."""
    control = CONTROLS[name]
    try:
        changes = control.write(state, state[control.key])
    except (ValueError, TypeError) as e:
        state["plan_error"] = f"{control.label}: {e}"
        state[control.key] = control.read(state)
        return False
    if not changes:
        state.pop("plan_error", None)
        return True
    if not set_plan(state, changes):
        state[control.key] = control.read(state)
        return False
    return True
