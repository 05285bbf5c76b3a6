"""Per-sample lengths in dataset order, the scheduler's input: from a histogram, or as dev's mock SFT data draws them.

Followed: megatron/training/datasets/sft_dataset.py ``MockSFTLowLevelDataset`` (dev d48bd6be), through
advisor/data/megatron_mock.py; the alternative, a histogram alone, has no order, and next fit depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.data.guard import DEFAULT_MAX_BYTES, MAX_LENGTH, iter_lines, read_file, text_bytes
from advisor.data.lengths import check_expandable
from advisor.data.megatron_mock import _VERIFICATION_DEFAULTS as MOCK_LOGNORMAL_DEFAULTS  # one source of them
from advisor.data.megatron_mock import MOCK_SIZE, lognormal_lengths, mock_histogram
from advisor.errors import InputError, excerpt

ORDERS = ("shuffle", "listed")


@dataclass(frozen=True, eq=False)
class SampleOrder:
    """Samples in data-set order as indices into their distinct lengths: the 16.3M Wikipedia samples are 32 MB of
    uint16 indices (the same shuffled order first_fit_shuffle packs in, cached once per histogram and seed) instead
    of 128 MB of int64 lengths, and a scale model reads only the samples its steps hold.

    >>> o = SampleOrder(lengths=np.array([5, 9]), codes=np.array([1, 0, 0], np.uint16))
    >>> o.size, o.take(np.array([0, 2])).tolist(), o.counts().tolist(), o.values().tolist()
    (3, [9, 5], [2, 1], [9, 5, 5])
    """

    lengths: np.ndarray  # distinct lengths (int64), ascending
    codes: np.ndarray  # each sample's index into ``lengths``, in data-set order
    tally: np.ndarray | None = None  # samples of each distinct length, when known (a histogram's counts)

    @property
    def size(self) -> int:
        return int(self.codes.size)

    def take(self, index: np.ndarray) -> np.ndarray:
        """The lengths at these positions (int64)."""
        return self.lengths[self.codes[index]]

    def counts(self) -> np.ndarray:
        """Samples of each distinct length."""
        return self.tally if self.tally is not None else np.bincount(self.codes, minlength=self.lengths.size)

    def values(self) -> np.ndarray:
        """Every sample's length, in order (8 bytes a sample: for a file to write, not for scheduling)."""
        return self.lengths[self.codes]


def expand_histogram(
    lengths, counts, *, order: str = "shuffle", seed: int = 0, source: str = "histogram"
) -> np.ndarray:
    """One length per sample from ``length,count`` rows.

    A histogram keeps no order, so one is chosen: ``shuffle`` (a seeded permutation, numpy's legacy RandomState,
    as a data set written in random order) or ``listed`` (rows as given, each repeated: sorted data, the worst
    case for next fit).

    >>> expand_histogram([5, 9], [2, 1], order="listed").tolist()
    [5, 5, 9]
    >>> sorted(expand_histogram([5, 9], [2, 1], seed=3).tolist())
    [5, 5, 9]
    """
    if order not in ORDERS:
        raise InputError(source, "order", f"{excerpt(order)} is not one of {', '.join(ORDERS)}")
    lengths, counts = np.asarray(lengths, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    if lengths.shape != counts.shape or lengths.ndim != 1:
        raise InputError(source, None, "lengths and counts must be two flat lists of the same size")
    if counts.size and counts.min() < 0:
        raise InputError(source, f"row {int(np.argmin(counts)) + 1}", "a count is negative")
    check_expandable(int(counts.sum()), source, "schedule")
    out = np.repeat(lengths, counts)
    if order == "shuffle":
        out = out[np.random.RandomState(seed).permutation(out.size)]
    return out


def mock_config_lengths(
    config: dict,
    source: str,
    *,
    base_dir: Path | None = None,
    size: int = MOCK_SIZE,
    allow_file_mode: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """The lengths ``MockSFTLowLevelDataset`` holds, in its order (``sequence_lengths[idx]``).

    ``distribution`` and ``verification``: ``size`` lognormal draws after ``np.random.seed(0)`` (Megatron-LM
    draws 1,000,000); ``file``: the CSV's values in file order, line 1 dropped as pandas' header.

    >>> mock_config_lengths({"mode": "distribution", "type": "lognormal", "min_seq_len": 2048,
    ...                      "max_seq_len": 4096, "mean_seq_len": 3072, "lognormal_sigma": 1.1}, "cfg", size=5).tolist()
    [4096, 2605, 4096, 4096, 4096]
    """
    got = mock_histogram(config, source, base_dir=base_dir, size=1, allow_file_mode=allow_file_mode)  # validates
    if isinstance(got, Path):
        shown = f"{got.name} (from {source})"
        return mock_file_lengths(text_bytes(read_file(got, shown, max_bytes), shown), shown)
    params = {**(MOCK_LOGNORMAL_DEFAULTS if config["mode"] == "verification" else {}), **config}
    return lognormal_lengths(
        size, params["mean_seq_len"], params["lognormal_sigma"], params["min_seq_len"], params["max_seq_len"]
    )


def mock_file_lengths(data: bytes, source: str) -> np.ndarray:
    """A mock ``file``-mode CSV as Megatron-LM reads it: pandas drops line 1 as a header and flattens the rest
    row by row; each value is cast with ``int()`` when the sample is drawn.

    >>> mock_file_lengths(b"seq_len\\n7\\n3\\n\\n5\\n", "l.csv").tolist()
    [7, 3, 5]
    """
    values, where = [], []
    for k, (line, text) in enumerate(iter_lines(data)):
        if k == 0 or not text.strip():
            continue
        for cell in text.split(b","):
            values.append(cell.strip())
            where.append(line)
    if not values:
        raise InputError(source, None, "has no lengths after its header line")
    try:
        nums = np.array([float(v) for v in values])
    except ValueError:
        bad = next(i for i, v in enumerate(values) if not _is_number(v))
        raise InputError(
            source, f"line {where[bad]}", f"{excerpt(values[bad].decode('utf-8', 'replace'))} is not a number"
        ) from None
    outside = np.flatnonzero(~np.isfinite(nums) | (nums < 0) | (nums > MAX_LENGTH))
    if outside.size:
        raise InputError(
            source,
            f"line {where[int(outside[0])]}",
            f"{values[int(outside[0])].decode('utf-8', 'replace')} is not a length in 0..{MAX_LENGTH:,}",
        )
    return nums.astype(np.int64)  # int() truncates toward zero, as astype does for non-negative values


def _is_number(raw: bytes) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True
