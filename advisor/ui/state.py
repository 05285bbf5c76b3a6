"""What the dashboard pages need, as plain functions over a session-state mapping. Nothing here imports Streamlit.

Session state keys: ``hist`` (the LengthHistogram in use), ``data_name`` (where it came from), ``plan`` (a typed
``Plan``), ``upload_error`` / ``plan_error`` (the last refusal's one-line message). Every change goes through
``set_plan`` or ``use_*``: on a bad input the message is stored and the previous data and plan are kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import zlib
from functools import lru_cache
from pathlib import Path

import pandas as pd

from advisor.analysis import EXPORT_FILE_NAMES, Analysis, analyze, memory_grid
from advisor.data.lengths import LengthHistogram, check_expandable, summarize
from advisor.data.megatron_mock import lognormal_lengths
from advisor.errors import InputError
from advisor.packing.baselines import pad_to_longest_in_batch, pad_to_sequence_length
from advisor.packing.cache import HistogramCache, packing_for
from advisor.packing.config import PackingConfig
from advisor.packing.offline import PackingResult, pack, runtime_lengths
from advisor.plan import Plan, PlanError, plan_from_dict, schema
from advisor.plan.io import MAX_PLAN_BYTES, parse_plan_text, plan_from_text
from advisor.plan.presets import MODEL_PRESETS

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_data"
# sample name -> (file, the plan it opens with)
SAMPLES: dict[str, tuple[str, dict]] = {
    "SQuAD 1.1 (real, 88k)": ("squad_v1.1_len384_hist.csv", {"seq_length": 384, "gpus": 8}),
    "Wikipedia BERT (real, 16.3M)": ("wikipedia_bert_len512_hist.csv", {"seq_length": 512, "gpus": 8}),
    "SFT-like (200k)": ("sft_like_hist.csv", {"seq_length": 8192, "gpus": 16}),
    "chat-like (180k)": ("chat_like_hist.csv", {"seq_length": 16384, "gpus": 16}),
    "long-context (20k)": ("long_context_hist.csv", {"seq_length": 131072, "gpus": 64, "cp": 16}),
    "VLM-like (100k)": ("vlm_like_hist.csv", {"seq_length": 4096, "gpus": 8, "task": "vlm-sft"}),
}
DEFAULT_SAMPLE = "SQuAD 1.1 (real, 88k)"
UPLOAD_LIMIT_MB = 200  # .streamlit/config.toml server.maxUploadSize: binary uploads (.npy, Parquet)
# Text is parsed into columns at about 12x its size (measured: a 186 MB CSV of 40M lengths peaks at 2.3 GB), so a
# shared server refuses text over this before parsing it; a length,count histogram of the same data is a few kB.
TEXT_UPLOAD_LIMIT_MB = 64
BINARY_SUFFIXES = (".npy", ".parquet", ".pq")
LOGNORMAL_SAMPLES = 200_000
MAX_GPUS = schema.MAX_GPUS  # the Memory page's GPU control goes as far as a plan may
MAX_DASHBOARD_PACK = 1 << 20  # a visitor's sequences, packs and sweeps stop at 1M tokens (the engine takes 2^24)


@lru_cache(maxsize=8)
def load_sample(name: str) -> LengthHistogram:
    from advisor.data.ingest import load_lengths

    return load_lengths(SAMPLE_DIR / SAMPLES[name][0])


def default_plan(sample: str = DEFAULT_SAMPLE) -> Plan:
    s = SAMPLES[sample][1]
    vlm = s.get("task") == "vlm-sft"
    return plan_from_dict({
        "model": "qwen2.5-vl-7b" if vlm else "llama3.1-8b",
        "parallel": {"gpus": s["gpus"], "tp": 2, "cp": s.get("cp", 1), "sp": True},
        "training": {"task": s.get("task", "llm-sft"), "seq_length": s["seq_length"],
                     "micro_batch_size": 4 if vlm else 1, "global_batch_size": 128},
        "packing": {"mode": "auto", "pack_size": None if vlm else s["seq_length"]},
        "data": {"lengths": f"sample_data/{SAMPLES[sample][0]}"},
        "hardware": {"gpu": "H100-80GB"}}, "default plan")


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


def init_state(state, query: dict | None = None) -> None:
    """Fill missing session keys: from a shared link's query parameters if given, else the default sample. Every
    page calls it first, so it is also where the session's trial job hears that its visitor is still here, and
    where the packing kernels start compiling in the background on a fresh install."""
    warm_up_in_background()
    if "trial_job" in state:
        from advisor.trial.jobs import touch

        touch(state["trial_job"])
    if "hist" in state and "plan" in state:
        return
    sample, plan = DEFAULT_SAMPLE, None
    if query:
        try:
            sample, plan = plan_from_query(query)
        except PlanError as e:
            sample, state["plan_error"] = DEFAULT_SAMPLE, f"the link's plan could not be read: {e}"
    if "hist" not in state:
        state["data_name"] = sample
        state["hist"] = load_sample(sample)
    if "plan" not in state:
        state["plan"] = plan or default_plan(sample)


def within_budget(plan: Plan, source: str = "plan") -> Plan:
    """The dashboard's limits on what a visitor's plan may ask the server to compute (the engine's are wider)."""
    problems = [f"training.seq_length {plan.training.seq_length:,} is over the dashboard's {MAX_DASHBOARD_PACK:,} "
                "tokens (use the command line for longer)"] if plan.training.seq_length > MAX_DASHBOARD_PACK else []
    if plan.pack_size > MAX_DASHBOARD_PACK:
        problems.append(f"packing.pack_size {plan.pack_size:,} is over the dashboard's {MAX_DASHBOARD_PACK:,} tokens")
    if problems:
        raise PlanError(source, problems)
    return plan


def set_plan(state, changes: dict) -> bool:
    """Merge ``{section: {field: value}}`` into the plan; on a problem keep the plan and store the message."""
    try:
        plan = within_budget(state["plan"].changed(changes))
    except PlanError as e:
        state["plan_error"] = str(e)
        return False
    state["plan"] = plan
    state.pop("plan_error", None)
    return True


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
            raise InputError(name[:80], None, f"is {len(data) / 2**20:,.0f} MB, over the dashboard's {limit} MB limit "
                             "for this format: upload a length,count histogram (a few kB) or .npy/Parquet, or use "
                             "the command line")
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


def use_lognormal(state, mean: float, sigma: float, lo: int, hi: int, samples: int = LOGNORMAL_SAMPLES) -> bool:
    """Megatron-LM's mock lognormal (seed 0), as a data set."""
    if not (0 < sigma <= 10 and 1 <= lo <= hi <= 1 << 24 and 0 < mean <= 1 << 24 and 1 <= samples <= 10_000_000):
        state["upload_error"] = (f"lognormal: need 0 < sigma <= 10, 1 <= min <= max <= 2^24 and a positive mean "
                                 f"(got mean {mean:g}, sigma {sigma:g}, min {lo}, max {hi})")
        return False
    hist = LengthHistogram.from_samples(lognormal_lengths(samples, mean, sigma, lo, hi),
                                        source=f"lognormal(mean {mean:g}, sigma {sigma:g}, [{lo}, {hi}])")
    state["hist"], state["data_name"] = hist, hist.source
    state.pop("upload_error", None)
    return True


def use_plan_file(state, data: bytes, name: str) -> bool:
    """Load an uploaded plan file; its data path is ignored (the dashboard's data stays)."""
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
    state["plan"] = plan.changed({"data": state["plan"].data.model_dump()})
    state.pop("plan_error", None)
    return True


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(text: str, most: int = 2000) -> str:
    r"""A message as plain text for Streamlit's Markdown widgets (st.error renders Markdown): every Markdown
    character escaped, so a crafted field name cannot show a link or an image, and long messages cut.

    >>> print(plain("[sign in](x.io)"))
    \[sign in\]\(x\.io\)
    """
    text = text if len(text) <= most else text[:most] + " …"
    return _MARKDOWN.sub(r"\\\1", text)


# ------------------------------------------------------------------------------------------------ the data
def summary_table(hist: LengthHistogram) -> pd.DataFrame:
    s = summarize(hist)
    rows = [("samples", f"{s.num_samples:,}"), ("tokens", f"{s.total_tokens:,}"), ("mean", f"{s.mean:,.1f}"),
            ("p50", f"{s.p50:,}"), ("p90", f"{s.p90:,}"), ("p99", f"{s.p99:,}"), ("max", f"{s.max:,}")]
    rows += [(f"share > {k:,}", f"{v:.2%}") for k, v in s.share_above.items()]
    rows.append(("rows left out", f"{s.excluded:,}"))
    return pd.DataFrame(rows, columns=["statistic", "value"])


def summary_numbers(hist: LengthHistogram) -> dict[str, str]:
    """The few figures shown large above the summary table."""
    s = summarize(hist)
    return {"samples": f"{s.num_samples:,}", "mean": f"{s.mean:,.0f}", "p99": f"{s.p99:,}", "max": f"{s.max:,}"}


# ------------------------------------------------------------------------------------------------ links
def plan_to_query(plan: Plan, sample: str | None) -> dict[str, str]:
    """Query parameters that reopen the dashboard on this plan (and sample, by name)."""
    text = json.dumps(plan.to_dict(), separators=(",", ":"))
    out = {"plan": base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()}
    if sample in SAMPLES:
        out["sample"] = sample
    return out


def plan_from_query(query: dict) -> tuple[str, Plan | None]:
    """The sample and plan of a shared link; a bad link raises ``PlanError`` (decompressed with a size cap, parsed
    with the plan files' depth limit, so a crafted link cannot blow up or crash the page)."""
    sample = query.get("sample", DEFAULT_SAMPLE)
    if sample not in SAMPLES:
        raise PlanError("link", [f"unknown sample {str(sample)[:40]!r}"])
    if "plan" not in query:
        return sample, None
    try:
        packed = base64.urlsafe_b64decode(str(query["plan"])[:MAX_PLAN_BYTES].encode())
        inflate = zlib.decompressobj()
        raw = inflate.decompress(packed, MAX_PLAN_BYTES)
        if inflate.unconsumed_tail:
            raise PlanError("link", [f"the plan parameter inflates past {MAX_PLAN_BYTES:,} bytes"])
        text = raw.decode()
    except (ValueError, binascii.Error, zlib.error, UnicodeDecodeError):
        raise PlanError("link", ["the plan parameter is not a plan link"]) from None
    return sample, within_budget(plan_from_dict(parse_plan_text(text, "link.json"), "link"), "link")


# ------------------------------------------------------------------------------------------------ analyses
def analysis_of(state) -> Analysis:
    """The session's plan on its data (cached in the engine: a rerun with the same inputs computes nothing)."""
    return analyze(state["plan"], state["hist"])


_SWEEPS = HistogramCache(16)
SWEEP_SAMPLES = 250_000  # past this the sweep runs on a scale model of the data (bench/bench_dashboard.py measures
# how far its figures are from the full data's: within 0.2 percentage points of efficiency on Wikipedia)


def packing_sweep(hist: LengthHistogram, pack_sizes: list[int], algorithms: list[str], micro_batch_size: int = 4,
                  seed: int = 1234, pad_seq_to_mult: int = 1, progress=None) -> pd.DataFrame:
    """Efficiency, padding and n against pack size per algorithm, and the two no-packing baselines; computed once
    per (data, settings) and kept. On more than ``SWEEP_SAMPLES`` samples the curves come from a scale model of the
    data (same shape, fewer samples): the packs themselves are not shown, and the page's own packing stays exact."""
    setting = (tuple(pack_sizes), tuple(algorithms), micro_batch_size, seed, pad_seq_to_mult)
    return _SWEEPS.get(hist, setting, lambda: _sweep(hist.scale_model(SWEEP_SAMPLES), pack_sizes, algorithms,
                                                     micro_batch_size, seed, pad_seq_to_mult, progress))


def _sweep(hist, pack_sizes, algorithms, micro_batch_size, seed, pad_seq_to_mult, progress=None) -> pd.DataFrame:
    rows = []
    steps = len(pack_sizes) * (len(algorithms) + 1)
    for i, size in enumerate(pack_sizes):
        for j, algorithm in enumerate(algorithms):
            if progress is not None:
                progress(f"sweep {i * (len(algorithms) + 1) + j + 1} of {steps}: {algorithm} at pack size {size:,}",
                         (i * (len(algorithms) + 1) + j) / steps)
            # not through the packing cache: the sweep is kept whole in _SWEEPS, its packs are not needed again
            res = pack(hist, PackingConfig(pack_size=size, algorithm=algorithm, seed=seed,
                                           pad_seq_to_mult=pad_seq_to_mult))
            rows.append({"pack_size": size, "algorithm": algorithm,
                         "packing_efficiency": res.metrics.packing_efficiency,
                         "padding_fraction": res.metrics.padding_fraction,
                         "packing_factor": res.metrics.num_sequences / res.num_packs,
                         "straggler_ratio": res.metrics.straggler_ratio})
        counts = runtime_lengths(hist, PackingConfig(pack_size=size)).counts
        for b in (pad_to_sequence_length(counts, size), pad_to_longest_in_batch(counts, size, micro_batch_size, seed)):
            rows.append({"pack_size": size, "algorithm": f"no packing: {b.name}", "packing_efficiency": b.efficiency,
                         "padding_fraction": b.padding_fraction, "packing_factor": 1.0, "straggler_ratio": None})
    if progress is not None:
        progress("sweep done", 1.0)
    frame = pd.DataFrame(rows)
    frame.attrs["samples"] = hist.num_samples
    frame.attrs["scale_model"] = "scale model" in hist.source
    return frame


def packing_changes(plan: Plan, algorithm: str, pack_size: int, pad_seq_to_mult: int) -> dict:
    """The plan changes the Packing page's controls ask for: only what differs from the plan's effective values, so
    opening the page changes nothing (``pack_size: null`` and the CP/SP padding rule stay as they are)."""
    changes = {}
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


def packing_at(hist: LengthHistogram, pack_size: int, algorithm: str, pad_seq_to_mult: int = 1) -> PackingResult:
    """One packing of the data (cached in the engine on the histogram and settings)."""
    return packing_for(hist, PackingConfig(pack_size=pack_size, algorithm=algorithm,
                                           pad_seq_to_mult=pad_seq_to_mult))


def sweep_sizes(hist: LengthHistogram, most: int = 6) -> list[int]:
    """Powers of two from the 10th-percentile length up to the first one that holds the longest sample: fixed per
    data set, so the sweep is computed once and a changed control does not pack it all again.

    >>> sweep_sizes(LengthHistogram.from_samples([100, 300, 5000]))
    [256, 512, 1024, 2048, 4096, 8192]
    """
    top = min(MAX_DASHBOARD_PACK, 1 << max(4, int(hist.max_length - 1).bit_length()))
    low = min(top, 1 << max(4, int(hist.percentile(10)).bit_length()))
    sizes = []
    size = top
    while size >= low and len(sizes) < most:
        sizes.append(size)
        size //= 2
    return sorted(sizes)


def memory_grid_frame(analysis: Analysis) -> pd.DataFrame:
    return pd.DataFrame(memory_grid(analysis), columns=["cp", "pack_size", "memory_gib", "fits"])


def candidates_table(analysis: Analysis) -> pd.DataFrame:
    result = analysis.search
    rows = [{"plan": "yours", **result.baseline.summary()}]
    rows += [{"plan": f"#{i + 1}", **c.summary()} for i, c in enumerate(result.best)]
    frame = pd.DataFrame(rows)[["plan", "tp", "cp", "dp", "pack_size", "micro_batch_size", "global_batch_size",
                                "global_batch_packs", "memory_gib", "fits", "tokens_per_second_per_gpu", "why"]]
    frame = frame.rename(columns={"global_batch_size": "samples/step", "global_batch_packs": "packs/step (MB GBS)"})
    return frame.round({"memory_gib": 1, "tokens_per_second_per_gpu": 0})


def search_note(analysis: Analysis) -> str | None:
    """Said under the candidates when they were estimated on a scale model of the data."""
    from advisor.analysis import SCALE_MODEL_SAMPLES

    n = analysis.hist.num_samples
    if n <= SCALE_MODEL_SAMPLES:
        return None
    return (f"Candidates are estimated on a scale model of the data ({SCALE_MODEL_SAMPLES:,} of {n:,} samples, the "
            "same length distribution); your plan's own figures on the other pages use all of it.")


def export_text(analysis: Analysis, fmt: str, version: str, recommended: bool) -> tuple[str, str]:
    """What ``python -m advisor export`` prints for the same plan, and a file name for it."""
    return analysis.export(fmt, version, recommended=recommended), EXPORT_FILE_NAMES[fmt]


def code_language(fmt: str) -> str:
    return {"python": "python", "megatron-lm": "bash", "plan": "yaml", "markdown": "markdown", "torchrun": "bash",
            "slurm": "bash"}.get(fmt, "text")


# ------------------------------------------------------------------------------------------------ controls
def index_of(options, value) -> int:
    keys = list(options)
    return keys.index(value) if value in keys else 0


CUSTOM_FIELDS = ("hidden_size", "num_layers", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                 "vocab_size", "kv_channels")


def model_fields(plan: Plan) -> dict[str, int]:
    """The TransformerConfig-style fields of the plan's model that the page lets you edit."""
    m = plan.model
    return {k: int(getattr(m, k) or (m.query_groups if k == "num_query_groups" else m.head_dim))
            for k in CUSTOM_FIELDS}


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


# ------------------------------------------------------------------------------------------------ worked examples
def attention_example_text(lengths: tuple[int, ...] = (100, 200, 300)) -> str:
    """Three samples' attention work three ways, in one sentence (computed by advisor.ui.explain)."""
    from advisor.ui.explain import attention_example

    e = attention_example(list(lengths))
    squares = " + ".join(f"{s}²" for s in lengths)
    return (f"Worked example: samples of {', '.join(map(str, lengths))} tokens in one packed row. THD computes "
            f"{squares} = {e['thd']:,}; one block mask over the row computes ({sum(lengths)})² = "
            f"{e['block_mask']:,} ({e['block_mask'] / e['thd']:.1f}x); padding each to {max(lengths)} computes "
            f"{len(lengths)} x {max(lengths)}² = {e['padded']:,}.")


def global_batch_example_text(plan: Plan, packing_factor: float) -> str:
    """The plan's samples per step before and after dividing by n."""
    from advisor.ui.explain import global_batch_example

    e = global_batch_example(plan.training.global_batch_size, packing_factor, plan.dp)
    return (f"Worked example: your plan's {e['samples']} samples per step / n = {packing_factor:.2f} → "
            f"Megatron-Bridge global_batch_size {e['packs']} packs (a multiple of DP {e['dp']}), about "
            f"{e['samples_trained']} samples per step.")


def cp_example_text(plan: Plan, length: int = 1001) -> str:
    """A sequence padded to the plan's CP/SP multiple."""
    from advisor.ui.explain import cp_padding_example

    p = plan.parallel
    e = cp_padding_example(length, p.cp, p.tp, p.sp)
    if e["multiple"] == 1:
        return "Worked example: with CP 1 and no sequence parallelism a sequence needs no padding to a multiple."
    return (f"Worked example: with CP {p.cp}, TP {p.tp}{' and SP' if p.sp else ''} a {length}-token sequence is "
            f"padded to {e['padded']} (a multiple of {e['multiple']}) and cut into {e['chunks']} chunks of "
            f"{e['chunk_tokens']}.")
