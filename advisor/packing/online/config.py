"""The knobs of Megatron-LM's online THD packing (``--sequence-packing-scheduler``), checked as values only.

Followed: megatron/core/model_parallel_config.py and megatron/training/arguments.py at main d98e8a64 and dev d48bd6be.
The alternative, a plan's full ModelParallelConfig, carries hundreds of fields the scheduler never reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from advisor.errors import InputError, excerpt
from advisor.limits import MAX_GPUS, MAX_TOKENS
from advisor.vocabulary import OnlineScheduler

COMMITS = {"main": "d98e8a64", "dev": "d48bd6be"}
# megatron/core/datasets/data_schedule.py scheduler_map (dev) / PackingSchedulerEnum (main)
SCHEDULERS: dict[str, tuple[OnlineScheduler, ...]] = {  # by MegatronLmBranch, read with a commit checked in COMMITS
    "main": ("dp_balanced",),
    "dev": get_args(OnlineScheduler),
}
# mock_sft: dev's MockSFTDataset (one sequence a sample); sft: SFTDataset with one conversation a line;
# custom: a dataset that hands the scheduler the lengths as given (padded_seq_len, as VarlenDataset does);
# gpt_sft: Megatron-Bridge's GPTSFTDataset under global-batch packing (7bdc5ef4 _collate_unpacked_rows)
DATASETS = ("mock_sft", "sft", "custom", "gpt_sft")
SOURCE = "online packing config"


def default_dataset(commit: str) -> str:
    """The data set a run reads when none is named: dev's mock SFT data set (the lengths file the exports write, in
    order); main has none, so its samples are taken as given (``custom``)."""
    return "mock_sft" if commit == "dev" else "custom"


def _whole(name: str, value, low: int = 1, high: int | None = None) -> int:
    """A whole number in low..high, or InputError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"{low}..{high:,}" if high is not None else f"at least {low}"
        raise InputError(SOURCE, name, f"{excerpt(value)} is not a whole number {span}")
    return int(value)


@dataclass(frozen=True, kw_only=True)
class OnlineConfig:
    """One training run's settings as the scheduler sees them.

    ``vpp`` set means virtual pipelining is on; ``microbatch_group_size_per_vp_stage`` then defaults to ``pp``
    (ModelParallelConfig.__post_init__). ``max_num_seqs`` is dev's cap on sequences a pack (from
    ``--thd-max-packed-sequences``, see ``validation.scheduler_max_num_seqs``). The last four only feed the checks.

    >>> c = OnlineConfig(commit="dev", dataset="mock_sft", seq_length=4096, global_batch_size=64, dp=4, cp=2)
    >>> c.ranks, c.num_microbatches, c.vpp_multiple, c.dynamic_cp
    (8, 16, None, False)
    >>> OnlineConfig(commit="main", dataset="custom", seq_length=4096, global_batch_size=60, dp=8)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: online packing config, global_batch_size: 60 is not a multiple of ...
    """

    commit: str
    scheduler: str = "dp_balanced"
    dataset: str
    seq_length: int
    global_batch_size: int
    micro_batch_size: int = 1
    dp: int = 1
    cp: int = 1
    tp: int = 1
    sequence_parallel: bool = False
    pp: int = 1
    vpp: int | None = None
    microbatch_group_size_per_vp_stage: int | None = None
    max_seqlen_per_dp_cp_rank: int | None = None
    min_dynamic_cp: int = 1
    max_num_seqs: int | None = None
    te_version: str | None = None
    num_moe_experts: int | None = None
    moe_token_dispatcher_type: str = "allgather"  # arguments.py default
    calculate_per_token_loss: bool | None = None

    def __post_init__(self) -> None:
        if self.commit not in COMMITS:
            raise InputError(SOURCE, "commit", f"{excerpt(self.commit)} is not one of {', '.join(COMMITS)}")
        if self.scheduler not in SCHEDULERS[self.commit]:
            raise InputError(
                SOURCE,
                "scheduler",
                f"{excerpt(self.scheduler)} is not a scheduler of Megatron-LM "
                f"{self.commit} {COMMITS[self.commit]} (it has {', '.join(SCHEDULERS[self.commit])})",
            )
        if self.dataset not in DATASETS:
            raise InputError(SOURCE, "dataset", f"{excerpt(self.dataset)} is not one of {', '.join(DATASETS)}")
        if self.dataset == "mock_sft" and self.commit == "main":
            raise InputError(SOURCE, "dataset", "main d98e8a64 has no MockSFTDataset: give 'sft' or 'custom'")
        _whole("seq_length", self.seq_length, 1, MAX_TOKENS)
        _whole("global_batch_size", self.global_batch_size, 1, 1 << 24)
        for name in ("micro_batch_size", "dp", "cp", "tp", "pp"):
            _whole(name, getattr(self, name), 1, MAX_GPUS)
        if self.ranks > MAX_GPUS:
            raise InputError(SOURCE, "dp", f"dp x cp = {self.ranks:,} ranks is beyond {MAX_GPUS:,} GPUs")
        if not isinstance(self.sequence_parallel, bool):
            raise InputError(SOURCE, "sequence_parallel", f"{excerpt(self.sequence_parallel)} is not true/false")
        for name in (
            "vpp",
            "microbatch_group_size_per_vp_stage",
            "max_seqlen_per_dp_cp_rank",
            "max_num_seqs",
            "num_moe_experts",
        ):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 1, MAX_TOKENS)
        _whole("min_dynamic_cp", self.min_dynamic_cp, 1, MAX_GPUS)
        if self.max_num_seqs is not None and self.commit == "main":
            raise InputError(
                SOURCE,
                "max_num_seqs",
                "main d98e8a64's DpBalancedScheduler has no cap on sequences a pack (dev adds it)",
            )
        per_step = self.micro_batch_size * self.dp  # arguments.py: GBS divisible by MBS x DP
        if self.global_batch_size % per_step:
            raise InputError(
                SOURCE,
                "global_batch_size",
                f"{self.global_batch_size} is not a multiple of "
                f"micro_batch_size x dp = {per_step} (Megatron-LM asserts it)",
            )

    @property
    def ranks(self) -> int:
        """DP x CP ranks: the schedule's width."""
        return self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        """Micro batches each DP rank loads from its sampler before scheduling (``get_num_microbatches()``)."""
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def dynamic_cp(self) -> bool:
        return self.scheduler == "default_dynamic_cp"

    @property
    def vpp_multiple(self) -> int | None:
        """``microbatch_group_size_per_vp_stage`` as wrap_data_iterator passes it: only when VPP is set."""
        if self.vpp is None:
            return None
        return self.microbatch_group_size_per_vp_stage or self.pp
