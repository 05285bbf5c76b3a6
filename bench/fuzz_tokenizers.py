"""Fuzz tokenizer folders and chat templates in child processes with hard limits, and count how each run ended.

Thousands of generated tokenizer folders (``tokenizer_config.json`` values of every type, ``auto_map`` pointing at
a planted module, very many special tokens, deeply nested configs, named-template lists, ``special_tokens_map.json``,
``chat_template.jinja``, ``config.json``, damaged ``tokenizer.json`` files, one that makes the Rust library panic)
and chat templates (nested loops, string and list products, powers, ``tojson`` indents, ``lipsum``,
``strftime_now`` loops, macro recursion and fan-out, ``raise_exception``, undefined names, sandbox escapes, huge
literals) are tokenized over a few small chat records through the code path ``python -m advisor tokenize --format
chat --loss-mode full --on-bad skip --workers 1`` runs (``engine.tokenize``), in batches, each batch in a child
process limited to 2 GiB of address space (``RLIMIT_AS``) and 60 s. Every planted module writes a marker file if
it is ever imported. Each run ends as one of:

    accepted        a TokenizeResult with lengths (records over a template's limits are counted, not fatal)
    refused         an InputError naming the tokenizer folder or one of its files
    traceback       any other exception, or a refusal that names neither
    hang            the batch's 60 s ran out on this input
    blow-up         MemoryError, or the child killed by a signal
    code-executed   a planted module's marker file appeared

Run from the repository root; it exits non-zero unless tracebacks, hangs, blow-ups and code executions are zero.

    python bench/fuzz_tokenizers.py                       # 800 folders and 800 templates, seed 0 (about 8 min)
    python bench/fuzz_tokenizers.py --per-surface 200 --seed 3 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
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
BATCH_SIZE = 50
OUTCOMES = ("accepted", "refused", "traceback", "hang", "blow-up", "code-executed")
BAD = ("traceback", "hang", "blow-up", "code-executed")
SURFACES = ("folder", "template")
MARKERS = "markers"  # folder (under the run's root) planted modules write into


# ---------------------------------------------------------------------------------------------- the base
def base_tokenizer(folder: Path) -> None:
    """A small word-level tokenizer with the special tokens real chat templates use."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = [
        "<s>",
        "</s>",
        "<unk>",
        "<|im_start|>",
        "<|im_end|>",
        "user",
        "assistant",
        "system",
        "tool",
        "Hello",
        "world",
        "x",
        "y",
        ":",
        "\n",
        "[",
        "]",
        "{",
        "}",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))


BENIGN = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "chat_template": BENIGN,
}
RECORDS = [
    {"messages": [{"role": "user", "content": "Hello world"}, {"role": "assistant", "content": "x y"}]},
    {
        "messages": [
            {"role": "system", "content": "x"},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "world"},
        ],
        "tools": [{"name": "f", "parameters": {}}],
    },
    {"conversations": [{"from": "human", "value": "y"}, {"from": "gpt", "value": "x"}]},
    {"messages": [{"role": "user", "content": "Hello " * 50}, {"role": "assistant", "content": None}]},
]
EVIL = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


# ---------------------------------------------------------------------------------------------- templates
def number(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 7, 64, 100, 1000, 10**5, 10**6, 10**9, 10**18, -1])


