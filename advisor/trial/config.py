"""The trial's settings, one frozen object shared by the command line and the dashboard's background job.

The dashboard's job runs ``python -m advisor trial`` with ``cli_arguments(config)``: every measured setting is
spelled out on its command line, so the job and a command-line run with the same options measure the same thing
(no default can differ between the two). Light module: no torch, so the CLI and the page import it freely.

>>> cli_arguments(TrialConfig(steps=5, seed=3))[:4]
['--steps', '5', '--warmup', '2']
"""

from __future__ import annotations

from dataclasses import dataclass

SCALES = ("small", "medium", "large")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    """What a trial measures.

    ``steps`` timed steps per way after ``warmup`` untimed ones (the first steps pay for allocations, thread
    pools and kernel selection); the ways run interleaved, step by step, so a busy moment of the machine hits all
    three ways instead of one.
    """

    steps: int = 10
    warmup: int = 2
    device: str = "auto"
    scale: str = "small"  # small: a CPU run of a few steps in well under a minute; medium/large for a GPU
    seed: int = 0
    pack_size: int = 512
    packs_per_step: int = 4
    micro_batch_size: int = 4
    threads: int | None = None  # torch's CPU threads; None: torch's default (all cores). 1 is steadier when shared
    break_mask: bool = False  # test-only: attention across sample boundaries, which the parity check must catch


DEFAULT = TrialConfig()  # the command line's defaults, which the dashboard's job also runs with


def cli_arguments(cfg: TrialConfig) -> list[str]:
    """The ``python -m advisor trial`` options that reproduce ``cfg`` (all of them, defaults included)."""
    args = [
        "--steps",
        str(cfg.steps),
        "--warmup",
        str(cfg.warmup),
        "--device",
        cfg.device,
        "--model-scale",
        cfg.scale,
        "--seed",
        str(cfg.seed),
        "--pack-size",
        str(cfg.pack_size),
        "--packs-per-step",
        str(cfg.packs_per_step),
        "--micro-batch-size",
        str(cfg.micro_batch_size),
    ]
    threads = ["--threads", str(cfg.threads)] if cfg.threads is not None else []
    return args + threads + (["--break-mask"] if cfg.break_mask else [])


def from_cli(args) -> TrialConfig:
    """The config of parsed ``trial`` arguments (the inverse of ``cli_arguments``)."""
    return TrialConfig(
        steps=args.steps,
        warmup=args.warmup,
        device=args.device,
        scale=args.model_scale,
        seed=args.seed,
        pack_size=args.pack_size,
        packs_per_step=args.packs_per_step,
        micro_batch_size=args.micro_batch_size,
        threads=args.threads,
        break_mask=args.break_mask,
    )
