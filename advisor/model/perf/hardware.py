"""One GPU and its links, from the plan's hardware table (``advisor.plan.presets.GPU_PRESETS``, with sources).

Alternatives: a per-cluster measured profile (exact, needs the cluster) or peak numbers alone (what a datasheet
gives). Here: datasheet peaks times the efficiencies that published benchmarks reach, named where they are set.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.plan import Plan
from advisor.plan.presets import GPUS_PER_NODE

# Achievable fractions of the datasheet bandwidths for large transfers. Why not 1: NCCL's bus bandwidth on 8 H100s
# over NVLink reaches ~360 of 450 GB/s per direction, ~45 of 50 GB/s over 400 Gb/s InfiniBand (nccl-tests results
# NVIDIA publishes); streaming kernels reach 80-90 % of HBM (BabelStream-style figures on H100).
NVLINK_EFFICIENCY = 0.8
NETWORK_EFFICIENCY = 0.9
HBM_EFFICIENCY = 0.8
NVLINK_LATENCY = 10e-6  # seconds per collective inside a node (NCCL small-message latency)
NETWORK_LATENCY = 25e-6  # across nodes


@dataclass(frozen=True, kw_only=True)
class Link:
    bandwidth: float  # bytes/s per GPU and direction, achievable
    latency: float  # seconds per transfer
    name: str


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """
    >>> from advisor.plan import plan_from_dict
    >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
    >>> g.peak / 1e12, g.sms, g.link(8).name, g.link(16).name
    (989.0, 132, 'nvlink', 'network')
    """

    name: str
    peak: float  # dense BF16 FLOP/s
    hbm: float  # achievable HBM bytes/s
    sms: int
    nvlink: Link
    network: Link
    per_node: int = GPUS_PER_NODE

    def link(self, span: int) -> Link:
        """The link a group of ranks spread over ``span`` consecutive GPUs uses: NVLink inside a node, the network
        (one NIC per GPU) as soon as the group leaves it."""
        return self.nvlink if span <= self.per_node else self.network


def gpu_of(plan: Plan) -> Gpu:
    row = plan.hardware.table
    return Gpu(name=plan.hardware.gpu, peak=row["bf16_tflops"] * 1e12, hbm=row["hbm_tbps"] * 1e12 * HBM_EFFICIENCY,
               sms=int(row["sms"]),
               nvlink=Link(bandwidth=row["nvlink_gbps"] * 1e9 * NVLINK_EFFICIENCY, latency=NVLINK_LATENCY,
                           name="nvlink"),
               network=Link(bandwidth=row["network_gbps"] * 1e9 * NETWORK_EFFICIENCY, latency=NETWORK_LATENCY,
                            name="network"))
