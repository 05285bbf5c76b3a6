"""Host memory and disk of ``advisor prepare`` and of Megatron-Bridge 0.6.2's own preparation, on growing data.

    python bench/bench_prepare_memory.py [--records 2000,8000,32000] [--short 8000,32000] [--scale 0.25]
                                         [--advisor-only 256000] [--pack-size 8192] [--workers N]

Writes synthetic SFT records (``{"input", "output"}``, seeded) whose token counts are drawn from the bundled
``sample_data/sft_like_hist.csv`` (mean 825 tokens, at most 8,192), ``--records`` of them at full length and
``--short`` of them at ``--scale`` of it (so records and tokens vary apart and the fit can tell them apart), and
prepares each set twice, each in a child process of its own (``--advisor-only``: many short records, at 0.05 of
the length, prepared by the advisor alone: Megatron-Bridge's Python loop would take minutes on them):

1. Megatron-Bridge's ``prepare_gpt_sft_packed_data`` from its wheel (tests/support/mb_prepare_oracle.py; its
   default single tokenizer process, the prompt template ``{input} {output}``), writing Parquet;
2. ``python -m advisor prepare DATA --tokenizer TOK --pack-size N -o OUT --workers W`` (every core by default).

The tokenizer is the bundled ``tiny-bpe`` with every id moved up by 1,000 (1,000 reserved tokens in front, as
Llama 3 reserves special tokens): CPython shares the int objects of ids up to 256, so the tiny vocabulary's
low ids would make Megatron-Bridge's Python lists of token ids look ~15 % cheaper than with a real 32k-256k
vocabulary, where no id is that small. The tokens are the same; only the ids change.

Each child is polled every 20 ms: the memory of its whole process tree (``/proc/PID/smaps_rollup``: PSS, which
shares pages between the processes instead of counting a forked worker's copy-on-write pages twice; and its
anonymous part, what cannot be dropped for the page cache), and the bytes under its working folder (output,
staging and the token cache; for Megatron-Bridge also the index files its memory-mapped JSONL reader writes
beside the data); each process's own peak PSS too (the command's process, the largest worker), and ``wait4``
the largest single process's ``ru_maxrss``. Prints a table, then per
implementation the least-squares fit ``bytes ~ base + a x records + b x tokens`` of the peak memory (PSS), its
anonymous part, the peak and the final disk, with each point's residual, and the ratio Megatron-Bridge /
advisor at each size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_tokenize import WORDS  # noqa: E402

TOKENIZER = ROOT / "sample_data" / "tokenizers" / "tiny-bpe"
HIST = ROOT / "sample_data" / "sft_like_hist.csv"
ID_OFFSET = 1000
TOKENS_PER_WORD = 2.345  # tiny-bpe on WORDS (measured on 20,000 words); the draws aim at the histogram's lengths
OUTPUT_SHARE = 0.3  # of a record's words in "output", the rest in "input"
POLL = 0.02
MIB = 2**20


# ------------------------------------------------------------------------------------------------ inputs
def shifted_tokenizer(dst: Path) -> Path:
    """tiny-bpe with every id + ID_OFFSET and ``<|reserved_i|>`` in front (never produced: no merge builds them)."""
    tok = json.loads((TOKENIZER / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    tok["model"]["vocab"] = {**{f"<|reserved_{i}|>": i for i in range(ID_OFFSET)}}
    tok["model"]["vocab"].update({k: v + ID_OFFSET for k, v in vocab.items()})
    for added in tok["added_tokens"]:
        added["id"] += ID_OFFSET
    for proc in tok["post_processor"].get("processors", [tok["post_processor"]]):
        for special in proc.get("special_tokens", {}).values():
            special["ids"] = [i + ID_OFFSET for i in special["ids"]]
    dst.mkdir()
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    (dst / "tokenizer_config.json").write_text((TOKENIZER / "tokenizer_config.json").read_text())
    return dst


def draw_lengths(n: int, scale: float, seed: int) -> np.ndarray:
    """n token counts from the SFT histogram, times ``scale`` (at least 8)."""
    lengths, counts = np.loadtxt(HIST, delimiter=",", skiprows=1, dtype=np.int64, unpack=True)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(lengths, size=n, p=counts / counts.sum())
    return np.maximum(8, np.round(drawn * scale)).astype(np.int64)


def write_sft(path: Path, lengths: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed + 1)
    with open(path, "w", encoding="utf-8") as f:
        for length in lengths.tolist():
            words = max(2, round(length / TOKENS_PER_WORD))
            out = max(1, round(words * OUTPUT_SHARE))
            text = rng.choice(WORDS, words)
            f.write(json.dumps({"input": " ".join(text[out:]), "output": " ".join(text[:out])}) + "\n")


# ------------------------------------------------------------------------------------------------ measuring
def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _pss(pid: int) -> tuple[int, int]:
    """(PSS, anonymous PSS) of one process in bytes; (0, 0) once it is gone."""
    pss = anon = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Pss_Anon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, anon


def _bytes_under(folder: Path) -> int:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                pass
    return total


def measured(cmd: list[str], work: Path, extra_disk=lambda: 0) -> dict:
    """Run ``cmd`` and poll its process tree's memory and the bytes under ``work`` until it exits."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = peak_anon = peak_disk = 0
    each: dict[int, int] = {}  # each process's own peak PSS
    while True:
        got, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if got:
            break
        sums = {p: _pss(p) for p in _tree(proc.pid)}
        for p, (pss, _) in sums.items():
            each[p] = max(each.get(p, 0), pss)
        peak = max(peak, sum(s[0] for s in sums.values()))
        peak_anon = max(peak_anon, sum(s[1] for s in sums.values()))
        peak_disk = max(peak_disk, _bytes_under(work) + extra_disk())
        time.sleep(POLL)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    disk = _bytes_under(work) + extra_disk()
    return {
        "seconds": time.perf_counter() - start,
        "peak": peak,
        "peak_anon": peak_anon,
        "driver": each.pop(proc.pid, 0),
        "worker": max(each.values(), default=0),
        "maxrss": usage.ru_maxrss * 1024,
        "disk_peak": max(peak_disk, disk),
        "disk": disk,
        "stdout": out.decode(),
    }


