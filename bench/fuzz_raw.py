"""Fuzz the raw-data readers of ``python -m advisor tokenize`` and of the dashboard's raw upload in child processes
with hard limits, and count how each input ended.

Generated inputs of every surface: JSONL (SFT and chat records, mutated, with lone surrogates, bytes that are not
UTF-8, deep ``tools`` schemas, a million values, lines of 65-80 MB), gzip and zstd files (one-line bombs of up to
3.5 GB, truncated streams, garbage), Parquet (dictionary and list bombs, thousands of row groups, binary columns
holding invalid UTF-8, damaged bytes), Arrow IPC streams, folders (symlinks leading out, loops, FIFOs, ``**``
globs over a link to the folder itself) and odd file names (a newline, an ANSI escape, only ``.jsonl``, bytes that
are not UTF-8). Each goes through ``engine.tokenize`` as the CLI runs it (``--on-bad error``, then ``skip`` when
refused, sometimes ``--sample``) and, for ``.jsonl``/``.parquet`` files, through ``raw_data.tokenize_upload`` as the
dashboard runs it, in batches, each batch in a child process limited to 2 GiB of address space (``RLIMIT_AS``)
and 60 s. Each read ends as one of:

    accepted      lengths, with every record counted (tokenized + left out = records read)
    refused       an InputError naming the file (or folder, or upload)
    traceback     any other exception (or an unnamed refusal, or records unaccounted for)
    hang          the batch's 60 s ran out on this input
    blow-up       MemoryError (also when wrapped in an InputError), or the child killed by a signal

Run from the repository root; it exits non-zero unless tracebacks, hangs and blow-ups are all zero.

    python bench/fuzz_raw.py                          # 120 inputs per surface, seed 0 (under 10 minutes, 1 core)
    python bench/fuzz_raw.py --per-surface 40 --seed 3 --jobs 2
"""

from __future__ import annotations

import argparse
import gzip
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEMORY_LIMIT = 2 << 30
BATCH_SECONDS = 60
BATCH_SIZE = 25
OUTCOMES = ("accepted", "refused", "traceback", "hang", "blow-up")
BAD = ("traceback", "hang", "blow-up")
WORDS = "the a of packing token model data long short answer question why how é 数据 🙂".split()


# ---------------------------------------------------------------------------------------------- records
def words(rng: random.Random, lo: int = 1, hi: int = 40) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def deep(rng: random.Random, levels: int):
    """A JSON value nested ``levels`` deep (a tools schema gone wrong), built without recursion."""
    value: object = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"p": value}} if rng.random() < 0.5 else [value]
    return value


def sft_record(rng: random.Random) -> dict:
    return {"input": words(rng), "output": words(rng)}


def chat_record(rng: random.Random, tools: bool = True) -> dict:
    msgs = [{"role": "system", "content": words(rng)}] if rng.random() < 0.3 else []
    for _ in range(rng.randint(1, 3)):
        msgs += [{"role": "user", "content": words(rng)}, {"role": "assistant", "content": words(rng)}]
    rec: dict = {"messages": msgs}
    if tools and rng.random() < 0.1:
        rec["tools"] = [{"type": "function", "function": {"name": "f", "parameters": deep(rng, rng.randint(1, 8))}}]
    return rec


