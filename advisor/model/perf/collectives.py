"""Seconds of NCCL-style collectives between ranks, ring algorithms, on the link the group spans.

Alternatives: measured nccl-tests tables per cluster (exact, not at planning time) or bandwidth alone (misses
latency and the (n-1)/n ring factor). Here: alpha-beta rings with the achievable bandwidths of ``hardware``, whose
``Gpu.ring`` gives a group's hierarchical bus bandwidth (NVLink inside a domain, the rails of the ranks each domain
holds across domains) and ``Gpu.link`` a point-to-point transfer's.
"""

from __future__ import annotations

from advisor.model.perf.hardware import Link, ranks_per_domain


def all_gather(total_bytes: float, ranks: int, link: Link) -> float:
    """Gather a tensor of ``total_bytes`` (the gathered size) over ``ranks``: each rank receives (n-1)/n of it.

    >>> from advisor.model.perf.hardware import Link, ranks_per_domain
    >>> all_gather(1e9, 4, Link(bandwidth=1e11, latency=0.0, name="x"))
    0.0075
    """
    if ranks <= 1 or total_bytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * total_bytes / link.bandwidth + link.latency


def reduce_scatter(total_bytes: float, ranks: int, link: Link) -> float:
    """The mirror of ``all_gather``: the same bytes cross the links."""
    return all_gather(total_bytes, ranks, link)


def all_reduce(total_bytes: float, ranks: int, link: Link) -> float:
    """Reduce-scatter then all-gather."""
    return 2 * all_gather(total_bytes, ranks, link)


def all_to_all(bytes_per_rank: float, ranks: int, link: Link) -> float:
    """Each rank sends (n-1)/n of its ``bytes_per_rank`` to the others."""
    return all_gather(bytes_per_rank, ranks, link)


def send(num_bytes: float, link: Link) -> float:
    """Point to point (pipeline stages, the CP ring)."""
    return num_bytes / link.bandwidth + link.latency if num_bytes > 0 else 0.0


def all_to_all_spread(bytes_per_rank: float, ranks: int, stride: int, gpu) -> float:
    """All-to-all over ``ranks`` ranks ``stride`` GPUs apart (EP over expert TP, Ulysses CP over TP): the bytes for
    peers in the same NVLink domain move over NVLink while those for other domains leave through the rank's own NIC,
    at the same time (an all-to-all cannot aggregate a node's NICs the way a ring does: S. Jeaugey,
    NVIDIA/nccl-tests#267).

    >>> from advisor.model.perf.hardware import gpu_of
    >>> from advisor.plan import plan_from_dict
    >>> g = gpu_of(plan_from_dict({"model": "llama3.1-8b"}))
    >>> inside = all_to_all_spread(1e9, 8, 1, g); across = all_to_all_spread(1e9, 8, 2, g)
    >>> across > inside, round(across / all_to_all(1e9, 8, g.network), 2)   # half the peers share the node
    (True, 0.57)
    >>> nvl72 = gpu_of(plan_from_dict({"model": "llama3.1-8b", "hardware": {"gpu": "GB200"}}))
    >>> all_to_all_spread(1e9, 64, 1, nvl72) == all_to_all(1e9, 64, nvl72.nvlink)   # one rack: NVLink only
    True
    """
    if ranks <= 1 or bytes_per_rank <= 0:
        return 0.0
    per_domain = ranks_per_domain(ranks, max(1, stride), gpu.domain)
    if per_domain >= ranks:
        return all_to_all(bytes_per_rank, ranks, gpu.nvlink)
    on = bytes_per_rank * (per_domain - 1) / ranks
    off = bytes_per_rank * (ranks - per_domain) / ranks
    return max(on / gpu.nvlink.bandwidth, off / gpu.network.bandwidth) + gpu.network.latency
