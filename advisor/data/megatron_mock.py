"""Megatron-LM's mock SFT data set config (``--sft-mock-dataset-config-json``), read as Megatron-LM reads it.

Followed: megatron/training/datasets/sft_dataset.py, ``MockSFTLowLevelDataset`` (Megatron-LM dev branch).
Its sequence lengths are whole-sample token counts (``length - 1`` ids plus the EOD appended later).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from advisor.errors import InputError

MOCK_SEED = 0  # MockSFTLowLevelDataset.seed, hard-coded
MOCK_SIZE = 1_000_000  # MockSFTLowLevelDataset.size, hard-coded
_VERIFICATION_DEFAULTS = {"min_seq_len": 100, "max_seq_len": 4096, "mean_seq_len": 2048, "lognormal_sigma": 1.1}


def is_mock_config(obj) -> bool:
    return isinstance(obj, dict) and "mode" in obj


def default_mock_config(seq_length: int) -> dict:
    """What Megatron-LM uses when no config is given (``MockSFTDataset.build_low_level_dataset``).

    >>> cfg = default_mock_config(4096)
    >>> cfg["min_seq_len"], cfg["max_seq_len"], cfg["mean_seq_len"], cfg["lognormal_sigma"]
    (2048, 4096, 3072, 1.1)
    """
    return {"mode": "distribution", "type": "lognormal", "min_seq_len": seq_length // 2,
            "max_seq_len": seq_length, "mean_seq_len": seq_length // 4 * 3, "lognormal_sigma": 1.1}


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


def mock_lengths(config: dict, source: str, base_dir: Path | None = None, size: int = MOCK_SIZE):
    """The sample lengths a mock config yields, with notes on where it departs from what a user may expect.

    Returns ``(lengths, notes)``; for ``mode: file`` the CSV is returned as a path to be read by the caller.
    """
    mode = config.get("mode")
    if mode == "file":
        if "path" not in config:
            raise InputError(source, '"mode": "file"', 'needs a "path" to a CSV of sequence lengths')
        path = Path(config["path"])
        candidates = [path] if path.is_absolute() else [Path.cwd() / path] + ([base_dir / path] if base_dir else [])
        for candidate in candidates:
            if candidate.is_file():
                return candidate, ()
        raise InputError(source, '"path"', f"file not found: {config['path']}")
    if mode in ("distribution", "verification"):
        params = dict(_VERIFICATION_DEFAULTS) if mode == "verification" else {}
        if mode == "distribution" and config.get("type") != "lognormal":
            raise InputError(source, '"type"', f"unsupported distribution type {config.get('type')!r} "
                             "(Megatron-LM supports only 'lognormal')")
        params.update({k: config[k] for k in _VERIFICATION_DEFAULTS if k in config})
        missing = [k for k in _VERIFICATION_DEFAULTS if k not in params]
        if missing:
            raise InputError(source, f'"mode": "{mode}"', f"missing {', '.join(missing)}")
        try:
            lo, hi = int(params["min_seq_len"]), int(params["max_seq_len"])
            mean, sigma = float(params["mean_seq_len"]), float(params["lognormal_sigma"])
        except (TypeError, ValueError) as e:
            raise InputError(source, f'"mode": "{mode}"', f"parameters must be numbers: {e}") from None
        if lo < 1 or hi < lo or mean <= 0 or sigma < 0:
            raise InputError(source, f'"mode": "{mode}"',
                             f"need 1 <= min_seq_len <= max_seq_len, mean_seq_len > 0 and lognormal_sigma >= 0 "
                             f"(got min {lo}, max {hi}, mean {mean:g}, sigma {sigma:g})")
        lengths = lognormal_lengths(size, mean, sigma, lo, hi)
        at_min = float(np.mean(lengths == lo))
        notes = (f"Megatron-LM mock lognormal: {size:,} samples, seed {MOCK_SEED}; {at_min:.0%} clipped to "
                 f"min_seq_len {lo}; realised mean {lengths.mean():.0f} against mean_seq_len {mean:g}",)
        return lengths, notes
    raise InputError(source, '"mode"', f"unknown mode {mode!r}: Megatron-LM takes 'file', 'distribution' or "
                     "'verification'")
