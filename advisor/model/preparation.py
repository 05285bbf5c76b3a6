"""Host memory and disk that preparing an SFT data set for offline packing takes: ``advisor prepare``'s and
Megatron-Bridge 0.6.2's own (``prepare_gpt_sft_packed_data``), modelled from the data's records and tokens.

Megatron-Bridge tokenizes every record into Python lists held in one array (data/packing/offline.py l.50,
``_materialize_dataset_items``: ``np.array([dataset[i] for i in range(len(dataset))])``), then ``create_hist``
groups them and ``fill_packing_strategy`` copies them into packs (``.tolist()``: new int objects), all at once: its
memory grows with the tokens, by a list slot and an int object per token id several times over. ``advisor
prepare`` streams the records through its token cache (``OUT/.tokens``): its memory is its buffers (full once a
shard reaches 8 MiB and a Parquet row group 500 packs) and a few arrays per record; its disk is that cache (int32
ids and int8 mask: 5 bytes a token) beside the Parquet, which is byte for byte Megatron-Bridge's.

The coefficients are fitted by ``python bench/bench_prepare_memory.py`` (run 2026-11-28 on a 2-core machine,
``advisor prepare --workers 2``, pack size 8192; its table and limits are in docs/limits.md, "Preparation
memory"): peak bytes ~ base + a x records + b x tokens, least squares over the sizes. ``tokens`` counts what the
dataset stores (``len(input_ids)`` of each record, after truncation). The alternative, a count of every object
Megatron-Bridge allocates, is what the bench measures instead: its Python lists' real cost (CPython's int objects
for ids above 256, the lists' over-allocation, numpy's copies) is hard to count and easy to measure.

>>> r = preparation_resources(1_000_000, 8_000_000_000, 32_768)
>>> round(r.mb_memory / 2**30), round(r.advisor_memory / 2**30, 1), round(r.advisor_disk / 2**30)
(905, 1.1, 80)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Linear:
    """bytes ~ base + per_record x records + per_token x tokens, never below zero."""

    base: float
    per_record: float
    per_token: float

    def __call__(self, records: float, tokens: float) -> float:
        return max(0.0, self.base + self.per_record * records + self.per_token * tokens)


# python bench/bench_prepare_memory.py, 2026-11-28 (SFT records, tiny-bpe ids + 1000, pack size 8192, 2 cores): the
# peak PSS of the whole process tree (residuals within 31 MiB for Megatron-Bridge, 74 MiB for the advisor)
MB_MEMORY = Linear(355_093_366, 2281.3, 121.202)
ADVISOR_MEMORY = Linear(316_087_792, 220.6, 5.972)
# disk: Megatron-Bridge's Parquet and its reader's index beside the data (dictionary pages of a 1,000-id vocabulary:
# a real one compresses less); the advisor's final folder (the same Parquet and the cache) plus its workers' token
# parts (int32 ids, int8 mask: 5 bytes a token), which stay until the cache is merged from them (polled: 10.1 bytes
# a token at the peak)
MB_DISK = Linear(18_037, 17.8, 0.788)
ADVISOR_DISK = Linear(47_563, 23.0, 5.792 + 5.0)
ADVISOR_WORKER = 163 * 2**20  # the largest tokenizer worker's peak PSS (its shard's buffers: at most 8 MiB of text)
BENCH_WORKERS = 2
BENCH_PACK_SIZE = 8192
# the most tokens the advisor was measured on: past it its buffers are full, and its memory's token term is held
# there (grown with the pack size past 8192: a row group holds 500 packs)
ADVISOR_MEASURED_TOKENS = 26_432_000


@dataclass(frozen=True, kw_only=True)
class PreparationResources:
    """Peak host memory and peak disk, bytes, of preparing one data set: with ``advisor prepare`` and with
    Megatron-Bridge's own preparation (which runs in the training job, on the first rank's node)."""

    advisor_memory: int
    advisor_disk: int
    mb_memory: int
    mb_disk: int


def preparation_resources(records: int, tokens: int, pack_size: int, *, workers: int = 1) -> PreparationResources:
    """The modelled peaks for ``records`` records holding ``tokens`` tokens in all, packed at ``pack_size``;
    ``workers``: ``advisor prepare``'s tokenizer processes (its ``--workers``; each holds its shard's buffers).

    Megatron-Bridge's figures are the fit as measured (it has no bound: ~120 bytes a token). The advisor's memory
    is its fit (two workers) with the tokens held at the largest data measured (scaled by ``pack_size`` / 8192 for
    larger packs), plus a worker's peak for each worker past two (an upper bound: the workers tokenize before the
    driver packs and writes, so their peaks and the driver's do not coincide).
    """
    held = min(tokens, ADVISOR_MEASURED_TOKENS * max(1.0, pack_size / BENCH_PACK_SIZE))
    advisor = ADVISOR_MEMORY(records, held) + max(0, workers - BENCH_WORKERS) * ADVISOR_WORKER
    return PreparationResources(
        advisor_memory=round(advisor),
        advisor_disk=round(ADVISOR_DISK(records, tokens)),
        mb_memory=round(MB_MEMORY(records, tokens)),
        mb_disk=round(MB_DISK(records, tokens)),
    )


__all__ = ["PreparationResources", "preparation_resources"]
