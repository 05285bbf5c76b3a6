"""The known traps (advisor/advice/traps.py): each cited on a plan that walks into it at a release without the fix,
and not at the release that has it; a clean plan cites none; no trap fires whose predicate does not hold."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.advice.rules import check
from advisor.advice.traps import OUTCOMES, TRAPS, trap_findings
from advisor.plan import plan_from_dict
from advisor.plan.versions import RELEASES, older

NEWEST = {p: list(r)[-1] for p, r in RELEASES.items()}
OLDEST = {p: list(r)[0] for p, r in RELEASES.items()}

# (trap, a plan that walks into it, the versions it names, the versions with the fix)
CASES = [
    (
        "mb-2952",
        {"model": "llama3.1-70b", "parallel": {"gpus": 64, "tp": 4, "pp": 4, "cp": 2}},
        {"megatron_bridge": "0.3.1"},
        {"megatron_bridge": "0.5.0"},
    ),
    (
        "te-3331",
        {"model": "llama3.1-8b", "parallel": {"gpus": 8, "cp": 2}, "training": {"seq_length": 16384}},
        {"transformer_engine": "2.16"},
        {"transformer_engine": "2.18"},
    ),
    (
        "mlm-4092",
        {
            "model": "llama3.1-70b",
            "parallel": {"gpus": 64, "tp": 2, "pp": 4},
            "packing": {"mode": "online"},
            "training": {"global_batch_samples": 64},
        },
        {"megatron_core": "0.17.1"},
        {"megatron_core": "0.18.0"},
    ),
    (
        "mb-4538",
        {
            "model": "qwen3-30b-a3b",
            "parallel": {"gpus": 16, "ep": 8, "moe_dispatcher": "flex_hybridep"},
            "training": {"seq_length": 4096},
        },
        {"megatron_core": "0.17.1", "megatron_bridge": "0.6.2"},
        {"megatron_core": "0.19.0", "megatron_bridge": "0.6.0"},
    ),
]


@pytest.mark.parametrize("trap, plan, bitten, fixed", CASES, ids=[c[0] for c in CASES])
def test_a_trap_is_cited_at_the_release_it_bites_and_not_at_the_fix(trap, plan, bitten, fixed):
    at = lambda versions: plan_from_dict({**plan, "versions": versions})  # noqa: E731
    ids = [f.id for f in check(at(bitten), None)]
    assert f"trap.{trap}" in ids
    cited = next(f for f in check(at(bitten), None) if f.id == f"trap.{trap}")
    assert trap.split("-")[1] in cited.message and cited.link and cited.link.startswith("https://github.com/")
    assert f"trap.{trap}" not in [f.id for f in check(at(fixed), None)]


def test_the_70b_plan_at_old_releases_would_train_wrong_and_at_the_newest_cites_none_of_those():
    plan = {
        "model": "llama3.1-70b",
        "parallel": {"gpus": 64, "tp": 4, "pp": 4, "cp": 2},
        "training": {"seq_length": 16384},
    }
    old = trap_findings(
        plan_from_dict({**plan, "versions": {"megatron_bridge": "0.3.1", "transformer_engine": "2.16"}})
    )
    new = trap_findings(plan_from_dict({**plan, "versions": NEWEST}))
    assert {f.id for f in old if f.outcome == "trains wrong"} == {"trap.mb-2952", "trap.te-3331"}
    assert not [f for f in new if f.outcome in ("trains wrong", "crash", "hang")]


def test_a_clean_plan_cites_no_trap():
    plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8}, "training": {"seq_length": 4096}})
    assert [f.id for f in trap_findings(plan)] == []


def test_dynamic_cp_on_the_dev_pin_trains_wrong_until_it_carries_the_rope_fix():
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "cp": 2},
            "packing": {"mode": "online", "scheduler": "default_dynamic_cp", "megatron_lm": "dev"},
            "training": {"seq_length": 16384, "global_batch_samples": 64},
        }
    )
    (f,) = [f for f in trap_findings(plan) if f.id == "trap.mlm-6821"]
    assert f.outcome == "trains wrong" and "6821" in f.message
    assert "trap.mlm-6821" not in [g.id for g in trap_findings(plan.changed(f.fix))]  # static CP


def test_applying_a_trap_fix_removes_it():
    plan = plan_from_dict(
        {**CASES[0][1], "versions": {"megatron_bridge": "0.3.1"}},
    )
    (f,) = [f for f in trap_findings(plan) if f.id == "trap.mb-2952"]
    assert "trap.mb-2952" not in [g.id for g in trap_findings(plan.changed(f.fix))]


LAYOUTS = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["llama3.1-8b", "llama3.1-70b", "qwen3-30b-a3b", "gemma3-27b"]),
        "tp": st.sampled_from([1, 2, 4]),
        "pp": st.sampled_from([1, 2, 3, 4]),
        "cp": st.sampled_from([1, 2, 4]),
        "mode": st.sampled_from(["offline", "online", "none"]),
        "cuda_graphs": st.booleans(),
        "mb": st.sampled_from(list(RELEASES["megatron_bridge"])),
        "mc": st.sampled_from(list(RELEASES["megatron_core"])),
        "te": st.sampled_from(list(RELEASES["transformer_engine"])),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=LAYOUTS)
def test_a_trap_fires_exactly_when_its_plan_predicate_and_its_versions_say_so(layout):
    gpus = layout["tp"] * layout["pp"] * layout["cp"] * 2
    try:
        plan = plan_from_dict(
            {
                "model": layout["model"],
                "parallel": {"gpus": gpus, "tp": layout["tp"], "pp": layout["pp"], "cp": layout["cp"]},
                "packing": {"mode": layout["mode"]},
                "training": {"seq_length": 8192, "global_batch_samples": 64, "cuda_graphs": layout["cuda_graphs"]},
                "versions": {
                    "megatron_bridge": layout["mb"],
                    "megatron_core": layout["mc"],
                    "transformer_engine": layout["te"],
                },
            }
        )
    except ValueError:
        return  # a layout the plan refuses (say PP beyond the layers): no plan, no trap
    fired = {f.id for f in trap_findings(plan)}
    for trap in TRAPS:
        versions_affected = not trap.fixed_in or any(
            older(getattr(plan.versions, p), v) for p, v in trap.fixed_in.items()
        )
        assert (f"trap.{trap.id}" in fired) == (trap.applies(plan, None) and versions_affected), trap.id
    # at the newest releases no versioned trap is left whose fix is released
    newest = plan.changed({"versions": NEWEST})
    left = {f.id for f in trap_findings(newest)}
    assert not {f"trap.{t.id}" for t in TRAPS if t.fixed_in and t.verified} & left


def test_every_trap_names_its_thread_outcome_and_fix():
    for trap in TRAPS:
        assert trap.url.startswith("https://") and trap.outcome in OUTCOMES and trap.fix and trap.fixed_by
        assert all(v in RELEASES[p] or not older(v, OLDEST[p]) for p, v in trap.fixed_in.items())


def test_global_batch_dynamic_cp_in_megatron_bridge_walks_into_the_rope_trap_too():
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 16, "cp": 2},
            "packing": {"mode": "global-batch", "scheduler": "default_dynamic_cp", "megatron_lm": "dev"},
            "training": {"seq_length": 16384, "global_batch_samples": 64},
            "versions": {"megatron_bridge": "0.7.1", "megatron_core": "0.20.0"},
        }
    )
    assert "trap.mlm-6821" in [f.id for f in trap_findings(plan)]


def test_megatron_bridge_preparation_is_cited_where_its_modelled_memory_exceeds_the_node():
    """Trap mb-6125 on the model of Megatron-Bridge's preparation (advisor/model/preparation.py, fitted by
    bench/bench_prepare_memory.py): the bundled SFT histogram (200k samples, 165M tokens: ~20 GiB) fits a DGX H100's
    2 TiB; the same shape 120 times over (24M samples, 20B tokens: ~2.3 TiB) does not, and the finding says the
    modelled GiB against the node's; on a GB200 tray (960 GiB) half of that does not fit either."""
    from advisor.advice.rules import rule_traps
    from advisor.data.lengths import LengthHistogram
    from advisor.packing.config import PackingConfig
    from advisor.packing.offline import pack
    from tests.support.histograms import read_hist

    sft = read_hist("sft_like_hist.csv")
    plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8}, "training": {"seq_length": 8192}})

    def cited(hist: LengthHistogram, gpu: str = "H100-80GB") -> list:
        at = plan.changed({"hardware": {"gpu": gpu}})
        packed = pack(hist, PackingConfig(pack_size=at.pack_size, algorithm="first_fit_decreasing"))
        return [f for f in rule_traps(at, packed) if f.id == "trap.mb-6125"]

    def times(k: int) -> LengthHistogram:
        return LengthHistogram(lengths=sft.lengths, counts=sft.counts * k, source=f"sft x {k}")

    assert cited(sft) == []
    (f,) = cited(times(120))
    assert f.outcome == "crash" and f.link.endswith("/pull/6125")
    assert "the node has 2,048 GiB (H100-80GB)" in f.message and "24,000,000 samples" in f.message
    modelled = float(f.message.split("modelled at ")[1].split(" GiB")[0].replace(",", ""))
    assert 2048 < modelled < 3000
    assert cited(times(60)) == [] and len(cited(times(60), "GB200")) == 1
    assert "trap.mb-6125" not in [g.id for g in trap_findings(plan)]  # no data: nothing to model
