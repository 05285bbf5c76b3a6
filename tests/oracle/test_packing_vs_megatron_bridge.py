"""The simulator against Megatron-Bridge 0.6.2's own code (its published wheel, pure modules only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.data.ingest import load_lengths
from advisor.data.lengths import LengthHistogram
from advisor.packing.algorithms import first_fit_decreasing, first_fit_shuffle
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack, runtime_lengths
from advisor.packing.permutation import shuffled_lengths
from tests.support.histograms import scaled
from tests.support.mb_fakes import FakeTokenizer, fake_sft_builder
from tests.support.tiers import slow_after


def _multisets(packs) -> list[list[int]]:
    return [sorted(p) for p in packs]


def _mb_strategy(mb_algorithms, counts: np.ndarray, pack_size: int, algorithm: str, seed: int):
    """create_packing_strategy under np.random.seed(seed), restoring the RNG after, as offline.py does."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return mb_algorithms.create_packing_strategy(counts.tolist(), pack_size, algorithm)
    finally:
        np.random.set_state(state)


@pytest.mark.parametrize("algorithm", slow_after(["first_fit_shuffle", "first_fit_decreasing"]))
@pytest.mark.parametrize("seed", slow_after([1234, 0, 42]))  # ~1 s each in Megatron-Bridge's Python packer
def test_squad_histogram_matches_megatron_bridge(mb_algorithms, squad, algorithm, seed):
    cfg = PackingConfig(pack_size=384, algorithm=algorithm, seed=seed)
    ours = pack(squad, cfg)
    assignments, metadata = _mb_strategy(mb_algorithms, ours.runtime.counts, 384, algorithm, seed)
    assert ours.metadata == metadata
    assert _multisets(ours.packs()) == _multisets(assignments)


@pytest.mark.slow  # 163k samples through Megatron-Bridge's Python packer
@pytest.mark.parametrize("algorithm", ["first_fit_shuffle", "first_fit_decreasing"])
def test_wikipedia_histogram_matches_megatron_bridge(mb_algorithms, wikipedia, algorithm):
    hist = scaled(wikipedia, 100)  # 163k samples of the same shape: Megatron-Bridge's packer is pure Python
    ours = pack(hist, PackingConfig(pack_size=512, algorithm=algorithm))
    assignments, metadata = _mb_strategy(mb_algorithms, ours.runtime.counts, 512, algorithm, 1234)
    assert ours.metadata == metadata
    assert _multisets(ours.packs()) == _multisets(assignments)


