"""What the dashboard pages need, as plain functions over a session-state mapping. Nothing here imports Streamlit.

Session state keys: ``hist`` (the LengthHistogram in use), ``data_name`` (where it came from), ``plan`` (a typed
``Plan``), ``upload_error`` / ``plan_error`` (the last refusal's one-line message), ``link_error`` (a shared link's
plan refused: the frame says so on whichever page the link opened). Every change goes through
``set_plan`` or ``use_*``: on a bad input the message is stored and the previous data and plan are kept.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from advisor.analysis import Analysis, analyze
from advisor.data.ingest import load_lengths
from advisor.data.lengths import LengthHistogram, check_expandable
from advisor.data.megatron_mock import lognormal_config
from advisor.errors import InputError
from advisor.packing.cache import packing_for
from advisor.packing.offline import PackingResult
from advisor.packing.packers import PACKERS
from advisor.plan import Plan, PlanError
from advisor.plan.io import plan_from_text
from advisor.plan.presets import MODEL_PRESETS
from advisor.ui import text
from advisor.ui.links import plan_from_query
from advisor.ui.samples import (  # noqa: F401 - the pages reach these through the session module
    DEFAULT_SAMPLE,
    LOGNORMAL_INPUTS,
    MAX_DASHBOARD_PACK,
    MAX_GPUS,
    PACK_SIZE_STEP,
    RAW_MAX_SEQ_LENGTH,
    SAMPLES,
    default_plan,
    load_sample,
    within_budget,
)

UPLOAD_LIMIT_MB = 200  # .streamlit/config.toml server.maxUploadSize: binary uploads (.npy, Parquet)
# Text is parsed into columns at about 12x its size (measured: a 186 MB CSV of 40M lengths peaks at 2.3 GB), so a
# shared server refuses text over this before parsing it; a length,count histogram of the same data is a few kB.
TEXT_UPLOAD_LIMIT_MB = 64
BINARY_SUFFIXES = (".npy", ".parquet", ".pq")


_WARMING = threading.Lock()
_WARM_STARTED: list[threading.Thread] = []


def warm_up_in_background() -> threading.Thread:
    """Compile the packing kernels in a background thread, once per server process, so the first Packing page does
    not wait on numba (a no-op in milliseconds when the set-up command already filled numba's cache)."""
    from advisor.packing.warmup import warm_up

    with _WARMING:
        if not _WARM_STARTED:
            thread = threading.Thread(target=warm_up, name="advisor-warm-up", daemon=True)
            thread.start()
            _WARM_STARTED.append(thread)
        return _WARM_STARTED[0]


def heartbeat(state) -> None:
    """The session's trial job hears that its visitor is still here (app.py, on every page run)."""
    if "trial_job" in state:
        from advisor.trial.jobs import touch

        touch(state["trial_job"])


def init_state(state, query: dict | None = None) -> None:
    """Fill missing session keys: from a shared link's query parameters if given, else the default sample. The
    frame (app.py) calls it once per run, before any page; it starts nothing."""
    if "hist" in state and "plan" in state:
        return
    sample, plan = DEFAULT_SAMPLE, None
    if query:
        try:
            sample, plan = plan_from_query(query)
        except PlanError as e:
            # shown by the frame on whichever page the link opens (plan_error is shown where the controls are)
            sample, state["link_error"] = DEFAULT_SAMPLE, f"the link's plan could not be read: {e}"
        if plan is not None and plan.notes:
            state["plan_notes"] = list(plan.notes)
    if "hist" not in state:
        state["data_name"] = sample
        state["hist"] = load_sample(sample)
    if "plan" not in state:
        state["plan"] = plan or default_plan(sample)


def set_plan(state, changes: dict) -> bool:
    """Merge ``{section: {field: value}}`` into the plan; on a problem keep the plan and store the message."""
    try:
        plan = within_budget(state["plan"].changed(changes))
    except PlanError as e:
        state["plan_error"] = str(e)
        return False
    new = [note for note in plan.notes if note not in state["plan"].notes]
    if new:  # what the change set beyond what was typed (the recipe's pipeline flags): said, until dismissed
        state["plan_notes"] = [*state.get("plan_notes", ()), *new]
    state["plan"] = plan
    state.pop("plan_error", None)
    return True


UPLOAD_LABEL = f"Or upload lengths (csv, tsv, json, jsonl, npy, parquet; up to {UPLOAD_LIMIT_MB} MB)"


def sample_choice(state) -> str:
    """The bundled sample the selector shows: the one in use, else the default (uploaded data is not a sample)."""
    return state["data_name"] if state["data_name"] in SAMPLES else DEFAULT_SAMPLE


def use_chosen_sample(state) -> None:
    """The sample selector's callback: use the sample it shows."""
    use_sample(state, state["sample_choice"])


def use_sample(state, name: str) -> None:
    fresh = default_plan(name)
    state["hist"] = load_sample(name)
    state["data_name"] = name
    keep_model = state["plan"].model if "plan" in state and fresh.training.task != "vlm-sft" else fresh.model
    state["plan"] = fresh.model_copy(update={"model": keep_model})
    state.pop("upload_error", None)


def use_upload(state, data: bytes, name: str) -> bool:
    """Read an uploaded file; on a bad file keep the data in use and store the engine's message.

    Uploads never reach the server's files: a Megatron-LM mock config in file mode is refused (its path would be
    read on the server), and the size is checked before anything is parsed.
    """
    try:
        limit = UPLOAD_LIMIT_MB if name.lower().endswith(BINARY_SUFFIXES) else TEXT_UPLOAD_LIMIT_MB
        if len(data) > limit * 2**20:
            raise InputError(
                name[:80],
                None,
                f"is {len(data) / 2**20:,.0f} MB, over the dashboard's {limit} MB limit "
                "for this format: upload a length,count histogram (a few kB) or .npy/Parquet, or use "
                "the command line",
            )
        hist = _parse_upload(data, name)
        check_expandable(hist.num_samples, name[:80], "pack")  # refuse now, not on the Packing page
    except InputError as e:
        state["upload_error"] = str(e)
        return False
    state["hist"], state["data_name"] = hist, name
    state["plan"] = state["plan"].changed({"data": {"lengths": name[:200], "column": None}})
    state.pop("upload_error", None)
    return True


def _parse_upload(data: bytes, name: str) -> LengthHistogram:
    from advisor.data.ingest import parse_lengths

    return parse_lengths(data, name, max_bytes=UPLOAD_LIMIT_MB * 2**20)


def use_lognormal(state, mean: float, sigma: float, lo: int, hi: int) -> bool:
    """Megatron-LM's mock lognormal (seed 0, its 1M samples), as a data set and as the plan's data: the inline
    config Megatron-LM's --sft-mock-dataset-config-json takes, which every command reads back as this draw."""
    values = (mean, sigma, lo, hi)
    bad = [
        f"{f.label} {v:g} is outside {f.lo:g}..{f.hi:g}"
        for f, v in zip(LOGNORMAL_INPUTS, values, strict=True)
        if not f.holds(v)
    ] + ([f"min_seq_len {lo} is over max_seq_len {hi}"] if lo > hi else [])
    if bad:
        state["upload_error"] = "lognormal: " + "; ".join(bad)
        return False
    inline = json.dumps(lognormal_config(min_seq_len=lo, max_seq_len=hi, mean_seq_len=mean, lognormal_sigma=sigma))
    # the plan's data is the config itself, as Megatron-LM's --sft-mock-dataset-config-json takes it: the saved plan,
    # its exports and the CLI read the very draw shown here (it kept the previous data's path: a plan saved after a
    # draw ran the CLI on SQuAD, an 11x different global batch)
    hist = load_lengths(inline)
    hist = replace(hist, source=f"lognormal(mean {mean:g}, sigma {sigma:g}, [{lo}, {hi}])")
    state["hist"], state["data_name"] = hist, hist.source
    state["plan"] = state["plan"].changed({"data": {"lengths": inline, "column": None}})
    state.pop("upload_error", None)
    return True


def use_plan_file(state, data: bytes, name: str) -> bool:
    """Load an uploaded plan file: every field of it, the data's format included, but its data path (a file on the
    visitor's machine, not the server's): the dashboard's data stays, and a note says so."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        state["plan_error"] = f"{name[:80]}: is not UTF-8 text (byte {e.start})"
        return False
    try:
        plan = within_budget(plan_from_text(text, name[:80]), name[:80])
    except PlanError as e:
        state["plan_error"] = str(e)
        return False
    current = state["plan"].data
    notes = list(plan.notes)
    if plan.data.lengths and plan.data.lengths != current.lengths:
        notes.append(
            f"the plan's data.lengths {plan.data.lengths[:80]!r} is a path on your machine: the dashboard "
            f"keeps the data it shows ({str(state.get('data_name', current.lengths))[:80]}); upload that "
            "file to use it"
        )
    state["plan"] = plan.changed({"data": {"lengths": current.lengths, "column": current.column}})
    state["plan_notes"] = notes
    state.pop("plan_error", None)
    return True


def saved_plan(state) -> str:
    """The session's plan as a YAML file to download, saying where its data is: a bundled sample's path is read
    from the advisor's own folder wherever the file is used (advisor/plan/io.py); an upload's name is not a path."""
    from advisor.plan import dump_plan

    name = str(state.get("data_name", ""))
    lengths = state["plan"].data.lengths or ""
    if lengths.lstrip().startswith("{"):  # the lognormal draw: its config, which every command draws again
        head = (
            "# data.lengths is Megatron-LM's mock SFT config (--sft-mock-dataset-config-json): every command draws "
            "the same lengths from it (seed 0, 1,000,000 samples)\n"
        )
    elif name in SAMPLES:
        head = (
            f"# data.lengths is the advisor's bundled sample {name!r}: sample_data/ is read from the advisor's own "
            "folder wherever this file is\n"
        )
    else:
        head = (
            f"# data.lengths names the data uploaded to the dashboard ({name[:80]!r}): put that file beside this "
            "plan, or give --lengths FILE\n"
        )
    return head + dump_plan(state["plan"])


plain = text.plain  # the one escaping of visitor-derived text for Markdown widgets (advisor/ui/text.py)


# ------------------------------------------------------------------------------------------------ analyses
def estimate_of(analysis: Analysis):
    """The estimate, or None and the one-line reason the data cannot be estimated under this plan (fewer samples than
    one micro batch, say): a page shows the reason instead of failing."""
    try:
        return analysis.estimate, None
    except ValueError as e:
        return None, str(e)


def guarded(compute):
    """``compute()``, or None and the one-line reason it cannot run on this data and plan (an InputError or a
    ValueError from the engine): a page shows the reason and keeps its state."""
    try:
        return compute(), None
    except (InputError, PlanError, ValueError) as e:
        return None, str(e)


def analysis_of(state) -> Analysis:
    """The session's plan on its data (cached in the engine: a rerun with the same inputs computes nothing)."""
    return analyze(state["plan"], state["hist"])


# ------------------------------------------------------------------------------------------------ a shared server
SERVED_SAMPLES = 1_000_000  # an online schedule past this many samples is a scale model of its epoch (the
# Wikipedia sample's 16.3M need ~2.4 GB exactly; with this, ~0.6 GB for the data and ~160 MB a schedule)
SERVED_CACHE_BYTES = {"packings": 768 << 20, "schedules": 384 << 20}
BIG_DATA = 250_000  # samples past which a session's own analysis counts as heavy work (packing 16M takes seconds)
_SERVING = threading.Lock()


def serve() -> None:
    """Set this process up as a server shared by many visitors (app.py, once per run; idempotent): online
    schedules over SERVED_SAMPLES become scale models, and the result caches hold less."""
    from advisor.packing.cache import PACKINGS
    from advisor.packing.online import from_plan

    with _SERVING:
        from_plan.limit_samples(SERVED_SAMPLES)
        PACKINGS.max_bytes = min(PACKINGS.max_bytes or SERVED_CACHE_BYTES["packings"], SERVED_CACHE_BYTES["packings"])
        from_plan.SCHEDULES.max_bytes = SERVED_CACHE_BYTES["schedules"]


def heavy(state, what: str, compute, *, memory: int):
    """``compute()`` run as one of the session's heavy jobs (advisor/ui/fair.py), or None and the one-line reason
    it did not run: the session over its CPU budget, the server full, or the engine refusing the inputs."""
    from advisor.ui import fair

    try:
        with fair.GATE.heavy(fair.meter_of(state), what, memory=memory):
            return guarded(compute)
    except fair.Busy as e:
        return None, str(e)


def analysis_memory(hist: LengthHistogram) -> int:
    """Bytes an analysis of this data holds while computed: the offline packing and its micro batches, measured
    at ~45 bytes a sample (16.3M Wikipedia samples: ~700 MB)."""
    return 48 * hist.num_samples


def comparison_memory(hist: LengthHistogram) -> int:
    """Bytes the Online packing page's comparison needs at its peak: the data in order, padded, and its offline
    micro batches (~36 bytes a sample), and up to three schedules of at most SERVED_SAMPLES (~160 bytes a sample):
    measured on the Wikipedia sample, 1.18 GB with two schedules of 2M samples and 1.49 GB with three. The
    comparison of every way (global-batch packing and GPT-SFT in-batch packing beside them) adds a fourth schedule
    and the in-batch micro batches of every sample (int64 rows, shuffled: ~40 bytes a sample), counted so, not
    measured together."""
    n = hist.num_samples
    return 76 * n + 4 * 160 * min(n, SERVED_SAMPLES)


def ready_analysis(state):
    """The session's analysis with its estimate computed, or None and why not: on big data (over BIG_DATA
    samples) computing it is heavy work the server's gate admits; a kept one is free."""
    analysis = analysis_of(state)
    if analysis.computed("estimate") is not None or state["hist"].num_samples <= BIG_DATA:
        return analysis, None
    done, problem = heavy(
        state, "the analysis of this data", lambda: estimate_of(analysis), memory=analysis_memory(state["hist"])
    )
    return (analysis, None) if problem is None else (None, problem)


# how far its figures are from the full data's: within 0.2 percentage points of efficiency on Wikipedia)


def packing_changes(plan: Plan, algorithm: str, pack_size: int, pad_seq_to_mult: int) -> dict:
    """The plan changes the Packing page's controls ask for: only what differs from the plan's effective values, so
    opening the page changes nothing (``pack_size: null`` and the CP/SP padding rule stay as they are)."""
    changes: dict[str, str | int] = {}
    if algorithm != plan.packing.algorithm:
        changes["algorithm"] = algorithm
    if pack_size != plan.pack_size:
        changes["pack_size"] = pack_size
    if pad_seq_to_mult != plan.pad_seq_to_mult:
        changes["pad_seq_to_mult"] = pad_seq_to_mult
    return {"packing": changes} if changes else {}


def plan_packing(state, progress=None) -> PackingResult:
    """Megatron-Bridge's offline packing of the session's data under its plan: the packing the estimate, the rules
    and the exports use (padding multiple, max length and seed included), whatever the plan's mode."""
    from advisor.model.estimate import packing_config

    return packing_for(state["hist"], packing_config(state["plan"]), progress=progress)


def packing_kept(state) -> bool:
    """Whether the plan's packing shows at once: kept, or small data (packed in well under a second)."""
    from advisor.model.estimate import packing_config
    from advisor.packing.cache import PACKINGS

    hist = state["hist"]
    return hist.num_samples <= BIG_DATA or PACKINGS.peek(hist, packing_config(state["plan"])) is not None


def packing_shown_before(state) -> dict | None:
    """The headline last shown for this data while the plan's packing is not ready at once (big data, a new pack
    size): the page keeps it on screen, said to be the previous one, instead of a blank while it packs."""
    previous = state.get("packing_shown")
    if previous and previous.get("data") == state.get("data_name") and not packing_kept(state):
        return previous
    return None


def packing_shown(state, result) -> dict:
    """The headline of ``result`` as shown, kept in the session for ``packing_shown_before``."""
    from advisor.ui.views import packing_headline

    shown = {**packing_headline(result), "data": state.get("data_name")}
    state["packing_shown"] = shown
    return shown


def ready_packing(state, progress=None):
    """``plan_packing``, or None and why not: packing big data (over BIG_DATA samples) anew is heavy work, unless
    the background worker is packing it already (then this waits for it, advisor/ui/ahead.py)."""
    from advisor.model.estimate import packing_config
    from advisor.ui.ahead import WORKER

    hist = state["hist"]
    if packing_kept(state):
        return guarded(lambda: plan_packing(state, progress))
    try:
        cfg = packing_config(state["plan"])
    except ValueError as e:
        return None, str(e)
    if WORKER.join(hist, cfg, progress):
        return guarded(lambda: plan_packing(state, progress))
    return heavy(state, "packing this data", lambda: plan_packing(state, progress), memory=analysis_memory(hist))


def pack_ahead(state) -> int:
    """On big data, wish for the packings one step of the pack size control away (the background worker computes
    them while the server is idle); how many were wished for."""
    from advisor.model.estimate import packing_config
    from advisor.ui.ahead import WORKER

    hist, plan = state["hist"], state["plan"]
    if hist.num_samples <= BIG_DATA or PACKERS[plan.packing.algorithm].solver:  # a solver's seconds per size
        return 0
    configs = []
    for size in (plan.pack_size + PACK_SIZE_STEP, plan.pack_size - PACK_SIZE_STEP):
        if 16 <= size <= MAX_DASHBOARD_PACK:
            try:
                configs.append(packing_config(within_budget(plan.changed({"packing": {"pack_size": size}}))))
            except (PlanError, ValueError):
                continue
    return WORKER.offer(hist, configs)


def ready_search(state, analysis: Analysis, vary, progress=None):
    """The layout search with these freedoms, or None and why not (a search not yet done is heavy work)."""

    if analysis.has_searched(vary):
        return guarded(lambda: analysis.searched(vary=vary))
    memory = 4 * analysis_memory(analysis.hist.scale_model())  # a few candidates kept at once
    return heavy(state, "the layout search", lambda: analysis.searched(progress=progress, vary=vary), memory=memory)


def ready_comparison(state, megatron_lm: str, max_seqlen_per_dp_cp_rank: int | None):
    """Offline against online packing (views.packing_comparison), or None and why not: heavy unless kept."""
    from advisor.ui import views

    plan, hist = state["plan"], state["hist"]
    compute = lambda: views.packing_comparison(plan, hist, megatron_lm, max_seqlen_per_dp_cp_rank)  # noqa: E731
    if views.comparison_kept(plan, hist, megatron_lm, max_seqlen_per_dp_cp_rank):
        return guarded(compute)
    return heavy(state, "the online schedules", compute, memory=comparison_memory(hist))


# ------------------------------------------------------------------------------------------------ controls
def index_of(options, value) -> int:
    keys = list(options)
    return keys.index(value) if value in keys else 0


CUSTOM_FIELDS = (
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "kv_channels",
)


def model_fields(plan: Plan) -> dict[str, int]:
    """The TransformerConfig-style fields of the plan's model that the page lets you edit."""
    m = plan.model
    return {k: int(getattr(m, k) or (m.query_groups if k == "num_query_groups" else m.head_dim)) for k in CUSTOM_FIELDS}


def only_changes(plan: Plan, changes: dict) -> dict:
    """The changes that differ from the plan, so a page rerun with untouched controls changes nothing.

    >>> only_changes(default_plan(), {"parallel": {"gpus": 8, "tp": 4}, "model": {}})
    {'parallel': {'tp': 4}}
    """
    raw = plan.to_dict()
    model = raw["model"] if isinstance(raw["model"], dict) else {"preset": raw["model"]}
    out = {}
    for section, values in changes.items():
        current = model if section == "model" else raw.get(section, {})
        if section == "model" and "preset" not in current:  # a custom model: compare with its fields
            current = plan.model.model_dump()
        diff = {k: v for k, v in values.items() if current.get(k, getattr(getattr(plan, section), k, None)) != v}
        if diff:
            out[section] = diff
    return out


def model_presets() -> list[str]:
    return list(MODEL_PRESETS)
