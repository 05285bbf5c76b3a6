"""Tokenization speed: the advisor's engines against Megatron-Bridge 0.6.2's own dataset class, on chat data.

    python bench/bench_tokenize.py [--samples 100000] [--mb-samples 5000]

Writes ``--samples`` synthetic chat conversations (seeded) as JSONL and tokenizes them with the bundled sample
tokenizer three ways, in one run: Megatron-Bridge's ``GPTSFTChatDataset`` (``ds[i]["input_ids"]`` for each sample,
as offline packing reads them; on ``--mb-samples`` of them and extrapolated per sample, said so in the output),
the advisor's local engine (one worker, then every core) and its Ray engine on this machine. Checks the lengths
agree, then prints the ratios, samples per second per core, and Ray's overhead here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.data.tokenize.chat import ChatSettings  # noqa: E402
from advisor.data.tokenize.engine import TokenizeJob, tokenize  # noqa: E402

TOKENIZER = ROOT / "sample_data" / "tokenizers" / "tiny-bpe"
WORDS = (
    "packing sequence model token data train long short answer question the a of to in is on why how what "
    "when which batch attention context parallel pipeline tensor gradient loss step epoch"
).split()


def conversations(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "You are a concise assistant."}] if i % 4 == 0 else []
        for _ in range(int(rng.integers(1, 4))):
            msgs += [
                {"role": "user", "content": " ".join(rng.choice(WORDS, rng.integers(3, 60)))},
                {"role": "assistant", "content": " ".join(rng.choice(WORDS, rng.integers(5, 160)))},
            ]
        out.append({"messages": msgs})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--mb-samples", type=int, default=5_000)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        records = conversations(args.samples)
        data = Path(tmp) / "chat.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        print(f"data: {args.samples:,} chat conversations, {data.stat().st_size / 2**20:.0f} MB; {cores} cores")
        job = TokenizeJob(data=str(data), tokenizer=str(TOKENIZER), fmt="chat", settings=ChatSettings())

        timings = {}
        for label, kw in (
            ("advisor local, 1 worker", {"workers": 1}),
            (f"advisor local, {cores} workers", {"workers": cores}),
            (f"advisor ray (local Ray), {cores} workers", {"engine": "ray", "workers": cores}),
        ):
            start = time.perf_counter()
            result = tokenize(job, **kw)
            timings[label] = (time.perf_counter() - start, result)
            print(f"  {label:<36} {timings[label][0]:8.2f} s  ({args.samples / timings[label][0]:,.0f} samples/s)")
        ours = next(iter(timings.values()))[1].lengths
        assert all(np.array_equal(r.lengths, ours) for _, r in timings.values()), "engines disagree"

        from tests.support.mb_sft_oracle import build_mb_tokenizer, mb_dataset, missing_reason

        reason = missing_reason()
        if reason:
            print(f"Megatron-Bridge not run: {reason}")
            return
        few = records[: args.mb_samples]
        sub = Path(tmp) / "mb"
        sub.mkdir()
        (sub / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in few))
        tokenizer = build_mb_tokenizer(TOKENIZER)
        start = time.perf_counter()
        ds = mb_dataset(
            sub / "chat.jsonl", tokenizer, chat=True, use_hf_tokenizer_chat_template=True, max_seq_length=1 << 20
        )
        mb = [len(ds[i]["input_ids"]) for i in range(len(ds))]
        mb_seconds = time.perf_counter() - start
        assert mb == ours[: len(mb)].tolist(), "Megatron-Bridge and the advisor disagree"
        per_sample = mb_seconds / len(mb)
        mb_total = per_sample * args.samples
        print(
            f"  Megatron-Bridge GPTSFTChatDataset     {mb_seconds:8.2f} s for {len(mb):,} samples (lengths "
            f"identical) -> {mb_total:,.1f} s for {args.samples:,} (extrapolated per sample)"
        )
        one, _ = timings["advisor local, 1 worker"]
        all_, _ = timings[f"advisor local, {cores} workers"]
        ray_s, _ = timings[f"advisor ray (local Ray), {cores} workers"]
        print(
            f"ratio, Megatron-Bridge / advisor local on {cores} cores: {mb_total / all_:.1f}x "
            f"(one core against one core: {mb_total / one:.1f}x)"
        )
        print(
            f"advisor local: {args.samples / one:,.0f} samples/s on one core, {args.samples / all_ / cores:,.0f} per "
            f"core on {cores}"
        )
        print(
            f"Ray on this machine: {ray_s:.2f} s against {all_:.2f} s local ({ray_s - all_:+.2f} s, "
            f"x{ray_s / all_:.2f}: start-up, task scheduling and the groupby histogram)"
        )


if __name__ == "__main__":
    main()
