"""Benchmark: advisor.packing.online.schedule against Megatron-LM's own schedulers, run step by step.

Same data in one run: dev's mock SFT data (the default lognormal config at seq_length 4096, 1,000,000 samples,
seed 0, exactly as MockSFTLowLevelDataset draws it), padded as MockSFTDataset pads it. For each scheduler the
advisor schedules the whole epoch (every global batch: micro batches, CP groups, FLOPs sums, per-rank work, the
summary); the oracle (the real classes from ../shared/oracles/megatron-lm, loaded by tests/support/mlm_oracle.py) runs
``get_groups_and_subsamples`` and the FLOPs sums of ``run`` for each step, on the same global-id ordered lengths,
and every step it runs is checked to give the same groups. Where a full epoch of the oracle would take too long
(dynamic CP), it runs the first ``--oracle-steps`` steps and its time is extrapolated per step; the output says so.

    python bench/bench_schedule.py                      # 1M samples, GBS 256, DP 8 x CP 2 and DP 4 x CP 2
    python bench/bench_schedule.py --samples 200000 --oracle-steps 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.data.megatron_mock import default_mock_config  # noqa: E402
from advisor.packing.online import OnlineConfig, mock_config_lengths, schedule  # noqa: E402
from advisor.packing.online.padding import padded_lengths, padding_divisor  # noqa: E402
from tests.support.mlm_oracle import load, missing_reason  # noqa: E402

SEQ = 4096
CASES = [  # label, commit, scheduler, DP, CP
    ("dev dp_balanced", "dev", "dp_balanced", 8, 2),
    ("main dp_balanced", "main", "dp_balanced", 8, 2),
    ("dev default_dynamic_cp", "dev", "default_dynamic_cp", 4, 2),
]


def oracle_steps(run, commit: str, scheduler: str, steps: int) -> float:
    """Seconds for the real scheduler on the first ``steps`` steps; checks each against the advisor's result."""
    ds = load(commit).data_schedule
    cfg = run.config
    mgs = cfg.vpp_multiple
    if scheduler == "dp_balanced":
        sched = ds.DpBalancedScheduler(run.max_seqlen_per_dp_cp_rank, cfg.cp, cfg.dp, mgs)
    else:
        sched = ds.DefaultDynamicCPScheduler(
            run.max_seqlen_per_dp_cp_rank, cfg.cp, cfg.dp, mgs, min_cp_size=cfg.min_dynamic_cp
        )
    rows = [row.tolist() for row in run.seqlens[:steps]]  # what the all-gather hands over: Python ints
    results = []
    start = time.perf_counter()
    for seqlens_gathered in rows:
        global_id_seqlens = [(i, s) for i, s in enumerate(seqlens_gathered)]  # _get_global_seqlens_and_ids
        try:
            groups = sched.get_groups_and_subsamples(global_id_seqlens)
        except AssertionError:
            groups = None
        total = float(sum(seqlens_gathered))  # the FLOPs sums of run()
        squares = float(sum(s**2 for s in seqlens_gathered))
        results.append((groups, total, squares))
    elapsed = time.perf_counter() - start
    for k, (groups, total, squares) in enumerate(results):
        assert (total, squares) == (run.seqlen_sum[k], run.seqlen_squared_sum[k]), k
        if groups is None:
            assert run.num_micro_batches[k] == 0, k
            continue
        step = run.step(k)
        assert [[list(ids) for ids in mb] for mb in step.global_ids] == [mb[: cfg.ranks] for mb in groups], k
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--gbs", type=int, default=256)
    ap.add_argument(
        "--oracle-steps", type=int, default=200, help="steps the dynamic-CP oracle runs (then extrapolated)"
    )
    ap.add_argument("--repeat", type=int, default=5, help="best of this many runs (the whole-epoch oracle too)")
    args = ap.parse_args()
    for commit in ("main", "dev"):
        reason = missing_reason(commit)
        if reason:
            sys.exit(reason)
    t = time.perf_counter()
    lengths = mock_config_lengths(default_mock_config(SEQ), "default mock config", size=args.samples)
    print(
        f"data: Megatron-LM's default mock SFT lengths at seq_length {SEQ}: {lengths.size:,} samples, mean "
        f"{lengths.mean():.0f} ({time.perf_counter() - t:.2f} s to draw)"
    )
    schedule(
        lengths[: args.gbs * 2],
        OnlineConfig(commit="dev", dataset="mock_sft", seq_length=SEQ, global_batch_size=args.gbs, dp=8, cp=2),
    )  # numba compile/load
    for label, commit, scheduler, dp, cp in CASES:
        cfg = OnlineConfig(
            commit=commit,
            scheduler=scheduler,
            dataset="mock_sft" if commit == "dev" else "custom",
            seq_length=SEQ,
            global_batch_size=args.gbs,
            dp=dp,
            cp=cp,
        )
        data = lengths
        if commit == "main":  # main has no MockSFTDataset: it gets the lengths dev's mock data set pads to
            div = padding_divisor(commit="dev", dataset="mock_sft", cp=cp)
            data = padded_lengths(lengths, seq_length=SEQ, divisor=div, dataset="mock_sft").padded
        ours = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            run = schedule(data, cfg)
            ours.append(time.perf_counter() - t)
        ours = min(ours)
        steps = run.summary.steps
        full = scheduler == "dp_balanced" or args.oracle_steps >= steps
        ran = steps if full else args.oracle_steps
        theirs = min(oracle_steps(run, commit, scheduler, ran) for _ in range(args.repeat if full else 1))
        theirs_epoch = theirs if full else theirs / ran * steps
        s = run.summary
        print(
            f"\n{label} (DP {dp} x CP {cp}, GBS {args.gbs}, {steps:,} steps, {s.samples:,} samples): "
            f"{s.micro_batches_mean:.1f} micro batches a step, straggler {s.straggler_factor:.3f}, "
            f"padding {s.padding_fraction:.2%}, refused steps {s.refused_steps}"
        )
        print(f"  advisor, whole epoch:          {ours:8.3f} s (best of {args.repeat})")
        if full:
            print(
                f"  Megatron-LM, whole epoch:      {theirs:8.3f} s (best of {args.repeat}; all {steps:,} steps "
                "checked identical)"
            )
        else:
            print(
                f"  Megatron-LM, {ran} steps:       {theirs:8.3f} s (checked identical) -> extrapolated per step "
                f"to the epoch: {theirs_epoch:.1f} s"
            )
        print(f"  ratio: {theirs_epoch / ours:.0f}x faster" + ("" if full else " (oracle extrapolated)"))


if __name__ == "__main__":
    main()