def odd_line(rng: random.Random, fmt: str) -> bytes:
    """One hostile JSON line (without its newline)."""
    base = json.dumps(chat_record(rng) if fmt == "chat" else sft_record(rng)).encode()
    roll = rng.random()
    if roll < 0.2:  # a lone surrogate (or a valid pair) written as a JSON escape
        esc = rng.choice([b"\\ud800", b"\\udfff", b"\\uDBFF", b"\\ud83d\\ude00", b"\\\\ud800", b"\\ud800\\u0041"])
        return base.replace(b'": "', b'": "' + esc, 1)
    if roll < 0.35:  # bytes that are not UTF-8
        at = rng.randrange(len(base))
        return base[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]) + base[at:]
    if roll < 0.5:  # deep nesting in a tools schema
        levels = rng.choice([30, 63, 65, 200, 5000, 100_000])
        return (
            json.dumps({"messages": [], "tools": deep(rng, min(levels, 300))}).encode()
            if levels <= 300
            else b'{"messages": [], "tools": ' + b"[" * levels + b"]" * levels + b"}"
        )
    if roll < 0.55:  # a million values
        return b'{"input": "x", "output": "y", "tools": [' + b"[]," * rng.choice([999_990, 1_000_010]) + b"[]]}"
    if roll < 0.7:
        return rng.choice(
            [
                b"[1, 2]",
                b'"text"',
                b"null",
                b"{",
                b'{"input": 5, "output": []}',
                b"{}",
                b"\x00" * 8,
                b'{"input": "' + b"9" * 5000 + b'"}',
                b'{"input": ' + b"9" * 5000 + b"}",
                b'{"messages": "x"}',
                b'{"messages": [{"role": "narrator", "content": 3}]}',
            ]
        )
    return mutate(rng, base)


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Leave alone (most of the time), cut short, overwrite, insert or duplicate bytes."""
    roll = rng.random()
    if roll < 0.6 or not data:
        return data
    data = bytearray(data)
    if roll < 0.7:
        return bytes(data[: rng.randrange(len(data))])
    if roll < 0.85:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    at = rng.randrange(len(data))
    if roll < 0.95:
        return bytes(data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[at:])
    return bytes(data[:at] + data[at : at + 64] * rng.randint(2, 50) + data[at:])


def jsonl_body(rng: random.Random, fmt: str, n: int | None = None) -> bytes:
    n = rng.choice([0, 1, 5, 30, 100, 200]) if n is None else n
    bad = rng.choice([0, 0, 0.05, 0.3, 1.0])
    lines = [
        odd_line(rng, fmt)
        if rng.random() < bad
        else json.dumps(
            chat_record(rng) if fmt == "chat" else sft_record(rng), ensure_ascii=rng.random() < 0.5
        ).encode()
        for _ in range(n)
    ]
    if rng.random() < 0.1:
        lines.insert(rng.randint(0, len(lines)), b"")
    bom = b"\xef\xbb\xbf" if rng.random() < 0.05 else b""
    return bom + b"\n".join(lines) + rng.choice([b"", b"\n", b"\r\n"])


# ---------------------------------------------------------------------------------------------- surfaces
def gen_jsonl(rng: random.Random, folder: Path, i: int, fmt: str, small: bool = False) -> str:
    path = folder / f"{i:05d}.jsonl"
    body = jsonl_body(rng, fmt)
    if rng.random() < 0.01 and not small:  # a line over the 64 MB a record may have (and the dashboard's 4 MB)
        body += b'\n{"input": "' + b"w " * rng.randint(33 << 20, 40 << 20) + b'", "output": "x"}\n'
    elif rng.random() < 0.04:
        body += b'\n{"input": "' + b"w " * rng.randint(2 << 20, 3 << 20) + b'", "output": "x"}\n'
    path.write_bytes(body)
    return str(path)


_BOMB_PARTS: dict[str, bytes] = {}


def _bomb_part(kind: str) -> bytes:
    """One gzip member / zstd frame of 64 MiB of one letter: bombs are these, repeated (both formats read
    members and frames one after another as one stream)."""
    if kind not in _BOMB_PARTS:
        block = b"a" * (64 << 20)
        if kind == "gz":
            _BOMB_PARTS[kind] = gzip.compress(block, 9)
        else:
            import zstandard

            _BOMB_PARTS[kind] = zstandard.ZstdCompressor(level=3).compress(block)
    return _BOMB_PARTS[kind]


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def gen_compressed(rng: random.Random, folder: Path, i: int, fmt: str, kind: str, small: bool = False) -> str:
    path = folder / f"{i:05d}.jsonl.{kind}"
    roll = rng.random()
    if roll < 0.15:  # a bomb: good lines, then one line of 64 MiB x k (up to 3.5 GB), maybe cut short
        k = 1 if small else rng.choice([1, 1, 2, 2, 4, 8, 8, 24, 56])
        data = (
            _compress(kind, jsonl_body(rng, fmt, 3) + b'\n{"input": "')
            + _bomb_part(kind) * k
            + _compress(kind, b'", "output": "x"}\n' + jsonl_body(rng, fmt, 2))
        )
        if rng.random() < 0.3:
            data = data[: rng.randrange(1, len(data))]
    elif roll < 0.25:  # a bomb of many blank lines
        data = _compress(kind, b"\n" * (rng.randint(1, 4 if small else 64) << 20))
    elif roll < 0.5:  # truncated
        whole = _compress(kind, jsonl_body(rng, fmt, rng.choice([50, 200])))
        data = whole[: rng.randrange(0, len(whole) + 1)]
    elif roll < 0.6:  # garbage behind a magic, or after a good stream
        magic = b"\x1f\x8b\x08\x00" if kind == "gz" else b"\x28\xb5\x2f\xfd"
        data = rng.choice([magic, _compress(kind, jsonl_body(rng, fmt, 5))]) + os.urandom(rng.randint(0, 300))
    else:
        data = mutate(rng, _compress(kind, jsonl_body(rng, fmt)))
    path.write_bytes(data)
    return str(path)


def _records_table(rng: random.Random, fmt: str, n: int):
    import pyarrow as pa

    # no tools schemas: their mixed nesting has no Arrow type
    return pa.Table.from_pylist([chat_record(rng, tools=False) if fmt == "chat" else sft_record(rng) for _ in range(n)])


def gen_table(rng: random.Random, fmt: str, small: bool = False):
    """A table of records, a bomb, or one with binary values; (table, row group size). The dictionary bombs
    all decode past 256 MB: a smaller one is just a data set of long texts, and takes its time to tokenize."""
    import numpy as np
    import pyarrow as pa

    roll = rng.random()
    if roll < 0.12:  # a dictionary bomb: one long string standing for every row
        rows, width = rng.choice([(3000, 100_000), (5000, 200_000), (20_000, 1_000_000), (80, 4 << 20)])
        d = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["x " * (width // 2)]))
        if fmt == "chat":
            msg = pa.StructArray.from_arrays([pa.array(["user"] * rows), d], ["role", "content"])
            offsets = pa.array(np.arange(rows + 1, dtype=np.int32))
            return pa.table({"messages": pa.ListArray.from_arrays(offsets, msg)}), rng.choice([None, 100])
        return pa.table({"input": d, "output": ["y"] * rows}), rng.choice([None, 100])
    if roll < 0.2:  # a list bomb: one row with tens of millions of zeros
        n = 1_000_000 if small else rng.choice([10_000_000, 40_000_000])
        ids = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), pa.nulls(n, pa.int8()).fill_null(0))
        return pa.table({"input": ["x"], "output": ["y"], "input_ids": ids}), None
    if roll < 0.3:  # many row groups
        n = 300 if small else rng.choice([500, 2500, 6000])
        return _records_table(rng, fmt, n), 1
    if roll < 0.45 and fmt == "sft":  # binary columns, some values not UTF-8
        vals = [rng.choice([b"fine", b"\xff\xfe", "é".encode(), b"\xed\xa0\x80", b""]) for _ in range(50)]
        return pa.table({"input": pa.array(vals, pa.binary()), "output": ["y"] * 50}), rng.choice([None, 7])
    return _records_table(rng, fmt, rng.choice([0, 1, 20, 300])), rng.choice([None, 64])


def gen_parquet(rng: random.Random, folder: Path, i: int, fmt: str, small: bool = False) -> str:
    import pyarrow.parquet as pq

    table, group = gen_table(rng, fmt, small)
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group)
    path = folder / f"{i:05d}.parquet"
    path.write_bytes(mutate(rng, buf.getvalue()) if group != 1 and table.num_rows < 1000 else buf.getvalue())
    return str(path)


def gen_arrow(rng: random.Random, folder: Path, i: int, fmt: str, small: bool = False) -> str:
    import pyarrow as pa

    table, _ = gen_table(rng, fmt, small)
    if table.num_rows > 10_000 or "input_ids" in table.column_names:
        table = table.slice(0, 100)
    sink = io.BytesIO()
    with (pa.ipc.new_stream if rng.random() < 0.7 else pa.ipc.new_file)(sink, table.schema) as w:
        w.write_table(table, max_chunksize=rng.choice([None, 10]))
    path = folder / f"{i:05d}.arrow"
    path.write_bytes(mutate(rng, sink.getvalue()))
    return str(path)


def gen_folder(rng: random.Random, folder: Path, i: int, fmt: str, small: bool = False) -> str:
    """A folder of shards with stray things beside them; sometimes a ``**`` glob over it."""
    home = folder / f"f{i:05d}"
    home.mkdir()
    (home / "part-0.jsonl").write_bytes(jsonl_body(rng, fmt, 10))
    outside = folder / f"outside{i}.jsonl"
    outside.write_bytes(jsonl_body(rng, fmt, 3))
    makers = [
        ("in.jsonl", lambda p: os.symlink(home / "part-0.jsonl", p)),
        ("out.jsonl", lambda p: os.symlink(outside, p)),
        ("etc.jsonl", lambda p: os.symlink("/etc/hostname", p)),
        ("proc.jsonl", lambda p: os.symlink("/proc/self/environ", p)),
        ("loop.jsonl", lambda p: os.symlink(p, p)),
        ("gone.jsonl", lambda p: os.symlink(p.with_name("nothing"), p)),
        ("up", lambda p: os.symlink(home, p)),
        ("dir.jsonl", lambda p: os.symlink(".", p)),
        ("pipe.jsonl", os.mkfifo),
        ("sub", lambda p: (p.mkdir(), os.symlink(home, p / "again"))),
        ("state.json", lambda p: p.write_text("{}")),
    ]
    for name, make in makers:
        if rng.random() < 0.4:
            make(home / name)
    if rng.random() < 0.3:
        return str(home / "**" / "*.jsonl")
    return str(home)


ODD_NAMES = [
    "a\nb.jsonl",
    "c\x1b[31md.jsonl",
    ".jsonl",
    ".parquet",
    "-x.jsonl",
    " s p a c e .jsonl",
    "x" * 240 + ".jsonl",
    "é数据.jsonl",
    os.fsdecode(b"\xff\xfe.jsonl"),
    "tab\there.parquet",
    "UPPER.JSONL",
    "q?.jsonl",
    "[x].jsonl",
    "star*.jsonl",
]


def gen_names(rng: random.Random, folder: Path, i: int, fmt: str, small: bool = False) -> str:
    home = folder / f"n{i:05d}"
    home.mkdir()
    name = rng.choice(ODD_NAMES)
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        pq.write_table(_records_table(rng, fmt, 5), home / name)
    else:
        (home / name).write_bytes(jsonl_body(rng, fmt, 5))
    return str(home / name)


SURFACES = {
    "jsonl": gen_jsonl,
    "gzip": lambda rng, folder, i, fmt, small=False: gen_compressed(rng, folder, i, fmt, "gz", small),
    "zstd": lambda rng, folder, i, fmt, small=False: gen_compressed(rng, folder, i, fmt, "zst", small),
    "parquet": gen_parquet,
    "arrow": gen_arrow,
    "folder": gen_folder,
    "names": gen_names,
}


def generate(root: Path, per_surface: int, seed: int, small: bool = False) -> list[tuple[str, str, str]]:
    """Write every input under ``root``: (surface, fmt, path) triples. ``small``: bombs of at most 64 MiB and no
    80 MB lines (the in-process test of the generators)."""
    rng = random.Random(seed)
    inputs = []
    for surface, gen in SURFACES.items():
        folder = root / surface
        folder.mkdir()
        for i in range(per_surface):
            fmt = "chat" if rng.random() < 0.4 else "sft"
            inputs.append((surface, fmt, gen(rng, folder, i, fmt, small)))
    return inputs


# ---------------------------------------------------------------------------------------------- the child
def tokenizers() -> tuple[str, str, str]:
    """(SFT tokenizer folder, chat tokenizer folder, a note): the doctests' example tokenizer for both, unless its
    template cannot build Bridge's loss mask, then the bundled tiny-bpe for chat."""
    from advisor.data.tokenize.chat import ChatSettings, chat_lengths
    from advisor.data.tokenize.tokenizer import _example_folder, load_tokenizer
    from advisor.errors import InputError
    from advisor.ui.raw_data import tokenizer_choices

    example = str(_example_folder())
    try:
        chat_lengths(
            [{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}],
            load_tokenizer(example),
            ChatSettings(),
        )
        return example, example, "example tokenizer for SFT and chat"
    except InputError:
        return (
            example,
            tokenizer_choices("")["tiny-bpe"],
            "example tokenizer for SFT, tiny-bpe for chat "
            "(the example's template cannot build the assistant loss mask)",
        )