def run_mb(spec: dict) -> None:
    """The child: Megatron-Bridge's preparation, its modules imported first (as a training process has them)."""
    import logging

    logging.disable(logging.WARNING)
    from tests.support import mb_prepare_oracle as oracle
    from tests.support.mb_sft_oracle import build_mb_tokenizer

    m = oracle.modules()
    out, size = Path(spec["out"]), spec["pack_size"]
    out.mkdir()
    m.offline.prepare_gpt_sft_packed_data(
        input_path=Path(spec["data"]),
        output_path=out / f"training_{size}.idx.parquet",
        output_metadata_path=out / f"{size}_metadata.jsonl",
        packed_sequence_size=size,
        tokenizer=build_mb_tokenizer(Path(spec["tokenizer"])),
        max_seq_length=size,
        seed=1234,
        packing_algorithm="first_fit_shuffle",
        dataset_kwargs=oracle.dataset_kwargs("sft"),
        pad_seq_to_mult=1,
        dataset_builder=m.build_split,
    )


# ------------------------------------------------------------------------------------------------ the fit
def fit(rows: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``key ~ base + a x records + b x tokens``: (base, a, b) and each row's residual."""
    x = np.array([[1.0, r["records"], r["tokens"]] for r in rows])
    y = np.array([float(r[key]) for r in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef, y - x @ coef


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="2000,8000,32000", help="sizes at full length (comma-separated)")
    ap.add_argument("--short", default="8000,32000", help="sizes at --scale of the length ('' for none)")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--advisor-only", default="256000", help="sizes at 0.05 of the length, the advisor alone")
    ap.add_argument("--pack-size", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-mb", action="store_true")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        run_mb(json.loads(args.step))
        return
    runs = [(int(n), 1.0, True) for n in args.records.split(",") if n]
    runs += [(int(n), args.scale, True) for n in args.short.split(",") if n]
    runs += [(int(n), 0.05, False) for n in args.advisor_only.split(",") if n]
    if not args.skip_mb:
        from tests.support.mb_prepare_oracle import missing_reason

        reason = missing_reason()
        if reason:
            print(f"Megatron-Bridge not run: {reason}")
            args.skip_mb = True
    print(
        f"SFT records, lengths from {HIST.name} (x scale), tokenizer tiny-bpe ids + {ID_OFFSET}; pack size "
        f"{args.pack_size}; advisor --workers {args.workers}; {os.cpu_count()} cores; "
        f"{time.strftime('%Y-%m-%d')}"
    )
    rows: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tok = shifted_tokenizer(tmp / "tok")
        for k, (n, scale, with_mb) in enumerate(runs):
            folder = tmp / f"run{k}"
            folder.mkdir()
            data = folder / "data" / "sft.jsonl"
            data.parent.mkdir()
            write_sft(data, draw_lengths(n, scale, seed=k), seed=k)
            ours = folder / "advisor"
            ours.mkdir()
            cmd = [sys.executable, "-m", "advisor", "prepare", str(data), "--tokenizer", str(tok), "--format", "sft"]
            cmd += ["--pack-size", str(args.pack_size), "-o", str(ours / "out"), "--workers", str(args.workers)]
            r = measured([*cmd, "--json", "--quiet"], ours)
            split = json.loads(r.pop("stdout"))["splits"][0]
            offsets = np.load(ours / "out" / ".tokens" / "training" / "offsets.npy")
            common = {"records": n, "scale": scale, "tokens": int(offsets[-1]), "data_bytes": data.stat().st_size}
            rows.append({"impl": "advisor", **common, **r, "packs": split["packs"]})
            if with_mb and not args.skip_mb:
                theirs = folder / "mb"
                theirs.mkdir()
                spec = {"data": str(data), "out": str(theirs / "out"), "pack_size": args.pack_size}
                spec["tokenizer"] = str(tok)

                def index_files(data=data) -> int:  # Bridge's memory-mapped reader writes its index beside the data
                    return sum(p.stat().st_size for p in data.parent.iterdir() if p != data)

                r = measured([sys.executable, __file__, "--step", json.dumps(spec)], theirs, index_files)
                r.pop("stdout")
                rows.append({"impl": "mb", **common, **r})
            shown = [x for x in rows if x["records"] == n and x["scale"] == scale]
            print(f"  {n:,} records x{scale}: " + ", ".join(f"{x['impl']} {x['seconds']:.1f} s" for x in shown))
    report(rows, time.perf_counter() - started)


IMPL_NAME = {"advisor": "advisor prepare", "mb": "Megatron-Bridge"}


def report(rows: list[dict], seconds: float) -> None:
    print(f"\n{len(rows)} runs in {seconds:.0f} s (MiB; tokens in thousands)")
    print(
        "impl             records scale tokens(k)  data seconds  peak PSS  driver  worker  anon PSS  max RSS"
        "  disk peak  disk"
    )
    for r in rows:
        print(
            f"{IMPL_NAME[r['impl']]:<16} {r['records']:>7,} {r['scale']:>5} {r['tokens'] / 1e3:>9,.0f}"
            f" {r['data_bytes'] / MIB:>5,.0f} {r['seconds']:>7.1f} {r['peak'] / MIB:>9,.0f}"
            f" {r['driver'] / MIB:>7,.0f} {r['worker'] / MIB:>7,.0f} {r['peak_anon'] / MIB:>9,.0f}"
            f" {r['maxrss'] / MIB:>8,.0f} {r['disk_peak'] / MIB:>10,.0f} {r['disk'] / MIB:>5,.0f}"
        )
    print(
        "(peak PSS: the process tree's at its peak; driver: the command's own process; worker: the largest other "
        "one; max RSS: the largest process's ru_maxrss)"
    )
    print("\nfit: bytes ~ base + a x records + b x tokens (least squares; residuals in MiB, in the table's order)")
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = [r for r in rows if r["impl"] == impl]
        for key, label in (
            ("peak", "peak PSS"),
            ("peak_anon", "anon PSS"),
            ("disk_peak", "disk peak"),
            ("disk", "disk final"),
        ):
            (base, a, b), res = fit(mine, key)
            print(
                f"  {IMPL_NAME[impl]:<16} {label:<10} base {base / MIB:8.1f} MiB  a {a:9.1f} B/record  "
                f"b {b:7.2f} B/token  residuals {', '.join(f'{x / MIB:+.1f}' for x in res)}"
            )
            print(f"    {impl}.{key} = ({base:.0f}, {a:.1f}, {b:.3f})")
    ours = {(r["records"], r["scale"]): r for r in rows if r["impl"] == "advisor"}
    theirs = [r for r in rows if r["impl"] == "mb"]
    if theirs:
        print("\nMegatron-Bridge / advisor prepare:")
        for r in theirs:
            o = ours[(r["records"], r["scale"])]
            print(
                f"  {r['records']:>7,} records x{r['scale']}: peak PSS {r['peak'] / o['peak']:.1f}x, "
                f"anon {r['peak_anon'] / o['peak_anon']:.1f}x, disk peak {r['disk_peak'] / o['disk_peak']:.2f}x, "
                f"disk final {r['disk'] / o['disk']:.2f}x, time {r['seconds'] / o['seconds']:.1f}x"
            )


if __name__ == "__main__":
    main()
