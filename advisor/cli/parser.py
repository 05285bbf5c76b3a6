"""The argparse tree of ``python -m advisor``: every command, its options, their checks and defaults.

Each command's options are added only when that command runs (``build_parser(command)``), because their names,
defaults and bounds come from the engine modules that own them (the plan schema, ``advisor.packing.config``,
``advisor.analysis``...) and ``advisor lengths`` must not wait for the layout search to load. ``build_parser()``
builds them all.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import get_args

from advisor.cli.arguments import (
    as_given,
    between,
    comma_list,
    megabytes,
    number,
    plan_choices,
    plan_default,
    plan_max,
    seed,
    whole,
)
from advisor.limits import MAX_GPUS, MAX_PACK, MAX_TOKENS

_VARY_HELP = (
    "what the search may change besides the layout, comma-separated: seq_length (packs longer than it), "
    "batch (the samples per step beyond ±5 %%), gpu (every GPU preset), precision (bf16, fp8, mxfp8, "
    "nvfp4), fsdp (Megatron FSDP on and off); by default all stay as the plan has them"
)


def _input_args(p: argparse.ArgumentParser) -> None:
    """A lengths file and how to read it (``lengths``, ``pack``, ``schedule``)."""
    from advisor.data.guard import DEFAULT_MAX_BYTES
    from advisor.data.ingest import ON_BAD
    from advisor.data.megatron_mock import MAX_MOCK_SAMPLES, MOCK_SIZE

    p.add_argument(
        "lengths",
        help="lengths file (csv, tsv, json, jsonl, npy, parquet), a Megatron-LM mock SFT "
        "config (file or inline JSON), or a Megatron-Bridge packed data set (.parquet, folder, .npy)",
    )
    p.add_argument("--column", help="column or record field holding lengths (default: chosen by name)")
    p.add_argument("--histogram", action="store_true", default=None, help="the file is a length,count histogram")
    p.add_argument(
        "--on-bad",
        choices=ON_BAD,
        default=ON_BAD[0],
        help="stop at the first bad row (default) or leave bad rows out and count them",
    )
    p.add_argument("--max-file-mb", type=megabytes(), default=DEFAULT_MAX_BYTES / 2**20, help="refuse larger files")
    p.add_argument(
        "--mock-samples",
        type=whole(1, MAX_MOCK_SAMPLES),
        default=MOCK_SIZE,
        help=f"samples drawn for a mock lognormal config (Megatron-LM: {MOCK_SIZE:,})",
    )
    _json_quiet(p)


def _json_quiet(p: argparse.ArgumentParser, json: bool = True) -> None:
    if json:
        p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")


def _packing(p: argparse.ArgumentParser) -> None:
    """Megatron-Bridge's offline packing knobs, its defaults (``pack``, ``prepare``)."""
    from advisor.packing.config import MB_DEFAULT_ALGORITHM, MB_DEFAULT_SEED
    from advisor.vocabulary import Algorithm

    p.add_argument(
        "--pack-size", type=whole(1, MAX_PACK), required=True, help=f"packed_sequence_size (at most {MAX_PACK:,})"
    )
    p.add_argument("--algorithm", choices=get_args(Algorithm), default=MB_DEFAULT_ALGORITHM)
    p.add_argument(
        "--seed", type=seed(), default=MB_DEFAULT_SEED, help=f"the dataset config's seed (default {MB_DEFAULT_SEED})"
    )
    p.add_argument(
        "--pad-seq-to-mult",
        type=whole(1, plan_max("packing", "pad_seq_to_mult")),
        default=1,
        help="pad each sample to a multiple (CP: 2*CP)",
    )
    p.add_argument("--max-seq-length", type=whole(1, MAX_PACK), help="dataset max length (default: the pack size)")