def classify(run, named: tuple[str, ...]) -> tuple[str, str]:
    """Run one read; (outcome, detail)."""
    from advisor.errors import InputError

    try:
        result = run()
    except MemoryError as e:
        return "blow-up", f"MemoryError: {e}"[:300]
    except InputError as e:
        if isinstance(e.__context__, MemoryError):
            return "blow-up", f"MemoryError under InputError: {e}"[:300]
        if not any(n and n in str(e) for n in named) and not str(e).startswith(("tokenize", "tokenizer")):
            return "traceback", f"InputError not naming the input: {e}"[:300]
        return "refused", str(e)[:300]
    except Exception as e:  # noqa: BLE001 - counting them is the point
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} at {frame.filename}:{frame.lineno}"
    return check_result(result)


def check_result(result) -> tuple[str, str]:
    """Accepted only when every record is accounted for: tokenized plus left out equals what was selected."""
    import numpy as np

    from advisor.data.lengths import LengthHistogram

    if isinstance(result, LengthHistogram):
        left = sum(e.count for e in result.excluded)
        return (
            ("accepted", f"{result.num_samples} samples, {left} left out")
            if result.num_samples > 0
            else ("traceback", "an empty histogram")
        )
    left = sum(e.count for e in result.excluded)
    if result.lengths.size + left != result.selected or np.any(result.lengths < 0):
        return "traceback", f"records unaccounted for: {result.lengths.size} + {left} != {result.selected}"
    return "accepted", f"{result.lengths.size} tokenized, {left} left out"


