"""Fuzz every length-file reader in child processes with hard limits, and count how each input ended.

A few thousand generated inputs of every format (CSV, TSV, JSON, JSONL, .npy, legacy packed .npy, Parquet,
packed Parquet folders, Megatron-LM mock configs, raw bytes, and special files: FIFOs, symlink loops, sparse
8 GiB files, /proc and /dev paths) go through ``load_lengths`` (and, for regular files, ``parse_lengths`` on
their bytes, the upload path; and again with ``on_bad="skip"`` when refused) in batches, each batch in a child
process limited to 2 GiB of address space (``RLIMIT_AS``) and 60 s. Each read ends as one of:

    accepted      a LengthHistogram whose totals equal a Python-int recomputation
    refused       an InputError naming the file
    traceback     any other exception (or an accepted histogram with wrong totals, or an unnamed refusal)
    hang          the batch's 60 s ran out on this input
    blow-up       MemoryError (also when wrapped in an InputError), or the child killed by a signal

Run from the repository root; it exits non-zero unless tracebacks, hangs and blow-ups are all zero.

    python bench/fuzz_inputs.py                       # 2,000 inputs per format, seed 0
    python bench/fuzz_inputs.py --per-format 300 --seed 7 --jobs 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEMORY_LIMIT = 2 << 30
BATCH_SECONDS = 60
BATCH_SIZE = 200
OUTCOMES = ("accepted", "refused", "traceback", "hang", "blow-up")
BAD = ("traceback", "hang", "blow-up")


# ---------------------------------------------------------------------------------------------- generators
ODD = [
    "",
    " ",
    "abc",
    "nan",
    "inf",
    "-inf",
    "1e400",
    "2.5",
    "1e3",
    "+7",
    ".5",
    "5.",
    "NULL",
    "true",
    '"5"',
    '"',
    "é",
    "2024-01-01",
    "0x10",
    "1_000",
    "\u0660",
    "-0",
    "16777217",
    str(2**53),
    str(2**63),
    str(2**64),
    "9" * 4000,
    "-" + "9" * 5000,
    "\x00",
    "\ud800",
]
HEADERS = ["length", "count", "seq_len", "num_tokens", "x", "Length", "input_ids", "", "n", "freq", "len", "ids"]


def cell(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.55:
        return str(rng.randint(1, 9000))
    if roll < 0.7:
        return str(rng.randint(-(2**70), 2**70))
    if roll < 0.9:
        return rng.choice(ODD)
    return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 6)))


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Leave alone (most of the time), cut short, overwrite, insert or duplicate bytes."""
    roll = rng.random()
    if roll < 0.6 or not data:
        return data
    roll = 0.5 + (roll - 0.6) * 1.25  # the rest spread over the four kinds of damage
    data = bytearray(data)
    if roll < 0.65:
        return bytes(data[: rng.randrange(len(data))])
    if roll < 0.85:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if roll < 0.95:
        at = rng.randrange(len(data))
        return bytes(data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[at:])
    at = rng.randrange(len(data))
    return bytes(data[:at] + data[at : at + 64] * rng.randint(2, 50) + data[at:])


def gen_delimited(rng: random.Random, sep: str | None = None) -> bytes:
    sep = sep or rng.choice([",", "\t", ";", "|"])
    eol = rng.choice(["\n", "\r\n", "\r"])
    width = rng.randint(1, 3)
    n = rng.choice([0, 1, 3, 10, 50, 200]) if rng.random() < 0.97 else 100_000
    odd, ragged = rng.choice([0, 0, 0.002, 0.05, 0.3]), rng.choice([0, 0, 0.01, 0.1])
    rows = [
        sep.join(
            cell(rng) if rng.random() < odd else str(rng.randint(1, 5000))
            for _ in range(width + (rng.random() < ragged))
        )
        for _ in range(n)
    ]
    if rng.random() < 0.6:
        rows.insert(0, sep.join(rng.choice(HEADERS) for _ in range(width)))
    if rng.random() < 0.2:
        rows.insert(rng.randint(0, len(rows)), "")
    bom = b"\xef\xbb\xbf" if rng.random() < 0.1 else b""
    return mutate(rng, bom + encode(eol.join(rows) + rng.choice(["", eol])))


