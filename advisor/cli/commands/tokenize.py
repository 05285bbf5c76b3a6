"""The ``tokenize`` command: a raw SFT or chat data set's token lengths as Megatron-Bridge tokenizes it (here or on
a Ray cluster), its lengths file, and with ``--sample`` the whole data set's packing estimated from a sample.
"""

from __future__ import annotations

import sys
from argparse import Namespace
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from advisor.cli.arguments import local_workers
from advisor.cli.commands.files import check_output_file, write_text
from advisor.cli.output import Progress
from advisor.errors import InputError

if TYPE_CHECKING:
    from advisor.data.tokenize.engine import TokenizeJob, TokenizeResult
    from advisor.packing.sampling import SampleEstimate

RAY_PROBE_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class TokenizeOutcome:
    data: dict  # the --json object
    result: TokenizeResult
    estimate: SampleEstimate | None
    output: str | None  # the lengths file written


def _job(args: Namespace) -> TokenizeJob:
    """The job of the options given: the rest keep Megatron-Bridge's defaults (the settings' own)."""
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.engine import TokenizeJob
    from advisor.data.tokenize.sft import SftSettings

    pc_fields = {
        "prompt_column": args.prompt_column,
        "completion_column": args.completion_column,
        "separator": args.separator,
        "strip_whitespace": args.strip_whitespace,
    }
    if args.prompt_completion or any(v is not None for v in pc_fields.values()):
        return TokenizeJob(
            data=args.data,
            tokenizer=args.tokenizer,
            fmt="sft",
            settings=_prompt_completion(args),
            on_bad=args.on_bad,
            loss_tokens=getattr(args, "loss_tokens", False),
        )
    settings: ChatSettings | SftSettings
    if args.format == "chat":
        if args.loss_mode == "completion":
            raise InputError(
                "--loss-mode", None, "completion is --prompt-completion's mode; chat has assistant, last_turn and full"
            )
        _refuse(
            args,
            SFT_OPTIONS,
            "an SFT option: chat samples are rendered whole and not cut (offline packing skips or cuts them)",
        )
        if getattr(args, "legacy_chat", False):
            _refuse(
                args,
                ("loss_mode", "tool_schemas"),
                "not an option of the legacy chat format (its mask is its "
                "own: every speaker's turns but the masked ones', named by each record's 'mask' field)",
            )
            settings = ChatSettings(use_hf_tokenizer_chat_template=False)
        else:
            fields = {"loss_mode": args.loss_mode, "tool_schemas": args.tool_schemas}
            settings = ChatSettings(**{k: v for k, v in fields.items() if v is not None})
    else:
        _refuse(
            args,
            CHAT_OPTIONS,
            "a chat option: SFT with a prompt template trains on the answer (add "
            "--prompt-completion for its completion/full loss modes)",
        )
        fields = {
            "prompt_template": args.prompt_template,
            "label_key": args.label_key,
            "truncation_field": args.truncation_field,
            "add_bos": args.add_bos,
            "add_eos": args.add_eos,
            "add_sep": args.add_sep,
            "max_seq_length": args.max_seq_length,
            "truncation_method": args.truncation_method,
        }
        settings = SftSettings(**{k: v for k, v in fields.items() if v is not None})
    return TokenizeJob(
        data=args.data,
        tokenizer=args.tokenizer,
        fmt=args.format,
        settings=settings,
        on_bad=args.on_bad,
        loss_tokens=getattr(args, "loss_tokens", False),
    )  # tokenize only


SFT_OPTIONS = (
    "prompt_template",
    "label_key",
    "truncation_field",
    "add_bos",
    "add_eos",
    "add_sep",
    "max_seq_length",
    "truncation_method",
)
CHAT_OPTIONS = ("loss_mode", "tool_schemas", "legacy_chat")
PROMPT_COMPLETION_OPTIONS = ("prompt_completion", "prompt_column", "completion_column", "separator", "strip_whitespace")
DATASET_OPTIONS = (*SFT_OPTIONS, *CHAT_OPTIONS, *PROMPT_COMPLETION_OPTIONS)


def _refuse(args: Namespace, names: tuple[str, ...], why: str) -> None:
    """One message naming the first of these options given (argparse leaves the others None or False)."""
    for name in names:
        if getattr(args, name, None) not in (None, False):
            raise InputError(f"--{name.replace('_', '-')}", None, why)


