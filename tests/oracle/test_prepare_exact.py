"""``advisor prepare`` against Megatron-Bridge 0.6.2's own ``prepare_gpt_sft_packed_data``, from its wheel.

The bundled raw samples (300 SFT records, 300 conversations) and tokenizer (``tiny-bpe``) go through Bridge's
real preparation (tests/support/mb_prepare_oracle.py: its offline.py, algorithms.py, parquet.py and the builder's
``build_gpt_sft_split`` with the real ``GPTSFTDataset`` / ``GPTSFTChatDataset``, one tokenizer worker) and
through the advisor's. With Bridge's algorithms and the same seed the Parquet files must be the same bytes (so the
same rows, in order) and the metadata files the same text, SFT and chat, several seeds, with and without
``pad_seq_to_mult``, with a validation split. With the advisor's packers the sequences must be Bridge's, in no more
packs, with the metadata Bridge's own ``create_packing_strategy`` computes from those packs. Bridge's builder reads
every folder back (``GPTSFTPackedParquetDataset``) and its ``collate_fn`` batches every pack.

Bridge tokenizes each data set once per (format, padding) here: its ``tokenize_dataset`` is memoized around the
real function, so the real ``prepare_gpt_sft_packed_data`` runs for every case without re-tokenizing.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from advisor.data.ingest import load_lengths
from advisor.data.tokenize.chat import ChatSettings
from advisor.data.tokenize.chat_tokens import chat_tokens
from advisor.data.tokenize.engine import TokenizeJob
from advisor.data.tokenize.sft import PromptCompletion, SftSettings
from advisor.data.tokenize.tokenizer import load_tokenizer
from advisor.packing.offline import megatron_bridge_metadata
from advisor.prepare.run import PrepareOptions, prepare
from tests.support import SAMPLE
from tests.support import mb_prepare_oracle as oracle

RAW = SAMPLE / "raw"
TOKENIZER = SAMPLE / "tokenizers" / "tiny-bpe"
SOURCES = {"sft": "sft_sample.jsonl", "chat": "chat_sample.jsonl"}
# SFT: 232 of 300 records cut by the dataset; chat: 15 longer than the pack. "prompt_completion": the SFT sample
# through Bridge's prompt-completion preprocessing; "legacy": generated conversations in the <extra_id_*> format
PACK = {"sft": 256, "chat": 1024, "prompt_completion": 256, "legacy": 512}
PC_OPTIONS = dict(
    prompt_column="input",
    completion_column="output",
    prompt_template="Question: {prompt}\nAnswer:",
    separator=" ",
    add_bos=True,
)


@pytest.fixture(scope="module")
def mb(tmp_path_factory):
    reason = oracle.missing_reason()
    if reason:
        pytest.skip(reason)
    m = oracle.modules()
    real = m.offline.tokenize_dataset
    memo: dict = {}

    def tokenize_once(
        path,
        tokenizer,
        max_seq_length,
        seed,
        dataset_kwargs=None,
        pad_seq_to_mult=1,
        num_tokenizer_workers=-1,
        *,
        dataset_builder,
    ):
        key = (Path(path).read_bytes(), max_seq_length, pad_seq_to_mult, repr(sorted((dataset_kwargs or {}).items())))
        if key not in memo:
            memo[key] = real(
                path,
                tokenizer,
                max_seq_length,
                seed,
                dataset_kwargs,
                pad_seq_to_mult,
                num_tokenizer_workers,
                dataset_builder=dataset_builder,
            )
        return memo[key]

    m.offline.tokenize_dataset = tokenize_once  # prepare_gpt_sft_packed_data looks it up in its module
    yield m
    m.offline.tokenize_dataset = real


@pytest.fixture(scope="module")
def mb_tok(mb):
    return oracle.mb_sft_oracle.build_mb_tokenizer(TOKENIZER)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """The samples copied (Bridge writes its index files beside the data), and a validation set: the chat sample's
    last 120 conversations in reverse order, and the SFT sample's first 150."""
    folder = tmp_path_factory.mktemp("raw")
    out = {}
    for fmt, name in SOURCES.items():
        out[fmt] = folder / f"{fmt}.jsonl"
        shutil.copy(RAW / name, out[fmt])
    lines = (RAW / SOURCES["chat"]).read_text().splitlines(keepends=True)
    (folder / "chat-val.jsonl").write_text("".join(lines[-120:][::-1]))
    out["chat-val"] = folder / "chat-val.jsonl"
    (folder / "sft-val.jsonl").write_text("".join((RAW / SOURCES["sft"]).read_text().splitlines(keepends=True)[:150]))
    out["sft-val"] = folder / "sft-val.jsonl"
    # the legacy <extra_id_*> chat format: generated conversations Bridge can build (it stops at any other)
    from tests.support.records import legacy_records

    records = legacy_records(seed=9, n=300)
    _, lengths, _ = chat_tokens(records, load_tokenizer(TOKENIZER), ChatSettings(use_hf_tokenizer_chat_template=False))
    good = [r for r, n in zip(records, lengths.tolist(), strict=True) if n > 0]
    for key, part in (("legacy", good), ("legacy-val", good[:100][::-1])):
        out[key] = folder / f"{key}.jsonl"
        out[key].write_text("".join(json.dumps(r) + "\n" for r in part))
    return out