@pytest.mark.parametrize("trial", range(12))
def test_generated_histograms_match_megatron_bridge(mb_algorithms, trial):
    rng = np.random.default_rng(trial)
    pack_size = int(rng.choice([16, 100, 512, 2048, 4096]))
    n = int(rng.integers(1, 4000))
    if trial % 3 == 0:  # heavy tail, many at the cap
        lengths = np.minimum(rng.lognormal(np.log(pack_size / 4), 1.2, n).astype(int), pack_size)
    else:
        lengths = rng.integers(0, pack_size + 1, n)
    counts = np.bincount(lengths, minlength=pack_size + 1)
    for algorithm, fn in (("first_fit_decreasing", first_fit_decreasing), ("first_fit_shuffle", first_fit_shuffle)):
        seed = int(rng.integers(0, 2**31))
        offsets, items = fn(counts, pack_size, seed)
        assignments, _ = _mb_strategy(mb_algorithms, counts, pack_size, algorithm, seed)
        ours = [items[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        assert _multisets(ours) == _multisets(assignments), (algorithm, pack_size, n, seed)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pack_size=st.one_of(st.integers(1, 1500), st.integers(32_000, 40_000)),  # int16 and int32 rooms
    groups=st.lists(st.tuples(st.floats(0, 1.05), st.integers(1, 300)), max_size=40),  # past 1: above the pack
    zeros=st.integers(0, 3),
    by_runs=st.booleans(),
)
def test_first_fit_decreasing_on_counts_is_megatron_bridges_pack_for_pack(
    mb_algorithms, monkeypatch, pack_size, groups, zeros, by_runs
):
    """Runs of identical bins placed at once (advisor/packing/decreasing.py), and the samples placed one by one
    where runs would cost more (many lengths, or one above the pack size), give Megatron-Bridge's own
    first_fit_decreasing exactly: the same packs in the same order, each pack's lengths in the order placed, for
    any histogram (length-0 samples join the first pack; a length above the pack size gets a pack of its own, as
    Megatron-Bridge's negative room gives it)."""
    from advisor.packing import decreasing

    monkeypatch.setattr(decreasing, "RUNS_WORK", 10**9 if by_runs else 0)
    counts = np.zeros(round(pack_size * 1.05) + 1, np.int64)
    for where, how_many in groups:
        counts[round(where * pack_size)] += how_many
    counts[0] += zeros
    offsets, items = first_fit_decreasing(counts, pack_size)
    ours = [items[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    lengths = np.repeat(np.arange(counts.size), counts).tolist()
    assert ours == mb_algorithms.first_fit_decreasing(lengths, pack_size)


def _run_mb_pipeline(mb_offline, tmp_path, lengths, pack_size, max_seq_length, mult, algorithm, seed):
    """Megatron-Bridge's own prepare_gpt_sft_packed_data, end to end, writing its .npy and metadata files."""
    out, meta = tmp_path / "training.npy", tmp_path / "metadata.jsonl"
    mb_offline.prepare_gpt_sft_packed_data(
        input_path=tmp_path,
        output_path=out,
        output_metadata_path=meta,
        packed_sequence_size=pack_size,
        tokenizer=FakeTokenizer(eos_id=0),
        max_seq_length=max_seq_length,
        seed=seed,
        packing_algorithm=algorithm,
        pad_seq_to_mult=mult,
        num_tokenizer_workers=1,
        dataset_builder=fake_sft_builder(lengths),
    )
    return out, json.loads(meta.read_text())[-1]


@pytest.mark.parametrize("mult", slow_after([2, 1, 4, 8]))
@pytest.mark.parametrize("algorithm", ["first_fit_shuffle", "first_fit_decreasing"])
def test_full_pipeline_with_padding_and_truncation(mb_offline, tmp_path, mult, algorithm):
    rng = np.random.default_rng(mult)
    pack_size = 1000
    max_seq_length = 997 if mult == 8 else 1000  # a max length not divisible by the multiple: the cap bites
    lengths = np.concatenate([rng.integers(1, 400, 1500), rng.integers(990, 1300, 60), [1, 2, 3]])
    out, metadata = _run_mb_pipeline(mb_offline, tmp_path, lengths, pack_size, max_seq_length, mult, algorithm, 77)
    hist = LengthHistogram.from_samples(lengths, source="generated")
    cfg = PackingConfig(
        pack_size=pack_size, algorithm=algorithm, seed=77, pad_seq_to_mult=mult, max_seq_length=max_seq_length
    )
    ours = pack(hist, cfg)
    assert ours.metadata == metadata
    written = load_lengths(out).packs  # Megatron-Bridge's packed file, read back by the advisor's auditor
    theirs = [written.items[a:b].tolist() for a, b in zip(written.offsets[:-1], written.offsets[1:], strict=True)]
    assert _multisets(ours.packs()) == _multisets(theirs)
    rt = ours.runtime  # every runtime token is data, padding, or counted as truncated
    assert rt.real_tokens + rt.tokens_truncated == int((lengths - 1).sum())
    assert rt.real_tokens + rt.pad_tokens == int(ours.items.sum())
    assert rt.num_truncated >= int((lengths > max_seq_length + 1).sum()) > 0


def test_truncation_is_counted(squad):
    cfg = PackingConfig(pack_size=256)
    rt = runtime_lengths(squad, cfg)
    over = squad.lengths > 256
    assert rt.num_truncated == int(squad.counts[over].sum())
    assert rt.tokens_truncated == int(((squad.lengths[over] - 256) * squad.counts[over]).sum())
    assert rt.counts.sum() == squad.num_samples


def test_skip_mode_drops_and_counts_overlong(squad):
    rt = runtime_lengths(squad, PackingConfig(pack_size=256, overlong="skip"))
    over = squad.lengths - 1 > 256
    assert rt.num_skipped == int(squad.counts[over].sum()) > 0
    assert rt.counts.sum() + rt.num_skipped == squad.num_samples


def test_packed_parquet_written_by_megatron_bridge_is_audited(mb_parquet, tmp_path):
    rows = [
        {"input_ids": list(range(10)), "loss_mask": [1] * 10, "seq_start_id": [0, 4, 7]},
        {"input_ids": list(range(5)), "loss_mask": [1] * 5, "seq_start_id": [0]},
    ]
    path = tmp_path / "training_16.idx.parquet"
    mb_parquet.write_packed_parquet(rows, path)
    hist = load_lengths(path)
    audit = hist.packs
    assert audit.num_packs == 2
    assert audit.items.tolist() == [3, 2, 2, 4]  # get_seqlen_list: gaps minus the trailing token
    assert hist.lengths.tolist() == [3, 4, 5] and hist.counts.tolist() == [2, 1, 1]


# ---------------------------------------------------------------------------------------------- the first-fit kernel
def _cases():
    """Item sequences that take each path of the wide-tree kernel (advisor/packing/first_fit.py): a bin's lowered
    room carried up a level or two and to the top, the newest bins' older half joining the tree (raising its
    ancestors or not), items landing among the newest bins and behind them, the next item's bin
    found before the current one is placed and looked for again, length-0 items (bin 0 answers them, or an
    unopened bin when none is open), items of the whole pack, int16 rooms and int32 ones, int32 and int64 sums
    of squares."""
    rng = np.random.default_rng(22)
    yield "uniform", 512, rng.integers(1, 513, 3000)
    yield "heavy tail at the cap", 512, np.minimum(rng.lognormal(np.log(128), 1.2, 3000).astype(int) + 1, 512)
    yield (
        "wikipedia-like (a quarter at the cap)",
        640,
        np.where(rng.random(3000) < 0.25, 511, rng.integers(4, 512, 3000)),
    )
    yield "zeros and whole packs", 64, rng.choice([0, 0, 1, 31, 32, 33, 64], 3000)
    yield "one length", 100, np.full(2000, 37)
    yield "tiny packs", 2, rng.integers(0, 3, 500)
    yield "small items into many bins", 4096, rng.integers(1, 200, 4000)
    yield "int32 rooms", 40_000, rng.integers(1, 40_001, 2000)
    yield "int64 squares", 200_000, rng.integers(1, 200_001, 1500)


def _first_fit_as_megatron_bridges(mb_algorithms, monkeypatch, items: np.ndarray, pack_size: int, chunk: int):
    """The kernel, cut into chunks of ``chunk`` items (its state carried across), against Megatron-Bridge's own
    first_fit: each bin's items in order, each bin's sums as the packs give them, the first packs as kept."""
    from advisor.packing import first_fit as ff

    theirs = mb_algorithms.first_fit(items.tolist(), pack_size)
    monkeypatch.setattr(ff, "CHUNK", chunk)
    fit = ff.first_fit(items, pack_size)
    ours: list[list[int]] = [[] for _ in range(fit.count)]
    for b, s in zip(fit.bins.tolist(), items.tolist(), strict=True):
        ours[b].append(s)
    assert ours == theirs
    assert fit.fill.tolist() == [sum(p) for p in theirs] and fit.nseq.tolist() == [len(p) for p in theirs]
    assert fit.work.tolist() == [sum(s * s for s in p) for p in theirs]
    assert [list(p) for p in fit.first_packs()] == theirs[: ff.STRIP]
    return fit


@pytest.mark.parametrize("name, pack_size, items", slow_after(list(_cases()), fast=3))
def test_first_fit_kernel_places_every_item_as_megatron_bridges_first_fit(
    mb_algorithms, name, pack_size, items, monkeypatch
):
    """Bins and each bin's items in the order Megatron-Bridge's own first_fit puts them, with the kernel cut into
    chunks of 97 items (its state carried across), and each bin's sums as the packs give them."""
    from advisor.packing import first_fit as ff

    items = np.asarray(items, dtype=np.int32)
    fit = _first_fit_as_megatron_bridges(mb_algorithms, monkeypatch, items, pack_size, chunk=97)
    fit_codes = ff.first_fit(
        np.argsort(np.argsort(items, kind="stable"), kind="stable").astype(np.int32),
        pack_size,
        table=np.sort(items),
        bins=False,
    )  # the same items through a table
    assert fit_codes.count == fit.count and fit_codes.fill.tolist() == fit.fill.tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pack_size=st.integers(1, 2048),
    shape=st.sampled_from(["uniform", "small", "capped", "bimodal"]),
    n=st.integers(1, 4000),
    chunk=st.integers(1, 700),
    seed=st.integers(0, 2**31 - 1),
)
def test_first_fit_kernel_is_megatron_bridges_first_fit_for_any_items(
    mb_algorithms, monkeypatch, pack_size, shape, n, chunk, seed
):
    """Any lengths in [0, pack size], any pack size, the kernel cut into chunks anywhere: the same bins as
    Megatron-Bridge's own first_fit. The shapes put the work where the kernel has its paths: "small" items land
    behind the newest 64 bins (in the tree), "capped" ones open bins that nothing else fits, "bimodal" ones
    alternate between opening a bin and filling one among the newest."""
    rng = np.random.default_rng(seed)
    if shape == "uniform":
        items = rng.integers(0, pack_size + 1, n)
    elif shape == "small":
        items = rng.integers(0, max(1, pack_size // 8) + 1, n)
    elif shape == "capped":
        items = np.where(rng.random(n) < 0.3, pack_size, rng.integers(0, pack_size + 1, n))
    else:
        items = np.where(rng.random(n) < 0.5, pack_size - pack_size // 4, rng.integers(0, pack_size // 4 + 1, n))
    _first_fit_as_megatron_bridges(mb_algorithms, monkeypatch, items.astype(np.int32), pack_size, chunk)


@pytest.mark.slow  # 1M items: the tree kernel (itself checked against Megatron-Bridge above) is the oracle
@pytest.mark.parametrize("pack_size", [256, 512, 640, 1024, 4096])
def test_first_fit_kernel_matches_the_tree_kernel_on_a_million_wikipedia_samples(wikipedia, pack_size):
    from advisor.packing.first_fit import first_fit, first_fit_tree

    counts = runtime_lengths(scaled(wikipedia, 16), PackingConfig(pack_size=pack_size)).counts
    items = shuffled_lengths(counts, 1234)
    fit = first_fit(items, pack_size)
    bins, count = first_fit_tree(items, pack_size)
    assert fit.count == count and np.array_equal(fit.bins, bins)


def test_a_packing_groups_its_packs_only_when_asked_and_then_as_megatron_bridge(mb_algorithms, squad):
    """first_fit_shuffle's figures come from the kernel; its packs are grouped on first use, identical to
    Megatron-Bridge's, and counted in the packing cache's budget from then on."""
    from advisor.packing.cache import packing_arrays

    ours = pack(squad, PackingConfig(pack_size=384))
    before = sum(a.nbytes for a in packing_arrays(ours))
    assert ours.csr is None and ours.pack(0) == list(ours.first[0])  # the first packs without grouping
    assignments, metadata = _mb_strategy(mb_algorithms, ours.runtime.counts, 384, "first_fit_shuffle", 1234)
    assert [ours.pack(i) for i in range(ours.num_packs)] == assignments  # grouped now, in Megatron-Bridge's order
    assert sum(a.nbytes for a in packing_arrays(ours)) == before + ours.offsets.nbytes + ours.items.nbytes
    assert ours.metadata == metadata


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
def test_the_shuffle_makes_numpys_legacy_swaps(dtype):
    """first_fit_shuffle's order is drawn by the advisor's own MT19937 (advisor/packing/permutation.py): the same
    swaps as ``np.random.RandomState(seed).shuffle`` (Megatron-Bridge's ``np.random.shuffle`` after
    ``np.random.seed``), at the generator's refills (624 words) and around them, and for seeds at the ends."""
    from advisor.packing.permutation import legacy_shuffle

    for seed in (0, 1, 42, 1234, 2**32 - 1):
        for n in (0, 1, 2, 3, 311, 312, 313, 623, 624, 625, 1249, 100_003):
            theirs = (np.arange(n) % 60_000).astype(dtype)
            ours = theirs.copy()
            np.random.RandomState(seed).shuffle(theirs)
            legacy_shuffle(ours, seed)
            assert np.array_equal(ours, theirs), (seed, n)
