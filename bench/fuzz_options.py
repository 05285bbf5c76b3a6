"""Fuzz the command line's options and output paths in child processes with hard limits, and count how each run ended.

Generated ``schedule`` option sets (every range --help allows: global batches to 16M, 131,072 ranks, dynamic CP
with odd CP, buffers against seq lengths, VPP groups, 16M steps, --json), ``recommend`` plans (presets, 1 to 2,048
GPUs, short and long sequences, every packing mode) and output paths for ``tokenize -o``, ``trial --out`` and
``export --lengths-csv`` (new names, existing files, symlinks to files and folders outside, folders, /dev/null,
/proc, /sys, the input itself, hard links to it, relative traversal, odd names, with and without --force) go
through ``advisor.cli.main(argv)`` in the child, in batches, each child limited to 2 GiB of address space
(``RLIMIT_AS``) and each run to 60 s. Path runs happen in a fresh sandbox whose every file, folder and link is
snapshotted before and after. Each run ends as one of:

    ok            exit code 0 (and for a path run: the output written where asked, and only there)
    refused       exit code 2 with one "error: ..." line (argparse: its usage line and one error line)
    traceback     any other exception or exit code, or a refusal that is not one message
    hang          the run's 60 s ran out
    blow-up       MemoryError, or the child killed by a signal
    elsewhere     a path run that changed anything but the asked-for output (or anything at all when refused)

The tokenizer and the trial run for real once per child; later runs reuse that result (the paths, not the
training, are under test here). Run from the repository root; exits non-zero unless tracebacks, hangs, blow-ups
and writes elsewhere are all zero.

    python bench/fuzz_options.py                          # 2,690 runs, seed 0 (~10 min on one core)
    python bench/fuzz_options.py --scale 0.1 --seed 3 --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEMORY_LIMIT = 2 << 30
RUN_SECONDS = 60
BATCH_SIZE = 60  # a child loads numba's kernels and the engines once per batch (seconds)
COUNTS = {"schedule": 2000, "recommend": 40, "tokenize -o": 300, "trial --out": 250, "export --lengths-csv": 100}
OUTCOMES = ("ok", "refused", "traceback", "hang", "blow-up", "elsewhere")
BAD = ("traceback", "hang", "blow-up", "elsewhere")
SAMPLE = ROOT / "sample_data"
SQUAD = str(SAMPLE / "squad_v1.1_len384_hist.csv")
TOKENIZER = str(SAMPLE / "tokenizers" / "tiny-bpe")


# ---------------------------------------------------------------------------------------------- generators
def _pick(rng: random.Random, *choices):
    return rng.choice(choices)


def gen_schedule(rng: random.Random) -> dict:
    """One ``schedule`` command line: values from the small, the ordinary and the largest --help allows."""
    dp = _pick(rng, 1, 1, 2, 3, 4, 8, 64, 1024, 1 << 14, 1 << 17)
    cp = _pick(rng, 1, 1, 2, 3, 4, 8, 16, 512, 4096, 1 << 17)
    mbs = _pick(rng, 1, 1, 1, 2, 4, 4096)
    gbs = dp * mbs * _pick(rng, 1, 2, 8, 64, 1024) if rng.random() < 0.85 else rng.randint(1, 1 << 24)
    gbs = min(gbs, 1 << 24)
    argv = [
        "schedule",
        _pick(rng, "squad", "squad", "small", "mock", "mock_huge"),
        "--seq-length",
        str(_pick(rng, 1, 2, 16, 384, 512, 4096, 8192, 1 << 20, 1 << 24)),
        "--dp",
        str(dp),
        "--cp",
        str(cp),
        "--global-batch-size",
        str(gbs),
        "--micro-batch-size",
        str(mbs),
        "--quiet",
    ]
    for flag, values in (
        ("--tp", (1, 2, 8, 1024)),
        ("--vpp-group", (1, 2, 3, 1024)),
        ("--steps", (1, 2, 10, 1000, 100_000, 1 << 24)),
        ("--max-seqlen-per-dp-cp-rank", (1, 64, 512, 100_000, 1 << 24)),
        ("--scheduler", ("dp_balanced", "default_dynamic_cp")),
        ("--megatron-lm", ("main", "dev")),
        ("--dataset", ("mock_sft", "sft", "custom")),
        ("--seed", (0, 7, 2**32 - 1)),
    ):
        if rng.random() < 0.35:
            argv += [flag, str(rng.choice(values))]
    for flag in ("--sp", "--json"):
        if rng.random() < 0.2:
            argv.append(flag)
    return {"argv": argv}


PRESETS = [
    "llama3.1-8b",
    "llama3.1-70b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "nemotron4-15b",
    "deepseek-v3",
    "qwen2.5-vl-7b",
]


def gen_recommend(rng: random.Random) -> dict:
    """A plan file (YAML as JSON) for ``recommend``: presets on 1 to 2,048 GPUs, short to long sequences."""
    gpus = _pick(rng, 1, 8, 16, 24, 256, 512, 1024, 2048)
    seq = _pick(rng, 128, 512, 1024, 2048, 8192, 65536)
    plan = {
        "version": 2,
        "model": rng.choice(PRESETS),
        "parallel": {
            "gpus": gpus,
            "tp": _pick(rng, 1, 2, 4, 8),
            "cp": _pick(rng, 1, 1, 2, 4),
            "pp": 1,
            "sp": rng.random() < 0.5,
        },
        "training": {
            "seq_length": seq,
            _pick(rng, "global_batch_size", "global_batch_samples"): _pick(rng, 8, 128, 1024, 4096, gpus * 2),
        },
        "packing": {"mode": _pick(rng, "offline", "offline", "online", "in-batch", "auto")},
        "data": {"lengths": _pick(rng, SQUAD, str(SAMPLE / "sft_like_hist.csv"), str(SAMPLE / "chat_like_hist.csv"))},
    }
    if plan["packing"]["mode"] == "offline":
        plan["packing"]["pack_size"] = seq
    argv = ["recommend", "plan.json", "--quiet"] + (["--vary", "seq_length,batch"] if rng.random() < 0.2 else [])
    return {"argv": argv, "plan": plan}


OUTPUT_KINDS = [
    "new",
    "new",
    "existing",
    "symlink_file",
    "dangling",
    "symlink_dir",
    "folder",
    "folder_slash",
    "empty_folder",
    "traversal",
    "deep_missing",
    "dev_null",
    "proc",
    "sys",
    "etc",
    "input",
    "hard_link",
    "dot",
    "dotdot",
    "odd_name",
    "inside_input_folder",
    "fifo",
    "plan",
]


def output_path(kind: str, rng: random.Random) -> str:
    """An output path of a kind, relative to the sandbox box (the child's working folder)."""
    return {
        "new": "out.csv" if rng.random() < 0.5 else "fresh/new.csv",
        "existing": "existing.csv",
        "symlink_file": "link.csv",
        "dangling": "dangling.csv",
        "symlink_dir": "linkdir/x.csv",
        "folder": "dir",
        "folder_slash": "dir/",
        "empty_folder": "empty",
        "traversal": "../outside/t.csv",
        "deep_missing": "a/b/c.csv",
        "dev_null": "/dev/null",
        "proc": "/proc/self/environ",
        "sys": "/sys/kernel/x",
        "etc": "/etc/advisor-fuzz.csv",
        "input": "data.jsonl",
        "hard_link": "hard.jsonl",
        "dot": ".",
        "dotdot": "..",
        "odd_name": rng.choice(["-x.csv", " .csv", "a\nb.csv", "é\u202e.csv", "x" * 300]),
        "inside_input_folder": "shards/l.csv",
        "fifo": "pipe",
        "plan": "plan.json",
    }[kind]


def gen_path_task(surface: str, rng: random.Random) -> dict:
    kind = rng.choice(OUTPUT_KINDS)
    out = output_path(kind, rng)
    if surface == "trial --out" and kind in ("new", "traversal", "deep_missing") and rng.random() < 0.5:
        out = out.removesuffix(".csv")  # a folder name
    force = ["--force"] if rng.random() < 0.4 else []
    data = "shards" if kind == "inside_input_folder" else "data.jsonl"
    if surface == "tokenize -o":
        argv = ["tokenize", data, "--tokenizer", TOKENIZER, "--workers", "1", "-o", out, *force, "--quiet"]
    elif surface == "trial --out":
        argv = [
            "trial",
            "plan.json",
            "--lengths",
            "lengths.csv",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--pack-size",
            "64",
            "--packs-per-step",
            "1",
            "--threads",
            "1",
            "--out",
            out,
            *force,
            "--quiet",
        ]
    else:
        argv = ["export", "plan.json", "--lengths", "lengths.csv", "--lengths-csv", out, *force, "--quiet"]
    return {"argv": argv, "output": out, "kind": kind, "sandbox": True}


def generate(counts: dict[str, int], seed: int) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    tasks = []
    for surface, n in counts.items():
        for _ in range(n):
            if surface == "schedule":
                tasks.append((surface, gen_schedule(rng)))
            elif surface == "recommend":
                tasks.append((surface, gen_recommend(rng)))
            else:
                tasks.append((surface, gen_path_task(surface, rng)))
    return tasks


# ---------------------------------------------------------------------------------------------- the sandbox
SMALL_PLAN = {
    "version": 2,
    "model": "llama3.1-8b",
    "parallel": {"gpus": 8, "tp": 2},
    "training": {"seq_length": 512, "global_batch_samples": 64},
}


def make_sandbox(root: Path) -> Path:
    """A box (the working folder) and a folder beside it; both are snapshotted. Returns the box."""
    box, outside = root / "box", root / "outside"
    box.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"must not change\n")
    (box / "data.jsonl").write_text(
        "".join(json.dumps({"input": f"q{i} " * (i % 7 + 1), "output": f"a{i}"}) + "\n" for i in range(40))
    )
    (box / "shards").mkdir()
    shutil.copy(box / "data.jsonl", box / "shards" / "s0.jsonl")
    (box / "lengths.csv").write_text("length\n" + "\n".join(str(20 + 7 * i % 300) for i in range(60)) + "\n")
    (box / "plan.json").write_text(json.dumps(SMALL_PLAN))
    (box / "existing.csv").write_bytes(b"keep\n")
    (box / "dir").mkdir()
    (box / "dir" / "x.txt").write_bytes(b"x\n")
    (box / "empty").mkdir()
    (box / "link.csv").symlink_to(outside / "victim.txt")
    (box / "dangling.csv").symlink_to(outside / "created-through-link.csv")
    (box / "linkdir").symlink_to(outside)
    os.link(box / "data.jsonl", box / "hard.jsonl")
    os.mkfifo(box / "pipe")
    return box


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind and content hash (files), link target (links), nothing followed."""
    out = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if os.path.islink(path):
                out[path] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[path] = ("dir",)
            elif os.path.isfile(path) and st.st_size > 64 << 20:  # a sparse giant a case planted: not read
                out[path] = ("file", st.st_size, st.st_mtime_ns, st.st_mode & 0o777)
            elif os.path.isfile(path):
                out[path] = ("file", hashlib.sha1(Path(path).read_bytes()).hexdigest(), st.st_mode & 0o777)
            else:
                out[path] = ("other", st.st_mode)
    return out


def changed_elsewhere(before: dict, after: dict, asked: str | None, folder: bool) -> list[str]:
    """Paths that changed, appeared or vanished other than the asked-for output (a folder: anything in it) and,
    for a new folder, the folders made on the way to it."""
    diff = [p for p in set(before) | set(after) if before.get(p) != after.get(p)]
    if asked is None:
        return diff

    def allowed(p: str) -> bool:
        if p == asked or (folder and p.startswith(asked.rstrip("/") + "/")):
            return True
        return p not in before and asked.startswith(p.rstrip("/") + "/") and after.get(p) == ("dir",)

    return [p for p in diff if not allowed(p)]


# ---------------------------------------------------------------------------------------------- the child
class _Sink(io.TextIOBase):
    """stdout that counts and drops (schedule --json can print megabytes)."""

    def __init__(self):
        self.chars = 0

    def write(self, text):
        self.chars += len(text)
        return len(text)


def _install_memos(surfaces: set[str]) -> None:
    """Tokenize and trial for real once per child, then reuse the result: the outputs are under test here. Only
    the engines the batch needs are imported: torch alone takes much of the 2 GiB of address space."""
    import importlib

    wanted = {
        "tokenize -o": ("advisor.data.tokenize.engine", "tokenize"),
        "trial --out": ("advisor.trial.run", "run_trial"),
    }
    for module_name, name in (wanted[s] for s in surfaces if s in wanted):
        module = importlib.import_module(module_name)
        real, memo = getattr(module, name), {}

        def once(*args, _real=real, _memo=memo, **kwargs):
            if "result" not in _memo:
                _memo["result"] = _real(*args, **kwargs)
            return _memo["result"]

        setattr(module, name, once)


def run_cli(argv: list[str]) -> tuple[str, str]:
    from advisor.cli import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(_Sink()), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as e:  # argparse's refusals, and the trial's parity exit 3
        code = e.code if isinstance(e.code, int) else 1
    except MemoryError as e:
        return "blow-up", f"MemoryError: {e}"[:300]
    except Exception as e:  # noqa: BLE001 - counting them is the point
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} at {frame.filename}:{frame.lineno}"
    text = err.getvalue()
    lines = [x for x in text.splitlines() if x.strip()]
    if code == 0:
        return "ok", ""
    # one message: a line, or a PlanError's first line and one "  - field: problem" line per problem
    one = bool(lines) and lines[0].startswith("error: ") and all(x.startswith("  - ") for x in lines[1:])
    parsed = len(lines) >= 2 and lines[0].startswith("usage:") and ": error: " in lines[-1]
    if code == 2 and (one or parsed):
        return "refused", lines[-1][:300]
    return "traceback", f"exit {code}: {text[-300:]}"


def run_task(surface: str, task: dict, work: Path) -> tuple[str, str]:
    argv = list(task["argv"])
    if surface == "schedule":
        argv[1] = {
            "squad": SQUAD,
            "small": str(SAMPLE / "chat_like_hist.csv"),
            "mock": '{"mode": "distribution", "type": "lognormal", "min_seq_len": 16, "max_seq_len": 8192, '
            '"mean_seq_len": 900, "lognormal_sigma": 1.1}',
            "mock_huge": '{"mode": "distribution", "type": "lognormal", "min_seq_len": 1, "max_seq_len": '
            '16777216, "mean_seq_len": 4000000, "lognormal_sigma": 2}',
        }[argv[1]]
        if "mock" in task["argv"][1]:
            argv += ["--mock-samples", "200000"]
        return run_cli(argv)
    sandbox = Path(tempfile.mkdtemp(dir=work))
    try:
        box = make_sandbox(sandbox)
        if surface == "recommend":
            (box / "plan.json").write_text(json.dumps(task["plan"]))
        before = snapshot(sandbox)
        os.chdir(box)
        try:
            outcome = run_cli(argv)
        finally:
            os.chdir(work)
        after = snapshot(sandbox)
        if "output" in task:
            asked = os.path.normpath(os.path.join(box, task["output"]))
            folder = surface == "trial --out"
            wrong = changed_elsewhere(before, after, asked if outcome[0] == "ok" else None, folder)
            if outcome[0] == "ok" and not any(
                p == asked or p.startswith(asked + "/") for p in after if before.get(p) != after.get(p)
            ):
                return "elsewhere", f"ok but nothing written at {task['output']!r} ({task['kind']})"
            if wrong:
                return (
                    "elsewhere",
                    f"{outcome[0]}: {task['kind']} {task['output']!r} changed "
                    f"{[os.path.relpath(p, sandbox) for p in wrong][:4]}",
                )
        elif changed_elsewhere(before, after, None, False):
            return "elsewhere", "recommend changed the sandbox"
        return outcome
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)


def worker(task_file: str, out_file: str, work: str) -> None:
    """Run each task of a batch, logging a start line (with the time) before and an end line after, so the
    parent can tell which run a hang or a crash happened on."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    import advisor.cli  # noqa: F401 - loaded before the first timed run

    tasks = json.loads(Path(task_file).read_text())
    _install_memos({surface for _, surface, _ in tasks})
    with open(out_file, "a", buffering=1) as out:
        for index, surface, task in tasks:
            out.write(json.dumps(["start", index, time.time()]) + "\n")
            outcome = run_task(surface, task, Path(work))
            out.write(json.dumps(["done", index, *outcome]) + "\n")