def mb_prepare(
    mb,
    mb_tok,
    data: dict,
    folder: Path,
    fmt: str,
    *,
    algorithm: str,
    seed: int,
    pad: int = 1,
    loss_mode: str = "assistant",
    validation: bool = False,
    pack_size: int | None = None,
) -> Path:
    """Bridge's folder: what ``GPTSFTDatasetBuilder.prepare_packed_data`` writes (training, then validation, the
    metadata appended), through the real ``prepare_gpt_sft_packed_data``."""
    size = pack_size or PACK[fmt]
    folder.mkdir()
    kwargs = oracle.dataset_kwargs(fmt, loss_mode)
    if fmt == "legacy":
        kwargs = {"chat": True, "use_hf_tokenizer_chat_template": False}
    if fmt == "prompt_completion":
        kwargs = {
            "prompt_completion_config": mb.sft.sft_processing.PromptCompletionSFTPreprocessingConfig(
                **PC_OPTIONS, loss_mode=loss_mode
            )
        }
    key = "sft" if fmt == "prompt_completion" else fmt
    for split, source in (("training", data[key]), ("validation", data[f"{key}-val"]))[: 1 + validation]:
        mb.offline.prepare_gpt_sft_packed_data(
            input_path=source,
            output_path=folder / f"{split}_{size}.idx.parquet",
            output_metadata_path=folder / f"{size}_metadata.jsonl",
            packed_sequence_size=size,
            tokenizer=mb_tok,
            max_seq_length=size,
            seed=seed,
            packing_algorithm=algorithm,
            dataset_kwargs=dict(kwargs),
            pad_seq_to_mult=pad,
            num_tokenizer_workers=1,
            dataset_builder=mb.build_split,
        )
    return folder


def ours(
    data: dict,
    folder: Path,
    fmt: str,
    *,
    algorithm: str,
    seed: int,
    pad: int = 1,
    loss_mode: str = "assistant",
    validation: bool = False,
    pack_size: int | None = None,
    **options,
):
    settings = ChatSettings(loss_mode=loss_mode) if fmt == "chat" else SftSettings()
    source, pack_size = fmt, pack_size or PACK[fmt]
    if fmt == "legacy":
        settings, fmt = ChatSettings(use_hf_tokenizer_chat_template=False), "chat"
    if fmt == "prompt_completion":
        settings = SftSettings(prompt_completion=PromptCompletion(**PC_OPTIONS, loss_mode=loss_mode))
        fmt = source = "sft"
    jobs = {
        split: TokenizeJob(data=str(data[key]), tokenizer=str(TOKENIZER), fmt=fmt, settings=settings)
        for split, key in (("train", source), ("validation", f"{source}-val"))[: 1 + validation]
    }
    options.setdefault("workers", 1)
    return prepare(
        str(folder),
        PrepareOptions(
            pack_size=pack_size or PACK[fmt], algorithm=algorithm, seed=seed, pad_seq_to_mult=pad, **options
        ),
        **jobs,
    )


