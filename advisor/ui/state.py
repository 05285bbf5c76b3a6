"""What the dashboard pages need, as plain functions: session-state set-up, samples and uploads, shareable links,
sweeps and grids. Pages call these and place what comes back; nothing here imports Streamlit.

Session state (a dict-like): ``hist`` (the LengthHistogram in use), ``data_name`` (where it came from), ``plan``
(the plan as a dict, the plan file's schema), ``upload_error`` (the last bad upload's message).
"""

from __future__ import annotations

import base64
import json
import zlib
from functools import lru_cache
from pathlib import Path

import pandas as pd

from advisor.data.ingest import parse_lengths
from advisor.data.lengths import LengthHistogram, summarize
from advisor.data.megatron_mock import lognormal_lengths
from advisor.errors import InputError
from advisor.model.estimate import HistogramCache, estimate, packing_config, packing_for
from advisor.packing.baselines import pad_to_longest_in_batch, pad_to_sequence_length
from advisor.packing.config import PackingConfig
from advisor.packing.offline import runtime_lengths
from advisor.plan.schema import Plan, PlanError, plan_from_dict

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
UPLOAD_LIMIT_MB = 200  # .streamlit/config.toml server.maxUploadSize


@lru_cache(maxsize=8)
def load_sample(name: str) -> LengthHistogram:
    from advisor.data.ingest import load_lengths

    return load_lengths(SAMPLE_DIR / SAMPLES[name][0])


def default_plan(sample: str = DEFAULT_SAMPLE) -> dict:
    s = SAMPLES[sample][1]
    vlm = s.get("task") == "vlm-sft"
    return {"model": "qwen2.5-vl-7b" if vlm else "llama3.1-8b",
            "parallel": {"gpus": s["gpus"], "tp": 2, "pp": 1, "cp": s.get("cp", 1), "ep": 1, "etp": 1, "vpp": None,
                         "sp": True},
            "training": {"task": s.get("task", "llm-sft"), "seq_length": s["seq_length"],
                         "micro_batch_size": 4 if vlm else 1, "global_batch_size": 64, "recompute": "selective",
                         "distributed_optimizer": True, "precision": "bf16", "peft": "none", "cuda_graphs": False},
            "packing": {"mode": "auto", "pack_size": None if vlm else s["seq_length"],
                        "algorithm": "first_fit_shuffle", "seed": 1234, "pad_seq_to_mult": None},
            "data": {"lengths": f"sample_data/{SAMPLES[sample][0]}"},
            "hardware": {"gpu": "H100-80GB"}}


def init_state(state, query: dict | None = None) -> None:
    """Fill missing session keys: from a shared link's query parameters if given, else the default sample."""
    if "hist" in state:
        return
    sample, plan = DEFAULT_SAMPLE, None
    if query:
        try:
            sample, plan = plan_from_query(query)
        except (ValueError, PlanError) as e:
            state["upload_error"] = f"the link's plan could not be read: {e}"
    state["data_name"] = sample
    state["hist"] = load_sample(sample)
    state["plan"] = plan or default_plan(sample)


def use_sample(state, name: str) -> None:
    state["hist"] = load_sample(name)
    state["data_name"] = name
    state["plan"] = {**default_plan(name), "model": state.get("plan", {}).get("model", default_plan(name)["model"])}
    state.pop("upload_error", None)


def use_upload(state, data: bytes, name: str) -> bool:
    """Read an uploaded file; on a bad file keep the data in use and store the engine's message."""
    try:
        hist = parse_lengths(data, name, max_bytes=UPLOAD_LIMIT_MB * 2**20)
    except InputError as e:
        state["upload_error"] = str(e)
        return False
    state["hist"], state["data_name"] = hist, name
    state["plan"] = {**state["plan"], "data": {"lengths": name}}
    state.pop("upload_error", None)
    return True


def use_lognormal(state, mean: float, sigma: float, lo: int, hi: int, samples: int = 200_000) -> None:
    """Megatron-LM's mock lognormal (seed 0), as a data set."""
    hist = LengthHistogram.from_samples(lognormal_lengths(samples, mean, sigma, lo, hi),
                                        source=f"lognormal(mean {mean:g}, sigma {sigma:g}, [{lo}, {hi}])")
    state["hist"], state["data_name"] = hist, hist.source
    state.pop("upload_error", None)


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


