"""The commands on a lengths file: ``lengths`` (its summary), ``pack`` (Megatron-Bridge's offline packing, against
padding without it and any packs the file already holds), ``schedule`` (Megatron-LM's online packing), and
``warmup`` (the packing kernels compiled). Each returns its result; advisor/cli/output.py prints it.
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from advisor.cli.output import Progress

if TYPE_CHECKING:
    import numpy as np

    from advisor.data.lengths import LengthHistogram
    from advisor.packing.baselines import Baseline
    from advisor.packing.offline import PackingResult
    from advisor.packing.online import OnlineConfig
    from advisor.packing.online.results import RunSchedule

MAX_LISTED_IDS = 1 << 22  # --json of a schedule: 4M listed ids print ~40 MB and build in about 1 GiB of Python
MAX_LISTED_STEPS = 50_000  # and each step is a few Python objects: 45,000 steps took 10 s


@dataclass(frozen=True, kw_only=True)
class LengthsResult:
    data: dict  # the --json object
    hist: LengthHistogram


@dataclass(frozen=True, kw_only=True)
class PackResult:
    data: dict
    hist: LengthHistogram
    packing: PackingResult
    baselines: tuple[Baseline, ...]


@dataclass(frozen=True, kw_only=True)
class ScheduleResult:
    data: dict | None  # with --json only: it lists every step
    run: RunSchedule
    config: OnlineConfig
    source: str
    order: str  # how the samples were ordered
    samples: int


def load(args: Namespace, progress: Progress) -> LengthHistogram:
    """The lengths file with the input options (``--column``, ``--histogram``, ``--on-bad``...)."""
    from advisor.data.ingest import load_lengths

    progress(f"reading {args.lengths if len(args.lengths) < 80 else 'inline JSON'}")
    return load_lengths(
        args.lengths,
        column=args.column,
        histogram=args.histogram,
        on_bad=args.on_bad,
        max_bytes=int(args.max_file_mb * 2**20),
        mock_samples=args.mock_samples,
    )


def lengths(args: Namespace) -> LengthsResult:
    from advisor.data.lengths import summarize

    hist = load(args, Progress(args.quiet))
    data = {
        "source": hist.source,
        **summarize(hist).as_dict(),
        "excluded": [asdict(e) for e in hist.excluded],
        "notes": list(hist.notes),
    }
    return LengthsResult(data=data, hist=hist)


def _overlong(args: Namespace) -> str:
    """``--format`` and ``--overlong`` are one choice: either gives it, both must agree."""
    from advisor.packing.config import OVERLONG_OF_FORMAT

    overlong = OVERLONG_OF_FORMAT[args.format] if args.format else args.overlong or OVERLONG_OF_FORMAT["sft"]
    if args.overlong and args.overlong != overlong:
        raise ValueError(
            f"--overlong {args.overlong} contradicts --format {args.format} ({args.format} data is "
            f"{'skipped' if overlong == 'skip' else 'truncated'} past the max length): give one of them"
        )
    return overlong


def pack(args: Namespace) -> PackResult:
    from advisor.data.packed_audit import PackedDatasetAudit
    from advisor.packing.audit import existing_packs
    from advisor.packing.baselines import without_packing
    from advisor.packing.config import OVERLONG_OF_FORMAT, PackingConfig
    from advisor.packing.offline import pack as simulate

    overlong = _overlong(args)
    progress = Progress(args.quiet)
    hist = load(args, progress)
    cfg = PackingConfig(
        pack_size=args.pack_size,
        algorithm=args.algorithm,
        seed=args.seed,
        pad_seq_to_mult=args.pad_seq_to_mult,
        max_seq_length=args.max_seq_length,
        overlong=overlong,
    )
    result = simulate(hist, cfg, progress=progress)
    baselines = without_packing(hist, cfg, args.micro_batch_size)
    data = {
        **result.summary(),
        "source": hist.source,
        "excluded": [asdict(e) for e in hist.excluded],
        "notes": list(result.notes),
        "format": next(f for f, o in OVERLONG_OF_FORMAT.items() if o == overlong),
        "baselines": [
            {
                "name": b.name,
                "efficiency": b.efficiency,
                "padding_fraction": b.padding_fraction,
                "micro_batches": b.micro_batches,
                "token_slots": b.token_slots,
            }
            for b in baselines
        ],
    }
    if isinstance(hist.packs, PackedDatasetAudit):  # the packs of a packed data set, else None
        longest = int(hist.packs.items.max())
        if longest > args.pack_size:
            raise ValueError(
                f"the existing packs hold a sequence of {longest} tokens, longer than --pack-size "
                f"{args.pack_size}: give the pack size they were made with"
            )
        data["existing_packs"] = existing_packs(hist.packs, args.pack_size)
    return PackResult(data=data, hist=hist, packing=result, baselines=baselines)


def _ordered_lengths(args: Namespace, progress: Progress) -> tuple[np.ndarray, str, str]:
    """The samples in data-set order, with their source and how they were ordered: a mock config as Megatron-LM
    draws it, a per-sample file in its own order, a length,count histogram shuffled with --seed (it has no order;
    the export writes the same shuffle)."""
    from advisor.data.megatron_mock import read_mock_config
    from advisor.packing.online import mock_config_lengths
    from advisor.packing.online.from_plan import dataset_order

    mock = read_mock_config(args.lengths, int(args.max_file_mb * 2**20))
    if mock is not None:
        progress("drawing the mock SFT lengths as Megatron-LM does")
        return (
            mock_config_lengths(mock.config, mock.source, base_dir=mock.base_dir, size=args.mock_samples),
            mock.source,
            "mock config (Megatron-LM's draw order)",
        )
    hist = load(args, progress)
    how = "file order" if hist.order is not None else f"histogram shuffled with seed {args.seed}"
    return dataset_order(hist, args.seed), hist.source, how


def schedule(args: Namespace) -> ScheduleResult:
    from advisor.packing.online import OnlineConfig
    from advisor.packing.online import schedule as run_schedule
    from advisor.packing.online.config import default_dataset

    progress = Progress(args.quiet)
    lengths, source, how = _ordered_lengths(args, progress)
    vpp = 2 if args.vpp_group else None  # VPP on; the scheduler reads only the group size
    cfg = OnlineConfig(
        commit=args.megatron_lm,
        scheduler=args.scheduler,
        dataset=args.dataset or default_dataset(args.megatron_lm),
        seq_length=args.seq_length,
        global_batch_size=args.global_batch_size,
        micro_batch_size=args.micro_batch_size,
        dp=args.dp,
        cp=args.cp,
        tp=args.tp,
        sequence_parallel=args.sp,
        pp=max(1, args.vpp_group or 1),
        vpp=vpp,
        microbatch_group_size_per_vp_stage=args.vpp_group,
        max_seqlen_per_dp_cp_rank=args.max_seqlen_per_dp_cp_rank,
    )
    from advisor.packing.online.validation import check as megatron_lm_checks

    refused = [f"{f.message} ({f.source})" for f in megatron_lm_checks(cfg).findings if f.severity == "error"]
    if refused:  # Megatron-LM stops in validate_args: nothing to simulate (every refusal said, not only the first)
        raise ValueError(f"Megatron-LM {args.megatron_lm} refuses these settings: " + "; ".join(refused))
    progress(f"scheduling {lengths.size:,} samples ({how})")
    run = run_schedule(lengths, cfg, steps=args.steps, source=source)
    data = None
    if args.json:
        data = {
            "source": source,
            "order": how,
            "config": asdict(cfg),
            "max_seqlen_per_dp_cp_rank": run.max_seqlen_per_dp_cp_rank,
            "capacity": run.capacity,
            "padding_divisor": run.padding_divisor,
            "summary": asdict(run.summary),
            "findings": [f.as_dict() for f in run.findings],
            "global_batches": _listing(run, cfg),
        }
    return ScheduleResult(data=data, run=run, config=cfg, source=source, order=how, samples=int(lengths.size))


def _listing(run: RunSchedule, cfg: OnlineConfig) -> list[dict]:
    """Every step, every micro batch, every rank's samples: refused past what prints in seconds."""
    _check_listing(run)
    refused = {r.step: r.reason for r in run.refusals}
    steps = []
    for k in range(run.seqlens.shape[0]):
        st = run.step(k)
        steps.append(
            {
                "step": k,
                "num_micro_batches": st.num_micro_batches,
                "seqlen_sum": st.seqlen_sum,
                "seqlen_squared_sum": st.seqlen_squared_sum,
                "groups": [[list(rank) for rank in mb] for mb in st.samples],
                "local_cp_size": [list(mb) for mb in st.local_cp_size] if cfg.dynamic_cp else None,
                "straggler": st.straggler,
                "refused": refused.get(k),
            }
        )
    return steps


