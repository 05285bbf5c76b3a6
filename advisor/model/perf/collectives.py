"""Seconds of NCCL-style collectives between ranks, ring algorithms, on the link the group spans.

Alternatives: measured nccl-tests tables per cluster (exact, not at planning time) or bandwidth alone (misses
latency and the (n-1)/n ring factor). Here: alpha-beta rings with the achievable bandwidths of ``hardware``.
"""

from __future__ import annotations

from advisor.model.perf.hardware import Link


def all_gather(total_bytes: float, ranks: int, link: Link) -> float:
    """Gather a tensor of ``total_bytes`` (the gathered size) over ``ranks``: each rank receives (n-1)/n of it.

    >>> from advisor.model.perf.hardware import Link
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
