"""The dashboard's figures, built from real engine results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.analysis import analyze, memory_grid
from advisor.model.estimate import estimate
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.ui import charts, views
from advisor.ui import state as dashboard


def test_figures_carry_the_numbers(squad):
    result = pack(squad, PackingConfig(pack_size=384))
    fig = charts.length_histogram(squad, 384)
    assert sum(fig.data[0].y) == squad.num_samples
    strip = charts.pack_strip(result, n=10)
    assert sum(sum(t.y) for t in strip.data) == sum(sum(result.pack(i)) for i in range(10))
    sweep = views.packing_sweep(squad, [256, 512], ["first_fit_decreasing"])
    curves = charts.sweep_curves(sweep, "packing_efficiency", 384)
    assert {t.name for t in curves.data} == set(sweep["algorithm"])
    work = charts.attention_work_histogram(result)  # binned: every pack counted once, a bounded payload
    assert sum(work.data[0].y) == result.num_packs and len(work.data[0].y) == 60
    fill = charts.pack_fill_histogram(result)
    assert sum(fill.data[0].y) == result.num_packs


def test_a_pack_of_every_sample_is_drawn_with_its_tokens_and_a_bounded_number_of_traces(squad):
    """Found by bench/fuzz_round4.py: at pack size 1 every SQuAD sample shares pack 0, and the strip drew one trace
    per sample (88,641): the Packing page never finished."""
    result = pack(squad, PackingConfig(pack_size=1))
    assert len(result.pack(0)) > 10_000
    strip = charts.pack_strip(result)
    assert len(strip.data) <= charts.STRIP_SEGMENTS
    assert sum(sum(t.y) for t in strip.data) == sum(sum(result.pack(i)) for i in range(min(40, result.num_packs)))
    assert any("more samples" in c for t in strip.data for c in t.customdata)
    assert charts.payload_bytes(strip) < 1 << 20


@pytest.mark.slow  # packs the 16.3M-sample Wikipedia sample
def test_chart_payloads_stay_small_at_any_data_size(wikipedia):
    from advisor.packing.cache import packing_for

    result = packing_for(wikipedia, PackingConfig(pack_size=512, algorithm="first_fit_decreasing"))
    assert result.num_packs > 8_000_000
    for fig in (
        charts.pack_fill_histogram(result),
        charts.attention_work_histogram(result),
        charts.pack_strip(result),
        charts.length_histogram(wikipedia, 512),
    ):
        assert charts.payload_bytes(fig) < 1 << 20


def test_memory_figures(squad):
    plan = dashboard.default_plan()
    est = estimate(plan, squad)
    bar = charts.memory_bar(est)
    advisor_total = sum(t.y[0] for t in bar.data if t.x[0] == "advisor")
    assert abs(advisor_total - est.memory.total / 2**30) < 1e-9
    grid = pd.DataFrame(memory_grid(analyze(plan, squad), [256, 384], [1, 2]))
    heat = charts.memory_heatmap(grid).data[0]
    assert list(heat.y) == ["1", "2"] and list(heat.x) == ["256", "384"]
    for row in grid.itertuples():  # each cell is its layout's own estimate, in GiB
        cell = plan.changed(
            {
                "parallel": {"cp": row.cp},
                "training": {"seq_length": row.pack_size},
                "packing": {"pack_size": row.pack_size},
            }
        )
        gib = estimate(cell, squad).memory.total / 2**30
        i, j = list(heat.y).index(str(row.cp)), list(heat.x).index(str(row.pack_size))
        assert heat.z[i][j] == pytest.approx(gib) and heat.text[i][j].startswith(f"{gib:.0f}")


def test_marks_on_log_axes_sit_at_the_value(squad):
    import math

    sweep = views.packing_sweep(squad, [256, 512], ["first_fit_decreasing"])
    curves = charts.sweep_curves(sweep, "packing_efficiency", 384)
    # plotly: shapes by value, annotations by exponent on a log axis
    assert curves.layout.xaxis.type == "log" and curves.layout.shapes[0].x0 == 384
    assert curves.layout.annotations[0].x == math.log10(384)
    log = charts.length_histogram(squad, 384, log_x=True).layout
    assert log.shapes[0].x0 == 384 and log.annotations[0].x == math.log10(384)
    assert charts.length_histogram(squad, 384).layout.annotations[0].x == 384


def test_memory_grid_marks_cells_that_break_a_rule(squad):
    """A CP cell whose sequence length is not divisible by 2*CP fits in memory but Megatron refuses it."""
    plan = dashboard.default_plan().changed({"training": {"seq_length": 1001}, "packing": {"pack_size": 1001}})
    rows = memory_grid(analyze(plan, squad), [1001], [1, 2])
    by_cp = {r["cp"]: r for r in rows}
    assert by_cp[1]["breaks"] == "" and "cp.seq_length" in by_cp[2]["breaks"]
    heat = charts.memory_heatmap(pd.DataFrame(rows))
    assert any(" !" in cell for row in heat.data[0].text for cell in row)


def test_loss_weight_chart_draws_the_engines_shares(squad):
    """One value per length bin and series, each the loss weighting's own; every series a share of one step."""
    lw = analyze(dashboard.default_plan(), squad).loss
    fig = charts.loss_weight_shares(lw)
    by_name = {t.name: list(t.y) for t in fig.data}
    assert by_name["samples (the data's lengths)"] == pytest.approx(lw.bins.samples.tolist())
    assert by_name["token-uniform (per-token loss)"] == pytest.approx(lw.bins.uniform.tolist())
    assert by_name["packed (offline), your settings"] == pytest.approx(lw.bins.plan.tolist())
    assert by_name["same samples unpacked, your settings"] == pytest.approx(lw.bins.unpacked.tolist())
    for values in by_name.values():
        assert sum(values) == pytest.approx(1.0, abs=1e-6)
    assert all(len(t.x) == lw.bins.edges.size - 1 for t in fig.data)
    assert charts.payload_bytes(fig) < 20_000
    assert "moves when packing is turned on" in fig.layout.title.text  # SQuAD's plan keeps per-micro-batch means


