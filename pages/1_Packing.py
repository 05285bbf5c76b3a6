"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import json

import streamlit as st

from advisor.packing.algorithms import ALGORITHMS
from advisor.ui import charts, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H

st.set_page_config(page_title="Packing", layout="wide")


def explained(fig, key: str) -> None:
    """A chart and, under it, what it shows (advisor/ui/explain.py)."""
    st.plotly_chart(fig, width="stretch")
    with st.expander("What am I looking at?"):
        st.markdown(ui.plain(H(key)))


ui.init_state(st.session_state)
plan, hist = st.session_state["plan"], st.session_state["hist"]
st.title("Packing")
c1, c2, c3 = st.columns(3)
algorithms = list(ALGORITHMS)
algorithm = c1.selectbox("Algorithm", algorithms, index=algorithms.index(plan.packing.algorithm), help=H("algorithm"))
size = int(c2.number_input("Pack size", 16, ui.MAX_DASHBOARD_PACK, min(plan.pack_size, ui.MAX_DASHBOARD_PACK),
                           step=256, help=H("pack_size")))
mult = int(c3.number_input("pad_seq_to_mult", 1, 65536, plan.pad_seq_to_mult, help=H("pad_seq_to_mult")))
if changes := ui.packing_changes(plan, algorithm, size, mult):
    ui.set_plan(st.session_state, changes)
if "plan_error" in st.session_state:
    st.error(ui.plain(st.session_state["plan_error"]))
bar = st.progress(0.0, text=f"packing {hist.num_samples:,} samples")
result = ui.plan_packing(st.session_state, progress=lambda what, done: bar.progress(done, text=what))
bar.empty()
m = result.metrics
k1, k2, k3, k5, k4 = st.columns(5)
k1.metric("packs", f"{m.num_packs:,}", help=H("packs"))
k2.metric("packing factor n", result.metadata["packing_factor"], help=H("packing_factor"))
k3.metric("efficiency", f"{result.metadata['packing_efficiency']} %", help=H("efficiency"))
k5.metric("data share", f"{100 * (1 - m.padding_fraction):.2f} %", help=H("data_share"))
k4.metric("straggler ratio", f"{m.straggler_ratio:.2f}", help=H("straggler_ratio"))
st.caption(views.global_batch_example_text(st.session_state["plan"], m.num_sequences / m.num_packs) + " " +
           views.cp_example_text(st.session_state["plan"]))
st.subheader("Megatron-Bridge metadata, as it will be written", help=H("metadata"))
st.code(json.dumps([result.metadata]), language="json", wrap_lines=True)
for note in result.notes:
    st.info(ui.plain(note))
bar = st.progress(0.0, text="sweeping pack sizes")
sweep = views.packing_sweep(hist, views.sweep_sizes(hist), ["first_fit_shuffle", "first_fit_decreasing",
                                                      "best_fit_decreasing"],
                         progress=lambda what, done: bar.progress(done, text=what),
                         overlong=result.config.overlong)  # chat data (data.format) is skipped, not cut
bar.empty()
metric = st.radio("Curve", ["packing_efficiency", "padding_fraction", "packing_factor"], horizontal=True,
                  help=H("sweep_metric"))
explained(charts.sweep_curves(sweep, metric, size), "sweep")
a, b = st.columns(2)
with a:
    explained(charts.pack_fill_histogram(result), "pack_fill")
with b:
    explained(charts.attention_work_histogram(result), "attention_work")
explained(charts.pack_strip(result), "pack_strip")