def _pack(p: argparse.ArgumentParser) -> None:
    from advisor.packing.config import OVERLONG, OVERLONG_OF_FORMAT

    _input_args(p)
    _packing(p)
    p.add_argument(
        "--format",
        choices=tuple(OVERLONG_OF_FORMAT),
        default=None,
        help="what the lengths are, as a plan's data.format: sft (GPTSFTDataset truncates overlong "
        "samples; the default) or chat (GPTSFTChatDataset does not, create_hist skips them)",
    )
    p.add_argument(
        "--overlong",
        choices=OVERLONG,
        default=None,
        help="the same choice by its effect: truncate (as --format sft) or skip (as --format chat)",
    )
    p.add_argument(
        "--micro-batch-size",
        type=whole(1, plan_max("training", "micro_batch_size")),
        default=4,
        help="for the pad-to-longest baseline",
    )


def _estimate(p: argparse.ArgumentParser) -> None:
    from advisor.analysis import check_mfu, check_overhead
    from advisor.model.memory import DEFAULT_OVERHEAD_GIB

    _plan_args(p)
    p.add_argument(
        "--mfu",
        type=number(check_mfu),
        help="fix the model FLOPs utilisation (of the dense peak at the "
        "plan's precision: FP8's for fp8 and mxfp8), in [0.01, 1], "
        "instead of the performance model's step time",
    )
    p.add_argument(
        "--overhead-gib",
        type=number(check_overhead),
        help=f"fixed memory overhead per GPU, 0 to 1024 (default {DEFAULT_OVERHEAD_GIB:g} GiB)",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="also every way of packing the plan's data on its layout, side by side (offline, in-batch, "
        "global-batch dp_balanced and dynamic CP; Megatron-LM's online packing for an online plan), each refused "
        "one with its reason, and the one to use with the reason in a sentence",
    )
    _json_quiet(p)


def _recommend(p: argparse.ArgumentParser) -> None:
    from advisor.advice.search import check_vary

    _plan_args(p)
    p.add_argument("--vary", type=comma_list(check_vary), default=frozenset(), help=_VARY_HELP)
    _json_quiet(p)


def _export(p: argparse.ArgumentParser) -> None:
    from advisor.advice.exports import _version as check_version
    from advisor.advice.search import check_vary
    from advisor.vocabulary import ExportFormat

    p.add_argument("plan", help="plan file (YAML or JSON)")
    p.add_argument("--format", choices=get_args(ExportFormat), default="python")
    p.add_argument(
        "--megatron-bridge-version",
        default=None,
        type=as_given(check_version),
        help="the Megatron-Bridge release to write for, MAJOR.MINOR.PATCH (default: the plan's "
        "versions.megatron_bridge; given, it replaces that in the plan exported, said in a note)",
    )
    p.add_argument("--recommended", action="store_true", help="export the best plan the search found instead")
    p.add_argument("--vary", type=comma_list(check_vary), default=frozenset(), help="with --recommended: " + _VARY_HELP)
    p.add_argument(
        "--force",
        action="store_true",
        help="export a plan that does not fit its GPU's memory (refused "
        "otherwise, exit code 2), and overwrite --lengths-csv",
    )
    p.add_argument("--lengths", help="lengths file (default: the plan's data.lengths)")
    p.add_argument(
        "--lengths-csv",
        help="megatron-lm: train on Megatron-LM's mock SFT data of the plan's lengths, "
        "written to this file and named in the arguments (without it the arguments read your data from "
        "$DATA_PATH); an existing file only with --force",
    )
    _json_quiet(p, json=False)