def json_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 4 or roll < 0.5:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randint(-3, 9000),
                rng.randint(-(2**70), 2**70),
                2.5,
                float("inf"),
                float("nan"),
                cell(rng),
                10**4000,
            ]
        )
    if roll < 0.75:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    keys = ["length", "input_ids", "seq_len", "count", "mode", "lengths", "x", "path"]
    return {rng.choice(keys): json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def gen_json(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.3:
        top = [rng.randint(1, 9000) for _ in range(rng.choice([1, 10, 1000]))]
        top += [json_value(rng) for _ in range(rng.choice([0, 0, 1, 2]))]
    elif roll < 0.5:
        top = [{"length": json_value(rng) if rng.random() < 0.2 else rng.randint(1, 99)} for _ in range(20)]
    elif roll < 0.6:
        top = [{"input_ids": list(range(rng.randint(0, 30)))} for _ in range(20)]
    elif roll < 0.7:
        top = {"lengths": [json_value(rng) for _ in range(10)]}
    else:
        top = json_value(rng)
    text = json.dumps(top, allow_nan=True)
    depth = rng.choice([0] * 8 + [63, 65, 3000, 100_000])
    return mutate(rng, encode("[" * depth + text + "]" * depth))


def gen_jsonl(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randint(0, 30)):
        roll = rng.random()
        lines.append(
            json.dumps(json_value(rng), allow_nan=True)
            if roll < 0.4
            else str(rng.randint(1, 9000))
            if roll < 0.7
            else json.dumps({"seq_len": rng.randint(-2, 9000)})
            if roll < 0.9
            else rng.choice(["{bad", "[" * 5000, "9" * 6000, "", "  "])
        )
    return mutate(rng, encode(rng.choice(["\n", "\r\n", "\r"]).join(lines)))


NPY_DTYPES = ["i1", "i2", "<i4", ">i4", "<i8", "u1", "<u2", "<u8", "<f2", "<f4", "<f8", "?", "<c8", "S3", "<U2"]


def gen_npy(rng: random.Random) -> bytes:
    dtype = np.dtype(rng.choice(NPY_DTYPES))
    shape = rng.choice([(0,), (1,), (7,), (3, 2), (4, 3), (2, 2, 2), (1000,)])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        wide = rng.random() < 0.2
        arr = np.array(
            [
                rng.randint(max(info.min, -5), info.max) if wide else rng.randint(1, min(info.max, 9000))
                for _ in range(int(np.prod(shape)))
            ],
            dtype=dtype,
        )
    elif dtype.kind in "fc":
        with np.errstate(over="ignore"):
            arr = np.array(
                [rng.choice([1.0, 5.0, 2.5, -1.0, np.inf, np.nan, 1e30]) for _ in range(int(np.prod(shape)))]
            ).astype(dtype)
    else:
        arr = np.zeros(int(np.prod(shape)), dtype=dtype)
    buf = io.BytesIO()
    np.save(buf, arr.reshape(shape), allow_pickle=False)
    data = buf.getvalue()
    roll = rng.random()
    if roll < 0.12:
        start, end = data.find(b"(", 10), data.find(b")", 10) + 1
        claim = rng.choice(
            [
                b"(10000000000000,)",
                b"(-1,)",
                b"(2, 2)",
                b"()",
                b"(0,)",
                b"(3, -3)",
                b"(" + b"9" * 5000 + b",)",
                b"((((((((((",
                b"(1,)*10**9",
            ]
        )
        data = data[:start] + claim + data[end:]
    elif roll < 0.18:
        at = data.find(b"'descr': ") + 9
        data = (
            data[:at]
            + rng.choice([b"'|O'", b"'<V8'", b"[('a', '<i8')]", b"'xyz'", b"b'\\x00'", b"'<i8',"])
            + data[data.find(b",", at) :]
        )
    elif roll < 0.22:
        data = data[:8] + bytes([rng.randrange(256), rng.randrange(256)]) + data[10:]
    return mutate(rng, data)


def gen_legacy_npy(rng: random.Random) -> bytes:
    rows = []
    for _ in range(rng.randint(0, 5)):
        ids = list(range(rng.randint(0, 20)))
        starts = sorted(rng.sample(range(max(1, len(ids))), k=min(len(ids), rng.randint(0, 3))))
        starts = [0] + [s for s in starts if s] if ids and rng.random() < 0.8 else starts
        if rng.random() < 0.1:
            starts.append(rng.choice([-1, 2**63, 2**70, -(2**63), 5, 0, "x", None, 2.5]))
        rows.append({"input_ids": ids, "loss_mask": [1] * len(ids), "seq_start_id": starts})
    if rng.random() < 0.05:  # a memo bomb: one long list in every row
        shared = list(range(20_000))
        rows = [{"input_ids": shared, "seq_start_id": shared} for _ in range(2000)]
    if rng.random() < 0.1:
        rows.append(rng.choice([Exception("x"), {"a": 1}, [1, 2], 5, None]))
    arr = np.empty(len(rows), dtype=object)
    arr[:] = rows
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return mutate(rng, buf.getvalue())


def arrow_table(rng: random.Random):
    import pyarrow as pa

    n = rng.choice([0, 1, 5, 50])
    kind = rng.choice(["length", "hist", "ids", "packed", "strings", "floats", "nested"])
    ints = lambda lo, hi: [rng.randint(lo, hi) for _ in range(n)]  # noqa: E731
    cols = {}
    if kind in ("length", "hist"):
        typ, lo, hi = rng.choice(
            [(pa.int64(), -3, 2**62), (pa.uint64(), 0, 2**64 - 1), (pa.int32(), -3, 2**31 - 1), (pa.int64(), 1, 9000)]
        )
        cols["length"] = pa.array(ints(lo, hi), typ)
    if kind == "hist":
        cols["count"] = pa.array(ints(-1, 2**41), pa.int64())
    if kind == "strings":
        cols["seq_len"] = pa.array([cell(rng).encode("utf-8", "replace").decode() for _ in range(n)], pa.string())
    if kind == "floats":
        cols["num_tokens"] = pa.array([rng.choice([1.0, 2.5, float("nan"), float("inf"), 1e300]) for _ in range(n)])
    if kind in ("ids", "packed"):
        cols["input_ids"] = pa.array([list(range(rng.randint(0, 12))) for _ in range(n)], pa.list_(pa.int32()))
    if kind == "packed":
        typ, lo, hi = rng.choice([(pa.int64(), -2, 2**63 - 1), (pa.uint64(), 0, 2**64 - 1), (pa.int64(), 0, 12)])
        cols["seq_start_id"] = pa.array(
            [
                None if rng.random() < 0.05 else sorted(rng.randint(lo, hi) for _ in range(rng.randint(0, 3)))
                for _ in range(n)
            ],
            pa.list_(typ),
        )
    if kind == "nested":
        cols["length"] = pa.array([{"a": rng.randint(1, 9)} for _ in range(n)])
    return pa.table(cols) if cols else pa.table({"x": pa.array([], pa.int8())})


def gen_parquet(rng: random.Random) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(arrow_table(rng), buf, compression=rng.choice(["snappy", "zstd", "none"]))
    return mutate(rng, buf.getvalue())


MOCK_PATHS = [
    "nope.csv",
    "good.csv",
    ".",
    "pipe.csv",
    "loop.csv",
    "dangling.csv",
    "sparse.csv",
    "/proc/self/environ",
    "/proc/self/mem",
    "/dev/zero",
    "",
    "\x00",
    5,
    None,
    ["a"],
    True,
    {"a": 1},
]


def gen_mock(rng: random.Random) -> bytes:
    cfg = {"mode": rng.choice(["file", "distribution", "distribution", "verification", "x", None, 1, ["file"]])}
    if rng.random() < 0.7:
        cfg["type"] = rng.choice(["lognormal", "lognormal", "uniform", None])
    if cfg["mode"] == "file" or rng.random() < 0.3:
        cfg["path"] = rng.choice(MOCK_PATHS)
    numbers = [
        lambda: rng.randint(-5, 10_000),
        lambda: rng.choice([1e200, -0.0, 2**24, 2**24 + 1, 2**70, 1.5]),
        lambda: rng.choice([float("inf"), float("nan"), True, None, "100", [1]]),
        lambda: rng.uniform(0, 12),
    ]
    sane = {
        "min_seq_len": rng.randint(1, 500),
        "max_seq_len": rng.randint(500, 2**24),
        "lognormal_sigma": rng.uniform(0, 3),
        "mean_seq_len": rng.uniform(1, 9000),
    }
    for key in ("min_seq_len", "max_seq_len", "mean_seq_len", "lognormal_sigma"):
        if rng.random() < 0.9:
            cfg[key] = rng.choice(numbers)() if rng.random() < 0.12 else sane[key]
    return (
        mutate(rng, encode(json.dumps(cfg, allow_nan=True)))
        if rng.random() < 0.3
        else encode(json.dumps(cfg, allow_nan=True))
    )


def gen_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 600)))


