"""``advisor prepare``'s own rules: every record packed once, the engines' files identical, the token cache, the
output folder's safety. Megatron-Bridge identity is tests/oracle/test_prepare_exact.py.

Data: the bundled raw samples and ``tiny-bpe`` tokenizer, and generated lengths for the properties.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.data.lengths import LengthHistogram
from advisor.data.tokenize.chat import ChatSettings
from advisor.data.tokenize.engine import TokenizeJob
from advisor.data.tokenize.sft import SftSettings
from advisor.errors import InputError
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.prepare.cache import fingerprint, open_cache
from advisor.prepare.fill import assign_slots, runtime_of
from advisor.prepare.rows import build_rows
from advisor.prepare.run import PrepareOptions, prepare
from advisor.vocabulary import Algorithm
from tests.support import SAMPLE

RAW = SAMPLE / "raw"
TOKENIZER = str(SAMPLE / "tokenizers" / "tiny-bpe")
ALGORITHMS = (
    "first_fit_shuffle",
    "first_fit_decreasing",
    "best_fit_decreasing",
    "shortest_pack_first",
    "column_generation",
)


def chat_job(data: Path | str = RAW / "chat_sample.jsonl", **kw) -> TokenizeJob:
    return TokenizeJob(data=str(data), tokenizer=TOKENIZER, fmt="chat", settings=ChatSettings(), **kw)


def sft_job(data: Path | str = RAW / "sft_sample.jsonl", **kw) -> TokenizeJob:
    return TokenizeJob(data=str(data), tokenizer=TOKENIZER, fmt="sft", settings=SftSettings(), **kw)


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a prepared folder but the cache, by name."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# ------------------------------------------------------------------------------------------ properties


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stored=st.lists(st.integers(0, 70), min_size=1, max_size=120),
    pack_size=st.integers(8, 64),
    multiple=st.sampled_from([1, 1, 2, 4]),
    algorithm=st.sampled_from(ALGORITHMS),
    mask_kind=st.sampled_from(["answer_start", "loss_mask"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_every_record_once_in_packs_that_fit(stored, pack_size, multiple, algorithm: Algorithm, mask_kind, seed):
    """For any lengths: each record left in is in exactly one slot, with its own tokens (cut or padded to its
    target), no pack is longer than the pack size, seq_start_id marks the records, and the mask is the record's
    (rolled by one for chat)."""
    stored = np.array(stored, np.int64)
    if multiple > pack_size:
        multiple = 1
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(stored)])
    ids = rng.integers(10, 1000, int(offsets[-1])).astype(np.int32)  # pad id 0 never appears in a record
    mask = rng.integers(0, 2, int(offsets[-1])).astype(np.int8)
    runtime = runtime_of(stored, pack_size, multiple)
    kept = np.flatnonzero(runtime.kept)
    if kept.size == 0:
        return
    packing = pack(
        LengthHistogram.from_samples(runtime.runtime[kept] + 1),
        PackingConfig(pack_size=pack_size, algorithm=algorithm, seed=seed, pad_seq_to_mult=multiple, overlong="skip"),
    )
    slots = assign_slots(runtime.runtime, packing, seed, algorithm == "first_fit_shuffle")
    assert Counter(slots.tolist()) == Counter(kept.tolist())  # every record once
    rows = build_rows(
        ids, mask, offsets[:-1], stored, slots, runtime.target[slots], packing.offsets, pad_id=0, mask_kind=mask_kind
    )
    assert rows.offsets.size - 1 == packing.num_packs
    # a pack's runtime tokens (each record one shorter: labels are the shifted input) fit the pack
    assert (np.diff(rows.offsets) - np.diff(rows.start_offsets) <= pack_size).all()
    for p in range(packing.num_packs):
        row_ids = rows.ids[rows.offsets[p] : rows.offsets[p + 1]]
        row_mask = rows.mask[rows.offsets[p] : rows.offsets[p + 1]]
        starts = rows.seq_start[rows.start_offsets[p] : rows.start_offsets[p + 1]].tolist()
        assert starts[0] == 0 and starts == sorted(starts) and starts[-1] < row_ids.size
        bounds = starts + [row_ids.size]
        for k, slot in enumerate(range(packing.offsets[p], packing.offsets[p + 1])):
            r = slots[slot]
            a, b = bounds[k], bounds[k + 1]
            assert b - a == runtime.target[r] == packing.items[slot] + 1
            keep = min(stored[r], b - a)
            assert row_ids[a : a + keep].tolist() == ids[offsets[r] : offsets[r] + keep].tolist()
            assert (row_ids[a + keep : b] == 0).all()
            own = np.concatenate(
                [
                    mask[offsets[r] : offsets[r] + keep],
                    np.full(b - a - keep, 1 if mask_kind == "answer_start" else 0, np.int8),
                ]
            )
            expect = np.concatenate([own[1:], [0]]) if mask_kind == "loss_mask" else own
            assert row_mask[a:b].tolist() == expect.tolist()


def test_runtime_lengths_skip_or_cut_as_megatron_bridge():
    r = runtime_of(np.array([1, 17, 18, 30]), 16, 1)  # chat: longer than max_seq_length + 1 stored is skipped
    assert r.runtime.tolist() == [0, 16, -1, -1] and not r.cut.any()
    r = runtime_of(np.array([1, 17, 18, 30]), 16, 8)  # padding to a multiple cuts instead, to cap + 1
    assert r.runtime.tolist() == [0, 16, 16, 16] and r.target.tolist() == [1, 17, 17, 17]
    assert r.cut.tolist() == [False, False, True, True]


# ------------------------------------------------------------------------------------------ engines


def test_process_pool_and_one_process_write_the_same_bytes(tmp_path):
    options = dict(pack_size=512, rows_per_file=60, seed=9)
    one = prepare(str(tmp_path / "one"), PrepareOptions(workers=1, **options), train=chat_job())
    prepare(str(tmp_path / "pool"), PrepareOptions(workers=2, **options), train=chat_job(), validation=chat_job())
    assert len(one.splits[0].files) > 1  # shards, written by different processes
    mine = files(tmp_path / "one")
    theirs = files(tmp_path / "pool")
    for name in one.splits[0].files:
        assert mine[name] == theirs[name], name
    assert json.loads(theirs["512_metadata.jsonl"])[0] == json.loads(mine["512_metadata.jsonl"])[0]


@pytest.mark.slow  # about 40 s on two cores: Ray's start and its workers' imports
def test_ray_writes_the_same_bytes_as_the_local_engine(tmp_path):
    pytest.importorskip("ray")
    options = dict(pack_size=1024, rows_per_file=50, workers=2)
    local = prepare(str(tmp_path / "local"), PrepareOptions(**options), train=chat_job(), validation=sft_job())
    remote = prepare(
        str(tmp_path / "ray"), PrepareOptions(engine="ray", **options), train=chat_job(), validation=sft_job()
    )
    assert files(tmp_path / "local") == files(tmp_path / "ray")
    assert len(local.splits[0].files) > 1 and remote.files == local.files


def test_progress_reports_fractions_up_to_one(tmp_path):
    seen: list[tuple[str, float]] = []
    prepare(
        str(tmp_path / "out"),
        PrepareOptions(pack_size=2048, workers=1),
        train=sft_job(),
        progress=lambda what, done: seen.append((what, done)),
    )
    fractions = [f for _, f in seen]
    assert all(0.0 <= f <= 1.0 for f in fractions) and fractions[-1] == 1.0
    assert any("packing" in what for what, _ in seen) and any("wrote" in what for what, _ in seen)


# ------------------------------------------------------------------------------------------ the cache


def test_a_repack_from_the_cache_equals_a_fresh_prepare(tmp_path):
    prepare(str(tmp_path / "first"), PrepareOptions(pack_size=2048, workers=1), train=chat_job(), validation=chat_job())
    again = prepare(
        str(tmp_path / "repacked"),
        PrepareOptions(pack_size=1024, algorithm="column_generation", pad_seq_to_mult=4),
        from_cache=str(tmp_path / "first"),
    )
    fresh = prepare(
        str(tmp_path / "fresh"),
        PrepareOptions(pack_size=1024, algorithm="column_generation", pad_seq_to_mult=4, workers=1),
        train=chat_job(),
        validation=chat_job(),
    )
    assert files(tmp_path / "repacked") == files(tmp_path / "fresh")
    assert again.tokenize_seconds == 0 and fresh.tokenize_seconds > 0
    assert [s.records_read for s in again.splits] == [300, 300]
    cache = open_cache(str(tmp_path / "repacked"), "training")  # the new folder can be re-packed in turn
    assert cache.meta["fingerprint"] == open_cache(str(tmp_path / "first"), "training").meta["fingerprint"]


def test_the_cache_knows_what_it_was_made_from(tmp_path):
    data = tmp_path / "chat.jsonl"
    shutil.copy(RAW / "chat_sample.jsonl", data)
    prepare(str(tmp_path / "out"), PrepareOptions(pack_size=2048, workers=1), train=chat_job(data))
    meta = open_cache(str(tmp_path / "out"), "training").meta
    assert meta["fingerprint"] == fingerprint([str(data)], TOKENIZER, "chat", ChatSettings())
    assert meta["format"] == "chat" and meta["mask_kind"] == "loss_mask" and meta["records_read"] == 300
    data.write_bytes(data.read_bytes().replace(b"packing", b"pecking", 1))
    assert fingerprint([str(data)], TOKENIZER, "chat", ChatSettings()) != meta["fingerprint"]
    assert fingerprint([str(data)], TOKENIZER, "chat", ChatSettings(loss_mode="full")) != meta["fingerprint"]


def test_sft_records_cut_for_another_length_are_not_repacked(tmp_path):
    prepare(str(tmp_path / "out"), PrepareOptions(pack_size=512, workers=1), train=sft_job())
    with pytest.raises(InputError, match="cut to 512 tokens when they were tokenized.*cut to 256"):
        prepare(str(tmp_path / "other"), PrepareOptions(pack_size=256), from_cache=str(tmp_path / "out"))
    prepare(
        str(tmp_path / "same"), PrepareOptions(pack_size=1024, max_seq_length=512), from_cache=str(tmp_path / "out")
    )  # a larger pack of the same records: allowed
    assert not (tmp_path / "other").exists()


def test_a_folder_without_a_cache_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "training_64.idx.parquet").write_bytes(b"PAR1")
    with pytest.raises(InputError, match="holds no token cache"):
        prepare(str(tmp_path / "out"), PrepareOptions(pack_size=64), from_cache=str(tmp_path / "plain"))
    bad = tmp_path / "bad" / ".tokens" / "training"
    bad.mkdir(parents=True)
    meta = {"version": 1, "format": "chat", "mask_kind": "loss_mask", "split": "training"}
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=r"meta\.json, records_packed_from: Field required"):
        prepare(str(tmp_path / "out"), PrepareOptions(pack_size=64), from_cache=str(tmp_path / "bad"))
    (bad / "meta.json").write_text(json.dumps({**meta, "records_packed_from": 0, "tokens": 0}))
    with pytest.raises(InputError, match=r"ids\.npy: missing"):
        prepare(str(tmp_path / "out"), PrepareOptions(pack_size=64), from_cache=str(tmp_path / "bad"))


# ------------------------------------------------------------------------------------------ the output folder


def test_an_output_folder_with_data_needs_force_and_only_prepares_own_is_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty; pass --force"):
        prepare(str(out), PrepareOptions(pack_size=2048, workers=1), train=sft_job())
    # --force replaces only a folder prepare wrote: a user's file in it is named and kept
    with pytest.raises(InputError, match="holds keep.txt, which this command did not write"):
        prepare(str(out), PrepareOptions(pack_size=2048, workers=1, force=True), train=sft_job())
    assert os.listdir(out) == ["keep.txt"] and os.listdir(tmp_path) == ["out"]
    (out / "keep.txt").unlink()
    prepare(str(out), PrepareOptions(pack_size=2048, workers=1), train=sft_job())
    prepare(str(out), PrepareOptions(pack_size=4096, workers=1, force=True), train=sft_job())
    assert sorted(os.listdir(out)) == [".tokens", "4096_metadata.jsonl", "training_4096.idx.parquet"]
    assert os.listdir(tmp_path) == ["out"]  # the old folder, set aside, is gone


@pytest.mark.parametrize("target", ["data", "tok", "work", "work/data/.."])
def test_force_never_replaces_a_folder_holding_an_input_or_the_working_folder(tmp_path, monkeypatch, target):
    """The round-4 data loss: ``-o data --force``, ``-o tok --force`` and ``-o . --force`` removed the raw data,
    the tokenizer or the working folder. Each is refused before anything is created, every file kept."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    shutil.copy(RAW / "sft_sample.jsonl", work / "data" / "a.jsonl")
    tok = tmp_path / "tok"
    shutil.copytree(TOKENIZER, tok)
    monkeypatch.chdir(work)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    job = TokenizeJob(data=str(work / "data" / "a.jsonl"), tokenizer=str(tok), fmt="sft", settings=SftSettings())
    out = {"data": str(work / "data"), "tok": str(tok), "work": ".", "work/data/..": str(work / "data" / "..")}[target]
    with pytest.raises(InputError, match="holds the input|is the working folder|is the input folder"):
        prepare(out, PrepareOptions(pack_size=2048, workers=1, force=True), train=job)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_a_staging_folder_left_by_a_killed_run_is_removed_by_the_next(tmp_path):
    stale = tmp_path / ".out.999999999-12345.0123456789ab.partial"  # no such pid: its run was killed
    (stale / ".work").mkdir(parents=True)
    (stale / ".work" / "big.npy").write_bytes(b"x" * 1000)
    result = prepare(str(tmp_path / "out"), PrepareOptions(pack_size=2048, workers=1), train=sft_job())
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert result.notes == ("removed .out.999999999-12345.0123456789ab.partial, left by an interrupted run",)


