"""`schedule` options --help allows, each either run within bounded memory and time or refused with one message
and exit code 2 (the bounds are computed from the options before anything is allocated)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.cli import main
from advisor.errors import InputError
from advisor.packing.online import OnlineConfig
from advisor.packing.online.schedule import check_cost, run_cost
from tests.support import SAMPLE

SQUAD = str(SAMPLE / "squad_v1.1_len384_hist.csv")  # 88,641 samples


@pytest.mark.parametrize(
    "options,expected",
    [
        ("--global-batch-size 16777216 --dp 1 --cp 1 --steps 1", "16,777,216 sub-samples"),
        ("--global-batch-size 1 --dp 1 --cp 1 --steps 16777216", "16,777,216 sub-samples"),
        ("--seq-length 1 --global-batch-size 8 --dp 1 --cp 131072 --steps 11080", "per-rank totals"),
        ("--seq-length 16 --global-batch-size 64 --dp 64 --cp 2048 --steps 1385", "per-rank totals"),
        ("--global-batch-size 131072 --dp 131072 --cp 1 --vpp-group 1024 --steps 1", "packs"),
        (
            "--global-batch-size 65536 --dp 64 --cp 1024 --steps 2 --scheduler default_dynamic_cp "
            "--max-seqlen-per-dp-cp-rank 100000",
            "sequence scans",
        ),
        ("--global-batch-size 32768 --dp 8 --cp 16 --steps 2 --scheduler default_dynamic_cp", "sequence scans"),
        (
            "--global-batch-size 64 --dp 1 --cp 4096 --vpp-group 1024 --steps 1 --scheduler default_dynamic_cp",
            "VPP rank lists",
        ),
    ],
)
def test_huge_combinations_are_refused_up_front(options, expected, capsys):
    argv = ["schedule", SQUAD, "--quiet", *options.split()]
    if "--seq-length" not in options:
        argv += ["--seq-length", "512"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.slow  # epochs at the bounds
@pytest.mark.parametrize(
    "options",
    [
        "--seq-length 1 --global-batch-size 8 --dp 1 --cp 131072",
        "--seq-length 16 --global-batch-size 64 --dp 64 --cp 2048",
    ],
)
def test_an_epoch_past_the_bounds_is_a_scale_model_of_it(options, capsys):
    """Without --steps the whole epoch is asked for: past what one simulation holds, a spread of its steps runs."""
    assert main(["schedule", SQUAD, "--quiet", *options.split()]) == 0
    out = capsys.readouterr().out
    assert "a scale model:" in out and "of the epoch's" in out, out


@pytest.mark.slow  # schedules 100 steps on 131,072 ranks
def test_json_listing_is_bounded_but_the_summary_runs(capsys):
    argv = [
        "schedule",
        SQUAD,
        "--seq-length",
        "512",
        "--dp",
        "1024",
        "--cp",
        "128",
        "--global-batch-size",
        "1024",
        "--steps",
        "100",
        "--quiet",
    ]
    assert main([*argv, "--json"]) == 2
    assert "--json: this schedule lists 26,214,400 rank entries" in capsys.readouterr().err
    assert main(argv) == 0 and "100 steps" in capsys.readouterr().out
    one_by_one = [
        "schedule",
        SQUAD,
        "--seq-length",
        "512",
        "--dp",
        "1",
        "--cp",
        "1",
        "--global-batch-size",
        "1",
        "--quiet",
        "--json",
    ]
    assert main(one_by_one) == 2
    assert "--json: this schedule lists 88,641 steps one by one, more than 50,000" in capsys.readouterr().err


def test_an_ordinary_epoch_still_runs(capsys):
    assert (
        main(
            [
                "schedule",
                SQUAD,
                "--seq-length",
                "512",
                "--dp",
                "8",
                "--cp",
                "2",
                "--global-batch-size",
                "128",
                "--quiet",
            ]
        )
        == 0
    )
    assert "692 steps" in capsys.readouterr().out  # 88,641 // 128


def _config(gbs_per, dp, cp, dyn, v):
    if dp * cp > 1 << 17 or gbs_per * dp > 1 << 24:
        return None  # beyond MAX_GPUS or the largest batch: the config refuses it (tested elsewhere)
    return OnlineConfig(
        commit="dev",
        dataset="mock_sft",
        seq_length=4096,
        global_batch_size=gbs_per * dp,
        dp=dp,
        cp=cp,
        scheduler="default_dynamic_cp" if dyn else "dp_balanced",
        pp=v or 1,
        vpp=2 if v else None,
        microbatch_group_size_per_vp_stage=v,
    )


configs = st.builds(
    _config,
    st.integers(1, 1 << 12),
    st.sampled_from([1, 2, 8, 64, 1024, 1 << 14]),
    st.sampled_from([1, 2, 3, 16, 512]),
    st.booleans(),
    st.sampled_from([None, 2, 1024]),
).filter(lambda c: c is not None)


@settings(max_examples=200, deadline=None)
@given(configs, st.integers(1, 1 << 24))
def test_check_cost_refuses_exactly_what_is_over_a_bound(cfg, steps):
    over = [name for name, (cost, limit, _) in run_cost(cfg, steps).items() if cost > limit]
    if over:
        with pytest.raises(InputError, match=over[0]):
            check_cost(cfg, steps)
    else:
        check_cost(cfg, steps)
    costs = run_cost(cfg, steps)
    assert costs["sub-samples"][0] == steps * cfg.global_batch_size  # the bound counts every sub-sample
    assert costs["per-rank totals"][0] == steps * cfg.dp * cfg.cp


def test_an_analysis_cache_counts_the_online_schedule_it_keeps():
    """A search over an online plan on 512 GPUs kept GiBs of schedules the cache's byte budget did not see."""
    from advisor.analysis import _analysis_arrays, analyze
    from advisor.caches import cache_budget
    from advisor.data.ingest import load_lengths
    from advisor.plan import plan_from_dict

    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": 64, "tp": 2},
            "training": {"seq_length": 512, "global_batch_size": 256},
            "packing": {"mode": "online"},
        }
    )
    a = analyze(plan, load_lengths(SQUAD))
    assert _analysis_arrays(a) == []  # nothing computed yet
    schedule = a.estimate.online
    held = {id(x) for x in _analysis_arrays(a)}
    assert id(schedule.seqlens) in held and id(schedule.rank_work) in held
    assert id(a.estimate.micro_batches.attention_thd) in held
    assert cache_budget(1 << 40) <= 1 << 40 and cache_budget(1) == 1


def test_the_cache_budget_follows_the_address_space_limit():
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    code = "from advisor.packing.cache import PACKING_CACHE_BYTES; print(PACKING_CACHE_BYTES)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit, cwd=SAMPLE.parent, timeout=120
    )
    assert out.stdout.strip() == str(256 << 20), out.stderr[-500:]
