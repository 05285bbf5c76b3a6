"""Fuzz the plan files and command-line options through the command line's own entry point, with hard limits.

Generated plans (valid plans with fields replaced by wrong types, out-of-range and special values; YAML anchors,
alias bombs, tags, merge keys, multiple documents, deep nesting; JSON with huge numbers and NaN; binary bytes) and
generated options (``--mfu``, ``--overhead-gib``, ``--megatron-bridge-version``, ``--format``, ``--lengths-csv``,
``--out``) run through ``advisor.cli.main`` in batches, each batch in a child process limited to 2 GiB of address
space and 60 s. Each run ends as one of:

    accepted      exit 0
    refused       exit 2 with one ``error:`` line (or argparse's usage line) on stderr
    traceback     any other exception or exit code
    hang          the batch's 60 s ran out on this input
    blow-up       MemoryError, or the child killed by a signal

It exits non-zero unless tracebacks, hangs and blow-ups are all zero.

    python bench/fuzz_plans.py                    # 1,500 plans and 500 option sets, seed 0
    python bench/fuzz_plans.py --plans 300 --options 100 --seed 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEMORY_LIMIT = 2 << 30
BATCH_SECONDS = 60
BATCH_SIZE = 100
OUTCOMES = ("accepted", "refused", "traceback", "hang", "blow-up")
BAD = ("traceback", "hang", "blow-up")
PRESETS = ["llama3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "qwen2.5-vl-7b", "deepseek-v3"]
ODD = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    3,
    7,
    2**31,
    2**53,
    2**63,
    2**64,
    10**40,
    -(10**30),
    1.5,
    0.0,
    -0.0,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    "4096",
    "4096x",
    "false",
    "true",
    "maybe",
    "null",
    "NaN",
    "1e3",
    "llama3.1-8b",
    "../../etc/passwd",
    "/proc/self/mem",
    "x" * 5000,
    "\u202e",
    [],
    [1],
    [8, 8],
    ["a"],
    {},
    {"a": 1},
    [[[[[[[[1]]]]]]]],
    {"preset": "llama3.1-8b"},
]
FIELDS = {
    "parallel": ["gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "sp", "cp_comm_type", "hierarchical_cp_sizes"],
    "training": [
        "task",
        "seq_length",
        "micro_batch_size",
        "global_batch_size",
        "global_batch_samples",
        "recompute",
        "distributed_optimizer",
        "precision",
        "peft",
        "lora_rank",
        "cuda_graphs",
    ],
    "packing": ["mode", "pack_size", "algorithm", "seed", "pad_seq_to_mult"],
    "hardware": ["gpu", "memory_gib", "bf16_tflops"],
    "data": ["lengths", "column"],
    "model": [
        "preset",
        "hidden_size",
        "num_layers",
        "num_attention_heads",
        "num_query_groups",
        "ffn_hidden_size",
        "vocab_size",
        "kv_channels",
        "num_moe_experts",
        "moe_layer_freq",
        "vision",
        "window_size",
        "mtp_num_layers",
        "family",
    ],
}


def valid_plan(rng: random.Random) -> dict:
    dp, tp, cp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2])
    return {
        "version": 2,
        "model": {"preset": rng.choice(PRESETS)},
        "parallel": {"gpus": dp * tp * cp, "tp": tp, "cp": cp, "sp": tp > 1},
        "training": {"seq_length": rng.choice([512, 1024, 4096]), "global_batch_size": 8 * dp, "micro_batch_size": 1},
        "packing": {"mode": rng.choice(["auto", "offline", "none"])},
        "hardware": {"gpu": rng.choice(["H100-80GB", "A100-40GB"])},
    }


def odd_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if roll < 0.7 or depth > 3:
        return rng.choice(ODD)
    if roll < 0.85:
        return [odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "gpus", "preset", "x"]): odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def broken_plan(rng: random.Random) -> dict:
    plan = valid_plan(rng)
    for _ in range(rng.randint(1, 3)):
        section = rng.choice([*FIELDS, "extra", "model"])
        if section in FIELDS and rng.random() < 0.8:
            plan.setdefault(section, {})
            if isinstance(plan[section], dict):
                plan[section][rng.choice(FIELDS[section])] = odd_value(rng)
        else:
            plan[section] = odd_value(rng)
    return plan


def yaml_special(rng: random.Random) -> str:
    roll = rng.randrange(9)
    if roll == 0:  # alias bomb of random depth and width
        width, depth = rng.randint(2, 12), rng.randint(2, 12)
        lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
        return "\n".join(lines) + f"\nmodel: llama3.1-8b\nparallel: {{gpus: *a{depth - 1}}}\n"
    if roll == 1:
        tag = rng.choice(
            [
                "!!python/object/apply:os.system ['id']",
                "!!python/name:os.system",
                "!!binary aGk=",
                "!!timestamp 2001-12-14",
                "!!set {a, b}",
                "!custom x",
                "!!float 8",
                "!!str 8",
            ]
        )
        return f"model: llama3.1-8b\nparallel: {{gpus: {tag}}}\n"
    if roll == 2:
        return "base: &b {gpus: 8, tp: 2}\nmodel: llama3.1-8b\nparallel:\n  <<: *b\n  cp: 2\n"
    if roll == 3:
        return "model: llama3.1-8b\n---\nmodel: qwen3-8b\n"
    if roll == 4:
        depth = rng.choice([50, 500, 3000])
        return "model: " + "[" * depth + "]" * depth + "\n"
    if roll == 5:
        depth = rng.choice([50, 300])
        return "model:\n" + "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"
    if roll == 6:
        return "model: llama3.1-8b\nmodel: qwen3-8b\nparallel: {gpus: 8, gpus: 16}\n"
    if roll == 7:
        return "model: llama3.1-8b\ntraining: {seq_length: " + "9" * rng.choice([20, 400, 5000]) + "}\n"
    return "model: llama3.1-8b\nparallel: {gpus: 0x10, tp: 0o2, cp: +1, sp: yes, vpp: ~}\n"


def plan_input(rng: random.Random, folder: Path, i: int) -> list[str]:
    roll = rng.random()
    if roll < 0.5:
        name, text = f"p{i}.yaml", yaml.safe_dump(broken_plan(rng), allow_unicode=True)
    elif roll < 0.65:
        name = f"p{i}.json"
        text = json.dumps(broken_plan(rng), allow_nan=True)
        if rng.random() < 0.3:
            text = text.replace("8", "1" + "0" * rng.choice([30, 400]), 1)
    elif roll < 0.9:
        name, text = f"p{i}.yaml", yaml_special(rng)
    else:
        name = f"p{i}.yaml"
        path = folder / name
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))))
        return ["estimate", str(path), "--lengths", str(folder / "lengths.csv"), "--quiet"]
    path = folder / name
    path.write_text(text, errors="surrogatepass")
    command = rng.choice(["estimate", "estimate", "export", "recommend"]) if rng.random() < 0.2 else "estimate"
    extra = ["--format", rng.choice(["python", "plan", "markdown"])] if command == "export" else []
    return [command, str(path), "--lengths", str(folder / "lengths.csv"), "--quiet", *extra]


OPTION_VALUES = [
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "50",
    "1",
    "0.4",
    "1e-300",
    "abc",
    "",
    " ",
    "0x1",
    "1e400",
    "0.5 ",
    "0.6.2",
    "0.6",
    "6",
    "0.6.2'); import os #",
    "v1.2.3",
    "1.2.3.4",
    "9999.9999.9999",
]


def option_input(rng: random.Random, folder: Path, i: int) -> list[str]:
    plan = str(ROOT / "sample_data" / "plans" / "llama8b_squad.yaml")
    roll = rng.randrange(5)
    if roll == 0:
        return ["estimate", plan, "--mfu", rng.choice(OPTION_VALUES), "--quiet"]
    if roll == 1:
        return ["estimate", plan, "--overhead-gib", rng.choice(OPTION_VALUES), "--quiet"]
    if roll == 2:
        return ["export", plan, "--megatron-bridge-version", rng.choice(OPTION_VALUES), "--quiet"]
    if roll == 3:
        target = rng.choice(
            [
                str(folder),
                str(folder / "missing" / "x.csv"),
                "/proc/self/x.csv",
                str(folder / f"o{i}"),
                "/dev/full",
                str(folder / f"o{i}.csv"),
            ]
        )
        return ["export", plan, "--format", "megatron-lm", "--lengths-csv", target, "--quiet"]
    return ["export", plan, "--format", rng.choice(["python", "docx", "", "plan", "slurm", "../x"]), "--quiet"]


# ---------------------------------------------------------------------------------------------- child
def run_batch(batch: list[list[str]]) -> list[str]:
    """In the child: each argv through ``advisor.cli.main``; one outcome line per input on stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    from advisor.cli import main

    out = []
    for argv in batch:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
        except SystemExit as e:  # argparse: usage and exit 2
            code = e.code
        except MemoryError:
            out.append("blow-up")
            continue
        except BaseException as e:  # noqa: BLE001 - what we count
            out.append(f"traceback {type(e).__name__}: {str(e)[:120]!r} {argv[:2]}")
            continue
        text = err.getvalue()
        if code == 0:
            out.append("accepted")
        elif code == 2 and ("error:" in text or "usage:" in text) and "Traceback" not in text:
            out.append("blow-up" if "MemoryError" in text else "refused")
        else:
            out.append(f"traceback exit {code}: {text[-200:]!r} {argv[:2]}")
    return out