def test_a_failure_leaves_nothing_half_written(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    lines = (RAW / "sft_sample.jsonl").read_text().splitlines()
    (data / "a.jsonl").write_text("\n".join(lines[:100] + ["{not json"] + lines[100:]) + "\n")
    with pytest.raises(InputError, match="a.jsonl, line 101"):
        prepare(str(tmp_path / "out"), PrepareOptions(pack_size=2048, workers=1), train=sft_job(data / "a.jsonl"))
    assert sorted(os.listdir(tmp_path)) == ["data"]  # no OUT, no staging folder
    deep = tmp_path.joinpath(*(f"d{i}" for i in range(19)), "out")  # round 4: 19 empty folders were left
    (tmp_path / "kept").mkdir()
    for out in (deep, tmp_path / "kept" / "a" / "b" / "out"):
        with pytest.raises(InputError, match="a.jsonl, line 101"):
            prepare(str(out), PrepareOptions(pack_size=2048, workers=1), train=sft_job(data / "a.jsonl"))
    assert sorted(os.listdir(tmp_path)) == ["data", "kept"] and os.listdir(tmp_path / "kept") == []
    with pytest.raises(InputError, match="inside the input folder"):
        prepare(str(data / "out"), PrepareOptions(pack_size=2048), train=sft_job(data))
    result = prepare(
        str(tmp_path / "out"),
        PrepareOptions(pack_size=2048, workers=1),
        train=TokenizeJob(data=str(data / "a.jsonl"), tokenizer=TOKENIZER, on_bad="skip", settings=SftSettings()),
    )
    assert result.splits[0].records_read == 301 and result.splits[0].packed == 300
    assert result.splits[0].excluded[0]["count"] == 1


def test_bad_options_are_one_message():
    with pytest.raises(InputError, match="max_seq_length 4096 cannot exceed the pack size 2048"):
        prepare("/tmp/never", PrepareOptions(pack_size=2048, max_seq_length=4096), train=sft_job())
    with pytest.raises(InputError, match="either the raw data .* or --from-cache"):
        prepare("/tmp/never", PrepareOptions(pack_size=2048))
    with pytest.raises(InputError, match="from_cache: is empty"):  # was an AttributeError (no train job to read)
        prepare("/tmp/never", PrepareOptions(pack_size=2048), from_cache="")
    chat_settings_job = TokenizeJob(data=str(RAW / "sft_sample.jsonl"), tokenizer=TOKENIZER, settings=ChatSettings())
    with pytest.raises(InputError, match="the sft format takes SftSettings, not ChatSettings"):  # was a TypeError
        prepare("/tmp/never", PrepareOptions(pack_size=2048), train=chat_settings_job)
    with pytest.raises(InputError, match="add_sep puts None"):
        from advisor.data.tokenize.sft import sft_tokens
        from advisor.data.tokenize.tokenizer import load_tokenizer

        sft_tokens([{"input": "a", "output": "b"}], load_tokenizer(TOKENIZER), SftSettings(add_sep=True))
    assert not os.path.exists("/tmp/never")


def test_rows_are_what_megatron_bridge_reads(tmp_path):
    """Column types as write_packed_parquet writes them, 500-row row groups, records in order of seq_start_id."""
    result = prepare(str(tmp_path / "out"), PrepareOptions(pack_size=256, workers=1), train=sft_job())
    f = pq.ParquetFile(tmp_path / "out" / "training_256.idx.parquet")
    schema = f.schema_arrow
    assert schema.names == ["input_ids", "loss_mask", "seq_start_id"]
    assert [str(schema.field(n).type.value_type) for n in schema.names] == ["int64", "int8", "int64"]
    assert f.metadata.num_rows == result.splits[0].packs
    groups = [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
    assert groups[0] == min(500, f.metadata.num_rows) and sum(groups) == f.metadata.num_rows


# ------------------------------------------------------------------------------------------ a tampered cache


def _tamper_meta(cache: Path, **changes) -> None:
    meta = json.loads((cache / "meta.json").read_text())
    meta.update(changes)
    (cache / "meta.json").write_text(json.dumps(meta))


def _rewrite(cache: Path, name: str, edit) -> None:
    array = np.load(cache / f"{name}.npy")
    edit(array)
    (cache / f"{name}.npy").unlink()
    np.save(cache / f"{name}.npy", array, allow_pickle=False)


def _sparse_offsets(cache: Path) -> None:
    """A header claiming 400M records over a sparse file of that size: nothing may map or diff it whole."""
    path = cache / "offsets.npy"
    path.unlink()
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": (400_000_001,)})
        f.truncate(f.tell() + 400_000_001 * 8)


TAMPERED = {
    "eod negative": (lambda c: _tamper_meta(c, eod=-1), r"meta\.json, eod: Input should be greater than or equal"),
    "format a list": (lambda c: _tamper_meta(c, format=["chat"]), r"meta\.json, format:"),
    "mask kind unknown": (lambda c: _tamper_meta(c, mask_kind="all"), r"meta\.json, mask_kind:"),
    "stored max a string": (lambda c: _tamper_meta(c, stored_max_seq_length="512"), r"stored_max_seq_length"),
    "excluded not a list": (lambda c: _tamper_meta(c, excluded={"a": 1}), r"meta\.json, excluded"),
    "records read NaN-like": (lambda c: _tamper_meta(c, records_read=1e300), r"meta\.json, records_read"),
    "unknown field": (lambda c: _tamper_meta(c, run="rm -rf /"), r"meta\.json, run: Extra inputs"),
    "tokens disagree": (lambda c: _tamper_meta(c, tokens=5), r"do not fit together or with its meta\.json"),
    "ids a FIFO": (lambda c: ((c / "ids.npy").unlink(), os.mkfifo(c / "ids.npy")), r"ids\.npy: not a regular file"),
    "meta a symlink": (
        lambda c: ((c / "meta.json").rename(c / "m"), (c / "meta.json").symlink_to(c / "m")),
        r"meta\.json: not a regular file",
    ),
    "sparse 400M records": (_sparse_offsets, r"offsets\.npy: claims 400,000,000 records"),
    "ids cut short": (
        lambda c: os.truncate(c / "ids.npy", os.path.getsize(c / "ids.npy") - 4),
        r"ids\.npy: its header says",
    ),
    "offsets not monotone": (
        lambda c: _rewrite(c, "offsets", lambda a: a.__setitem__(2, a[1] - 1)),
        r"offsets\.npy: not a running total",
    ),
    "mask of 7": (
        lambda c: _rewrite(c, "mask", lambda a: a.__setitem__(slice(None), 7)),
        r"mask\.npy: holds the loss mask value 7",
    ),
    "negative id": (
        lambda c: _rewrite(c, "ids", lambda a: a.__setitem__(slice(None), -3)),
        r"ids\.npy: holds the token id -3",
    ),
    "id beyond the vocabulary": (
        lambda c: _rewrite(c, "ids", lambda a: a.__setitem__(slice(None), 1 << 30)),
        r"ids\.npy: holds the token id 1,073,741,824, outside the tokenizer.s ids, \[0, ",
    ),
}


@pytest.fixture(scope="module")
def prepared_once(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cache") / "out"
    prepare(str(out), PrepareOptions(pack_size=1024, workers=1), train=chat_job())
    return out


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_cache_is_one_message_and_nothing_is_written(prepared_once, tmp_path, case):
    """Round 4: unchecked meta.json fields were tracebacks, a FIFO hung, a sparse array of 400M records blew up,
    and masks of 7, ids of -3 and an EOS of -1 reached the Parquet Megatron-Bridge trains on."""
    source = tmp_path / "src"
    shutil.copytree(prepared_once, source)
    tamper, message = TAMPERED[case]
    tamper(source / ".tokens" / "training")
    with pytest.raises(InputError, match=message):
        prepare(str(tmp_path / "out"), PrepareOptions(pack_size=2048, workers=1), from_cache=str(source))
    assert sorted(os.listdir(tmp_path)) == ["src"]  # no output, no staging folder left


def test_a_prepared_folder_read_back_counts_the_training_split_only(tmp_path):
    """Round 4: a prepared folder read back counted its validation split as training (58 samples for 29)."""
    from advisor.data.ingest import load_lengths

    out = tmp_path / "out"
    prepare(str(out), PrepareOptions(pack_size=2048, workers=1), train=sft_job(), validation=sft_job())
    hist = load_lengths(str(out))
    assert hist.num_samples == 300  # the training split's 300, not 600
    assert any("validation split (validation_2048.idx.parquet) is left out" in n for n in hist.notes)


def _longer_first_pack(folder: Path, split: str = "training") -> None:
    """The first pack of a split filled 10 tokens past the pack size its name says: its last sequence made longer
    (packing counts each sequence less its last token, so the pack holds 1,034 + one token a sequence)."""
    path = folder / f"{split}_1024.idx.parquet"
    table = pq.read_table(path).to_pylist()
    nseq = len(table[0]["seq_start_id"])
    table[0]["input_ids"] = table[0]["input_ids"] + [7] * (1024 + 10 + nseq - len(table[0]["input_ids"]))
    table[0]["loss_mask"] = table[0]["loss_mask"] + [0] * (len(table[0]["input_ids"]) - len(table[0]["loss_mask"]))
    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(path)), path)


PREPARED_TAMPERED = {  # name: (what is done to a prepared folder, the one message reading it back gives)
    "a training pack past the pack size": (
        _longer_first_pack,
        r"out, pack 0: is filled to 1,034 tokens, over the "
        r"pack size 1,024 its file names say",
    ),
    "a validation pack past the pack size": (
        lambda f: _longer_first_pack(f, "validation"),
        r"validation_1024\.idx\.parquet, pack 0: is filled to 1,034 tokens",
    ),
    "metadata not JSON": (
        lambda f: (f / "1024_metadata.jsonl").write_text("{garbage"),
        r"1024_metadata\.jsonl: is not JSON",
    ),
    "metadata of another pack size": (
        lambda f: _edit_metadata(f, pack_size=4096),
        r"entry 1: pack_size is 4,096, but the file is named for 1,024",
    ),
    "metadata with a negative factor": (
        lambda f: _edit_metadata(f, packing_factor=-2.5),
        r"entry 1: packing_factor: input should be greater than 0",
    ),
    "metadata under the packs' sequences": (
        lambda f: _edit_metadata(f, every=True, max_samples_per_bin=1),
        r"1024_metadata\.jsonl: says max_samples_per_bin 1, but a training pack "
        r"holds \d+ sequences",
    ),
    "training files of two pack sizes": (
        lambda f: shutil.copy(f / "training_1024.idx.parquet", f / "training_2048.idx.parquet"),
        r"holds training files of pack sizes 1,024, 2,048",
    ),
}


def _edit_metadata(folder: Path, every: bool = False, **fields) -> None:
    """The training entry edited (every split's with ``every``: Megatron-Bridge pads to the largest of them)."""
    path = folder / "1024_metadata.jsonl"
    entries = json.loads(path.read_text())
    for entry in entries if every else entries[:1]:
        entry.update(fields)
    path.write_text(json.dumps(entries))


@pytest.mark.parametrize("case", list(PREPARED_TAMPERED))
def test_a_tampered_prepared_folder_read_back_is_one_message(tmp_path, case):
    """Round 4: a folder whose packs are longer than its name says, or whose metadata is garbage, was read back
    (and exported) as valid."""
    from advisor.data.ingest import load_lengths

    out = tmp_path / "out"
    prepare(str(out), PrepareOptions(pack_size=1024, workers=1), train=chat_job(), validation=chat_job())
    assert load_lengths(str(out)).num_samples > 0  # as written, it reads back
    tamper, message = PREPARED_TAMPERED[case]
    tamper(out)
    with pytest.raises(InputError, match=message):
        load_lengths(str(out))


def test_a_file_named_like_inline_json_is_read_as_the_file(tmp_path, monkeypatch):
    """Round 4: a data file named ``{lengths}`` was read as inline JSON."""
    from advisor.data.ingest import load_lengths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "{lengths}.csv").write_text("length\n5\n7\n")
    assert load_lengths("{lengths}.csv").num_samples == 2