def _listed_ids(run: RunSchedule) -> int:
    """What ``schedule --json`` lists: one rank list per rank and micro batch, each sample id once per rank of its
    CP group (so a run of few samples on 131,072 ranks still lists 131,072 lists a micro batch)."""
    import numpy as np

    g = run.groups
    per_group = np.diff(g.item_offsets) * np.asarray(g.rank_count)
    return int(g.mb_offsets[-1]) * g.num_ranks + int(per_group.sum())


def _check_listing(run: RunSchedule) -> None:
    steps = int(run.seqlens.shape[0])
    if steps > MAX_LISTED_STEPS:
        raise ValueError(
            f"--json: this schedule lists {steps:,} steps one by one, more than {MAX_LISTED_STEPS:,}; "
            "give fewer --steps, or leave out --json for the summary"
        )
    listed = _listed_ids(run)
    if listed > MAX_LISTED_IDS:
        raise ValueError(
            f"--json: this schedule lists {listed:,} rank entries and sample ids, more than "
            f"{MAX_LISTED_IDS:,}; give fewer --steps, or leave out --json for the summary"
        )


def warmup(args: Namespace) -> list[tuple[str, float]]:
    """Each packing algorithm and the seconds its kernels took to compile."""
    from advisor.packing.warmup import warm_up

    return warm_up()
