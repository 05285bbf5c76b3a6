"""The dashboard's figures, built from real engine results."""

from __future__ import annotations

import pandas as pd

from advisor.analysis import analyze, memory_grid
from advisor.model.estimate import estimate
from advisor.packing.config import PackingConfig
from advisor.packing.offline import pack
from advisor.ui import charts
from advisor.ui import state as dashboard


def test_figures_carry_the_numbers(squad):
    result = pack(squad, PackingConfig(pack_size=384))
    fig = charts.length_histogram(squad, 384)
    assert sum(fig.data[0].y) == squad.num_samples
    strip = charts.pack_strip(result, n=10)
    assert sum(sum(t.y) for t in strip.data) == sum(sum(result.pack(i)) for i in range(10))
    sweep = dashboard.packing_sweep(squad, [256, 512], ["first_fit_decreasing"])
    curves = charts.sweep_curves(sweep, "packing_efficiency", 384)
    assert {t.name for t in curves.data} == set(sweep["algorithm"])
    assert charts.attention_work_histogram(result).data[0].x.size == result.num_packs


def test_memory_figures(squad):
    plan = dashboard.default_plan()
    est = estimate(plan, squad)
    bar = charts.memory_bar(est)
    advisor_total = sum(t.y[0] for t in bar.data if t.x[0] == "advisor")
    assert abs(advisor_total - est.memory.total / 2**30) < 1e-9
    grid = pd.DataFrame(memory_grid(analyze(plan, squad), [256, 384], [1, 2]))
    heat = charts.memory_heatmap(grid)
    assert heat.layout.xaxis.type == "category" and len(grid) == 4
