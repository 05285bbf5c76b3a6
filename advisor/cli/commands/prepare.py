"""The ``prepare`` command: the packed data set Megatron-Bridge trains on, from raw data (``tokenize``'s options
and job) or from a prepared folder's token cache (``--from-cache``), written by ``advisor.prepare``.
"""

from __future__ import annotations

import sys
from argparse import Namespace
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from advisor.cli.arguments import local_workers
from advisor.cli.commands.files import named
from advisor.cli.commands.tokenize import DATASET_OPTIONS, _job, _refuse, check_ray_address
from advisor.cli.output import Bar
from advisor.errors import InputError

if TYPE_CHECKING:
    from advisor.prepare.run import PrepareResult


@dataclass(frozen=True, kw_only=True)
class PrepareOutcome:
    data: dict  # the --json object
    result: PrepareResult


def prepare(args: Namespace) -> PrepareOutcome:
    from advisor.data.prepared import written_by_prepare
    from advisor.prepare.run import PrepareOptions
    from advisor.prepare.run import prepare as run
    from advisor.safe_write import check_output_folder

    if args.from_cache and (args.data or args.tokenizer or args.validation):
        raise InputError(
            "prepare",
            "--from-cache",
            "re-packs a prepared folder's tokens: give it without DATA, "
            "--tokenizer and --validation (the cache has them)",
        )
    if args.from_cache:
        dataset = tuple(o for o in DATASET_OPTIONS if o != "max_seq_length")  # prepare's is the packing's
        _refuse(
            args,
            dataset,
            "a dataset option: --from-cache re-packs the tokens and masks the cache holds, "
            "tokenized with its own settings (prepare the raw data again to change them)",
        )
        if args.format is not None:  # given: it must be the cache's (the tokens cannot change format)
            import os

            from advisor.prepare.cache import read_meta, split_folder

            # its meta.json alone (the arrays are checked once, when the re-pack opens the cache)
            folder = split_folder(args.from_cache, "training")
            held = read_meta(folder)["format"] if os.path.isdir(folder) else None
            if held is not None and held != args.format:
                raise InputError(
                    "--format",
                    None,
                    f"{args.format}: the token cache of {args.from_cache[:80]} holds "
                    f"{held} records (tokenized by GPTSFT{'Chat' if held == 'chat' else ''}Dataset's "
                    "rules); --from-cache re-packs them as they are: drop --format, or prepare the raw "
                    "data again",
                )
    if not args.from_cache and not (args.data and args.tokenizer):
        raise InputError("prepare", None, "give DATA and --tokenizer (or --from-cache PREPARED_FOLDER)")
    if args.ray_address:
        check_ray_address(args.ray_address, args.engine)
    workers, capped = local_workers(args.workers, args.engine)
    if capped:
        print(f"note: {capped}", file=sys.stderr)
    options = PrepareOptions(
        pack_size=args.pack_size,
        algorithm=args.algorithm,
        seed=args.seed,
        pad_seq_to_mult=args.pad_seq_to_mult,
        max_seq_length=args.max_seq_length,
        rows_per_file=args.rows_per_file,
        engine=args.engine,
        workers=workers,
        address=args.ray_address,
        force=args.force,
    )
    jobs = {}
    if not args.from_cache:
        # the dataset's max length is the packing's (--max-seq-length, else the pack size): advisor.prepare sets it
        jobs["train"] = _job(Namespace(**{**vars(args), "max_seq_length": None, "format": args.format or "sft"}))
        if args.validation:
            jobs["validation"] = replace(jobs["train"], data=args.validation)
    inputs = [args.from_cache] if args.from_cache else [args.data, args.tokenizer, args.validation]
    # before the work, not after: and --force replaces only a folder prepare wrote, never one holding an input
    named("-o", check_output_folder, args.output, force=args.force, inputs=inputs, owned=written_by_prepare)
    if not args.from_cache and not args.quiet:  # its modelled peaks and Megatron-Bridge's, where the size is cheap
        import os

        from advisor.prepare.resources import resources_note

        local = (workers or os.cpu_count() or 1) if args.engine == "local" else 1
        note = resources_note(args.data, args.pack_size, local)
        if note:
            print(f"note: {note}", file=sys.stderr)
    try:
        with Bar(args.quiet, "prepare") as bar:
            result = run(args.output, options, from_cache=args.from_cache, progress=bar, **jobs)
    except ConnectionError as e:  # Ray's "ray client connection timeout" and the like: an OSError, not a bug
        raise ValueError(f"--ray-address {args.ray_address[:80]}: {str(e)[:200]}") from None
    return PrepareOutcome(data=_data(result), result=result)


def _data(r: PrepareResult) -> dict:
    splits = []
    for s in r.splits:
        d = asdict(s)
        d["excluded"] = list(s.excluded)
        splits.append(d)
    return {
        "out": r.out,
        "files": list(r.files),
        "seconds": r.seconds,
        "tokenize_seconds": r.tokenize_seconds,
        "from_cache": r.from_cache,
        "options": {k: v for k, v in asdict(r.options).items() if k != "force"},
        "splits": splits,
        "metadata": [s.metadata for s in r.splits],
        "packed_sequence_specs": r.specs(),
        "notes": list(r.notes),
    }