FURTHER = pytest.mark.slow  # the further cases of a parametrized check: the full suite runs them
CASES = [  # (format, algorithm, seed, pad_seq_to_mult, loss mode, validation split)
    ("sft", "first_fit_shuffle", 1234, 1, "assistant", True),
    pytest.param("sft", "first_fit_decreasing", 99, 1, "assistant", False, marks=FURTHER),
    pytest.param("sft", "first_fit_shuffle", 3, 4, "assistant", False, marks=FURTHER),
    ("chat", "first_fit_shuffle", 1234, 1, "assistant", True),
    pytest.param("chat", "first_fit_shuffle", 5678, 1, "last_turn", False, marks=FURTHER),
    pytest.param("chat", "first_fit_decreasing", 7, 1, "full", False, marks=FURTHER),
    pytest.param("chat", "first_fit_shuffle", 42, 8, "assistant", False, marks=FURTHER),
    ("prompt_completion", "first_fit_shuffle", 1234, 1, "completion", True),
    ("legacy", "first_fit_shuffle", 1234, 1, "assistant", True),
    pytest.param("legacy", "first_fit_decreasing", 3, 8, "assistant", False, marks=FURTHER),
    pytest.param("prompt_completion", "first_fit_decreasing", 11, 4, "full", False, marks=FURTHER),
]


@pytest.mark.parametrize(("fmt", "algorithm", "seed", "pad", "loss_mode", "validation"), CASES)
def test_identical_to_megatron_bridge(mb, mb_tok, data, tmp_path, fmt, algorithm, seed, pad, loss_mode, validation):
    theirs = mb_prepare(
        mb,
        mb_tok,
        data,
        tmp_path / "mb",
        fmt,
        algorithm=algorithm,
        seed=seed,
        pad=pad,
        loss_mode=loss_mode,
        validation=validation,
    )
    state = np.random.get_state()[1].copy()
    result = ours(
        data,
        tmp_path / "ours",
        fmt,
        algorithm=algorithm,
        seed=seed,
        pad=pad,
        loss_mode=loss_mode,
        validation=validation,
    )
    assert np.array_equal(np.random.get_state()[1], state), "the caller's global RNG must be left alone"
    names = sorted(p.name for p in theirs.iterdir() if not p.name.endswith(".idx.info"))
    assert sorted(result.files) == names
    for name in names:
        mine, bridge = (tmp_path / "ours" / name).read_bytes(), (theirs / name).read_bytes()
        if name.endswith(".parquet"):
            assert pq.read_table(tmp_path / "ours" / name).to_pylist() == pq.read_table(theirs / name).to_pylist(), name
        assert mine == bridge, name
    split = result.splits[0]
    if fmt != "legacy":  # the legacy records are the generated ones Bridge builds
        assert split.records_read == 300 and split.packed + split.skipped == 300
    if fmt == "chat" and pad == 1:
        assert split.skipped == 15 and split.truncated == 0  # GPTSFTChatDataset does not cut; create_hist skips
    if fmt == "sft":
        assert split.skipped == 0 and split.truncated == 232  # GPTSFTDataset cuts the input field
    if fmt == "prompt_completion":  # the prompt is cut first, then the completion
        assert split.skipped == 0 and split.truncated > 100


@pytest.mark.parametrize("fmt", ["sft", "chat"])
@pytest.mark.parametrize("algorithm", [pytest.param("best_fit_decreasing", marks=FURTHER), "column_generation"])
def test_better_packers_same_sequences_fewer_packs(mb, mb_tok, data, tmp_path, fmt, algorithm):
    pack_size = 512 if fmt == "chat" else PACK[fmt]
    packs = {}
    for name in ("first_fit_shuffle", "first_fit_decreasing"):
        folder = mb_prepare(mb, mb_tok, data, tmp_path / name, fmt, algorithm=name, seed=1234, pack_size=pack_size)
        packs[name] = pq.read_table(folder / f"training_{pack_size}.idx.parquet").to_pylist()
    result = ours(data, tmp_path / "ours", fmt, algorithm=algorithm, seed=1234, pack_size=pack_size)
    rows = pq.read_table(tmp_path / "ours" / f"training_{pack_size}.idx.parquet").to_pylist()
    assert Counter(_sequences(rows)) == Counter(_sequences(packs["first_fit_shuffle"]))
    assert len(rows) <= min(len(p) for p in packs.values())
    assert len(rows) == result.splits[0].packs
    if algorithm == "column_generation":
        assert len(rows) == result.splits[0].lower_bound  # optimal here: the LP bound is met
    # the metadata Bridge's own create_packing_strategy computes from these packs (handed to it as an algorithm)
    bins = [
        [b - a - 1 for a, b in zip(r["seq_start_id"], r["seq_start_id"][1:] + [len(r["input_ids"])], strict=True)]
        for r in rows
    ]
    hist = np.bincount([x for b in bins for x in b], minlength=pack_size + 1).tolist()
    mb.algorithms.advisor_packs = lambda seqlens, size: bins
    try:
        _, metadata = mb.algorithms.create_packing_strategy(hist, pack_size, "advisor_packs")
    finally:
        del mb.algorithms.advisor_packs
    written = (tmp_path / "ours" / f"{pack_size}_metadata.jsonl").read_text()
    assert written == f"[{_json(metadata)}]"
    fills = np.array([sum(b) for b in bins])
    assert metadata == megatron_bridge_metadata(fills, np.array([len(b) for b in bins]), np.array(hist), pack_size)