def test_the_histograms_binned_for_charts_count_as_numpy_does():
    """The one-pass binning behind the pack charts (advisor/packing/metrics.py) gives numpy's counts and edges,
    values on the edges and at the top included."""
    from advisor.packing.metrics import even_histogram, integer_counts

    rng = np.random.default_rng(22)
    for trial in range(100):
        values = rng.integers(0, rng.integers(1, 300_000), rng.integers(1, 3000)).astype(np.int32)
        top = float(values.max()) * (1 + 1e-9 if trial % 2 else 1)
        bins = int(rng.integers(1, 80))
        counts, edges = even_histogram(values, 0.0, top, bins)
        expected, expected_edges = np.histogram(values, bins, (0.0, top))
        assert counts.tolist() == expected.tolist() and edges.tolist() == expected_edges.tolist()
        assert integer_counts(values).tolist() == np.bincount(values).tolist()


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.integers(-70_000, 70_000), min_size=1, max_size=400),
    lo=st.floats(-80_000, 80_000),
    width=st.just(0.0) | st.floats(0.5, 3_000_000),
    bins=st.integers(1, 70),
    dtype=st.sampled_from(["int16", "int32", "int64", "uint16", "uint64", "float64"]),
)
def test_even_histogram_counts_as_numpy_for_any_values_and_range(values, lo, width, bins, dtype):
    """Both ways of ``even_histogram`` (integers counted per value then binned by numpy; other values binned one
    by one) give ``np.histogram``'s counts for every range: values below, inside, on the edges and above it."""
    from advisor.packing.metrics import even_histogram

    info = np.iinfo(dtype) if dtype != "float64" else None
    v = np.array([x for x in values if info is None or info.min <= x <= info.max] or [0], dtype=dtype)
    counts, edges = even_histogram(v, lo, lo + width, bins)
    expected, expected_edges = np.histogram(v, bins, (lo, lo + width))
    assert counts.tolist() == expected.tolist() and edges.tolist() == expected_edges.tolist()
    if width > 0:  # a range the wrong way round is refused, as numpy refuses it
        with pytest.raises(ValueError, match="max must be larger than min"):
            even_histogram(v, lo + width, lo, bins)
