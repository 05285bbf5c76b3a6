"""Data the dashboard pages place: plain tables and dicts, built here so pages hold no logic."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

from advisor.ingest import load_lengths
from advisor.lengths import summarize
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_data"
SAMPLES = {"squad_v1.1_len384_hist.csv": 384, "wikipedia_bert_len512_hist.csv": 512}  # file -> its pack size


@lru_cache(maxsize=4)
def _sample(name: str):
    return load_lengths(SAMPLE_DIR / name)


def sample_packing_table(name: str, pack_size: int) -> tuple[pd.DataFrame, dict]:
    """A bundled sample's length summary (one row) and the metadata Megatron-Bridge would write for it."""
    hist = _sample(name)
    s = summarize(hist).as_dict()
    s.pop("share_above")
    return pd.DataFrame([s]), pack(hist, PackingConfig(pack_size=pack_size)).metadata
