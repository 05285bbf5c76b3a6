"""advisor.packing.online against Megatron-LM's own code (main d98e8a64, dev d48bd6be), loaded by mlm_oracle.py.

Nothing of the schedulers is re-typed here: every expected value comes from calling the real classes and
functions (DpBalancedScheduler, DefaultDynamicCPScheduler, build_packed_microbatches, SFTDataset, MockSFTDataset,
MockSFTLowLevelDataset, _unpack_batch, wrap_data_iterator) on the same input.
"""

from __future__ import annotations

import contextlib
import signal
import time
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.errors import InputError
from advisor.packing.online import OnlineConfig, check, expand_histogram, mock_config_lengths, schedule
from advisor.packing.online.dp_balanced import dp_balanced
from advisor.packing.online.dynamic_cp import dynamic_cp
from advisor.packing.online.padding import padded_lengths, padding_divisor
from tests.support import SAMPLE, SHARED
from tests.support.mlm_oracle import load, missing_reason, pg_collection

DATA = SHARED / "data"


def oracle(commit: str):
    reason = missing_reason(commit)
    if reason:
        pytest.skip(reason)
    return load(commit)


class OracleHang(Exception):
    """The real code did not return within the time limit (an endless loop)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the oracle after ``seconds`` (SIGALRM), keeping pytest-timeout's own alarm running afterwards."""

    def on_alarm(signum, frame):
        raise OracleHang()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.01))