def reads(path: str, fmt: str, sft_tok: str, chat_tok: str, rng: random.Random):
    """(how, run, names a refusal may give) for every read of one input."""
    from advisor.data.guard import display_name
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.engine import TokenizeJob, tokenize
    from advisor.data.tokenize.sft import SftSettings
    from advisor.ui import raw_data

    tok = chat_tok if fmt == "chat" else sft_tok
    settings = ChatSettings() if fmt == "chat" else SftSettings()
    base = os.path.basename(path.rstrip(os.sep))
    named = (base, display_name(base), display_name(path))

    def cli(on_bad: str, sample: int | None = None):
        return lambda: tokenize(
            TokenizeJob(data=path, tokenizer=tok, fmt=fmt, settings=settings, on_bad=on_bad),
            workers=1,
            sample=sample,
            seed=rng.randint(0, 99),
        )

    yield "error", cli("error"), named
    yield "skip", cli("skip"), named
    if rng.random() < 0.2:
        yield "sample", cli("skip", rng.choice([1, 7, 50])), named
    if (
        os.path.isfile(path)
        and not os.path.islink(path)
        and path.lower().endswith(raw_data.RAW_SUFFIXES)
        and os.path.getsize(path) <= raw_data.RAW_UPLOAD_LIMIT_MB << 20
    ):
        data = Path(path).read_bytes()
        yield (
            "upload",
            (lambda: raw_data.tokenize_upload(data, base, os.path.basename(tok), fmt, 4096, env=tok)),
            (base[:80], display_name(base)[:80]),
        )