def child_main() -> None:
    batch = json.loads(sys.stdin.read())
    for line in run_batch(batch):
        print(line, flush=True)


def run(batches: list[list[list[str]]]) -> tuple[Counter, list[str]]:
    counts, examples = Counter(), []
    for k, batch in enumerate(batches):
        started = time.time()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child"],
                input=json.dumps(batch),
                text=True,
                capture_output=True,
                timeout=BATCH_SECONDS,
                cwd=ROOT,
            )
            lines = proc.stdout.splitlines()
            if proc.returncode < 0:
                lines.append("blow-up")
        except subprocess.TimeoutExpired as e:
            lines = (
                (e.stdout or b"").decode().splitlines()
                if isinstance(e.stdout, bytes)
                else (e.stdout or "").splitlines()
            )
            lines.append("hang")
            examples.append(f"hang at {batch[len(lines) - 1][:2]}")
        for line in lines:
            kind = line.split(" ", 1)[0]
            counts[kind] += 1
            if kind in BAD and len(examples) < 20:
                examples.append(line)
        # inputs after a hang or a crash in the batch did not run: they are not counted
        print(f"  batch {k + 1}/{len(batches)}: {len(lines)} runs in {time.time() - started:.1f} s", file=sys.stderr)
    return counts, examples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=1500)
    parser.add_argument("--options", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main()
        return 0
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fuzz-plans-") as tmp:
        folder = Path(tmp)
        (folder / "lengths.csv").write_text("length\n" + "\n".join(str(rng.randint(50, 3000)) for _ in range(300)))
        inputs = [plan_input(rng, folder, i) for i in range(args.plans)]
        inputs += [option_input(rng, folder, i) for i in range(args.options)]
        batches = [inputs[i : i + BATCH_SIZE] for i in range(0, len(inputs), BATCH_SIZE)]
        print(
            f"{len(inputs)} runs of `python -m advisor` ({args.plans} plans, {args.options} option sets), "
            f"seed {args.seed}, batches of {BATCH_SIZE} under {MEMORY_LIMIT >> 30} GiB and {BATCH_SECONDS} s"
        )
        counts, examples = run(batches)
    print("  ".join(f"{k}: {counts.get(k, 0):,}" for k in OUTCOMES))
    for line in examples:
        print("  " + line)
    return 1 if any(counts.get(k, 0) for k in BAD) else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    raise SystemExit(main())
