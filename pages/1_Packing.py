"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import json

import streamlit as st

from advisor.packing.algorithms import ALGORITHMS
from advisor.ui import charts
from advisor.ui import state as ui

st.set_page_config(page_title="Packing", layout="wide")
ui.init_state(st.session_state)
plan, hist = st.session_state["plan"], st.session_state["hist"]
st.title("Packing")
c1, c2, c3 = st.columns(3)
algorithms = list(ALGORITHMS)
algorithm = c1.selectbox("Algorithm", algorithms, index=algorithms.index(plan.packing.algorithm))
size = int(c2.number_input("Pack size", 16, ui.MAX_DASHBOARD_PACK, min(plan.pack_size, ui.MAX_DASHBOARD_PACK),
                           step=256))
mult = int(c3.number_input("pad_seq_to_mult", 1, 65536, plan.pad_seq_to_mult,
                           help="Default: Megatron-Bridge 0.6's CP/SP multiple, lcm(2·CP, CP·TP with SP)"))
if changes := ui.packing_changes(plan, algorithm, size, mult):
    ui.set_plan(st.session_state, changes)
if "plan_error" in st.session_state:
    st.error(ui.plain(st.session_state["plan_error"]))
bar = st.progress(0.0, text=f"packing {hist.num_samples:,} samples")
result = ui.plan_packing(st.session_state, progress=lambda what, done: bar.progress(done, text=what))
bar.empty()
m = result.metrics
k1, k2, k3, k4 = st.columns(4)
k1.metric("packs", f"{m.num_packs:,}")
k2.metric("packing factor n", result.metadata["packing_factor"])
k3.metric("efficiency", f"{result.metadata['packing_efficiency']} %")
k4.metric("straggler ratio", f"{m.straggler_ratio:.2f}")
st.subheader("Megatron-Bridge metadata, as it will be written")
st.code(json.dumps([result.metadata]), language="json", wrap_lines=True)
for note in result.notes:
    st.info(ui.plain(note))
bar = st.progress(0.0, text="sweeping pack sizes")
sweep = ui.packing_sweep(hist, ui.sweep_sizes(hist), ["first_fit_shuffle", "first_fit_decreasing",
                                                      "best_fit_decreasing"],
                         progress=lambda what, done: bar.progress(done, text=what))
bar.empty()
metric = st.radio("Curve", ["packing_efficiency", "padding_fraction", "packing_factor"], horizontal=True)
st.plotly_chart(charts.sweep_curves(sweep, metric, size), width="stretch")
a, b = st.columns(2)
a.plotly_chart(charts.pack_fill_histogram(result), width="stretch")
b.plotly_chart(charts.attention_work_histogram(result), width="stretch")
st.plotly_chart(charts.pack_strip(result), width="stretch")
