"""Megatron-LM's mock SFT data set config (``--sft-mock-dataset-config-json``), read as Megatron-LM reads it.

Followed: megatron/training/datasets/sft_dataset.py, ``MockSFTLowLevelDataset`` (Megatron-LM dev branch).
Its sequence lengths are whole-sample token counts (``length - 1`` ids plus the EOD appended later).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.data.guard import MAX_LENGTH, excerpt, loads_json, read_file, text_bytes
from advisor.errors import InputError

MOCK_SEED = 0  # MockSFTLowLevelDataset.seed, hard-coded
MOCK_SIZE = 1_000_000  # MockSFTLowLevelDataset.size, hard-coded
MAX_MOCK_SAMPLES = 50_000_000  # drawn in chunks into a histogram: time grows with it, memory does not
MAX_SIGMA = 10.0  # exp(10 sigma) spans 43 orders of magnitude: anything wider is a typo
MODES = ("file", "distribution", "verification")
_VERIFICATION_DEFAULTS = {"min_seq_len": 100, "max_seq_len": 4096, "mean_seq_len": 2048, "lognormal_sigma": 1.1}
_DRAW_CHUNK = 1 << 20
_DENSE_SPAN = 1 << 25  # lengths counted in one int64 array up to this span


def is_mock_config(obj) -> bool:
    """A JSON object with a ``mode`` key, as ``--sft-mock-dataset-config-json`` takes.

    >>> is_mock_config({"mode": "file"}), is_mock_config([1, 2])
    (True, False)
    """
    return isinstance(obj, dict) and "mode" in obj


@dataclass(frozen=True, kw_only=True)
class MockConfig:
    """A mock config as read, where it came from, and the folder a ``mode: file`` CSV is found from."""

    config: dict
    source: str
    base_dir: Path | None


def read_mock_config(text: str, max_bytes: int) -> MockConfig | None:
    """The mock config ``text`` gives, as ``--sft-mock-dataset-config-json`` takes it: inline JSON, or a ``.json``
    file (read through advisor.data.guard as every input: size, UTF-8, depth and huge integers refused). None when
    ``text`` is neither, or its JSON has no ``mode``: then it is a lengths file like any other.

    >>> read_mock_config('{"mode": "distribution"}', 1 << 20).source, read_mock_config("lengths.csv", 1 << 20)
    ('inline JSON', None)
    """
    if text.lstrip().startswith("{"):
        data, source, base_dir = text.encode("utf-8", "surrogateescape"), "inline JSON", None
    elif text.lower().endswith(".json"):
        source, base_dir = os.path.basename(text), Path(text).resolve().parent
        data = text_bytes(read_file(text, source, max_bytes), source)
    else:
        return None
    parsed = loads_json(data, source)
    return MockConfig(config=parsed, source=source, base_dir=base_dir) if is_mock_config(parsed) else None


def lognormal_config(*, min_seq_len: int, max_seq_len: int, mean_seq_len: float, lognormal_sigma: float) -> dict:
    """A Megatron-LM mock SFT config drawing lognormal lengths, as --sft-mock-dataset-config-json takes it."""
    return {
        "mode": "distribution",
        "type": "lognormal",
        "min_seq_len": min_seq_len,
        "max_seq_len": max_seq_len,
        "mean_seq_len": mean_seq_len,
        "lognormal_sigma": lognormal_sigma,
    }


def default_mock_config(seq_length: int) -> dict:
    """What Megatron-LM uses when no config is given (``MockSFTDataset.build_low_level_dataset``).

    >>> cfg = default_mock_config(4096)
    >>> cfg["min_seq_len"], cfg["max_seq_len"], cfg["mean_seq_len"], cfg["lognormal_sigma"]
    (2048, 4096, 3072, 1.1)
    """
    return lognormal_config(
        min_seq_len=seq_length // 2, max_seq_len=seq_length, mean_seq_len=seq_length // 4 * 3, lognormal_sigma=1.1
    )


def lognormal_lengths(size: int, mean: float, sigma: float, min_seq_len: int, max_seq_len: int) -> np.ndarray:
    """``generate_lognormal_samples``: mu = ln(mean) - sigma^2/2, numpy's legacy global RNG seeded with 0.

    The trap: clipping piles the left tail onto ``min_seq_len`` (57 % of samples with Megatron-LM's defaults),
    so the realised mean sits well below ``mean_seq_len``.

    >>> lognormal_lengths(5, 3072, 1.1, 2048, 4096).tolist()
    [4096, 2605, 4096, 4096, 4096]
    """
    mu = np.log(mean) - sigma**2 / 2
    rng = np.random.RandomState(MOCK_SEED)  # == np.random.seed(0) then np.random.lognormal
    return np.clip(rng.lognormal(mu, sigma, size), min_seq_len, max_seq_len).astype(int)


def lognormal_histogram(
    size: int, mean: float, sigma: float, min_seq_len: int, max_seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """``lognormal_lengths`` as (distinct lengths, counts), drawn in chunks of 2**20 so memory stays flat.

    The legacy RandomState carries its cached second Gaussian across calls, so the chunked draws are the very
    samples one call would give (and Megatron-LM gets).

    >>> v, c = lognormal_histogram(5, 3072, 1.1, 2048, 4096)
    >>> v.tolist(), c.tolist()
    ([2605, 4096], [1, 4])
    """
    mu = np.log(mean) - sigma**2 / 2
    rng = np.random.RandomState(MOCK_SEED)
    span = max_seq_len - min_seq_len + 1
    dense = np.zeros(span, dtype=np.int64) if span <= _DENSE_SPAN else None  # 256 MiB at most
    values, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for done in range(0, size, _DRAW_CHUNK):
        drawn = np.clip(rng.lognormal(mu, sigma, min(_DRAW_CHUNK, size - done)), min_seq_len, max_seq_len)
        draw = drawn.astype(np.int64) - min_seq_len
        if dense is not None and span <= _DRAW_CHUNK * 4:
            dense += np.bincount(draw, minlength=span)
        elif dense is not None:  # a wide span: a bincount per chunk would allocate the whole span each time
            v, c = np.unique(draw, return_counts=True)
            dense[v] += c
        else:
            v, c = np.unique(draw, return_counts=True)
            values, counts = _merge(values, counts, v, c)
    if dense is not None:
        keep = np.flatnonzero(dense)
        return keep + min_seq_len, dense[keep]
    return values + min_seq_len, counts


def _merge(v1: np.ndarray, c1: np.ndarray, v2: np.ndarray, c2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, inverse = np.unique(np.concatenate([v1, v2]), return_inverse=True)
    counts = np.zeros(values.size, np.int64)
    np.add.at(counts, inverse, np.concatenate([c1, c2]))
    return values, counts


@dataclass(frozen=True)
class MockDraw:
    """What a distribution or verification config yields: a histogram of the draw and notes on it."""

    values: np.ndarray
    counts: np.ndarray
    notes: tuple[str, ...]


def mock_histogram(
    config: dict,
    source: str,
    *,
    base_dir: Path | None = None,
    size: int = MOCK_SIZE,
    allow_file_mode: bool = True,
    max_length: int = MAX_LENGTH,
) -> MockDraw | Path:
    """Validate a mock config field by field and draw its lengths, or, for ``mode: file``, find its CSV.

    ``allow_file_mode=False`` refuses file mode outright, before the path is even looked at: an uploaded config
    must not learn whether a server path exists, let alone read it.

    >>> d = mock_histogram(default_mock_config(4096), "cfg", size=1000)
    >>> int(d.counts.sum()), int(d.values.min()), int(d.values.max())
    (1000, 2048, 4096)
    >>> try:
    ...     mock_histogram({"mode": "file", "path": "/etc/passwd"}, "upload.json", allow_file_mode=False)
    ... except InputError as e:
    ...     print(e.where, "|", e.what[:44])
    "mode": "file" | reads a CSV from the server's disk, which an
    """
    mode = config.get("mode")
    if not isinstance(mode, str) or mode not in MODES:
        raise InputError(
            source,
            '"mode"',
            f"unknown mode {excerpt(mode)}: Megatron-LM takes 'file', 'distribution' or 'verification'",
        )
    if mode == "file":
        if not allow_file_mode:
            raise InputError(
                source,
                '"mode": "file"',
                "reads a CSV from the server's disk, which an uploaded config "
                "may not do: upload the CSV of lengths itself",
            )
        return _mock_file(config, source, base_dir)
    if mode == "distribution" and config.get("type") != "lognormal":
        raise InputError(
            source,
            '"type"',
            f"unsupported distribution type {excerpt(config.get('type'))} (Megatron-LM supports only 'lognormal')",
        )
    params = dict(_VERIFICATION_DEFAULTS) if mode == "verification" else {}
    params.update({k: config[k] for k in _VERIFICATION_DEFAULTS if k in config})
    missing = [k for k in _VERIFICATION_DEFAULTS if k not in params]
    if missing:
        raise InputError(source, f'"mode": "{mode}"', f"missing {', '.join(missing)}")
    lo, hi, mean, sigma = _lognormal_params(params, source, max_length)
    size = _sample_count(size, source)
    values, counts = lognormal_histogram(size, mean, sigma, lo, hi)
    at_min = float(counts[0] / size) if values[0] == lo else 0.0
    realised = float(np.dot(values.astype(np.float64), counts) / size)
    notes = (
        f"Megatron-LM mock lognormal: {size:,} samples, seed {MOCK_SEED}; {at_min:.0%} clipped to "
        f"min_seq_len {lo}; realised mean {realised:.0f} against mean_seq_len {mean:g}",
    )
    return MockDraw(values, counts, notes)


def mock_lengths(
    config: dict,
    source: str,
    base_dir: Path | None = None,
    size: int = MOCK_SIZE,
    *,
    allow_file_mode: bool = True,
    max_length: int = MAX_LENGTH,
):
    """The sample lengths a mock config yields, with notes on where it departs from what a user may expect.

    Returns ``(lengths, notes)``; for ``mode: file`` the CSV is returned as a path to be read by the caller
    (through ``advisor.data.guard.read_file``). Memory: 8 bytes a sample; ``mock_histogram`` keeps a histogram.
    """
    got = mock_histogram(
        config, source, base_dir=base_dir, size=size, allow_file_mode=allow_file_mode, max_length=max_length
    )
    if isinstance(got, Path):
        return got, ()
    return np.repeat(got.values, got.counts), got.notes


def _json_kind(value) -> str:
    """A value's JSON type in words, for messages about the wrong type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    kinds = ((str, "a string"), ((int, float), "a number"), (list, "a list"), (dict, "an object"))
    return next((name for t, name in kinds if isinstance(value, t)), type(value).__name__)


def _mock_file(config: dict, source: str, base_dir: Path | None) -> Path:
    if "path" not in config:
        raise InputError(source, '"mode": "file"', 'needs a "path" to a CSV of sequence lengths')
    raw = config["path"]
    if not isinstance(raw, str):
        raise InputError(
            source, '"path"', f"must be a string naming a CSV of lengths, not {_json_kind(raw)} ({excerpt(raw)})"
        )
    if not raw.strip() or "\x00" in raw:
        raise InputError(source, '"path"', f"is not a file name: {excerpt(raw)}")
    path = Path(raw)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path] + ([base_dir / path] if base_dir else [])
    for candidate in candidates:
        if os.path.lexists(candidate):  # the first that exists at all: the reader then says what is wrong with it
            return candidate
    raise InputError(source, '"path"', f"file not found: {excerpt(raw, 120)}")