GENERATORS = {
    "csv": (gen_delimited, ".csv"),
    "tsv": (lambda r: gen_delimited(r, "\t"), ".tsv"),
    "json": (gen_json, ".json"),
    "jsonl": (gen_jsonl, ".jsonl"),
    "npy": (gen_npy, ".npy"),
    "legacy-npy": (gen_legacy_npy, ".npy"),
    "parquet": (gen_parquet, ".parquet"),
    "mock": (gen_mock, ".json"),
    "bytes": (gen_bytes, ".csv"),
}


def make_fixtures(root: Path) -> None:
    """What mock configs and special inputs point at: a good CSV, a FIFO, loops, dangling links, a sparse file."""
    (root / "good.csv").write_text("length\n5\n7\n")
    os.mkfifo(root / "pipe.csv")
    os.symlink(root / "loop.csv", root / "loop.csv")
    os.symlink(root / "gone.csv", root / "dangling.csv")
    with open(root / "sparse.csv", "wb") as fh:
        fh.truncate(8 << 30)


def gen_special(rng: random.Random, root: Path, i: int) -> str:
    """A path that is not an ordinary file, or a packed folder with odd entries."""
    kind = rng.choice(["fifo", "loop", "dangling", "sparse", "proc", "dev", "folder", "packed", "nul", "long"])
    if kind == "fifo":
        return str(root / "pipe.csv")
    if kind == "loop":
        return str(root / "loop.csv")
    if kind == "dangling":
        return str(root / "dangling.csv")
    if kind == "sparse":
        return str(root / "sparse.csv")
    if kind == "proc":
        return rng.choice(["/proc/self/mem", "/proc/self/environ", "/proc/self/fd/0", "/sys/kernel/mm", "/proc"])
    if kind == "dev":
        return rng.choice(["/dev/zero", "/dev/null", "/dev/stdin", "/dev/urandom"])
    if kind == "nul":
        return "bad\x00name.csv"
    if kind == "long":
        return "x" * 5000 + ".csv"
    folder = root / f"folder_{i}"
    folder.mkdir()
    if kind == "packed":
        import pyarrow.parquet as pq

        for k in range(rng.randint(0, 3)):
            buf = io.BytesIO()
            pq.write_table(arrow_table(rng), buf)
            (folder / f"s{k}.parquet").write_bytes(mutate(rng, buf.getvalue()))
        for name, make in [
            ("sub.parquet", lambda p: p.mkdir()),
            ("pipe.parquet", os.mkfifo),
            ("loop.parquet", lambda p: os.symlink(p, p)),
            ("gone.parquet", lambda p: os.symlink(p.with_name("nothing"), p)),
        ]:
            if rng.random() < 0.5:
                make(folder / name)
    return str(folder)