def _trial(p: argparse.ArgumentParser) -> None:
    from advisor.trial.config import DEFAULT, DEVICES, SCALES

    d = DEFAULT  # the defaults the dashboard's job also runs with
    _plan_args(p)
    p.add_argument(
        "--steps",
        type=whole(1, 100_000),
        default=d.steps,
        help="timed steps per way (after the warm-up steps); the report takes their median and spread",
    )
    p.add_argument("--warmup", type=whole(1, 1000), default=d.warmup, help="untimed warm-up steps per way")
    p.add_argument("--device", choices=DEVICES, default=d.device)
    p.add_argument("--model-scale", choices=SCALES, default=d.scale)
    p.add_argument(
        "--pack-size",
        type=whole(1, 1 << 20),
        default=d.pack_size,
        help="the trial's pack size (lengths are scaled to it)",
    )
    p.add_argument(
        "--packs-per-step",
        type=whole(1, 4096),
        default=d.packs_per_step,
        help="packs per step and rank (one per micro batch)",
    )
    p.add_argument(
        "--micro-batch-size", type=whole(1, 4096), default=d.micro_batch_size, help="samples per padded micro batch"
    )
    p.add_argument("--seed", type=seed(), default=d.seed, help="fixes the data, the initialisation and the order")
    p.add_argument(
        "--threads",
        type=whole(1, 1024),
        default=d.threads,
        help="torch CPU threads (default: all cores); 1 is slower but steadier on a shared machine",
    )
    p.add_argument("--break-mask", action="store_true", help=argparse.SUPPRESS)  # test-only: must fail parity
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", help="folder for trial.json and steps.csv (new or empty; any other only with --force)")
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a --out folder that holds files, replacing trial.json and steps.csv",
    )
    p.add_argument("--heartbeat", help=argparse.SUPPRESS)  # the dashboard's job: stop when this file goes stale
    p.add_argument(
        "--heartbeat-seconds", type=between(1, 86_400, "a number of seconds"), default=30.0, help=argparse.SUPPRESS
    )
    p.add_argument(
        "--wall-seconds",
        type=between(1, 7 * 86_400, "a number of seconds"),
        help="stop the trial after this many seconds (1 to a week)",
    )
    p.add_argument(
        "--memory-gib",
        type=between(0.5, 1024, "a number of GiB"),
        help="stop the trial, with one "
        "message, when it "
        "would hold more than this much memory (the dashboard gives its trials 2)",
    )
    _json_quiet(p, json=False)


def _schedule(p: argparse.ArgumentParser) -> None:
    from advisor.packing.online.config import DATASETS
    from advisor.plan.schema import MB_RECIPE_SEED

    _input_args(p)
    p.add_argument(
        "--megatron-lm",
        choices=plan_choices("packing", "megatron_lm"),
        default=plan_default("packing", "megatron_lm"),
        help="which commit's scheduler",
    )
    p.add_argument(
        "--scheduler", choices=plan_choices("packing", "scheduler"), default=plan_default("packing", "scheduler")
    )
    p.add_argument(
        "--dataset", choices=DATASETS, help="the data set's padding (default: dev's mock SFT, main: lengths as given)"
    )
    p.add_argument("--seq-length", type=whole(1, MAX_TOKENS), required=True)
    p.add_argument(
        "--max-seqlen-per-dp-cp-rank",
        type=whole(1, plan_max("packing", "max_seqlen_per_dp_cp_rank")),
        help="tokens per DP x CP rank (default: Megatron-LM's, seq_length / CP)",
    )
    p.add_argument("--dp", type=whole(1, MAX_GPUS), required=True)
    p.add_argument("--cp", type=whole(1, MAX_GPUS), required=True)
    p.add_argument("--tp", type=whole(1, plan_max("parallel", "tp")), default=1)
    p.add_argument("--sp", action="store_true", help="sequence parallelism (pads to a multiple of TP as well)")
    p.add_argument(
        "--global-batch-size",
        type=whole(1, plan_max("training", "global_batch_size")),
        required=True,
        help="samples per step",
    )
    p.add_argument("--micro-batch-size", type=whole(1, plan_max("training", "micro_batch_size")), default=1)
    p.add_argument(
        "--vpp-group",
        type=whole(1, 1024),
        help="microbatch_group_size_per_vp_stage under VPP (packs rounded to DP x this)",
    )
    p.add_argument("--steps", type=whole(1, 1 << 24), help="steps to schedule (default: one epoch)")
    p.add_argument(
        "--seed",
        type=seed(),
        default=MB_RECIPE_SEED,
        help=f"shuffle of a length,count histogram (it has no order; default {MB_RECIPE_SEED}, the "
        "export's when the plan sets no packing.seed)",
    )