def _prompt_completion(args: Namespace):
    """``SftSettings`` with Megatron-Bridge's prompt-completion preprocessing from the options; a prompt-template
    option, a chat one, or a prompt-completion option without ``--prompt-completion`` is refused by name."""
    from advisor.data.tokenize.sft import PromptCompletion, SftSettings

    given = [
        f"--{k.replace('_', '-')}"
        for k in ("prompt_column", "completion_column", "separator", "strip_whitespace")
        if getattr(args, k) is not None
    ]
    if not args.prompt_completion:
        raise InputError(given[0], None, "a prompt-completion option: add --prompt-completion")
    if args.format != "sft":
        raise InputError("--prompt-completion", None, "prompt-completion preprocessing is SFT data (--format sft)")
    legacy = getattr(args, "legacy_chat", False) or None
    for flag, value in (
        ("--label-key", args.label_key),
        ("--truncation-field", args.truncation_field),
        ("--tool-schemas", args.tool_schemas),
        ("--legacy-chat", legacy),
    ):
        if value is not None:
            raise InputError(
                flag, None, "not an option of --prompt-completion (it reads the prompt and completion columns only)"
            )
    if args.loss_mode not in (None, "completion", "full"):
        raise InputError(
            "--loss-mode",
            None,
            f"{args.loss_mode} is a chat mode; --prompt-completion has completion (the prompt masked) and full",
        )
    fields = {
        "prompt_column": args.prompt_column,
        "completion_column": args.completion_column,
        "prompt_template": args.prompt_template,
        "separator": args.separator,
        "strip_whitespace": args.strip_whitespace,
        "add_bos": args.add_bos,
        "add_sep": args.add_sep,
        "add_eos": args.add_eos,
        "truncation_method": args.truncation_method,
        "loss_mode": args.loss_mode,
    }
    pc = PromptCompletion(**{k: v for k, v in fields.items() if v is not None})
    length = {"max_seq_length": args.max_seq_length} if args.max_seq_length is not None else {}
    return SftSettings(prompt_completion=pc, **length)


def tokenize(args: Namespace) -> TokenizeOutcome:
    from advisor.data.lengths import summarize
    from advisor.data.tokenize.engine import lengths_csv
    from advisor.data.tokenize.engine import tokenize as run

    progress = Progress(args.quiet)
    inputs = (args.data, args.tokenizer)
    if args.output:  # refused before the tokenizing, not after it
        check_output_file("-o", args.output, args.force, inputs)
    for option, value in (("--pack-size", args.pack_size), ("--bootstraps", args.bootstraps), ("--seed", args.seed)):
        if value is not None and args.sample is None:  # refused, not ignored: the estimate it sets runs on a sample
            raise InputError(option, None, "sets the sample's packing estimate: it goes with --sample N")
    if args.loss_tokens and args.histogram_output:
        raise InputError(
            "--loss-tokens", None, "loss tokens are written one row per sample: leave out --histogram-output"
        )
    if args.ray_address:
        check_ray_address(args.ray_address, args.engine)
    job = _job(args)
    try:
        workers, capped = local_workers(args.workers, args.engine)
        if capped:
            print(f"note: {capped}", file=sys.stderr)
        result = run(
            job,
            engine=args.engine,
            workers=workers,
            sample=args.sample,
            seed=args.seed or 0,
            address=args.ray_address,
            progress=lambda text, done: progress(text),
        )
    except ConnectionError as e:  # Ray's "ray client connection timeout" and the like: an OSError, not a bug
        raise ValueError(f"--ray-address {args.ray_address[:80]}: {str(e)[:200]}") from None
    if args.output:
        write_text("-o", args.output, lengths_csv(result, histogram=args.histogram_output), args.force, inputs)
        progress(f"wrote {result.lengths.size:,} lengths to {args.output}")
    hist = result.histogram()
    rate = result.lengths.size / max(result.seconds, 1e-9)
    data: dict[str, Any] = {
        "source": result.source,
        "records": result.total_records,
        "tokenized": int(result.lengths.size),
        "engine": result.engine,
        "workers": result.workers,
        "seconds": result.seconds,
        "records_per_second": rate,
        "records_per_second_per_worker": rate / result.workers,
        "excluded": [asdict(e) for e in result.excluded],
        "notes": list(result.notes),
        "settings": asdict(job.settings) if job.settings is not None else None,  # _job always gives settings
        # what a plan needs to read these lengths as this format (data.format: chat skips, sft truncates)
        "format": result.fmt,
        "plan_data": {"lengths": args.output, "format": result.fmt},
        "lengths": summarize(hist).as_dict(),
        "loss_fraction": hist.loss_fraction,
    }
    estimate, note = _sample_estimate(args, job, result, progress) if args.sample is not None else (None, None)
    if estimate is not None:
        data["sample_estimate"] = estimate.as_dict()
    if note is not None:
        data["notes"].append(note)
        print(f"note: {note}", file=sys.stderr)
    return TokenizeOutcome(data=data, result=result, estimate=estimate, output=args.output)


