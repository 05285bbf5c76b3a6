"""One GPU and its links, from the plan's hardware table (``advisor.plan.presets.GPU_PRESETS``, with sources).

Alternatives: a per-cluster measured profile (exact, needs the cluster) or peak numbers alone (what a datasheet
gives). Here: datasheet peaks times the efficiencies that published benchmarks reach, named where they are set.

Collectives are hierarchical. A group of ranks ``stride`` apart in Megatron's rank order (TP innermost, then CP, DP,
PP) holds ``local`` ranks in each NVLink domain (8 GPUs on HGX/DGX boards, 72 in an NVL72 rack). Inside one domain
it runs over NVLink; across domains NCCL builds one ring per rail, so a domain's traffic leaves through the NICs of
the ``local`` ranks it holds (each GPU has its own NIC in every system here) and the group's bus bandwidth is
min(NVLink, local x NIC). The other groups of the same layout use the domain's other NICs at the same time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from advisor.plan import Plan

# Achievable fractions of the datasheet bandwidths for large transfers, from nccl-tests bus bandwidths NVIDIA's NCCL
# maintainers published: 8 x H100 over NVLink reach ~370 of 450 GB/s per direction with the ring ("protocol overhead
# ~20 %", S. Jeaugey, NVIDIA/nccl-tests#212, 2024); a ring all-reduce over DGX A100 nodes with 8 x 200 Gb/s
# InfiniBand measures 192 GB/s of the NICs' 200 (NVIDIA/nccl#812, 2023), and one 400 Gb/s ConnectX-7 NIC 48-49 of
# 50 GB/s (NVIDIA/nccl-tests#267, 2025). Streaming kernels reach 80-90 % of HBM (BabelStream-style figures on H100).
NVLINK_EFFICIENCY = 0.82
# pinned host-device copies on their own stream: nvbandwidth's host_to_device_memcpy_ce reads ~55 of PCIe Gen5 x16's
# 64 GB/s on H100 systems; taken for NVLink-C2C too
HOST_LINK_EFFICIENCY = 0.85
NETWORK_EFFICIENCY = 0.96
HBM_EFFICIENCY = 0.8
NVLINK_LATENCY = 10e-6  # seconds per point-to-point transfer inside an NVLink domain
NETWORK_LATENCY = 25e-6  # across domains
# NCCL's own latency model (NVIDIA/nccl src/graph/tuning.cc at b6475625, ncclTopoTuneModel's baseLat and hwLat, in
# microseconds there): a ring all-gather or reduce-scatter over n ranks on N nodes pays its base latency and one
# hop per step, n - N steps over NVLink and N - 1 over the network (Simple protocol: the large transfers of DP and
# TP); a small all-reduce (an amax) takes the faster of the LL tree, 2 x (n/N - 1) NVLink hops and 2 x log2(N)
# network hops, and the LL ring, 2 (n - 1) - 2 N hops on NVLink and 2 N on the network. Why it matters: a DP
# group of 1,024 ranks on 256 nodes pays ~6 ms a collective where 8 ranks in one node pay 32 us, which is part of
# what makes the same per-GPU work slower at 2,048 GPUs than at 16 (bench/calibrate.py --scaling). (Transformer
# Engine's TP overlap runs on its own userbuffers, not NCCL: only the exposed share of TP traffic pays these.)
RING_BASE, RING_HOP_NVLINK, RING_HOP_NET = 8.4e-6, 3.4e-6, 14.0e-6
TREE_LL_BASE, TREE_LL_HOP_NVLINK, TREE_LL_HOP_NET = 6.8e-6, 0.6e-6, 5.0e-6
RING_LL_BASE, RING_LL_HOP_NVLINK, RING_LL_HOP_NET = 6.6e-6, 0.6e-6, 2.7e-6
# bytes per element of a GEMM operand by the precision its tensor cores run (fp8/mxfp8: one byte; nvfp4: half)
OPERAND_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}


@dataclass(frozen=True, kw_only=True)
class Link:
    bandwidth: float  # bytes/s per GPU and direction, achievable
    latency: float  # seconds per transfer
    name: str


def ranks_per_domain(ranks: int, stride: int, domain: int) -> int:
    """Ranks of a group of ``ranks`` ranks ``stride`` apart that share one NVLink domain of ``domain`` GPUs, rounded
    down to a divisor of ``ranks`` (Megatron's groups split evenly: 64 GPUs of a 72-GPU rack hold whole groups).

    >>> ranks_per_domain(16, 1, 8), ranks_per_domain(16, 8, 8), ranks_per_domain(32, 8, 72), ranks_per_domain(4, 2, 8)
    (8, 1, 8, 4)
    """
    fit = domain // stride if stride < domain else 1
    local = max(1, min(ranks, fit))
    while ranks % local:
        local -= 1
    return local


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """
    >>> from advisor.plan import plan_from_dict
    >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
    >>> g.peak / 1e12, g.sms, g.link(8).name, g.link(16).name
    (989.0, 132, 'nvlink', 'network')
    >>> round(g.ring(16, 1).bandwidth / 1e9), round(g.ring(16, 8).bandwidth / 1e9)   # 8 rails, then one
    (369, 48)
    >>> round(g.ring(8).latency * 1e6, 1), round(g.ring(16).latency * 1e6, 1), round(g.ring(1024, 2).latency * 1e3, 2)
    (32.2, 70.0, 6.19)
    >>> round(g.small_all_reduce(8) * 1e6, 1), round(g.small_all_reduce(1024, 2) * 1e6, 1)
    (15.0, 90.4)
    """

    name: str
    peak: float  # dense BF16 FLOP/s
    peaks: dict = field(default_factory=dict)  # dense FLOP/s by tensor-core precision: bf16, fp8, fp4 (None: none)
    hbm: float  # achievable HBM bytes/s
    sms: int
    nvlink: Link
    network: Link  # one GPU's NIC (its rail)
    host: Link = Link(bandwidth=64e9 * HOST_LINK_EFFICIENCY, latency=NETWORK_LATENCY, name="host")  # to host memory
    domain: int = 8  # GPUs one NVLink fabric joins
    compute_capability: float = 9.0

    def link(self, span: int) -> Link:
        """The link of point-to-point transfers between ranks ``span`` consecutive GPUs apart (pipeline stages, a
        ring's neighbours): NVLink inside the domain, the sender's NIC as soon as the pair leaves it."""
        return self.nvlink if span <= self.domain else self.network

    def ring(self, ranks: int, stride: int = 1) -> Link:
        """The bus bandwidth of a ring collective (all-gather, reduce-scatter, all-reduce) over ``ranks`` ranks
        ``stride`` GPUs apart: NVLink inside one domain; across domains min(NVLink, NIC x ranks each domain holds),
        the node's rails working in parallel (NCCL builds one ring per rail)."""
        local = ranks_per_domain(ranks, stride, self.domain)
        nodes = self.nodes(ranks, stride)
        latency = RING_BASE + (ranks - nodes) * RING_HOP_NVLINK + (nodes - 1) * RING_HOP_NET
        if local >= ranks:
            return Link(bandwidth=self.nvlink.bandwidth, latency=latency, name=self.nvlink.name)
        bandwidth = min(self.nvlink.bandwidth, local * self.network.bandwidth)
        return Link(bandwidth=bandwidth, latency=latency, name=f"network x{local}")

    def nodes(self, ranks: int, stride: int = 1) -> int:
        """NVLink domains a group of ``ranks`` ranks ``stride`` GPUs apart spans (from a domain's first GPU).

        >>> from advisor.plan import plan_from_dict
        >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
        >>> g.nodes(8), g.nodes(16), g.nodes(20), g.nodes(16, 2), g.nodes(4, 8)
        (1, 2, 3, 4, 4)
        """
        if stride >= self.domain:
            return ranks
        return max(1, -(-ranks * stride // self.domain))

    def small_all_reduce(self, ranks: int, stride: int = 1) -> float:
        """Seconds of an all-reduce of a few bytes (the amaxes of FP8 scaling) over ``ranks`` ranks ``stride``
        GPUs apart: the faster of NCCL's LL tree and LL ring (``TREE_LL_BASE``)."""
        if ranks <= 1:
            return 0.0
        nodes = self.nodes(ranks, stride)
        per_node = max(1, ranks // nodes)
        tree = TREE_LL_BASE + 2 * ((per_node - 1) * TREE_LL_HOP_NVLINK + int(math.log2(nodes)) * TREE_LL_HOP_NET)
        inter = 2 * nodes if nodes > 1 else 0
        ring = RING_LL_BASE + (2 * (ranks - 1) - inter) * RING_LL_HOP_NVLINK + inter * RING_LL_HOP_NET
        return min(tree, ring)

    def flops(self, precision: str) -> float:
        """Dense tensor-core FLOP/s at ``precision`` (bf16, fp8, fp4)."""
        value = self.peaks.get(precision)
        if not value:
            raise ValueError(f"{self.name} has no {precision} tensor cores")
        return value


def gpu_of(plan: Plan) -> Gpu:
    row = plan.hardware.table
    per_gpu_nic = row["nics_per_node"] * row["nic_gbps"] / row["gpus_per_node"]
    peaks = {"bf16": row["bf16_tflops"] * 1e12}
    peaks.update({p: row[f"{p}_tflops"] * 1e12 for p in ("fp8", "fp4") if row.get(f"{p}_tflops")})
    return Gpu(
        name=plan.hardware.gpu,
        peak=peaks["bf16"],
        peaks=peaks,
        hbm=row["hbm_tbps"] * 1e12 * HBM_EFFICIENCY,
        sms=int(row["sms"]),
        domain=int(row["nvlink_domain"]),
        compute_capability=float(row["compute_capability"]),
        nvlink=Link(bandwidth=row["nvlink_gbps"] * 1e9 * NVLINK_EFFICIENCY, latency=NVLINK_LATENCY, name="nvlink"),
        network=Link(bandwidth=per_gpu_nic * 1e9 * NETWORK_EFFICIENCY, latency=NETWORK_LATENCY, name="network"),
        host=Link(bandwidth=row["host_gbps"] * 1e9 * HOST_LINK_EFFICIENCY, latency=NETWORK_LATENCY, name="host"),
    )