def _raw_data(p: argparse.ArgumentParser, *, prepare: bool = False) -> None:
    """Raw records, the tokenizer, Megatron-Bridge's dataset settings and the engine (``tokenize``, ``prepare``:
    ``prepare`` takes its max length from the packing options, and needs no data with ``--from-cache``)."""
    from typing import get_type_hints

    from advisor.data.ingest import ON_BAD
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.engine import ENGINES, FORMATS
    from advisor.data.tokenize.sft import PromptCompletion, SftSettings

    p.add_argument(
        "data",
        nargs="?" if prepare else None,
        help="JSONL (plain, .gz, .zst), Parquet, a folder or glob "
        "of shards, or a datasets.save_to_disk folder" + (" (not with --from-cache)" if prepare else ""),
    )
    p.add_argument(
        "--tokenizer",
        required=not prepare,
        help="a local Hugging Face tokenizer folder or a SentencePiece .model (nothing is downloaded)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None if prepare else FORMATS[0],
        help="sft: GPTSFTDataset (prompt template); chat: GPTSFTChatDataset with the tokenizer's template"
        + (" (default sft; with --from-cache, the cache's: another is refused)" if prepare else ""),
    )
    p.add_argument("--prompt-template", help="sft: the template, label last (default '{input} {output}')")
    p.add_argument("--label-key", help="sft: the field the model learns to write (default output)")
    p.add_argument("--truncation-field", help="sft: the field(s) cut when a sample is too long (default input)")
    for flag in ("bos", "eos", "sep"):
        p.add_argument(
            f"--add-{flag}",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"sft: add the {flag.upper()} token (Megatron-Bridge's default)",
        )
    if not prepare:
        p.add_argument(
            "--max-seq-length",
            type=whole(1, MAX_TOKENS),
            help="sft: GPTSFTDataset's max_seq_length (default 1024, as Megatron-Bridge's builder)",
        )
    p.add_argument(
        "--truncation-method",
        choices=get_args(get_type_hints(SftSettings)["truncation_method"]),
        help="sft: which end is cut (default right)",
    )
    p.add_argument(
        "--prompt-completion",
        action="store_true",
        help="sft: Megatron-Bridge's prompt-completion "
        "preprocessing (PromptCompletionSFTPreprocessingConfig: prompt and completion tokenized apart, no "
        "template of fields) instead of the prompt template; --prompt-template then holds only {prompt}",
    )
    p.add_argument("--prompt-column", help="--prompt-completion: the prompt's field (default prompt)")
    p.add_argument("--completion-column", help="--prompt-completion: the completion's field (default completion)")
    p.add_argument("--separator", help="--prompt-completion: text put between prompt and completion (default none)")
    p.add_argument(
        "--strip-whitespace",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--prompt-completion: strip spaces around both fields (default on)",
    )
    modes = tuple(
        dict.fromkeys(
            (
                *get_args(get_type_hints(ChatSettings)["loss_mode"]),
                *get_args(get_type_hints(PromptCompletion)["loss_mode"]),
            )
        )
    )
    p.add_argument(
        "--loss-mode",
        choices=modes,
        help="chat: the loss mask's mode (assistant, last_turn, full); "
        "--prompt-completion: completion (the prompt masked) or full",
    )
    p.add_argument("--tool-schemas", help="chat: the data set's tools as JSON (records' own tools win)")
    p.add_argument(
        "--legacy-chat",
        action="store_true",
        help="chat: Megatron-Bridge's legacy <extra_id_*> format "
        "(ShareGPT conversations with a system field, use_hf_tokenizer_chat_template=False) instead of "
        "the tokenizer's chat template",
    )
    p.add_argument("--engine", choices=ENGINES, default=ENGINES[0])
    p.add_argument(
        "--ray-address",
        help="ray: an existing cluster (ray://HOST:10001, needs ray[client], or auto); default a local Ray",
    )
    p.add_argument("--workers", type=whole(1, 4096), help="processes (local) or tasks (ray); default every core")
    p.add_argument(
        "--on-bad",
        choices=ON_BAD,
        default=ON_BAD[0],
        help="error (default): stop at an unreadable record, or after the run name the records the "
        "template cannot fill; skip: leave such records out and count them",
    )