# ---------------------------------------------------------------------------------------------- the parent
def run_batch(
    tasks: list, workdir: Path, batch_id: int, script: str = __file__, run_seconds: float = RUN_SECONDS
) -> list[tuple[int, str, str]]:
    """Run tasks in children (``script --worker``) until all are done; a hang or a crash is charged to the run it
    happened in."""
    results, todo, attempt = [], list(tasks), 0
    # ARROW_DEFAULT_MEMORY_POOL=system: Arrow's own allocator reserves about 1 GiB of address space when the first
    # file is read, which RLIMIT_AS counts although no memory is used: with it the limit measures real use
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "RAY_DISABLE_USAGE_STATS": "1",
        "ARROW_DEFAULT_MEMORY_POOL": "system",
    }
    while todo:
        attempt += 1
        task_file, out_file = workdir / f"b{batch_id}_{attempt}.json", workdir / f"b{batch_id}_{attempt}.out"
        task_file.write_text(json.dumps(todo))
        proc = subprocess.Popen(
            [sys.executable, script, "--worker", str(task_file), str(out_file), str(workdir)],
            env=env,
            cwd=workdir,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        hung = False
        while proc.poll() is None:
            time.sleep(0.5)
            lines = _lines(out_file)
            open_runs = [x for x in lines if x[0] == "start" and x[1] not in {y[1] for y in lines if y[0] == "done"}]
            if open_runs and time.time() - open_runs[-1][2] > run_seconds:
                os.killpg(proc.pid, signal.SIGKILL)
                hung = True
        err = proc.stderr.read() if proc.stderr else b""
        lines = _lines(out_file)
        finished = {x[1] for x in lines if x[0] == "done"}
        results += [(x[1], x[2], x[3]) for x in lines if x[0] == "done"]
        started = [x[1] for x in lines if x[0] == "start" and x[1] not in finished]
        if started:
            what = "hang" if hung else "blow-up"
            detail = (
                f"{f'{run_seconds:.0f} s timeout' if hung else f'child died (exit {proc.returncode})'}: "
                f"{err.decode()[-300:]}"
            )
            results.append((started[-1], what, detail))
            finished.add(started[-1])
        elif proc.returncode != 0 and not hung:
            raise RuntimeError(f"a worker failed outside any run: {err.decode()[-2000:]}")
        todo = [t for t in todo if t[0] not in finished]
    return results


def _chunks(items: list) -> list[list]:
    return [items[i : i + BATCH_SIZE] for i in range(0, len(items), BATCH_SIZE)]


def _lines(path: Path) -> list:
    if not path.exists():
        return []
    out = []
    for x in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written as we read
            out.append(json.loads(x))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every surface's count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--messages", type=int, default=0, help="print the N most common refusals (by kind)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    start = time.time()
    counts = {k: max(1, round(v * args.scale)) for k, v in COUNTS.items()}
    tasks = generate(counts, args.seed)
    indexed = [(i, surface, task) for i, (surface, task) in enumerate(tasks)]
    # a batch holds one surface: a child loads only the engines it needs (torch for the trial, the tokenizer)
    batches = [chunk for surface in COUNTS for chunk in _chunks([t for t in indexed if t[1] == surface])]
    print(
        f"{len(tasks):,} runs ({', '.join(f'{k} {v}' for k, v in counts.items())}), seed {args.seed}; batches of "
        f"{BATCH_SIZE} under RLIMIT_AS {MEMORY_LIMIT >> 30} GiB and {RUN_SECONDS} s a run",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="fuzz_options_") as tmp:
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda b: run_batch(b[1], Path(tmp), b[0]), enumerate(batches)))
    results = [r for batch in done for r in batch]
    return report(tasks, results, time.time() - start, args.messages)


