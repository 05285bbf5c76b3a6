"""The bundled samples, the plan each opens with, and the dashboard's limits on what a visitor's plan may ask the
server to compute (the engine's own limits are wider).

>>> default_plan().training.seq_length
384
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from advisor import caches
from advisor.data.lengths import LengthHistogram
from advisor.data.megatron_mock import MAX_SIGMA
from advisor.plan import Plan, PlanError, plan_from_dict, schema

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


MAX_GPUS = schema.MAX_GPUS  # the Memory page's GPU control goes as far as a plan may


MAX_DASHBOARD_PACK = 1 << 20  # a visitor's sequences, packs and sweeps stop at 1M tokens (the engine takes 2^24)
PACK_SIZE_STEP = 256  # the Packing page's pack size control moves by this; its neighbours are packed ahead


@lru_cache(maxsize=8)
def load_sample(name: str) -> LengthHistogram:
    from advisor.data.ingest import load_lengths

    return load_lengths(SAMPLE_DIR / SAMPLES[name][0])


caches.listed("bundled samples", load_sample)


def sample_path(name: str) -> str:
    """A bundled sample's data path as plans hold it (relative to the repository: advisor/plan/io.py resolves it)."""
    return f"sample_data/{SAMPLES[name][0]}"


def default_plan(sample: str = DEFAULT_SAMPLE) -> Plan:
    s = SAMPLES[sample][1]
    vlm = s.get("task") == "vlm-sft"
    return plan_from_dict(
        {
            "version": 2,
            "model": "qwen2.5-vl-7b" if vlm else "llama3.1-8b",
            "parallel": {"gpus": s["gpus"], "tp": 2, "cp": s.get("cp", 1), "sp": True},
            "training": {
                "task": s.get("task", "llm-sft"),
                "seq_length": s["seq_length"],
                "micro_batch_size": 4 if vlm else 1,
                "global_batch_size": 128,
            },
            "packing": {"mode": "auto"},  # the pack follows seq_length
            "data": {"lengths": sample_path(sample)},
            "hardware": {"gpu": "H100-80GB"},
        },
        "default plan",
    )


def within_budget(plan: Plan, source: str = "plan") -> Plan:
    """The dashboard's limits on what a visitor's plan may ask the server to compute (the engine's are wider)."""
    problems = (
        [
            f"training.seq_length {plan.training.seq_length:,} is over the dashboard's {MAX_DASHBOARD_PACK:,} "
            "tokens (use the command line for longer)"
        ]
        if plan.training.seq_length > MAX_DASHBOARD_PACK
        else []
    )
    if plan.pack_size > MAX_DASHBOARD_PACK:
        problems.append(f"packing.pack_size {plan.pack_size:,} is over the dashboard's {MAX_DASHBOARD_PACK:,} tokens")
    if problems:
        raise PlanError(source, problems)
    return plan


@dataclass(frozen=True, kw_only=True)
class Number:
    """A number a visitor types on the home page, with the bounds the server checks it against too."""

    label: str
    lo: float
    hi: float
    default: float

    def holds(self, value: float) -> bool:
        return self.lo <= value <= self.hi


# Megatron-LM's mock lognormal (megatron/training/datasets/sft_dataset.py MockSFTDataset); its own defaults are
# mean 2048, sigma 1.1, [100, 4096]
LOGNORMAL_INPUTS = (
    Number(label="mean_seq_len", lo=16, hi=MAX_DASHBOARD_PACK, default=2048),
    Number(label="lognormal_sigma", lo=0.01, hi=MAX_SIGMA, default=1.1),
    Number(label="min_seq_len", lo=1, hi=MAX_DASHBOARD_PACK, default=128),
    Number(label="max_seq_len", lo=2, hi=MAX_DASHBOARD_PACK, default=8192),
)
RAW_MAX_SEQ_LENGTH = Number(label="max_seq_length (sft)", lo=16, hi=MAX_DASHBOARD_PACK, default=4096)
