"""``advisor prepare`` against Megatron-Bridge 0.6.2's ``prepare_gpt_sft_packed_data``, on chat conversations.

    python bench/bench_prepare.py [--records 10000] [--mb-records N] [--pack-size 2048] [--skip-mb]

Writes ``--records`` synthetic chat conversations (seeded, the bundled chat sample's shape: a system prompt on a
quarter of them, one to three user/assistant turns) as JSONL, streamed, and in one run, each step in a fresh
process so its peak memory is its own:

1. Megatron-Bridge's own preparation from its wheel (tests/support/mb_prepare_oracle.py; its default
   ``num_tokenizer_workers``, one process) with the same tokenizer (``tiny-bpe``), on ``--mb-records`` of them
   (default all, at most 10,000) and extrapolated linearly per record to ``--records`` when fewer (said so);
2. ``prepare`` from the raw data (every core), the files checked identical to Bridge's when both ran on the
   same records;
3. ``prepare --from-cache`` of that folder at half the pack size (re-packing without tokenizing);
4. the floors: the tokenizer's Rust encode of the same conversations on every core (each rendered by its chat
   template before the clock), and writing the re-pack's Parquet files from its table in memory.

Each step's clock starts once its libraries are imported (Bridge's modules, torch and transformers; the advisor's
engine, and transformers with torch for the fresh prepare), so both sides are timed on the same work: loading the
tokenizer, reading, tokenizing, packing and writing.

Prints the seconds, records per second, the ratios (Bridge / advisor, fresh / re-pack, Bridge / re-pack) and each
step's peak resident memory (``getrusage``: the driver, and the largest worker process).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_tokenize import conversations  # noqa: E402

TOKENIZER = ROOT / "sample_data" / "tokenizers" / "tiny-bpe"
CHUNK = 10_000


def write_data(path: Path, n: int, seed: int = 0) -> None:
    """n conversations as JSONL, CHUNK at a time (a million never sit in this process's memory at once)."""
    with open(path, "w", encoding="utf-8") as f:
        for k, start in enumerate(range(0, n, CHUNK)):
            f.write("".join(json.dumps(r) + "\n" for r in conversations(min(CHUNK, n - start), seed=seed + k)))


def step(kind: str, **kw) -> dict:
    """Run one step in a fresh Python process; returns its seconds and peak memory."""
    out = subprocess.run(
        [sys.executable, __file__, "--step", json.dumps({"kind": kind, **kw})],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_step(spec: dict) -> None:
    kind = spec["kind"]
    start = time.perf_counter()
    if kind == "mb":
        import logging

        logging.disable(logging.WARNING)
        from tests.support import mb_prepare_oracle as oracle
        from tests.support.mb_sft_oracle import build_mb_tokenizer

        m = oracle.modules()
        out = Path(spec["out"])
        out.mkdir()
        size = spec["pack_size"]
        start = time.perf_counter()  # the wheel's modules are loaded: time Bridge's preparation alone
        m.offline.prepare_gpt_sft_packed_data(
            input_path=Path(spec["data"]),
            output_path=out / f"training_{size}.idx.parquet",
            output_metadata_path=out / f"{size}_metadata.jsonl",
            packed_sequence_size=size,
            tokenizer=build_mb_tokenizer(TOKENIZER),
            max_seq_length=size,
            seed=1234,
            packing_algorithm="first_fit_shuffle",
            dataset_kwargs=oracle.dataset_kwargs("chat"),
            pad_seq_to_mult=1,
            dataset_builder=m.build_split,
        )
    elif kind == "floor":
        # the per-record floor: the tokenizer's Rust encode of the same conversations on every core, nothing else
        # (each rendered by its chat template before the clock starts: Jinja is part of the work, not the floor)
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(TOKENIZER))
        with open(spec["data"], encoding="utf-8") as f:
            texts = [hf.apply_chat_template(json.loads(line)["messages"], tokenize=False) for line in f]
        fast = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
        start = time.perf_counter()
        fast.encode_batch_fast(texts, add_special_tokens=False)
    elif kind == "parquet":
        # the re-pack's floor: writing its Parquet files alone, from the packed table already in memory
        import pyarrow.parquet as pq

        from advisor.prepare.parquet import ROW_GROUP, SCHEMA

        out = Path(spec["out"])
        tables = {path.name: pq.read_table(path) for path in Path(spec["folder"]).glob("*.parquet")}
        out.mkdir()
        start = time.perf_counter()
        for name, table in tables.items():
            with pq.ParquetWriter(out / name, SCHEMA) as writer:
                writer.write_table(table.cast(SCHEMA), row_group_size=ROW_GROUP)
    else:
        from advisor.data.tokenize.chat import ChatSettings
        from advisor.data.tokenize.engine import TokenizeJob
        from advisor.prepare.run import PrepareOptions, prepare

        if kind == "fresh":
            from transformers import AutoTokenizer  # noqa: F401 - imports torch, as Bridge's step has before its clock

        start = time.perf_counter()  # libraries imported: time the preparation alone, as Bridge's
        options = PrepareOptions(pack_size=spec["pack_size"], workers=spec.get("workers"))
        if kind == "fresh":
            job = TokenizeJob(data=spec["data"], tokenizer=str(TOKENIZER), fmt="chat", settings=ChatSettings())
            result = prepare(spec["out"], options, train=job)
        else:
            result = prepare(spec["out"], options, from_cache=spec["cache"])
        spec["packs"] = result.splits[0].packs
    seconds = time.perf_counter() - start
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mb": self_kb / 1024,
                "worker_peak_mb": children_kb / 1024,
                "packs": spec.get("packs"),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--mb-records", type=int, help="records Megatron-Bridge prepares (default all, at most 10,000)")
    ap.add_argument("--pack-size", type=int, default=2048)
    ap.add_argument("--skip-mb", action="store_true", help="only the advisor (a memory run at 1M records)")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        run_step(json.loads(args.step))
        return
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "chat.jsonl"
        write_data(data, args.records)
        print(
            f"data: {args.records:,} chat conversations, {data.stat().st_size / 2**20:.0f} MB; pack size "
            f"{args.pack_size}; {cores} cores"
        )
        fresh = step("fresh", data=str(data), out=str(tmp / "ours"), pack_size=args.pack_size, workers=cores)
        repack = step("repack", cache=str(tmp / "ours"), out=str(tmp / "repacked"), pack_size=args.pack_size // 2)
        floor = step("floor", data=str(data))
        written = step("parquet", folder=str(tmp / "repacked"), out=str(tmp / "written"))
        rows = [
            ("advisor prepare (raw data)", fresh, args.records),
            ("  its floor: the tokenizer's encode of the records alone", floor, args.records),
            (f"advisor prepare --from-cache (pack {args.pack_size // 2})", repack, args.records),
            ("  its floor: writing its Parquet files alone", written, args.records),
        ]
        mb = None
        if not args.skip_mb:
            from tests.support.mb_prepare_oracle import missing_reason

            reason = missing_reason()
            if reason:
                print(f"Megatron-Bridge not run: {reason}")
            else:
                n = min(args.records, args.mb_records or 10_000)
                mb_data = tmp / "mb.jsonl"
                with open(data, encoding="utf-8") as src, open(mb_data, "w", encoding="utf-8") as dst:
                    for _, line in zip(range(n), src, strict=False):
                        dst.write(line)
                mb = step("mb", data=str(mb_data), out=str(tmp / "mb"), pack_size=args.pack_size)
                mb["records"] = n
                rows.insert(0, (f"Megatron-Bridge prepare_gpt_sft_packed_data ({n:,} records)", mb, n))
                if n == args.records:
                    name = f"training_{args.pack_size}.idx.parquet"
                    same = (tmp / "mb" / name).read_bytes() == (tmp / "ours" / name).read_bytes()
                    print(f"  Bridge's file and the advisor's are {'identical' if same else 'DIFFERENT'}")
        for label, r, n in rows:
            print(
                f"  {label:<58} {r['seconds']:9.2f} s  {n / r['seconds']:10,.0f} records/s  peak "
                f"{r['peak_mb']:,.0f} MB (largest worker {r['worker_peak_mb']:,.0f} MB)"
            )
        if mb is not None:
            mb_full = mb["seconds"] * args.records / mb["records"]
            note = (
                ""
                if mb["records"] == args.records
                else (f" (Bridge extrapolated from {mb['records']:,} to {args.records:,} records: {mb_full:,.0f} s)")
            )
            print(f"ratio Megatron-Bridge / advisor prepare: {mb_full / fresh['seconds']:.1f}x{note}")
            # what a user re-packing today runs: Bridge's preparation from the raw data, tokenizing again
            print(f"ratio Megatron-Bridge prepare / re-pack from the cache: {mb_full / repack['seconds']:.1f}x")
        print(f"ratio fresh prepare / re-pack from the cache: {fresh['seconds'] / repack['seconds']:.1f}x")
        print(f"ratio prepare / its encode floor: {fresh['seconds'] / floor['seconds']:.2f}x (goal 1.5x)")
        print(f"ratio re-pack / writing its Parquet alone: {repack['seconds'] / written['seconds']:.2f}x (goal 1.3x)")


if __name__ == "__main__":
    main()