def template_piece(rng: random.Random) -> str:
    """One construct, benign or hostile, with random sizes."""
    n, m = number(rng), number(rng)
    pieces = [
        BENIGN,
        "{{ bos_token }}{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}{% endfor %}",
        "{% if tools %}{{ tools|tojson }}{% endif %}",
        f"{{{{ 'a' * {n} }}}}",
        f"{{{{ {n} ** {m} }}}}",
        f"{{{{ ({n} ** {m}) * ({m} ** {n}) }}}}",
        f"{{{{ (range({n})|list) * {m} }}}}",
        f"{{% for a in range({n}) %}}{{% for b in range({m}) %}}{{% endfor %}}{{% endfor %}}",
        f"{{% set x = range({n})|list %}}{{% for a in x %}}{{% for b in x %}}{{{{ b }}}}{{% endfor %}}{{% endfor %}}",
        f"{{{{ messages|tojson(indent={n}) }}}}",
        f"{{{{ messages|tojson(separators=(',' * {n}, ':')) }}}}",
        f"{{{{ lipsum({n}) }}}}",
        f"{{% for i in range({n}) %}}{{{{ lipsum() }}}}{{% endfor %}}",
        f"{{% for i in range({n}) %}}{{% for j in range({m}) %}}{{{{ strftime_now('%Y-%m-%d') }}}}{{% endfor %}}"
        "{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        f"{{% macro f(n) %}}{{% if n > 0 %}}{{{{ f(n - 1) }}}}{{{{ f(n - 1) }}}}{{% endif %}}x{{% endmacro %}}"
        f"{{{{ f({min(n, 60)}) }}}}",
        "{% for m in [[[1]]] recursive %}{{ loop(m) }}{% endfor %}",
        "{{ raise_exception('no ' ~ messages[0].role) }}",
        "{{ undefined_thing.attr }}",
        "{{ messages[99].content }}",
        "{{ messages[0].content.nope() }}",
        "{{ ().__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{% set ns = namespace(_x=1) %}",
        "{{ self.__dict__ }}",
        "{{ messages.append(1) }}",
        f"{{% set ns = namespace(s='ab') %}}{{% for i in range({min(n, 200)}) %}}{{% set ns.s = ns.s ~ ns.s %}}"
        "{% endfor %}{{ ns.s|length }}",
        f"{{% set ns = namespace(s=[1]) %}}{{% for i in range({min(n, 200)}) %}}{{% set ns.s = ns.s + ns.s %}}"
        "{% endfor %}{{ ns.s|length }}",
        f"{{% set ns = namespace(s=['x']) %}}{{% for i in range({min(n, 200)}) %}}{{% set ns.s = [ns.s, ns.s] %}}"
        "{% endfor %}{{ ns.s }}",
        f"{{{{ 'a'.ljust({n}) }}}}",
        f"{{{{ '{{:>{n}}}'.format('a') }}}}",
        f"{{{{ '%{n}s' % 'a' }}}}",
        f"{{{{ '%*s' % ({n}, 'a') }}}}",
        f"{{{{ 'a'|center({n}) }}}}",
        f"{{{{ ('a\\n' * 100)|indent({n}) }}}}",
        f"{{{{ ('a b ' * 100)|wordwrap(1, wrapstring='x' * {min(n, 10**6)}) }}}}",
        f"{{{{ ('a' * {min(n, 10**5)})|replace('a', 'bb' * {min(m, 10**5)}) }}}}",
        f"{{{{ (['x' * {min(n, 10**5)}] * {min(m, 10**5)})|join }}}}",
        f"{{{{ [1]|slice({n})|list }}}}",
        f"{{{{ [1, 2]|batch({n})|list }}}}",
        f"{{{{ dict.fromkeys(range({n})) }}}}",
        f"{{{{ ('\\t' * 100).expandtabs({n}) }}}}",
        f"{{{{ ('a' * {min(n, 10**5)}).translate({{97: 'b' * {m}}}) }}}}",
        "{% for x in messages %}{% break %}{% endfor %}{% generation %}{{ messages[-1].content }}{% endgeneration %}",
        "{{ '",
        "{% for %}",
        "{% if x %}",
        "{{ x | nosuchfilter }}",
        "{% endfor %}",
        "'" * rng.randint(1, 5),
        "{{ 1 / 0 }}",
        "{{ 10 ** -5 }}",
        "{{ (1, 2) * 3 }}",
    ]
    return rng.choice(pieces)


def gen_template(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.03:
        return "{{ '" + "x" * rng.choice([10**5, 600_000, 3 * 10**6]) + "' }}"  # huge literals
    if roll < 0.06:
        return "{% if 1 %}" * rng.choice([10, 100, 5000]) + "x" + "{% endif %}" * rng.randint(0, 5000)
    return "".join(template_piece(rng) for _ in range(rng.randint(1, 3)))


# ---------------------------------------------------------------------------------------------- folders
ODD_VALUES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**70,
    1.5,
    float("inf"),
    "",
    "yes",
    "true",
    "<s>",
    "x" * 5000,
    [],
    ["<s>"],
    {},
    {"content": "<s>"},
    {"content": 5},
    {"content": "<x>", "lstrip": "yes"},
    {"content": "<x>", "rstrip": {"a": 1}},
    {"a": {"b": {"c": [1, 2]}}},
    [[["deep"]]],
]
KEYS = [
    "split_special_tokens",
    "add_bos_token",
    "add_eos_token",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "mask_token",
    "additional_special_tokens",
    "extra_special_tokens",
    "added_tokens_decoder",
    "tokenizer_class",
    "model_max_length",
    "padding_side",
    "chat_template",
    "clean_up_tokenization_spaces",
    "legacy",
    "add_prefix_space",
    "trust_remote_code",
    "auto_map",
    "name_or_path",
    "model_input_names",
]
CLASSES = [
    "PreTrainedTokenizerFast",
    "TokenizersBackend",
    "LlamaTokenizer",
    "LlamaTokenizerFast",
    "Qwen2Tokenizer",
    "GPT2Tokenizer",
    "EvilTokenizer",
    "",
    "tokenization_evil.EvilTokenizer",
    "AutoTokenizer",
]