def plan_to_query(plan: dict, sample: str | None) -> dict[str, str]:
    """Query parameters that reopen the dashboard on this plan (and sample, by name)."""
    packed = base64.urlsafe_b64encode(zlib.compress(json.dumps(plan, separators=(",", ":")).encode())).decode()
    out = {"plan": packed}
    if sample in SAMPLES:
        out["sample"] = sample
    return out


def plan_from_query(query: dict) -> tuple[str, dict | None]:
    sample = query.get("sample", DEFAULT_SAMPLE)
    if sample not in SAMPLES:
        raise ValueError(f"unknown sample {sample!r}")
    plan = None
    if "plan" in query:
        try:
            plan = json.loads(zlib.decompress(base64.urlsafe_b64decode(query["plan"].encode())))
        except (ValueError, zlib.error) as e:
            raise ValueError(f"plan parameter is not a plan: {e}") from None
        plan_from_dict(plan, "link")  # refuse an inconsistent plan with its problems
    return sample, plan


def packing_sweep(hist: LengthHistogram, pack_sizes: list[int], algorithms: list[str], micro_batch_size: int = 4,
                  seed: int = 1234, pad_seq_to_mult: int = 1) -> pd.DataFrame:
    """Efficiency, padding and n against pack size per algorithm, and the two no-packing baselines."""
    rows = []
    for size in pack_sizes:
        for algorithm in algorithms:
            res = packing_for(hist, PackingConfig(pack_size=size, algorithm=algorithm, seed=seed,
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
    return pd.DataFrame(rows)


def memory_grid(plan: Plan, hist: LengthHistogram, pack_sizes: list[int], cps: list[int]) -> pd.DataFrame:
    """Memory per GPU over pack size and CP (other settings as in the plan); layouts the GPUs cannot hold are left
    out."""
    rows = []
    for cp in cps:
        for size in pack_sizes:
            raw = plan.to_dict()
            raw["parallel"] = {**raw["parallel"], "cp": cp}
            raw["training"] = {**raw["training"], "seq_length": size}
            raw["packing"] = {**raw["packing"], "pack_size": size}
            try:
                candidate = plan_from_dict(raw, "grid")
            except PlanError:
                continue
            est = estimate(candidate, hist)
            rows.append({"cp": cp, "pack_size": size, "memory_gib": est.memory.total / 2**30,
                         "fits": est.memory.fits})
    return pd.DataFrame(rows, columns=["cp", "pack_size", "memory_gib", "fits"])


def with_packing(plan: dict, **changes) -> dict:
    return {**plan, "packing": {**plan["packing"], **changes}}




def plan_dict_from_text(text: str, name: str) -> dict:
    """A plan file's text (YAML or JSON) as the plan dict the dashboard keeps, checked."""
    import yaml

    try:
        raw = json.loads(text) if name.lower().endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise PlanError(name, [f"is not valid {'JSON' if name.lower().endswith('.json') else 'YAML'}: {e}"]) from None
    return plan_from_dict(raw, name).to_dict()


def packing_at(hist: LengthHistogram, pack_size: int, algorithm: str, pad_seq_to_mult: int = 1):
    """One packing of the data (cached in the engine on the histogram and settings)."""
    return packing_for(hist, PackingConfig(pack_size=pack_size, algorithm=algorithm,
                                           pad_seq_to_mult=pad_seq_to_mult))


def sweep_sizes(hist: LengthHistogram, most: int = 6) -> list[int]:
    """Powers of two from the 10th-percentile length up to the first one that holds the longest sample: fixed per
    data set, so the sweep is computed once and a changed control does not pack it all again.

    >>> sweep_sizes(LengthHistogram.from_samples([100, 300, 5000]))
    [256, 512, 1024, 2048, 4096, 8192]
    """
    top = 1 << max(4, int(hist.max_length - 1).bit_length())
    low = 1 << max(4, int(hist.percentile(10)).bit_length())
    sizes = []
    size = top
    while size >= low and len(sizes) < most:
        sizes.append(size)
        size //= 2
    return sorted(sizes)


def index_of(options, value) -> int:
    keys = list(options)
    return keys.index(value) if value in keys else 0


CUSTOM_FIELDS = ("hidden_size", "num_layers", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                 "vocab_size", "kv_channels")


def model_fields(model: str | dict) -> dict[str, int]:
    """The TransformerConfig-style fields of a preset (or a custom model) that the page lets you edit."""
    from advisor.plan.presets import MODEL_PRESETS

    spec = plan_from_dict({"model": model}).model if isinstance(model, str) and model in MODEL_PRESETS else None
    source = model if isinstance(model, dict) else {}
    return {k: int(source.get(k) or (getattr(spec, k) if spec else 0) or (spec.head_dim if spec else 128))
            for k in CUSTOM_FIELDS}


def with_layout(plan: dict, *, model: str | dict, gpu: str, micro_batch_size: int, **parallel) -> dict:
    """The plan dict with another model preset, GPU and layout (checked when estimated)."""
    return {**plan, "model": model, "hardware": {**plan["hardware"], "gpu": gpu},
            "parallel": {**plan["parallel"], **parallel},
            "training": {**plan["training"], "micro_batch_size": micro_batch_size}}


def estimate_for(plan: dict, hist: LengthHistogram):
    return estimate(plan_from_dict(plan, "dashboard plan"), hist)


def memory_grid_for(plan: dict, hist: LengthHistogram) -> pd.DataFrame:
    p = plan_from_dict(plan, "dashboard plan")
    base = p.packing.pack_size or p.training.seq_length
    sizes = sorted({max(256, base // 2), base, base * 2})
    cps = [c for c in (1, 2, 4, 8, 16) if p.parallel.gpus % (p.parallel.tp * p.parallel.pp * c) == 0]
    return memory_grid(p, hist, sizes, cps)


def findings_for(plan: dict, hist: LengthHistogram) -> list:
    from advisor.advice.rules import check, packing_mode

    p = plan_from_dict(plan, "dashboard plan")
    result = packing_for(hist, packing_config(p)) if packing_mode(p) == "offline" else None
    return check(p, result)


def apply_fix_dict(plan: dict, fix: dict) -> dict:
    from advisor.advice.rules import apply_fix

    return apply_fix(plan_from_dict(plan, "dashboard plan"), fix).to_dict()


_SEARCHES = HistogramCache(8)


def search_for(plan: dict, hist: LengthHistogram):
    """The layout search, cached on the plan and the data."""
    from advisor.advice.search import search

    return _SEARCHES.get(hist, json.dumps(plan, sort_keys=True),
                         lambda: search(plan_from_dict(plan, "dashboard plan"), hist))


def candidates_table(plan: dict, hist: LengthHistogram) -> pd.DataFrame:
    result = search_for(plan, hist)
    rows = [{"plan": "yours", **result.baseline.summary()}]
    rows += [{"plan": f"#{i + 1}", **c.summary()} for i, c in enumerate(result.best)]
    frame = pd.DataFrame(rows)[["plan", "tp", "cp", "dp", "pack_size", "micro_batch_size", "global_batch_size",
                                "memory_gib", "fits", "tokens_per_second_per_gpu", "why"]]
    return frame.round({"memory_gib": 1, "tokens_per_second_per_gpu": 0})


def export_text(plan: dict, hist: LengthHistogram, fmt: str, version: str, recommended: bool) -> tuple[str, str]:
    """What ``python -m advisor export`` prints for the same plan, and a file name for it."""
    from advisor.advice.exports import export
    from advisor.advice.rules import check

    p = plan_from_dict(plan, "dashboard plan")
    result = search_for(plan, hist) if recommended else None
    if recommended:
        p = result.recommended
    est = findings = None
    if fmt == "markdown":
        est = estimate(p, hist)
        findings = check(p, est.packing)
    names = {"python": "packing_config.py", "overrides": "overrides.txt", "megatron-lm": "megatron_lm_args.sh",
             "paths": "packed_paths.txt", "plan": "plan.yaml", "markdown": "report.md",
             "torchrun": "trial_torchrun.sh", "slurm": "trial.sbatch"}
    return export(p, fmt, version, hist, findings, est, result), names[fmt]


def code_language(fmt: str) -> str:
    return {"python": "python", "megatron-lm": "bash", "plan": "yaml", "markdown": "markdown", "torchrun": "bash",
            "slurm": "bash"}.get(fmt, "text")