def generate(root: Path, per_format: int, seed: int) -> list[tuple[str, str]]:
    """Write every input under ``root``: (format, path) pairs."""
    rng = random.Random(seed)
    np.random.seed(seed)
    make_fixtures(root)
    inputs = []
    for fmt, (gen, suffix) in GENERATORS.items():
        (root / fmt).mkdir()
        for i in range(per_format):
            path = root / fmt / f"{i:05d}{suffix if rng.random() < 0.9 else rng.choice(['', '.txt', '.dat'])}"
            path.write_bytes(gen(rng))
            inputs.append((fmt, str(path)))
    (root / "special").mkdir()
    inputs += [("special", gen_special(rng, root / "special", i)) for i in range(max(50, per_format // 10))]
    return inputs


# ---------------------------------------------------------------------------------------------- the child
def classify(read, named: str) -> tuple[str, str]:
    """Run one read; (outcome, detail)."""
    from advisor.data.lengths import LengthHistogram
    from advisor.errors import InputError

    try:
        hist = read()
    except MemoryError as e:
        return "blow-up", f"MemoryError: {e}"[:300]
    except InputError as e:
        if isinstance(e.__context__, MemoryError):
            return "blow-up", f"MemoryError under InputError: {e}"[:300]
        if named not in str(e):
            return "traceback", f"InputError not naming the file: {e}"[:300]
        return "refused", str(e)[:300]
    except Exception as e:  # noqa: BLE001 - counting them is the point
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} at {frame.filename}:{frame.lineno}"
    if not isinstance(hist, LengthHistogram):
        return "traceback", f"returned {type(hist).__name__}"
    lengths, counts = hist.lengths.tolist(), hist.counts.tolist()
    tokens = sum(n * c for n, c in zip(lengths, counts, strict=True))
    if hist.num_samples != sum(counts) or hist.total_tokens != tokens or tokens >= 2**63:
        return "traceback", "accepted with wrong totals"
    return "accepted", f"{hist.num_samples} samples"


def worker(task_file: str, out_file: str) -> None:
    """Read each input of a batch, logging a start line before and an end line after, so the parent can tell
    which input a hang or a crash happened on."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    from advisor.data.guard import display_name
    from advisor.data.ingest import load_lengths, parse_lengths

    tasks = json.loads(Path(task_file).read_text())
    with open(out_file, "a", buffering=1) as out:
        for index, path in tasks:
            out.write(json.dumps(["start", index]) + "\n")
            outcome = classify(lambda p=path: load_lengths(p), display_name(path))
            out.write(json.dumps(["load", index, *outcome]) + "\n")
            if outcome[0] == "refused":  # again with bad rows left out, as --on-bad skip does
                outcome = classify(lambda p=path: load_lengths(p, on_bad="skip"), display_name(path))
                out.write(json.dumps(["skip", index, *outcome]) + "\n")
            ordinary = not path.startswith(("/proc", "/sys", "/dev")) and not os.path.islink(path)
            if ordinary and os.path.isfile(path) and os.path.getsize(path) < 64 << 20:  # the upload path too
                data, name = Path(path).read_bytes(), "upload" + (Path(path).suffix or ".bin")
                outcome = classify(lambda d=data, n=name: parse_lengths(d, n), "upload")
                out.write(json.dumps(["parse", index, *outcome]) + "\n")
            out.write(json.dumps(["end", index]) + "\n")


# ---------------------------------------------------------------------------------------------- the parent
def run_batch(tasks: list[tuple[int, str]], workdir: Path, cwd: Path, batch_id: int) -> list[tuple[str, int, str, str]]:
    """Run tasks in children until all are done; a hang or a crash is charged to the input being read."""
    from bench._watch import child_env, run_watched

    results, todo, attempt = [], list(tasks), 0
    while todo:
        attempt += 1
        task_file, out_file = workdir / f"b{batch_id}_{attempt}.json", workdir / f"b{batch_id}_{attempt}.out"
        task_file.write_text(json.dumps(todo))
        end = run_watched(
            [sys.executable, __file__, "--worker", str(task_file), str(out_file)],
            env=child_env(),
            cwd=cwd,
            out_file=out_file,
            seconds=BATCH_SECONDS,
        )
        lines = end.lines
        finished = {x[1] for x in lines if x[0] == "end"}
        results += [(x[0], x[1], x[2], x[3]) for x in lines if x[0] in ("load", "skip", "parse")]
        started = [x[1] for x in lines if x[0] == "start" and x[1] not in finished]
        if started:  # the input the child was on when it hung or died: charged to the read that never ended
            culprit = started[-1]
            done_reads = [x[0] for x in lines if x[0] in ("load", "skip") and x[1] == culprit]
            how = (
                "load"
                if not done_reads
                else ("parse" if done_reads[-1] == "skip" or "skip" not in done_reads else "skip")
            )
            results.append((how, culprit, "hang" if end.hung else "blow-up", end.detail()))
            finished.add(culprit)
        elif end.returncode != 0 and not end.hung:
            raise RuntimeError(f"a worker failed outside any input: {end.err[-2000:]}")
        todo = [t for t in todo if t[0] not in finished]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-format", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="fuzz_inputs_") as tmp:
        root = Path(tmp)
        (root / "inputs").mkdir()
        inputs = generate(root / "inputs", args.per_format, args.seed)
        print(
            f"generated {len(inputs):,} inputs in {time.time() - start:.0f} s (seed {args.seed}); reading them in "
            f"batches of {BATCH_SIZE} under RLIMIT_AS {MEMORY_LIMIT >> 30} GiB and a {BATCH_SECONDS} s timeout",
            flush=True,
        )
        (root / "work").mkdir()
        indexed = list(enumerate(path for _, path in inputs))
        batches = [indexed[i : i + BATCH_SIZE] for i in range(0, len(indexed), BATCH_SIZE)]
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda b: run_batch(b[1], root / "work", root / "inputs", b[0]), enumerate(batches)))
    results = [r for batch in done for r in batch]
    return report(inputs, results, time.time() - start)


def report(inputs: list[tuple[str, str]], results: list[tuple[str, int, str, str]], seconds: float) -> int:
    fmt_of = [fmt for fmt, _ in inputs]
    table: dict[tuple[str, str], Counter] = {}
    for how, index, outcome, _ in results:
        table.setdefault((fmt_of[index], how), Counter())[outcome] += 1
    print(f"\n{'format':<12}{'read':<7}" + "".join(f"{o:>11}" for o in OUTCOMES))
    for (fmt, how), counts in sorted(
        table.items(), key=lambda kv: (list(GENERATORS).index(kv[0][0]) if kv[0][0] in GENERATORS else 99, kv[0][1])
    ):
        print(f"{fmt:<12}{how:<7}" + "".join(f"{counts[o]:>11,}" for o in OUTCOMES))
    total = Counter(outcome for _, _, outcome, _ in results)
    print(f"{'all':<12}{'':<7}" + "".join(f"{total[o]:>11,}" for o in OUTCOMES))
    print(f"\n{len(inputs):,} inputs, {len(results):,} reads in {seconds:.0f} s")
    bad = [r for r in results if r[2] in BAD]
    for how, index, outcome, detail in bad[:30]:
        print(f"  {outcome}: {how} {inputs[index][1][-80:]!r}: {detail}")
    print(f"tracebacks {total['traceback']}, hangs {total['hang']}, memory blow-ups {total['blow-up']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
