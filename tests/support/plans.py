"""Plans for property tests: a hypothesis strategy of valid plans (presets with overrides, layouts that divide
the model) and a small length histogram to analyse them on."""

from __future__ import annotations

import math

from hypothesis import assume
from hypothesis import strategies as st

from advisor.data.lengths import LengthHistogram
from advisor.plan import Plan, PlanError, plan_from_dict
from advisor.plan.presets import MODEL_PRESETS

SMALL = LengthHistogram.from_samples([90, 150, 200, 310, 380, 500, 700, 1000, 1500, 2000] * 30)


def _divisors(n: int, most: int = 8) -> list[int]:
    return [d for d in range(1, most + 1) if n % d == 0]


@st.composite
def plans(draw) -> Plan:
    """A valid plan: a preset (often with overrides) or a custom model, and a layout that divides it."""
    name = draw(st.sampled_from(sorted(MODEL_PRESETS)))
    preset = plan_from_dict({"model": name}).model
    tp = draw(st.sampled_from(_divisors(math.gcd(preset.num_attention_heads, preset.query_groups))))
    pp = draw(st.sampled_from([1, 2]))
    vpp = draw(st.sampled_from([None, 2])) if pp > 1 else None
    cp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4]))
    layers = draw(st.integers(1, 6)) * pp * (vpp or 1) * 2
    model: str | dict = name
    if draw(st.booleans()) and not preset.moe_layer_freq or isinstance(preset.moe_layer_freq, int):
        overrides = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "num_layers": st.just(layers),
                    "vocab_size": st.integers(1000, 200_000),
                    "window_size": st.sampled_from([None, 4096]),
                    "mtp_num_layers": st.sampled_from([0, 1]),
                },
            )
        )
        model = {"preset": name, **overrides} if overrides else name
    task = draw(st.sampled_from(["llm-sft", "vlm-sft", "pretrain"]))
    mode = draw(st.sampled_from(["auto", "offline", "in-batch", "none", "global-batch"]))
    mbs = draw(st.sampled_from([1, 2, 4]))
    seq = draw(st.sampled_from([512, 1024, 2048, 4096]))
    raw = {
        "model": model,
        "parallel": {
            "gpus": tp * pp * cp * dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "vpp": vpp,
            "sp": tp > 1 and draw(st.booleans()),
            "cp_comm_type": draw(st.sampled_from(["p2p", "all_gather"])),
        },
        "training": {
            "task": task,
            "seq_length": seq,
            "micro_batch_size": mbs,
            "global_batch_samples": mbs * dp * draw(st.integers(1, 16)),
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
            "peft": draw(st.sampled_from(["none", "lora"])),
            "cuda_graphs": draw(st.booleans()),
        },
        "packing": {
            "mode": mode,
            "pack_size": draw(st.sampled_from([None, seq, seq * 2])),
            "pad_seq_to_mult": draw(st.sampled_from([None, 1, 8])),
            "seed": draw(st.integers(0, 2**32 - 1)),
            **(
                {
                    "scheduler": draw(st.sampled_from(["dp_balanced", "default_dynamic_cp"])),
                    "max_seqlen_per_dp_cp_rank": draw(st.sampled_from([None, -(-seq // cp)])),
                }
                if mode == "global-batch"
                else {}
            ),
        },
        "versions": {"megatron_bridge": draw(st.sampled_from(["0.6.2", "0.7.1"]))},
        "data": {"lengths": draw(st.sampled_from([None, "lengths.csv", "/data/l.parquet"]))},
        "hardware": {"gpu": draw(st.sampled_from(["H100-80GB", "A100-40GB", "B200"]))},
    }
    try:
        return plan_from_dict(raw)
    except PlanError:
        assume(False)
