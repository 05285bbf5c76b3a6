"""What one read of a lengths file carries from reader to reader: the name for messages, the user's choices
and limits, and what was left out. Its own module so that the dispatch (``ingest``), the cell checks
(``cells``), column choice (``columns``) and the delimited-text reader (``delimited``) can all take it without
importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from advisor.data.guard import DEFAULT_MAX_BYTES, MAX_LENGTH, check_totals
from advisor.data.lengths import Exclusion, LengthHistogram
from advisor.data.megatron_mock import MOCK_SIZE
from advisor.errors import InputError

__all__ = ["Ctx"]


@dataclass(kw_only=True)
class Ctx:
    """What one read needs to know: the file's name for messages, the user's choices and limits, and what was
    left out."""

    name: str
    column: str | None = None
    histogram: bool | None = None
    on_bad: str = "error"
    max_length: int = MAX_LENGTH
    base_dir: Path | None = None
    mock_samples: int = MOCK_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    allow_file_mode: bool = False
    excluded: list[Exclusion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def result(self, lengths, counts=None, loss=None, **kw) -> LengthHistogram:
        if loss is not None and counts is None and np.asarray(lengths).size:  # per-sample loss tokens beside them
            check_totals(*np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True), self.name)
            return LengthHistogram.from_samples(
                lengths,
                loss=loss,
                source=self.name,
                excluded=tuple(self.excluded),
                notes=tuple(self.notes),
                order=np.asarray(lengths, dtype=np.int64).astype(np.int32),
            )
        if counts is None:  # one length per sample: keep the file's order too (int32: lengths are below 2**24)
            kw.setdefault("order", np.asarray(lengths, dtype=np.int64).astype(np.int32))
            lengths, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
        if np.asarray(lengths).size == 0 or not np.any(np.asarray(counts) > 0):
            raise InputError(
                self.name,
                None,
                "has no usable lengths"
                + (f" ({sum(e.count for e in self.excluded):,} rows left out)" if self.excluded else ""),
            )
        check_totals(lengths, counts, self.name)
        return LengthHistogram.from_pairs(
            lengths, counts, source=self.name, excluded=tuple(self.excluded), notes=tuple(self.notes), **kw
        )