def _json(d: dict) -> str:
    import json

    return json.dumps(d)


def _sequences(rows: list[dict]) -> list[tuple]:
    """Every packed record as (input_ids, loss_mask), cut at seq_start_id."""
    out = []
    for r in rows:
        bounds = r["seq_start_id"] + [len(r["input_ids"])]
        for a, b in zip(bounds, bounds[1:], strict=False):
            out.append((tuple(r["input_ids"][a:b]), tuple(r["loss_mask"][a:b])))
    return out


@pytest.mark.parametrize(
    "fmt", [pytest.param("sft", marks=FURTHER), "chat", pytest.param("prompt_completion", marks=FURTHER)]
)
def test_megatron_bridge_reads_and_collates_every_folder(mb, mb_tok, data, tmp_path, fmt):
    """Bridge's builder reads the advisor's files (one file; numbered shards by glob; column generation's packs)
    and collates every pack; the batches train on exactly the tokens Bridge's own preparation trains on."""
    size = PACK[fmt]
    mode = "completion" if fmt == "prompt_completion" else "assistant"
    theirs = mb_prepare(
        mb, mb_tok, data, tmp_path / "mb", fmt, algorithm="first_fit_shuffle", seed=1234, loss_mode=mode
    )
    single = tmp_path / "single"
    ours(data, single, fmt, algorithm="first_fit_shuffle", seed=1234, loss_mode=mode)
    sharded = tmp_path / "sharded"
    got = ours(data, sharded, fmt, algorithm="column_generation", seed=1234, rows_per_file=40, loss_mode=mode)
    assert len(got.splits[0].files) > 1 and got.splits[0].files[0] == f"training_{size}_00000.idx.parquet"
    expected = _collated(oracle.reader(str(theirs / f"training_{size}.idx.parquet"), mb_tok, size, fmt=fmt))
    for spec in (single / f"training_{size}.idx.parquet", sharded / f"training_{size}_*.idx.parquet", single):
        ds = oracle.reader(str(spec), mb_tok, size, fmt=fmt)
        assert ds.__class__.__name__ == "GPTSFTPackedParquetDataset"
        totals = _collated(ds)
        assert totals["loss_tokens"] == expected["loss_tokens"] and totals["tokens"] == expected["tokens"], spec
        assert totals["max_seqlen"] <= size
    assert (
        len(oracle.reader(str(sharded / f"training_{size}_*.idx.parquet"), mb_tok, size, fmt=fmt))
        == got.splits[0].packs
    )
    # the advisor's own reading of the folder (the loss weighting's loss tokens) counts what Bridge's collate trains on
    for folder in (single, sharded, theirs):
        hist = load_lengths(str(folder))
        assert round(float(hist.loss_tokens @ hist.counts)) == expected["loss_tokens"], folder


def _collated(ds) -> dict:
    """Sums over every pack collated alone (offline packing trains with micro batch 1): tokens the model sees,
    tokens with loss, the longest sequence."""
    out = {"tokens": 0, "loss_tokens": 0, "max_seqlen": 0}
    for i in range(len(ds)):
        batch = ds.collate_fn([ds[i]])
        out["tokens"] += int(sum(batch["token_count"]))
        out["loss_tokens"] += int(batch["loss_mask"].sum())
        out["max_seqlen"] = max(out["max_seqlen"], int(batch["max_seqlen_q"].max()))
    return out
