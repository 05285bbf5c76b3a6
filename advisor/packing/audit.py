"""The figures of packs Megatron-Bridge already wrote (a packed data set, read by advisor/data/packed_audit.py),
measured with the same yardstick as the simulated packs: its ``{size}_metadata.jsonl`` line and the packing metrics.

The alternative, trusting the data set's own metadata file, misses packs written by another version or edited since.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from advisor.packing.metrics import packing_metrics, per_pack
from advisor.packing.offline import megatron_bridge_metadata

if TYPE_CHECKING:
    from advisor.data.packed_audit import PackedDatasetAudit


def existing_packs(audit: PackedDatasetAudit, pack_size: int) -> dict:
    """Megatron-Bridge's metadata of the existing packs (under ``metadata``) and the packing metrics, flat.

    >>> from advisor.data.packed_audit import audit_from_rows
    >>> out = existing_packs(audit_from_rows(np.array([7, 3]), np.array([0, 4, 0]), np.array([0, 2, 3]), "d").packs, 8)
    >>> out["metadata"]["packing_factor"], out["num_packs"]
    (1.5, 2)
    """
    longest = int(audit.items.max())
    if longest > pack_size:  # the histogram below has one slot per length up to the pack size
        raise ValueError(
            f"the existing packs hold a sequence of {longest:,} tokens, longer than the pack size {pack_size:,}"
        )
    counts = np.bincount(audit.items, minlength=pack_size + 1)
    fill, nseq, work = per_pack(audit.offsets, audit.items)
    return {
        "metadata": megatron_bridge_metadata(fill, nseq, counts, pack_size),
        **packing_metrics(fill, nseq, work, counts, pack_size, int(audit.items.sum())).as_dict(),
    }
