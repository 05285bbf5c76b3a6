"""``{pack_size}_metadata.jsonl``, as Megatron-Bridge 0.6.2's ``prepare_gpt_sft_packed_data`` writes it.

Followed: megatron/bridge/data/packing/offline.py: despite the name, one JSON list (``json.dump``, default
separators) of the dict ``create_packing_strategy`` returns (algorithms.py), one per split in the order the
builder prepares them: training, then validation. Bridge appends to an existing file; a prepared folder is
written whole, so the list is written at once. The dict itself is ``advisor.packing.offline``'s
``megatron_bridge_metadata``, computed from the packs as Bridge computes it.
"""

from __future__ import annotations

import json


def metadata_text(splits: list[dict]) -> str:
    """The file's text: the splits' dicts as one JSON list, as ``json.dump(packing_metadata_file, f)`` writes it.

    >>> metadata_text([{"pack_size": 8, "packing_factor": 2.5}])
    '[{"pack_size": 8, "packing_factor": 2.5}]'
    """
    return json.dumps(splits)