def worker(task_file: str, out_file: str) -> None:
    """Read each input of a batch, logging a start line before and an end line after, so the parent can tell
    which input a hang or a crash happened on."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    tasks = json.loads(Path(task_file).read_text())
    sft_tok, chat_tok = tasks["tokenizers"]
    with open(out_file, "a", buffering=1) as out:
        for index, path, fmt in tasks["todo"]:
            rng = random.Random(index)
            out.write(json.dumps(["start", index]) + "\n")
            for how, run, named in reads(path, fmt, sft_tok, chat_tok, rng):
                out.write(json.dumps(["begin", index, how]) + "\n")
                outcome = classify(run, named)
                out.write(json.dumps(["read", index, how, *outcome]) + "\n")
            out.write(json.dumps(["end", index]) + "\n")


# ---------------------------------------------------------------------------------------------- the parent
def run_batch(tasks: list, toks: tuple[str, str], workdir: Path, batch_id: int) -> list[tuple[str, int, str, str]]:
    """Run tasks in children until all are done; a hang or a crash is charged to the read that never ended."""
    from bench._watch import child_env, run_watched

    results, todo, attempt = [], list(tasks), 0
    # RLIMIT_AS counts address space, not memory: pyarrow's mimalloc reserves 1 GiB arenas and glibc 64 MiB per
    # thread, which made a 200 kB Arrow file "blow up" a 2 GiB child with 12 MB of real memory. The system
    # allocator and two arenas keep the limit about what is actually used.
    env = child_env(
        RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", ARROW_DEFAULT_MEMORY_POOL="system", MALLOC_ARENA_MAX="2"
    )
    while todo:
        attempt += 1
        task_file, out_file = workdir / f"b{batch_id}_{attempt}.json", workdir / f"b{batch_id}_{attempt}.out"
        task_file.write_text(json.dumps({"todo": todo, "tokenizers": toks}))
        end = run_watched(
            [sys.executable, __file__, "--worker", str(task_file), str(out_file)],
            env=env,
            cwd=workdir,
            out_file=out_file,
            seconds=BATCH_SECONDS,
        )
        lines = end.lines
        finished = {x[1] for x in lines if x[0] == "end"}
        results += [(x[2], x[1], x[3], x[4]) for x in lines if x[0] == "read"]
        open_reads = [x for x in lines if x[0] == "begin" and x[1] not in finished]
        done = {(x[1], x[2]) for x in lines if x[0] == "read"}
        stuck = [x for x in open_reads if (x[1], x[2]) not in done]
        what = "hang" if end.hung else "blow-up"
        if stuck:
            _, culprit, how = stuck[-1]
            results.append((how, culprit, what, end.detail()))
            finished.add(culprit)
        elif end.returncode != 0 or end.hung:
            started = [x[1] for x in lines if x[0] == "start" and x[1] not in finished]
            if not started:
                raise RuntimeError(f"a worker failed outside any input: {end.err[-2000:]}")
            results.append(("load", started[-1], what, end.err[-300:]))
            finished.add(started[-1])
        todo = [t for t in todo if t[0] not in finished]
    return results


def run_all(inputs: list[tuple[str, str, str]], workdir: Path, jobs: int) -> list[tuple[str, int, str, str]]:
    sft_tok, chat_tok, note = tokenizers()
    print(f"tokenizers: {note}", flush=True)
    indexed = [(i, path, fmt) for i, (_, fmt, path) in enumerate(inputs)]
    rng = random.Random(len(inputs))
    rng.shuffle(indexed)  # bombs spread over the batches, so no batch is all bombs
    batches = [indexed[i : i + BATCH_SIZE] for i in range(0, len(indexed), BATCH_SIZE)]
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda b: run_batch(b[1], (sft_tok, chat_tok), workdir, b[0]), enumerate(batches)))
    return [r for batch in done for r in batch]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-surface", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="fuzz_raw_") as tmp:
        root = Path(tmp)
        (root / "inputs").mkdir()
        inputs = generate(root / "inputs", args.per_surface, args.seed)
        print(
            f"generated {len(inputs):,} inputs in {time.time() - start:.0f} s (seed {args.seed}); reading them in "
            f"batches of {BATCH_SIZE} under RLIMIT_AS {MEMORY_LIMIT >> 30} GiB and a {BATCH_SECONDS} s timeout",
            flush=True,
        )
        (root / "work").mkdir()
        results = run_all(inputs, root / "work", args.jobs)
    return report(inputs, results, time.time() - start)


def report(inputs: list[tuple[str, str, str]], results: list[tuple[str, int, str, str]], seconds: float) -> int:
    table: dict[tuple[str, str], Counter] = {}
    for how, index, outcome, _ in results:
        table.setdefault((inputs[index][0], how), Counter())[outcome] += 1
    print(f"\n{'surface':<10}{'read':<8}" + "".join(f"{o:>11}" for o in OUTCOMES))
    order = list(SURFACES)
    for (surface, how), counts in sorted(table.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        print(f"{surface:<10}{how:<8}" + "".join(f"{counts[o]:>11,}" for o in OUTCOMES))
    total = Counter(outcome for _, _, outcome, _ in results)
    print(f"{'all':<10}{'':<8}" + "".join(f"{total[o]:>11,}" for o in OUTCOMES))
    print(f"\n{len(inputs):,} inputs, {len(results):,} reads in {seconds:.0f} s")
    bad = [r for r in results if r[2] in BAD]
    for how, index, outcome, detail in bad[:30]:
        print(f"  {outcome}: {how} {inputs[index][0]} {inputs[index][2][-80:]!r}: {detail}")
    print(f"tracebacks {total['traceback']}, hangs {total['hang']}, memory blow-ups {total['blow-up']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