def named_templates(rng: random.Random):
    options = [
        [{"name": "default", "template": BENIGN}, {"name": "tool_use", "template": gen_template(rng)}],
        [{"name": "rag", "template": BENIGN}],
        [{"template": BENIGN}],
        [{"name": ["x"], "template": BENIGN}],
        [{"name": "default", "template": 5}],
        [BENIGN],
        [],
        {"default": BENIGN},
        {"default": 5},
        5,
        [{"name": "default", "template": BENIGN}] * 2,
        [{"name": f"t{i}", "template": BENIGN} for i in range(rng.choice([3, 100]))],
    ]
    return rng.choice(options)


def many_tokens(rng: random.Random, key: str):
    n = rng.choice([10, 1000, 17000, 70000])
    if key == "added_tokens_decoder":
        return {str(100 + i): {"content": f"<t{i}>", "special": True} for i in range(n)}
    if key == "extra_special_tokens" and rng.random() < 0.5:
        return {f"t{i}_token": f"<t{i}>" for i in range(n)}
    return [f"<t{i}>" for i in range(n)]


def mutate_config(rng: random.Random, config: dict, folder: Path, marker: Path) -> None:
    """One change to a folder: a field's value or type, code, size or depth."""
    roll = rng.random()
    if roll < 0.30:
        config[rng.choice(KEYS)] = rng.choice(ODD_VALUES)
    elif roll < 0.40:
        key = rng.choice(["additional_special_tokens", "extra_special_tokens", "added_tokens_decoder"])
        config[key] = many_tokens(rng, key)
    elif roll < 0.50:
        plant(folder, marker, rng)
        config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
        if rng.random() < 0.5:
            config["tokenizer_class"] = "EvilTokenizer"
        if rng.random() < 0.3:
            config["trust_remote_code"] = True
    elif roll < 0.58:
        plant(folder, marker, rng)
        config["tokenizer_class"] = rng.choice(CLASSES)
    elif roll < 0.70:
        config["chat_template"] = named_templates(rng)
    elif roll < 0.75:
        depth = rng.choice([10, 70, 1000, 100000])
        config["deep"] = "__DEEP__"
        config["__depth__"] = depth
    elif roll < 0.80:
        (folder / "special_tokens_map.json").write_text(
            json.dumps({rng.choice(["bos_token", "additional_special_tokens", "pad_token"]): rng.choice(ODD_VALUES)})
        )
    elif roll < 0.86:
        data = gen_template(rng).encode()
        (folder / "chat_template.jinja").write_bytes(data if rng.random() < 0.8 else b"\xff\xfe" + data)
    elif roll < 0.90:
        plant(folder, marker, rng)
        (folder / "config.json").write_text(
            json.dumps(
                rng.choice(
                    [
                        {
                            "model_type": "llama",
                            "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]},
                        },
                        {"model_type": "evil", "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}},
                        {"model_type": "llama", "tokenizer_class": "EvilTokenizer"},
                        {"model_type": 5},
                        [],
                    ]
                )
            )
        )
    elif roll < 0.93:
        (folder / "added_tokens.json").write_text(
            json.dumps(rng.choice([{"<a>": 30}, {"<a>": "x"}, {f"<a{i}>": 30 + i for i in range(70000)}, [1]]))
        )
    else:
        damage_tokenizer_json(rng, folder)


def plant(folder: Path, marker: Path, rng: random.Random) -> None:
    """Modules that announce it when imported: in the folder, a subfolder, and under names transformers knows."""
    for name in ("tokenization_evil.py", "configuration_evil.py", "__init__.py", "tokenizer.py"):
        (folder / name).write_text(EVIL.format(marker=str(marker)))
    if rng.random() < 0.3:
        (folder / "tokenization_evil").mkdir(exist_ok=True)
        (folder / "tokenization_evil" / "__init__.py").write_text(EVIL.format(marker=str(marker)))


def damage_tokenizer_json(rng: random.Random, folder: Path) -> None:
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text())
    roll = rng.random()
    if roll < 0.25:
        spec["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}  # tokenizers panics on it
    elif roll < 0.45:
        spec["model"]["type"] = rng.choice(["Unigram", "BPE", "WordPiece", "Evil", 5])
    elif roll < 0.6:
        spec["added_tokens"] = [
            {
                "id": 50 + i,
                "content": "x" * rng.choice([1, 10**5]) + str(i),
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i in range(rng.choice([1, 100, 5000]))
        ]
    elif roll < 0.75:
        spec["pre_tokenizer"] = {
            "type": "Split",
            "pattern": {"Regex": rng.choice(["(", "a{99999999}", "\\p{Evil}", "(?<=a)b", "(a*)*b"])},
            "behavior": "Isolated",
            "invert": False,
        }
    else:
        data = json.dumps(spec).encode()
        path.write_bytes(data[: rng.randint(0, len(data))])
        return
    path.write_text(json.dumps(spec))


def write_config(config: dict, path: Path) -> None:
    depth = config.pop("__depth__", None)
    text = json.dumps(config)
    if depth:
        text = text.replace('"__DEEP__"', "[" * depth + "]" * depth)
    path.write_text(text)


def gen_folder(rng: random.Random, folder: Path, base: Path, marker: Path, surface: str) -> None:
    shutil.copytree(base, folder)
    config = dict(CONFIG)
    if surface == "template":
        config["chat_template"] = gen_template(rng)
    else:
        for _ in range(rng.randint(1, 3)):
            mutate_config(rng, config, folder, marker)
    write_config(config, folder / "tokenizer_config.json")


def generate(root: Path, per_surface: int, seed: int) -> list[tuple[str, str]]:
    """Write every input under ``root``: (surface, tokenizer folder) pairs, plus the data set and the markers'
    folder. The data folder holds a planted module too."""
    rng = random.Random(seed)
    base = root / "base"
    base_tokenizer(base)
    data = root / "data"
    data.mkdir()
    (data / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (root / MARKERS).mkdir()
    (data / "evil.py").write_text(EVIL.format(marker=str(root / MARKERS / "data")))
    inputs = []
    for surface in SURFACES:
        (root / surface).mkdir()
        for i in range(per_surface):
            folder = root / surface / f"{i:05d}"
            gen_folder(rng, folder, base, root / MARKERS / f"{surface}-{i}", surface)
            inputs.append((surface, str(folder)))
    return inputs


# ---------------------------------------------------------------------------------------------- the child
def run_one(folder: str, data: str) -> tuple[str, str]:
    """``python -m advisor tokenize DATA --tokenizer FOLDER --format chat --loss-mode full --on-bad skip``, in
    process: (outcome, detail)."""
    from advisor.data.tokenize import engine
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.errors import InputError

    engine._TOKENIZERS.clear()  # each folder loaded afresh, and none kept alive
    try:
        job = engine.TokenizeJob(
            data=data, tokenizer=folder, fmt="chat", settings=ChatSettings(loss_mode="full"), on_bad="skip"
        )
        result = engine.tokenize(job, workers=1)
    except MemoryError as e:
        return "blow-up", f"MemoryError: {e}"[:300]
    except InputError as e:
        if isinstance(e.__context__, MemoryError):
            return "blow-up", f"MemoryError under InputError: {e}"[:300]
        if folder not in str(e) and "chat" not in str(e) and "data" not in e.source:
            return "traceback", f"InputError naming neither the folder nor the data: {e}"[:300]
        return "refused", str(e).replace(folder, "FOLDER").replace(data, "DATA")[:300]
    except Exception as e:  # noqa: BLE001 - counting them is the point
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} at {frame.filename}:{frame.lineno}"
    except BaseException as e:  # a Rust panic that escaped: pyo3_runtime.PanicException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return "traceback", f"{type(e).__module__}.{type(e).__name__} escaped: {str(e)[:200]}"
    finally:
        engine._TOKENIZERS.clear()
    left_out = sum(x.count for x in result.excluded)
    return "accepted", f"{result.lengths.size} tokenized, {left_out} left out" + (
        f" ({result.excluded[0].reason[:80]})" if result.excluded else ""
    )


def worker(task_file: str, out_file: str, data: str, markers: str) -> None:
    """Run each input of a batch, logging a start line before and an end line after, so the parent can tell
    which input a hang or a crash happened on."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RUST_BACKTRACE"] = "0"
    tasks = json.loads(Path(task_file).read_text())
    with open(out_file, "a", buffering=1) as out:
        for index, folder in tasks:
            out.write(json.dumps(["start", index]) + "\n")
            outcome = run_one(folder, data)
            if any(Path(markers).iterdir()):
                outcome = ("code-executed", f"marker(s) {sorted(p.name for p in Path(markers).iterdir())}")
                for p in Path(markers).iterdir():
                    p.unlink()
            out.write(json.dumps(["run", index, *outcome]) + "\n")
            out.write(json.dumps(["end", index]) + "\n")


# ---------------------------------------------------------------------------------------------- the parent
def run_batch(tasks: list[tuple[int, str]], root: Path, batch_id: int) -> list[tuple[int, str, str]]:
    """Run tasks in children until all are done; a hang or a crash is charged to the input being run."""
    from bench._watch import child_env, run_watched

    results, todo, attempt = [], list(tasks), 0
    env = child_env(HF_HUB_OFFLINE="1", RUST_BACKTRACE="0")
    work = root / "work"
    while todo:
        attempt += 1
        task_file, out_file = work / f"b{batch_id}_{attempt}.json", work / f"b{batch_id}_{attempt}.out"
        task_file.write_text(json.dumps(todo))
        end = run_watched(
            [
                sys.executable,
                __file__,
                "--worker",
                str(task_file),
                str(out_file),
                str(root / "data"),
                str(root / MARKERS),
            ],
            env=env,
            cwd=root / "data",
            out_file=out_file,
            seconds=BATCH_SECONDS,
        )
        lines = end.lines
        finished = {x[1] for x in lines if x[0] == "end"}
        results += [(x[1], x[2], x[3]) for x in lines if x[0] == "run"]
        started = [x[1] for x in lines if x[0] == "start" and x[1] not in finished]
        if started:
            culprit = started[-1]
            results.append((culprit, "hang" if end.hung else "blow-up", end.detail()))
            finished.add(culprit)
        elif end.returncode != 0 and not end.hung:
            raise RuntimeError(f"a worker failed outside any input: {end.err[-2000:]}")
        todo = [t for t in todo if t[0] not in finished]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-surface", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="fuzz_tokenizers_") as tmp:
        root = Path(tmp)
        inputs = generate(root, args.per_surface, args.seed)
        print(
            f"generated {len(inputs):,} tokenizer folders in {time.time() - start:.0f} s (seed {args.seed}); "
            f"tokenizing in batches of {BATCH_SIZE} under RLIMIT_AS {MEMORY_LIMIT >> 30} GiB and a "
            f"{BATCH_SECONDS} s timeout",
            flush=True,
        )
        (root / "work").mkdir()
        indexed = list(enumerate(path for _, path in inputs))
        batches = [indexed[i : i + BATCH_SIZE] for i in range(0, len(indexed), BATCH_SIZE)]
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda b: run_batch(b[1], root, b[0]), enumerate(batches)))
        results = [r for batch in done for r in batch]
        return report(inputs, results, time.time() - start)


def report(inputs: list[tuple[str, str]], results: list[tuple[int, str, str]], seconds: float) -> int:
    table: dict[str, Counter] = {}
    for index, outcome, _ in results:
        table.setdefault(inputs[index][0], Counter())[outcome] += 1
    print(f"\n{'surface':<10}" + "".join(f"{o:>15}" for o in OUTCOMES))
    for surface in SURFACES:
        counts = table.get(surface, Counter())
        print(f"{surface:<10}" + "".join(f"{counts[o]:>15,}" for o in OUTCOMES))
    total = Counter(outcome for _, outcome, _ in results)
    print(f"{'all':<10}" + "".join(f"{total[o]:>15,}" for o in OUTCOMES))
    messages = Counter(_kind(detail) for _, outcome, detail in results if outcome in ("refused", "accepted"))
    print("\nmost common endings:")
    for text, n in messages.most_common(25):
        print(f"  {n:>6,}  {text}")
    print(f"\n{len(inputs):,} inputs in {seconds:.0f} s")
    bad = [r for r in results if r[1] in BAD]
    for index, outcome, detail in bad[:30]:
        print(f"  {outcome}: {inputs[index][1][-40:]!r}: {detail}")
    print(
        f"tracebacks {total['traceback']}, hangs {total['hang']}, memory blow-ups {total['blow-up']}, "
        f"code executed {total['code-executed']}"
    )
    return 1 if bad else 0


def _kind(detail: str) -> str:
    import re

    return re.sub(r"[\d,]+", "N", detail)[:110]


if __name__ == "__main__":
    sys.exit(main())
