"""The step model's pipeline bubble against Megatron-Core's own 1F1B order (its warm-up counts and interleaved
schedule table, from the megatron-core wheel), event-simulated by bench/bench_pipeline_latency.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.model.perf.step import pipeline_bubble
from bench.bench_pipeline_latency import rank_orders, simulate


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(2, 8),
    vpp=st.sampled_from([0, 2, 3, 4, 5]),
    groups=st.integers(1, 5),
    fwd=st.floats(0.1, 5.0),
    bwd=st.floats(0.1, 10.0),
)
def test_bubble_is_megatron_cores_order_without_latency(pp, vpp, groups, fwd, bwd):
    """m micro batches of v chunks a rank, each chunk fwd + bwd: the last chunk ends at m x stage + the bubble."""
    micro_batches = pp * groups
    chunks = max(vpp, 1)
    orders = rank_orders(pp, vpp, micro_batches)
    assert all(len(o) == 2 * micro_batches * chunks for o in orders)
    stage = chunks * (fwd + bwd)
    makespan = simulate(orders, fwd, bwd, lambda a, b: 0.0, chunks, blocking=False)
    assert makespan == pytest.approx(micro_batches * stage + pipeline_bubble(pp, vpp or None, stage), rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(2, 6), vpp=st.sampled_from([0, 2, 4]), latency=st.floats(0.001, 0.5))
def test_sends_cost_at_most_their_blocking_time(pp, vpp, latency):
    """Overlapped sends never cost more than blocking ones, and neither beats the order without latency."""
    chunks = max(vpp, 1)
    orders = rank_orders(pp, vpp, 2 * pp)
    free = simulate(orders, 1.0, 2.0, lambda a, b: 0.0, chunks, blocking=False)
    overlap = simulate(orders, 1.0, 2.0, lambda a, b: latency, chunks, blocking=False)
    blocking = simulate(orders, 1.0, 2.0, lambda a, b: latency, chunks, blocking=True)
    assert free <= overlap <= blocking + 1e-9
    assert blocking > free
