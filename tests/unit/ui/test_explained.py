"""Every metric, control and chart on every page carries its explanation (advisor/ui/explain.py), and the worked
examples are the engine's own numbers."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from advisor.analysis import analyze
from advisor.ui import explain, views
from advisor.ui import state as ui
from advisor.ui.pages import page_paths
from tests.support import ROOT
from tests.support.apptest import open_page

PAGES = page_paths()  # every page of the registry (advisor/ui/pages.py)
WIDGETS = (
    "number_input",
    "selectbox",
    "toggle",
    "radio",
    "text_input",
    "checkbox",
    "slider",
    "select_slider",
    "text_area",
    "multiselect",
    "date_input",
)
TRIAL_RESULT = {  # what a trial.json holds (format 2), enough for the Trial page to draw its chart and tables
    "format": 2,
    "device": "cpu",
    "steps": 5,
    "speedup": 2.0,
    "predicted_speedup": 1.9,
    "packed_kernel": "a note",
    **{
        way: {"timed_step_seconds": [0.5, 0.52, 0.48, 0.5, 0.51], "timed_step_tokens": [tokens] * 5}
        for way, tokens in (("packed", 1000), ("padded", 500), ("block_masked", 750))
    },
    "memory": {"measured_bytes": 2**20, "predicted_bytes": 2**20},
    "loss_parity": {"max_abs_diff": 0.0, "bound": 1e-5},
    "grad_parity": {"max_rel_diff": 0.0, "bound": 1e-4},
}


def _help_of(element) -> str:
    return getattr(element, "help", None) or getattr(getattr(element, "proto", None), "help", "") or ""


@pytest.mark.slow  # AppTest
@pytest.mark.parametrize("page", PAGES)
def test_every_metric_control_and_chart_is_explained(page):
    at = open_page(page, {"trial_result": TRIAL_RESULT})
    assert not at.exception, [e.value for e in at.exception]
    for metric in at.metric:
        assert _help_of(metric), f"{page}: metric {metric.label!r} has no explanation"
    for kind in WIDGETS:
        for widget in at.get(kind):
            assert _help_of(widget), f"{page}: {kind} {getattr(widget, 'label', '?')!r} has no explanation"
    for uploader in at.get("file_uploader"):
        assert uploader.proto.help, f"{page}: file uploader {uploader.proto.label!r} has no explanation"
    charts = len(at.get("plotly_chart"))
    explained = sum(1 for e in at.expander if e.label == "What am I looking at?")
    assert explained == charts, f"{page}: {charts} charts, {explained} explanations"


def test_every_explanation_names_its_source():
    for key, e in explain.HELP.items():
        assert len(e.text) > 20 and e.source, key
        assert e.source in explain.help_text(key)


def test_worked_examples_are_the_engines_numbers(squad):
    from advisor.analysis import analyze

    plan = ui.default_plan()
    analysis = analyze(plan, squad)
    n = analysis.packing_factor
    text = views.global_batch_example_text(plan, n)
    assert f"global_batch_size {analysis.global_batch_packs} packs" in text
    with_cp = plan.changed({"parallel": {"cp": 2}})
    assert f"pad_seq_to_mult {with_cp.pad_seq_to_mult} " in views.cp_example_text(with_cp)
    e = explain.attention_example([100, 200, 300])
    assert (e["thd"], e["block_mask"], e["padded"]) == (100**2 + 200**2 + 300**2, 600**2, 3 * 300**2)
    cp_plan = plan.changed({"parallel": {"cp": 2, "tp": 4, "gpus": 8}})
    cp = explain.cp_padding_example(1001, cp_plan.pad_seq_to_mult, cp_plan.parallel.cp)
    assert cp == {"length": 1001, "multiple": 8, "padded": 1008, "chunks": 4, "chunk_tokens": 252}
    assert "chunks" not in views.cp_example_text(plan)  # CP 1: nothing is cut
    from advisor.ui.samples import default_plan

    vlm = default_plan("VLM-like (100k)")  # in-batch packing: the batch stays in samples, whatever n is
    assert views.global_batch_example_text(vlm, 2.0) == views.global_batch_example_text(vlm, 5.0)
    assert f"({vlm.requested_samples:,} samples per step)" in views.global_batch_example_text(vlm, 2.0)


def _tour_expectations(index: int, hist, plan, a) -> list[str]:
    """Fragments each tour step must show, computed here from the step's sample and plan, not from the tour."""
    import numpy as np

    if index == 0:
        size = plan.pack_size
        real = int((np.maximum(np.minimum(hist.lengths, size) - 1, 0) * hist.counts).sum())
        efficiency = 100 * real / (hist.num_samples * size)  # every sample padded to the pack size
        return [
            f"{hist.num_samples:,} samples",
            f"longest {int(hist.lengths.max()):,}",
            f"{efficiency:.1f} % of the computed tokens are data",
        ]
    if index == 1:
        p = a.packing
        data_share = 100 * p.metrics.real_tokens / (p.num_packs * plan.pack_size)
        return [f"{p.num_packs:,} packs", f"{data_share:.2f} % of the row is data"]
    if index == 2:
        return [views.global_batch_example_text(plan, a.packing_factor)]
    if index == 3:
        return [f"attention = {a.estimate.flops.attention_ratio:.2f}."]
    if index == 4:
        fill_work = np.add.reduceat(a.packing.items.astype(np.int64) ** 2, a.packing.offsets[:-1])
        return [
            f"{fill_work.max() / fill_work.mean():.2f}x the mean attention work",
            f"waits x{a.estimate.time.straggler_factor:.2f}",
        ]
    if index == 5:
        return [views.cp_example_text(plan), f"pad_seq_to_mult: {plan.pad_seq_to_mult}."]
    if index == 6:
        m = a.estimate.memory
        return [f"{m.total / 2**30:.1f} GiB per GPU", "(fits)" if m.total <= m.capacity else "(does not fit)"]
    if index == 7:
        return [f"{f.id}: {f.message}" for f in a.findings if f.id.startswith(("long_context", "cp."))][:4]
    if index == 8:
        t = a.estimate.time
        return [f"Step {t.step_seconds:.2f} s", f"MFU {t.mfu:.0%}"]
    if index == 9:
        return [f"Recommended here: {views.packing_comparison(plan, hist).recommended}."]
    if index == 10:
        return [
            f"{a.loss.moved_vs_unpacked:.0%} of each step's gradient weight moves",
            f"objective {a.loss.objective_same.mean:.3f}",
            "With calculate_per_token_loss: 0% moves, objective 1.000.",
        ]
    export = a.export("python")
    return [f"cfg.train.global_batch_size = {a.global_batch_packs}"] + [
        line for line in export.splitlines() if "Specs(" in line
    ]


def test_every_tour_step_shows_its_samples_figures_and_links_a_page():
    from advisor.ui import tour

    for i, step in enumerate(tour.STEPS):
        hist, plan = ui.load_sample(step.sample), tour.step_plan(step)
        shown = "\n".join(tour.step_figures(i))
        expected = _tour_expectations(i, hist, plan, analyze(plan, hist))
        assert expected, step.title
        for fragment in expected:
            assert fragment in shown, (step.title, fragment, shown)
        assert (ROOT / step.page).exists()
        state: dict = {}
        ui.init_state(state)
        tour.apply_step(state, i)
        assert state["data_name"] == step.sample and state["plan"] == tour.step_plan(step)


@pytest.mark.slow  # AppTest
def test_the_tour_walks_forward_and_opens_a_page():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("pages/5_Tour.py").run()
    from advisor.ui.tour import STEPS

    for step in STEPS[:-1]:
        assert at.header[0].value == step.title
        next(b for b in at.button if b.label == "Next").click().run()
    assert at.header[0].value == STEPS[-1].title
    next(b for b in at.button if b.label.startswith("Open")).click().run()
    assert not at.exception and at.title[0].value == "Trial"
