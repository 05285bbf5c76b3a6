"""What to pack and how: the knobs of Megatron-Bridge's offline packing, with its defaults."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.packing.packers import PACKERS
from advisor.vocabulary import MB_DEFAULT_ALGORITHM, Algorithm

MB_DEFAULT_SEED = 1234  # GPTSFTDatasetConfig.seed (data/builders/gpt_sft.py, 0.6.2)
# A plan's data.format -> what happens to a sample longer than the max length: GPTSFTDataset (sft) truncates it;
# GPTSFTChatDataset (chat) does not, so create_hist skips it
OVERLONG_OF_FORMAT = {"sft": "truncate", "chat": "skip"}
OVERLONG = tuple(OVERLONG_OF_FORMAT.values())


@dataclass(frozen=True, kw_only=True)
class PackingConfig:
    """Offline packing as Megatron-Bridge 0.6.2 does it (data/packing/offline.py).

    ``max_seq_length`` is the dataset's (``max_single_sequence_length or seq_length``); None means the pack size.
    ``overlong``: ``truncate`` as GPTSFTDataset does; ``skip`` as happens with GPTSFTChatDataset, which does not
    truncate, so ``create_hist`` drops samples longer than ``max_seq_length`` (only when ``pad_seq_to_mult`` is
    1; otherwise pre-padding cuts them first).

    >>> PackingConfig(pack_size=4096).effective_max_seq_length
    4096
    """

    pack_size: int
    algorithm: Algorithm = MB_DEFAULT_ALGORITHM  # checked against PACKERS below: a dataclass does not check types
    seed: int | None = MB_DEFAULT_SEED
    pad_seq_to_mult: int | None = 1
    max_seq_length: int | None = None
    overlong: str = "truncate"

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.pack_size, int) or self.pack_size < 1:
            problems.append(f"pack_size must be a positive integer, got {self.pack_size!r}")
        if self.algorithm not in PACKERS:
            problems.append(f"unknown algorithm {self.algorithm!r}; choose from {', '.join(PACKERS)}")
        if self.pad_seq_to_mult is not None and self.pad_seq_to_mult < 1:
            problems.append("pad_seq_to_mult must be a positive integer when provided")  # PackedSequenceSpecs' check
        if self.max_seq_length is not None and self.max_seq_length < 1:
            problems.append("max_seq_length must be a positive integer when provided")
        elif (
            self.max_seq_length is not None and isinstance(self.pack_size, int) and self.max_seq_length > self.pack_size
        ):
            problems.append(
                f"max_seq_length {self.max_seq_length} cannot exceed the pack size {self.pack_size} "
                "(Megatron-Bridge: max_single_sequence_length cannot exceed packed_sequence_size)"
            )
        if self.overlong not in OVERLONG:
            problems.append(f"overlong must be one of {', '.join(OVERLONG)}")
        if not problems and self.multiple > 1 and self.effective_max_seq_length // self.multiple == 0:
            problems.append(
                f"max_seq_length ({self.effective_max_seq_length}) must be at least the effective "
                f"padding multiple ({self.multiple})"
            )  # offline.py tokenize_dataset
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def effective_max_seq_length(self) -> int:
        return self.max_seq_length or self.pack_size

    @property
    def multiple(self) -> int:
        return 1 if self.pad_seq_to_mult is None else max(1, self.pad_seq_to_mult)
