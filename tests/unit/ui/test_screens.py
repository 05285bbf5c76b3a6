"""The pages' read-only parts as blocks (advisor/ui/screens.py), checked without Streamlit against the engine's
own figures on the bundled samples: a page shows exactly what ``estimate`` and ``pack`` computed."""

from __future__ import annotations

from advisor.analysis import analyze
from advisor.findings import Finding
from advisor.model.estimate import packing_config
from advisor.packing.offline import pack
from advisor.ui import blocks, screens
from advisor.ui.samples import DEFAULT_SAMPLE, default_plan, load_sample


def _session():
    hist = load_sample(DEFAULT_SAMPLE)
    plan = default_plan()
    return hist, plan, analyze(plan, hist)


def test_the_memory_screen_shows_the_estimates_figures():
    hist, plan, a = _session()
    est = a.estimate
    shown = blocks.texts(screens.memory(a, est))
    assert f"step time (straggler x{est.time.straggler_factor:.2f}): {est.time.step_seconds:.3f} s" in shown
    assert f"tokens/s/GPU: {est.time.tokens_per_second_per_gpu:,.0f}" in shown
    assert any(t.startswith("memory per GPU") and f"{est.memory.total / 2**30:.1f} of" in t for t in shown)
    charts = [b.explain for b in blocks.walk(screens.memory(a, est)) if isinstance(b, blocks.Chart)]
    assert charts == ["memory_bar", "attention_flops", "step_breakdown"]


def test_the_packing_screen_shows_the_metadata_megatron_bridge_writes():
    hist, plan, _ = _session()
    result = pack(hist, packing_config(plan))
    code = [b for b in screens.packing_details(plan, result) if isinstance(b, blocks.Code)]
    assert len(code) == 1 and str(result.metadata["packing_factor"]) in code[0].text
    head = blocks.texts((screens.headline({"figures": [("packs", f"{result.metrics.num_packs:,}", "packs")]}),))
    assert head == [f"packs: {result.metrics.num_packs:,}"]


def test_the_data_screen_counts_every_row_left_out():
    hist, plan, _ = _session()
    hist = hist.__class__.from_samples([5, 7, 9], source="x")
    shown = blocks.texts(screens.data_summary(hist, "x.csv", plan, False, False))
    assert shown[0] == "x.csv" and "samples: 3" in shown


def test_a_findings_text_is_escaped_when_drawn_and_errors_open():
    f = Finding(id="a.b", severity="error", message="**bold** [link](http://x)", reason="r", source="s")
    fold = screens.finding(f)
    assert fold.expanded and fold.label == "a.b: **bold** [link](http://x)"
    assert all(not (isinstance(b, blocks.Text) and b.markdown) for b in blocks.walk((fold,)))