def _kind(surface: str, task: dict, detail: str) -> str:
    """A refusal's message without the run's own values, to count messages by kind."""
    what = task.get("kind") or surface
    return f"{what}: " + " ".join(w for w in detail.split() if not any(c.isdigit() for c in w))[:110]


def outcome_table(
    tasks: list,
    results: list,
    surfaces: list[str],
    outcomes: tuple[str, ...],
    seconds: float,
    width: int = 22,
    cell: int = 11,
) -> Counter:
    """Print how the runs ended, a row per surface and one for all, and their count and time; the totals."""
    table: dict[str, Counter] = {}
    for index, outcome, _ in results:
        table.setdefault(tasks[index][0], Counter())[outcome] += 1
    print(f"\n{'surface':<{width}}" + "".join(f"{o:>{cell}}" for o in outcomes))
    for surface in surfaces:
        if surface in table:
            print(f"{surface:<{width}}" + "".join(f"{table[surface][o]:>{cell},}" for o in outcomes))
    total = Counter(outcome for _, outcome, _ in results)
    print(f"{'all':<{width}}" + "".join(f"{total[o]:>{cell},}" for o in outcomes))
    print(f"\n{len(results):,} runs in {seconds:.0f} s")
    return total


def report(tasks: list, results: list, seconds: float, messages: int = 0) -> int:
    said: Counter = Counter()
    for index, outcome, detail in results:
        if outcome == "refused":
            said[_kind(*tasks[index], detail)] += 1
    for text, n in said.most_common(messages):
        print(f"  {n:>6,} x {text}")
    total = outcome_table(tasks, results, list(COUNTS), OUTCOMES, seconds)
    bad = [r for r in results if r[1] in BAD]
    for index, outcome, detail in bad[:30]:
        print(f"  {outcome}: {tasks[index][0]} {' '.join(tasks[index][1]['argv'])[:200]!r}: {detail}")
    print(
        f"tracebacks {total['traceback']}, hangs {total['hang']}, memory blow-ups {total['blow-up']}, written "
        f"elsewhere {total['elsewhere']}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