def _tokenize(p: argparse.ArgumentParser) -> None:
    _raw_data(p)
    p.add_argument(
        "--sample",
        type=whole(1, 1 << 40),
        help="tokenize a uniform random sample of this many "
        "records and estimate the whole data set's packing with bootstrap intervals",
    )
    p.add_argument("--seed", type=seed(), help="--sample: the sample's and the bootstrap's seed (default 0)")
    p.add_argument(
        "--pack-size", type=whole(1, MAX_PACK), help="--sample: the pack size to estimate (default max_seq_length)"
    )
    p.add_argument(
        "--bootstraps",
        type=whole(2, 10_000, "{value} bootstrap replicates: give {low} to {high:,} (an interval needs a spread)"),
        help="--sample: bootstrap replicates (2 to 10,000; default 200, fewer where the pack size and "
        "the data set's size would make 200 take over half a minute)",
    )
    p.add_argument(
        "-o",
        "--output",
        help="write the lengths file (sample_index,length in data-set order; a new "
        "file, or an existing one with --force)",
    )
    p.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")
    p.add_argument("--histogram-output", action="store_true", help="write length,count instead")
    p.add_argument(
        "--loss-tokens",
        action="store_true",
        help="also count each sample's label positions with loss "
        "(its loss mask as Megatron-Bridge's packed collate uses it: answer-only SFT, assistant turns), "
        "written as a loss_tokens column that plans read for the loss weighting (about twice the time "
        "for chat)",
    )
    _json_quiet(p)


def _prepare(p: argparse.ArgumentParser) -> None:
    from advisor.prepare.run import ROWS_PER_FILE

    _raw_data(p, prepare=True)
    _packing(p)
    p.add_argument(
        "--validation",
        help="the validation split's raw data (same format and settings), written as validation_{S}.idx.parquet",
    )
    p.add_argument(
        "--from-cache",
        help="re-pack the token cache of a folder prepare wrote, without tokenizing (instead of DATA and --tokenizer)",
    )
    p.add_argument(
        "--rows-per-file",
        type=whole(1, 1 << 40),
        default=ROWS_PER_FILE,
        help=f"packs per Parquet file before a split is written as numbered shards (default {ROWS_PER_FILE:,})",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="the folder to write (new or empty; any other only with --force, which replaces it)",
    )
    p.add_argument("--force", action="store_true", help="replace an -o folder that holds files")
    _json_quiet(p)


def _nothing(p: argparse.ArgumentParser) -> None:
    pass


# name -> (help, the options); the order is the help's
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "lengths": ("read a lengths file and summarise it", _input_args),
    "pack": ("simulate Megatron-Bridge offline packing of a length distribution", _pack),
    "estimate": ("memory per GPU, FLOPs and step time for a plan file", _estimate),
    "recommend": ("findings, with reasons and fixes, and the best layouts found", _recommend),
    "export": (
        "the plan as a Megatron-Bridge snippet, overrides, Megatron-LM arguments, packed-file paths, plan "
        "file or Markdown report",
        _export,
    ),
    "trial": ("a short real training run: packed vs padded vs block-masked, parity, memory", _trial),
    "schedule": (
        "Megatron-LM's online THD packing of a data set, global batch by global batch (--sequence-packing-scheduler)",
        _schedule,
    ),
    "tokenize": (
        "token lengths of a raw SFT or chat data set, exactly as Megatron-Bridge 0.6.2 tokenizes it (on "
        "this machine or a Ray cluster)",
        _tokenize,
    ),
    "prepare": (
        "the packed data set Megatron-Bridge trains on, from raw SFT or chat data (or re-packed from a "
        "prepared folder's token cache)",
        _prepare,
    ),
    "schema": ("print the plan file's JSON Schema (for editors and validation)", _nothing),
    "warmup": ("compile the packing kernels once (the set-up command runs it)", _nothing),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command with its help; the options of all of them (``command`` None) or of ``command`` alone (none
    when it names no command: argparse then refuses it, or prints the list)."""
    parser = argparse.ArgumentParser(
        prog="python -m advisor", description="Sequence packing advisor for Megatron-Bridge and Megatron-LM."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (text, add_options) in COMMANDS.items():
        p = sub.add_parser(name, help=text)
        p.set_defaults(json=False)  # commands without --json print text (export, schema, warmup)
        if command is None or command == name:
            add_options(p)
    return parser
