"""Megatron-LM's online THD packing (``--sequence-packing-scheduler``), simulated global batch by global batch.

For main d98e8a64 and dev d48bd6be: the sampler's global-id order, the SFT dataset's padding, DpBalancedScheduler,
dev's DefaultDynamicCPScheduler, the checks, and the per-rank work of every micro batch. ``schedule`` runs it all.
"""

from advisor.packing.online.config import OnlineConfig
from advisor.packing.online.inputs import expand_histogram, mock_config_lengths, mock_file_lengths
from advisor.packing.online.results import Refusal, RunSchedule, RunSummary, StepSchedule
from advisor.packing.online.schedule import schedule
from advisor.packing.online.validation import Checked, check

__all__ = [
    "Checked",
    "OnlineConfig",
    "Refusal",
    "RunSchedule",
    "RunSummary",
    "StepSchedule",
    "check",
    "expand_histogram",
    "mock_config_lengths",
    "mock_file_lengths",
    "schedule",
]