def draw_lengths(rng: np.random.Generator, n: int, top: int) -> np.ndarray:
    """Lengths of several shapes: uniform, lognormal-like, mostly short, mostly long, one length only."""
    kind = rng.integers(5)
    if kind == 0:
        return rng.integers(1, top + 1, n)
    if kind == 1:
        return np.clip(rng.lognormal(np.log(top / 4), 1.0, n), 1, top).astype(np.int64)
    if kind == 2:
        return rng.integers(1, max(2, top // 8), n)
    if kind == 3:
        return rng.integers(max(1, top // 2), top + 1, n)
    return np.full(n, int(rng.integers(1, top + 1)))


def oracle_dp_balanced(commit: str, lens, *, max_seqlen: int, dp: int, cp: int, mgs, max_num_seqs=None):
    """The real get_groups_and_subsamples, or the string 'refused' where it asserts."""
    ds = oracle(commit).data_schedule
    kwargs = {"max_num_seqs": max_num_seqs} if commit == "dev" else {}
    sched = ds.DpBalancedScheduler(max_seqlen, cp, dp, mgs, **kwargs)
    try:
        return sched.get_groups_and_subsamples([(i, int(s)) for i, s in enumerate(lens)])
    except AssertionError as e:
        assert str(e) == "Not enough samples to move"
        return "refused"


def oracle_dynamic_cp(lens, *, max_seqlen: int, dp: int, cp: int, mgs, min_cp: int):
    """The real DefaultDynamicCPScheduler, or 'refused' where it raises, 'hangs' where it never returns."""
    ds = oracle("dev").data_schedule
    sched = ds.DefaultDynamicCPScheduler(max_seqlen, cp, dp, mgs, min_cp_size=min_cp)
    try:
        with time_limit(0.5):
            return sched.get_groups_and_subsamples([(i, int(s)) for i, s in enumerate(lens)])
    except (AssertionError, IndexError):
        return "refused"
    except OracleHang:
        return "hangs"


def our_lists(groups, step: int = 0) -> list:
    nmb = int(groups.mb_offsets[step + 1] - groups.mb_offsets[step])
    return [[list(ids) for ids in groups.rank_lists(step, m)] for m in range(nmb)]


# ---------------------------------------------------------------------------------------------- dp_balanced
def _compare_dp_balanced(commit, lens, *, max_seqlen, dp, cp, mgs, max_num_seqs=None):
    want = oracle_dp_balanced(commit, lens, max_seqlen=max_seqlen, dp=dp, cp=cp, mgs=mgs, max_num_seqs=max_num_seqs)
    got = dp_balanced(
        np.asarray(lens)[None, :],
        cap=max_seqlen * cp,
        dp=dp,
        cp=cp,
        vpp_multiple=mgs,
        commit=commit,
        max_num_seqs=max_num_seqs,
    )
    if want == "refused":
        assert got.refused[0]
        assert got.groups.mb_offsets[-1] == 0
        return "refused"
    assert not got.refused[0]
    assert our_lists(got.groups) == want
    return "ok"


def test_dp_balanced_matches_oracle_seeded():
    """300 random global batches over DP, CP, VPP groups, dev's cap, length shapes and overlong sequences."""
    rng = np.random.default_rng(12)
    outcomes = {"ok": 0, "refused": 0}
    for case in range(300):
        commit = ("main", "dev")[case % 2]
        dp, cp = int(rng.integers(1, 9)), int(rng.choice([1, 2, 3, 4]))
        mgs = None if rng.random() < 0.6 else int(rng.integers(2, 5))
        max_seqlen = int(rng.choice([64, 128, 256, 1000]))
        gbs = dp * int(rng.integers(1, 40))
        lens = draw_lengths(rng, gbs, int(max_seqlen * cp * rng.choice([0.25, 1.0, 1.2])))
        cap = int(rng.integers(1, 7)) if commit == "dev" and rng.random() < 0.3 else None
        outcomes[
            _compare_dp_balanced(commit, lens, max_seqlen=max_seqlen, dp=dp, cp=cp, mgs=mgs, max_num_seqs=cap)
        ] += 1
    assert outcomes["ok"] > 150 and outcomes["refused"] > 10, outcomes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    commit=st.sampled_from(["main", "dev"]),
    dp=st.integers(1, 6),
    cp=st.integers(1, 3),
    mgs=st.one_of(st.none(), st.integers(2, 4)),
    max_seqlen=st.integers(1, 40),
    lens=st.lists(st.integers(1, 60), min_size=1, max_size=60),
    cap=st.one_of(st.none(), st.integers(1, 4)),
)
def test_dp_balanced_matches_oracle_hypothesis(commit, dp, cp, mgs, max_seqlen, lens, cap):
    lens = lens[: len(lens) // dp * dp] or [1] * dp
    _compare_dp_balanced(
        commit, lens, max_seqlen=max_seqlen, dp=dp, cp=cp, mgs=mgs, max_num_seqs=cap if commit == "dev" else None
    )


def test_main_refuses_what_dev_accepts():
    """One pack for two DP ranks: main never splits pack 0 (asserts i > 0), dev does (i >= 0)."""
    lens = [10, 10, 10, 10]
    assert oracle_dp_balanced("main", lens, max_seqlen=100, dp=2, cp=1, mgs=None) == "refused"
    assert oracle_dp_balanced("dev", lens, max_seqlen=100, dp=2, cp=1, mgs=None) != "refused"
    runs = {
        c: schedule(lens, OnlineConfig(commit=c, dataset="custom", seq_length=100, global_batch_size=4, dp=2))
        for c in ("main", "dev")
    }
    assert runs["main"].summary.refused_steps == 1 and runs["main"].num_micro_batches.tolist() == [0]
    assert "i > 0" in runs["main"].refusals[0].reason and "d98e8a64" in runs["main"].refusals[0].source
    assert runs["dev"].summary.refused_steps == 0 and runs["dev"].num_micro_batches.tolist() == [1]


# ---------------------------------------------------------------------------------------------- dynamic CP
@pytest.mark.slow  # hundreds of batches through Megatron-LM's code
def test_dynamic_cp_matches_oracle_seeded():
    """160 random global batches over DP x CP (non powers of two too), min CP sizes and VPP groups."""
    rng = np.random.default_rng(7)
    outcomes = {"ok": 0, "refused": 0, "hangs": 0}
    for case in range(160):
        dp, cp = [(1, 1), (1, 2), (2, 2), (1, 4), (2, 4), (4, 2), (3, 2), (1, 6), (2, 3), (8, 1), (7, 2), (4, 4)][
            case % 12
        ]
        ranks = dp * cp
        min_cp = int(rng.choice([c for c in (1, 1, 2, 4, 3) if c <= ranks]))
        mgs = None if rng.random() < 0.6 else int(rng.integers(2, 5))
        max_seqlen = int(rng.choice([32, 100, 256]))
        gbs = dp * int(rng.integers(1, 12))
        lens = draw_lengths(rng, gbs, int(max_seqlen * ranks * rng.choice([0.2, 0.5, 1.0, 1.2])))
        want = oracle_dynamic_cp(lens, max_seqlen=max_seqlen, dp=dp, cp=cp, mgs=mgs, min_cp=min_cp)
        got = dynamic_cp(
            lens[None, :], dp=dp, cp=cp, max_seqlen_per_dp_cp_rank=max_seqlen, min_cp=min_cp, vpp_multiple=mgs
        )
        if want in ("refused", "hangs"):
            assert got.reasons[0] is not None, (case, want)
            if want == "hangs":
                assert "never returns" in got.reasons[0]
            outcomes[want] += 1
            continue
        assert got.reasons[0] is None, (case, got.reasons[0])
        assert our_lists(got.groups) == [mb[:ranks] for mb in want], case
        lost = {i for mb in want for ids in mb for i in ids} - {i for mb in want for ids in mb[:ranks] for i in ids}
        assert (got.defects[0] is not None) == bool(lost)
        _compare_local_cp(want, got.groups, lens, ranks)
        outcomes["ok"] += 1
    # refusals: a sequence needing more ranks than DP x CP has (powers of two only: 6 ranks take 4 x max), no
    # micro batch left to split for VPP, a min CP size of 3 pushing ranks past the end; hangs: VPP widening at 6 ranks
    assert outcomes["ok"] > 80 and outcomes["refused"] > 20 and outcomes["hangs"] > 0, outcomes


def _compare_local_cp(sample_id_groups, groups, lens, ranks):
    """Per rank and micro batch: the real build_packed_microbatches' local_cp_size and cu_seqlens_padded."""
    import torch

    utils = oracle("dev").data_schedule_utils
    samples = {
        i: {"original_seq_len": torch.tensor([int(s)]), "padded_seq_len": torch.tensor([int(s)])}
        for i, s in enumerate(lens)
    }
    cp_of = {}
    for m in range(len(sample_id_groups)):
        g0, g1 = groups.group_offsets[m], groups.group_offsets[m + 1]
        for g in range(g0, g1):
            for r in range(groups.rank_start[g], groups.rank_start[g] + groups.rank_count[g]):
                cp_of[m, r] = int(groups.cp[g])
    for rank in range(ranks):
        packed = utils.build_packed_microbatches(samples, sample_id_groups, rank, "cpu", True)
        for m, sample in enumerate(packed):
            assert int(sample["local_cp_size"]) == cp_of[m, rank]
            ids = sample_id_groups[m][rank]
            assert sample["cu_seqlens_padded"].tolist() == np.concatenate([[0], np.cumsum(lens[ids])]).tolist()


def test_dynamic_cp_known_cases():
    """Megatron-LM's own expectations, reproduced through the oracle and through ours."""
    want = oracle_dynamic_cp([6144, 2048], max_seqlen=4096, dp=1, cp=2, mgs=None, min_cp=1)
    got = dynamic_cp(np.array([[6144, 2048]]), dp=1, cp=2, max_seqlen_per_dp_cp_rank=4096)
    assert want == our_lists(got.groups) == [[[0, 1], [0, 1]]]
    want = oracle_dynamic_cp([50, 50], max_seqlen=100, dp=2, cp=7, mgs=None, min_cp=1)
    got = dynamic_cp(np.array([[50, 50]]), dp=2, cp=7, max_seqlen_per_dp_cp_rank=100)
    assert want == our_lists(got.groups) == [[[0, 1]] * 14]


def test_dynamic_cp_refuses_a_sequence_longer_than_all_ranks():
    lens = [100, 900]
    assert oracle_dynamic_cp(lens, max_seqlen=100, dp=2, cp=2, mgs=None, min_cp=1) == "refused"
    got = dynamic_cp(np.array([lens]), dp=2, cp=2, max_seqlen_per_dp_cp_rank=100)
    assert "needs CP size 16" in got.reasons[0]


# ---------------------------------------------------------------------------------------------- padding
def _mock_dataset(sft, lengths, *, seq_length, cp, dp=1, tp=1, sp=False, dynamic=False):
    """dev's MockSFTDataset over given lengths, built without its data-set machinery (which is stubbed)."""
    low = object.__new__(sft.MockSFTLowLevelDataset)
    low.sequence_lengths, low.size, low.format = np.asarray(lengths), len(lengths), "thd"
    ds = object.__new__(sft.MockSFTDataset)
    ds.dataset, ds.indices = low, np.arange(len(lengths))
    ds.config = types.SimpleNamespace(
        tokenizer=types.SimpleNamespace(eod=0, pad=-1),
        sequence_length=seq_length,
        context_parallel_size=cp,
        data_parallel_size=dp,
        sequence_parallel_size=tp * int(sp),
        dynamic_context_parallel=dynamic,
    )
    return ds


def _sft_dataset(sft, lengths, *, seq_length, cp, dp=1, tp=1, sp=False, dynamic=False):
    """SFTDataset with one conversation a line, tokenized to the given lengths."""
    ds = object.__new__(sft.SFTDataset)
    ds.dataset = [[{"role": "system", "content": int(n)}] for n in lengths]
    ds.indices = np.arange(len(lengths))
    tokenize = lambda conv, **kw: (np.arange(conv[0]["content"]) + 5, np.arange(conv[0]["content"]) + 5)  # noqa: E731
    ds.config = types.SimpleNamespace(
        tokenizer=types.SimpleNamespace(eod=0, pad=1, tokenize_conversation=tokenize),
        sequence_length=seq_length,
        context_parallel_size=cp,
        data_parallel_size=dp,
        sequence_parallel_size=tp * int(sp),
        dynamic_context_parallel=dynamic,
        reset_position_ids=False,
        create_attention_mask=False,
        reset_attention_mask=False,
    )
    return ds


@pytest.mark.parametrize("commit,dataset", [("dev", "mock_sft"), ("dev", "sft"), ("main", "sft")])
def test_padding_matches_sft_datasets(commit, dataset):
    """padded_seq_len as _unpack_batch takes it from the real dataset's cu_seqlens, over 40 configs."""
    mod = oracle(commit)
    rng = np.random.default_rng(3)
    for _ in range(40):
        cp, tp, sp = int(rng.choice([1, 2, 3, 4])), int(rng.choice([1, 2, 4])), bool(rng.integers(2))
        dp, dynamic = int(rng.integers(1, 4)), commit == "dev" and dataset == "mock_sft" and rng.random() < 0.3
        seq_length = int(rng.choice([64, 100, 128]))
        lengths = rng.integers(0 if dataset == "mock_sft" else 1, seq_length + 30, 12)
        build = _mock_dataset if dataset == "mock_sft" else _sft_dataset
        ds = build(mod.sft_dataset, lengths, seq_length=seq_length, cp=cp, dp=dp, tp=tp, sp=sp, dynamic=dynamic)
        divisor = padding_divisor(
            commit=commit, dataset=dataset, cp=cp, tp=tp, sequence_parallel=sp, dp=dp, dynamic_cp=dynamic
        )
        if commit == "dev":
            assert ds._calculate_padding_divisor() == divisor
        unpacked = mod.data_schedule_utils._unpack_batch([ds[i] for i in range(len(lengths))])
        want = [int(s["padded_seq_len"]) for s in unpacked]
        got = padded_lengths(lengths, seq_length=seq_length, divisor=divisor, dataset=dataset)
        assert got.padded.tolist() == want


# ---------------------------------------------------------------------------------------------- lengths
def test_mock_config_lengths_match_mock_low_level_dataset(tmp_path):
    sft = oracle("dev").sft_dataset
    dist = {
        "mode": "distribution",
        "type": "lognormal",
        "min_seq_len": 100,
        "max_seq_len": 4096,
        "mean_seq_len": 1500,
        "lognormal_sigma": 1.3,
    }
    real = sft.MockSFTLowLevelDataset(**dist)
    ours = mock_config_lengths(dist, "cfg", size=1_000_000)
    assert real.size == ours.size and np.array_equal(real.sequence_lengths, ours)
    real = sft.MockSFTLowLevelDataset(mode="verification", data_path="unused")
    assert np.array_equal(real.sequence_lengths[:1000], mock_config_lengths({"mode": "verification"}, "c", size=1000))
    path = tmp_path / "lengths.csv"
    path.write_text("seq_len\n17\n4\n\n4096\n")
    real = sft.MockSFTLowLevelDataset(mode="file", path=str(path))
    assert real.sequence_lengths.tolist() == mock_config_lengths({"mode": "file", "path": str(path)}, "c").tolist()


def test_expand_histogram_keeps_counts_and_order_choice():
    listed = expand_histogram([3, 1], [1, 2], order="listed")
    assert listed.tolist() == [3, 1, 1]
    shuffled = expand_histogram([3, 1, 7], [5, 6, 7], seed=1)
    assert sorted(shuffled.tolist()) == [1] * 6 + [3] * 5 + [7] * 7
    with pytest.raises(InputError, match="order"):
        expand_histogram([3], [1], order="random")


# ---------------------------------------------------------------------------------------------- whole runs
def _scaled(path: Path, samples: int) -> np.ndarray:
    rows = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64)
    counts = np.maximum(1, rows[:, 1] * samples // rows[:, 1].sum())
    return expand_histogram(rows[:, 0], counts, seed=0)


RUNS = [  # (histogram, samples, commit, scheduler, dataset, seq_length, GBS, MBS, DP, CP, TP, SP, VPP group, steps)
    ("squad_v1.1_len384_hist.csv", 88641, "dev", "dp_balanced", "mock_sft", 384, 256, 2, 8, 1, 1, False, None, 60),
    ("squad_v1.1_len384_hist.csv", 88641, "main", "dp_balanced", "custom", 384, 64, 1, 8, 2, 1, False, 2, 60),
    ("wikipedia_bert_len512_hist.csv", 40000, "dev", "dp_balanced", "mock_sft", 512, 128, 1, 4, 2, 2, True, 3, 60),
    ("wikipedia_bert_len512_hist.csv", 40000, "main", "dp_balanced", "custom", 512, 32, 1, 8, 1, 1, False, None, 60),
    (
        "squad_v1.1_len384_hist.csv",
        20000,
        "dev",
        "default_dynamic_cp",
        "mock_sft",
        384,
        64,
        1,
        4,
        2,
        1,
        False,
        None,
        12,
    ),
    (
        "wikipedia_bert_len512_hist.csv",
        20000,
        "dev",
        "default_dynamic_cp",
        "mock_sft",
        512,
        64,
        1,
        4,
        2,
        1,
        False,
        2,
        10,
    ),
]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r[0][:5]}-{r[2]}-{r[3]}-dp{r[8]}cp{r[9]}")
def test_real_histograms_match_oracle(run):
    name, samples, commit, scheduler, dataset, seq, gbs, mbs, dp, cp, tp, sp, mgs, steps = run
    path = DATA / name if (DATA / name).is_file() else SAMPLE / name
    lengths = _scaled(path, samples)
    cfg = OnlineConfig(
        commit=commit,
        scheduler=scheduler,
        dataset=dataset,
        seq_length=seq,
        global_batch_size=gbs,
        micro_batch_size=mbs,
        dp=dp,
        cp=cp,
        tp=tp,
        sequence_parallel=sp,
        pp=mgs or 1,
        vpp=2 if mgs else None,
        max_seqlen_per_dp_cp_rank=seq // cp if scheduler == "dp_balanced" else seq // 4,
    )
    result = schedule(lengths, cfg)
    refused = {r.step for r in result.refusals}
    for k in range(min(steps, result.summary.steps)):
        lens = result.seqlens[k]
        if scheduler == "dp_balanced":
            want = oracle_dp_balanced(commit, lens, max_seqlen=result.max_seqlen_per_dp_cp_rank, dp=dp, cp=cp, mgs=mgs)
        else:
            want = oracle_dynamic_cp(lens, max_seqlen=result.max_seqlen_per_dp_cp_rank, dp=dp, cp=cp, mgs=mgs, min_cp=1)
        if want in ("refused", "hangs"):
            assert k in refused
            continue
        assert k not in refused
        step = result.step(k)
        assert [[list(ids) for ids in mb] for mb in step.global_ids] == [mb[: dp * cp] for mb in want]
        assert step.num_micro_batches == len(want) == result.num_micro_batches[k]
        assert step.samples[0][0] == tuple(int(result.sample_index[k][i]) for i in want[0][0])


# ---------------------------------------------------------------------------------------------- wrap_data_iterator
@pytest.fixture
def single_rank_torch(monkeypatch):
    """torch with CUDA and the collectives of a one-rank data-parallel group patched to run on the CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.distributed, "all_gather", lambda out, inp, group=None: out[0].copy_(inp))
    monkeypatch.setattr(torch.distributed, "get_process_group_ranks", lambda group: list(range(group.size())))

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
        output.copy_(input[: output.numel()])

    monkeypatch.setattr(torch.distributed, "all_to_all_single", all_to_all_single)
    return torch


def _custom_sample(torch, index: int, length: int) -> dict:
    """An already-unpacked sample (as VarlenDataset gives): tokens carry the sample's index, to trace it."""
    return {
        "tokens": torch.full((length,), index, dtype=torch.int64),
        "labels": torch.full((length,), index, dtype=torch.int64),
        "loss_mask": torch.ones(length, dtype=torch.float32),
        "position_ids": torch.arange(length, dtype=torch.int64),
        "original_seq_len": torch.tensor([length], dtype=torch.int32),
        "padded_seq_len": torch.tensor([length], dtype=torch.int32),
    }


WRAPS = [  # commit, scheduler, dataset, CP, MBS, steps
    ("main", "dp_balanced", "custom", 1, 1, 3),
    ("main", "dp_balanced", "custom", 1, 2, 3),
    ("dev", "dp_balanced", "custom", 2, 2, 3),
    ("dev", "dp_balanced", "mock_sft", 4, 1, 3),
    ("dev", "default_dynamic_cp", "custom", 4, 1, 3),
    ("dev", "default_dynamic_cp", "mock_sft", 2, 2, 2),
]


@pytest.mark.parametrize("commit,scheduler,dataset,cp,mbs,steps", WRAPS)
def test_wrap_data_iterator_matches(single_rank_torch, commit, scheduler, dataset, cp, mbs, steps):
    """The real wrap_data_iterator on one DP rank, fed step by step: micro-batch counts, the FLOPs sums, and every
    CP rank's packed micro batches (its sequences' padded lengths, the samples they hold, local_cp_size)."""
    torch = single_rank_torch
    mod = oracle(commit)
    seq, gbs = 256, 16
    rng = np.random.default_rng(5 + cp + mbs)
    lengths = np.clip(rng.lognormal(np.log(70), 1.0, gbs * steps), 1, seq + 20).astype(np.int64)
    cfg = OnlineConfig(
        commit=commit,
        scheduler=scheduler,
        dataset=dataset,
        seq_length=seq,
        global_batch_size=gbs,
        micro_batch_size=mbs,
        cp=cp,
        max_seqlen_per_dp_cp_rank=seq // cp + 8,
    )
    run = schedule(lengths, cfg)
    if dataset == "mock_sft":
        ds = _mock_dataset(mod.sft_dataset, lengths, seq_length=seq, cp=cp, dynamic=cfg.dynamic_cp)
        items = [ds[i] for i in range(lengths.size)]
    else:
        items = [_custom_sample(torch, i, int(s)) for i, s in enumerate(lengths)]
    config = types.SimpleNamespace(
        sequence_packing_scheduler=scheduler,
        max_seqlen_per_dp_cp_rank=run.max_seqlen_per_dp_cp_rank,
        virtual_pipeline_model_parallel_size=None,
        microbatch_group_size_per_vp_stage=1,
        pipeline_model_parallel_layout=None,
        mtp_num_layers=None,
        min_dynamic_context_parallel_size=1,
    )
    for cp_rank in range(cp):
        loader = iter([items[i : i + mbs] for i in range(0, len(items), mbs)])  # the identity collate: lists of MBS
        for k in range(steps):
            it, nmb, total, squares = mod.data_schedule.wrap_data_iterator(
                loader, config, gbs // mbs, pg_collection(cp=cp, cp_rank=cp_rank)
            )
            assert (nmb, total, squares) == (run.num_micro_batches[k], run.seqlen_sum[k], run.seqlen_squared_sum[k])
            step = run.step(k)
            for m in range(nmb):
                packed = next(it)
                ids = step.global_ids[m][cp_rank]
                want = np.concatenate([[0], np.cumsum(run.seqlens[k][list(ids)])]).tolist()
                assert packed["cu_seqlens_padded"].tolist() == want
                if dataset == "custom":  # the tokens name the samples: the right ones, in order
                    starts = packed["cu_seqlens_padded"][:-1].long()
                    assert packed["tokens"][starts].tolist() == list(step.samples[m][cp_rank])
                if cfg.dynamic_cp:
                    assert int(packed["local_cp_size"]) == step.local_cp_size[m][cp_rank]
                assert step.tokens[m][cp_rank] * step.local_cp_size[m][cp_rank] == pytest.approx(want[-1])


# ---------------------------------------------------------------------------------------------- the engine alone
def test_summary_and_loads():
    lengths = np.array([100, 10, 10, 10, 90, 90, 5, 5] * 4)
    run = schedule(
        lengths,
        OnlineConfig(
            commit="dev", dataset="custom", seq_length=128, global_batch_size=8, dp=2, max_seqlen_per_dp_cp_rank=128
        ),
    )
    s = run.summary
    assert (s.steps, s.refused_steps, s.samples, s.unused_samples) == (4, 0, 32, 0)
    assert s.padding_fraction == 0.0 and s.padded_tokens == s.real_tokens == int(lengths.sum())
    assert run.rank_work.shape == (4, 2) and run.rank_work.sum() == pytest.approx(4 * float((lengths[:8] ** 2).sum()))
    step = run.step(0)
    assert step.work.sum() == pytest.approx(run.rank_work[0].sum())
    assert step.straggler == pytest.approx(run.step_straggler[0]) and s.straggler_factor >= 1.0
    assert s.micro_batches_min <= s.micro_batches_mean <= s.micro_batches_max


def test_padding_counts_and_overlong_warning():
    cfg = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=100, global_batch_size=4, cp=4)
    run = schedule([100, 7, 150, 1], cfg)  # divisor 2 x CP = 8 pushes 100 to 104, past the buffer 4 x 25
    assert run.padding_divisor == 8 and run.seqlens.tolist() == [[104, 8, 104, 8]] and run.capacity == 100
    assert run.summary.truncated_samples == 1 and run.summary.truncated_tokens == 50
    assert run.summary.padding_fraction == pytest.approx((224 - 208) / 224)
    assert run.step(0).global_ids[0][0] == ()  # the empty pack 0, as the real next fit leaves it
    assert any(i.id == "packing.overlong" and "empty pack 0" in i.message for i in run.findings)


def test_checks_follow_megatron_rules():
    issues = check(
        OnlineConfig(
            commit="dev",
            dataset="mock_sft",
            scheduler="default_dynamic_cp",
            seq_length=4096,
            global_batch_size=8,
            dp=2,
            cp=2,
            min_dynamic_cp=8,
            te_version="2.8.1",
            num_moe_experts=8,
            calculate_per_token_loss=False,
        )
    ).findings
    errors = {i.id for i in issues if i.severity == "error"}
    assert errors == {
        "packing.te_version",
        "packing.moe_dispatcher",
        "packing.min_dynamic_cp",
        "packing.dynamic_cp_loss",
    }
    assert all(i.source.endswith("(dev d48bd6be)") for i in issues)
    main = check(
        OnlineConfig(commit="main", dataset="custom", seq_length=4096, global_batch_size=8, micro_batch_size=2, cp=2)
    )
    assert main.max_seqlen_per_dp_cp_rank == 2048
    assert {i.id for i in main.findings} >= {"packing.main_not_wired", "packing.mbs_main", "packing.max_seqlen_default"}


@pytest.mark.parametrize(
    "kwargs,where",
    [
        ({"commit": "main", "scheduler": "default_dynamic_cp"}, "scheduler"),
        ({"commit": "main", "dataset": "mock_sft"}, "dataset"),
        ({"dp": 0}, "dp"),
        ({"global_batch_size": 6, "dp": 4}, "global_batch_size"),
        ({"commit": "main", "max_num_seqs": 4}, "max_num_seqs"),
        ({"seq_length": True}, "seq_length"),
    ],
)
def test_bad_config_names_the_argument(kwargs, where):
    base = {"commit": "dev", "dataset": "custom", "seq_length": 64, "global_batch_size": 8}
    with pytest.raises(InputError) as e:
        OnlineConfig(**{**base, **kwargs})
    assert e.value.where == where


def test_bad_lengths_and_steps():
    cfg = OnlineConfig(commit="dev", dataset="custom", seq_length=64, global_batch_size=4)
    with pytest.raises(InputError, match="sample 1"):
        schedule([3, -1, 2, 2], cfg)
    with pytest.raises(InputError, match="0 tokens"):
        schedule([3, 0, 2, 2], cfg)
    with pytest.raises(InputError, match="fewer than one global batch"):
        schedule([3, 1], cfg)
    with pytest.raises(InputError, match="steps"):
        schedule([3, 1, 2, 2], cfg, steps=0)
    assert schedule([3, 1], cfg, steps=3).sample_index.tolist() == [[0, 1, 0, 1]] * 3
