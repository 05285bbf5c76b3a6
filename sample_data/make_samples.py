"""Regenerate the synthetic sample histograms in this folder (seeded; run from the repository root).

    python sample_data/make_samples.py

Each is a ``length,count`` CSV of token counts per sample, drawn from a documented mixture (see README.md here).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def write(name: str, lengths: np.ndarray) -> None:
    values, counts = np.unique(lengths.astype(np.int64), return_counts=True)
    with open(HERE / name, "w") as f:
        f.write("length,count\n")
        f.writelines(f"{v},{c}\n" for v, c in zip(values, counts, strict=True))


def main() -> None:
    rng = np.random.default_rng(2026)
    # SFT-like: instruction + answer, lognormal around 600 tokens, long tail to 8k
    sft = np.clip(rng.lognormal(np.log(600), 0.8, 200_000), 32, 8192)
    write("sft_like_hist.csv", sft)
    # chat-like: multi-turn conversations, a mixture of short single turns and long threads
    chat = np.concatenate([rng.lognormal(np.log(350), 0.6, 120_000), rng.lognormal(np.log(2500), 0.7, 60_000)])
    write("chat_like_hist.csv", np.clip(chat, 16, 32768))
    # long-context: documents for 128k training, heavy tail with a pile at the cap
    long = np.clip(rng.pareto(1.1, 20_000) * 8000 + 2000, 2000, 131072)
    write("long_context_hist.csv", long)
    # VLM: image tokens (fixed 256 per image, 1-4 images) plus text
    images = rng.integers(1, 5, 100_000) * 256
    text = np.clip(rng.lognormal(np.log(180), 0.9, 100_000), 8, 4096)
    write("vlm_like_hist.csv", images + text)


if __name__ == "__main__":
    main()