def _sample_estimate(
    args: Namespace,
    job: TokenizeJob,
    result: TokenizeResult,
    progress: Progress,
) -> tuple[SampleEstimate, str | None]:
    """The whole data set's packing at ``--pack-size`` (else the samples' max_seq_length), from the sample, and a
    note when the default number of replicates was lowered to stay within the bound."""
    from advisor.packing.config import OVERLONG_OF_FORMAT, PackingConfig
    from advisor.packing.sampling import BOOTSTRAPS, max_bootstraps, population_size, sample_estimate

    pack_size = args.pack_size or getattr(job.settings, "max_seq_length", None)
    if pack_size is None:
        raise InputError(
            "tokenize",
            "--pack-size",
            "chat samples have no max_seq_length: give the pack size to estimate (--pack-size)",
        )
    # records left out of the sample are left out of the data set in the same share
    usable = round(result.total_records * result.lengths.size / max(1, result.selected))
    most = max_bootstraps(result.lengths.size, usable, pack_size)
    if args.bootstraps is not None and args.bootstraps > most and result.lengths.size < usable:
        raise InputError(
            "--bootstraps",
            None,
            f"{args.bootstraps:,} replicates at pack size {pack_size:,} over "
            f"{usable:,} records: at most {most:,} here (each packs "
            f"{population_size(result.lengths.size, usable):,} records over arrays of pack-size "
            "length; more would take over half a minute)",
        )
    bootstraps = args.bootstraps if args.bootstraps is not None else min(BOOTSTRAPS, most)
    progress(f"bootstrapping the packing of {result.lengths.size:,} sampled lengths ({bootstraps} replicates)")
    cfg = PackingConfig(pack_size=pack_size, overlong=OVERLONG_OF_FORMAT[args.format])
    estimate = sample_estimate(result.lengths, usable, cfg, bootstraps=bootstraps, seed=args.seed or 0)
    note = None
    if bootstraps < BOOTSTRAPS and args.bootstraps is None and estimate.bootstraps:  # 0: the sample is everything
        note = (
            f"{bootstraps} bootstrap replicates, not {BOOTSTRAPS}: at pack size {pack_size:,} over {usable:,} "
            "records more would take over half a minute (--bootstraps sets it, up to that)"
        )
    return estimate, note


def check_ray_address(address: str, engine: str) -> None:
    """Refuse a --ray-address that cannot work, in seconds and with what to do: Ray itself waits 30 s on a closed
    port and then raises a ConnectionError, and without ``ray[client]`` (grpcio) a ray:// address is a traceback.

    >>> check_ray_address("auto", "ray")
    >>> check_ray_address("ray://h", "ray")
    Traceback (most recent call last):
    ...
    ValueError: --ray-address ray://h: give ray://HOST:PORT (the head's client port, usually 10001) or auto
    """
    import importlib.util
    import socket

    shown = address[:80]
    if engine != "ray":
        raise ValueError(f"--ray-address {shown}: only used with --engine ray")
    if address == "auto":
        return  # the cluster this machine belongs to: Ray finds it in its own files
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not address.startswith("ray://") or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--ray-address {shown}: give ray://HOST:PORT (the head's client port, usually 10001) or auto")
    if importlib.util.find_spec("grpc") is None:
        raise ValueError(
            f"--ray-address {shown}: a ray:// address needs Ray's client: pip install "
            "'ray[client]==2.60.0' (requirements.txt pins it; it adds grpcio)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_PROBE_SECONDS).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ValueError(
            f"--ray-address {shown}: nothing answers at {host[:60]}:{port} ({why}); start the head "
            "with `ray start --head` (client port 10001) or check the address"
        ) from None