def _number(params: dict, key: str, source: str) -> float:
    """A parameter that must be a real, finite JSON number (not a bool, a string, null, NaN or Infinity)."""
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(source, f'"{key}"', f"must be a number, not {_json_kind(value)} ({excerpt(value)})")
    if isinstance(value, int) and abs(value) >= 2**63:
        raise InputError(source, f'"{key}"', f"{excerpt(value)} is beyond any sequence length")
    if not math.isfinite(value):
        raise InputError(source, f'"{key}"', f"must be a finite number, not {value}")
    return float(value)


def _lognormal_params(params: dict, source: str, max_length: int) -> tuple[int, int, float, float]:
    """(min, max, mean, sigma), each checked on its own so the message names the one that is wrong."""
    nums = {k: _number(params, k, source) for k in _VERIFICATION_DEFAULTS}
    for key in ("min_seq_len", "max_seq_len", "mean_seq_len"):
        if not 0 < nums[key] <= max_length:
            raise InputError(
                source,
                f'"{key}"',
                f"{excerpt(params[key])} is not a sequence length: give a value in 1..{max_length:,}",
            )
    if nums["min_seq_len"] < 1:
        raise InputError(source, '"min_seq_len"', f"{excerpt(params['min_seq_len'])} is below 1 token")
    if not 0 <= nums["lognormal_sigma"] <= MAX_SIGMA:
        raise InputError(
            source,
            '"lognormal_sigma"',
            f"{excerpt(params['lognormal_sigma'])} is outside 0..{MAX_SIGMA:g} (Megatron-LM's default is 1.1)",
        )
    lo, hi = int(nums["min_seq_len"]), int(nums["max_seq_len"])
    if hi < lo:
        raise InputError(source, '"max_seq_len"', f"{hi:,} is below min_seq_len {lo:,}")
    return lo, hi, nums["mean_seq_len"], nums["lognormal_sigma"] + 0.0  # -0.0 passes 0 <= s, numpy refuses it


def _sample_count(size, source: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= MAX_MOCK_SAMPLES:
        raise InputError(source, "mock samples", f"{excerpt(size)} is not a sample count in 1..{MAX_MOCK_SAMPLES:,}")
    return int(size)
