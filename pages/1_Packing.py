"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import json

import streamlit as st

from advisor.packing.algorithms import ALGORITHMS
from advisor.ui import charts
from advisor.ui import state as dashboard

st.set_page_config(page_title="Packing", layout="wide")
dashboard.init_state(st.session_state)
plan, hist = st.session_state["plan"], st.session_state["hist"]
st.title("Packing")
c1, c2, c3 = st.columns(3)
algorithms = list(ALGORITHMS)
algorithm = c1.selectbox("Algorithm", algorithms, index=algorithms.index(plan["packing"]["algorithm"]))
size = c2.number_input("Pack size", 16, 1_048_576, plan["packing"]["pack_size"] or plan["training"]["seq_length"],
                       step=256)
mult = c3.number_input("pad_seq_to_mult", 1, 256, plan["packing"]["pad_seq_to_mult"] or 1)
st.session_state["plan"] = dashboard.with_packing(plan, algorithm=algorithm, pack_size=int(size),
                                                  pad_seq_to_mult=int(mult) if mult > 1 else None)
with st.spinner("packing"):
    result = dashboard.packing_at(hist, int(size), algorithm, int(mult))
m = result.metrics
k1, k2, k3, k4 = st.columns(4)
k1.metric("packs", f"{m.num_packs:,}")
k2.metric("packing factor n", result.metadata["packing_factor"])
k3.metric("efficiency", f"{result.metadata['packing_efficiency']} %")
k4.metric("straggler ratio", f"{m.straggler_ratio:.2f}")
st.subheader("Megatron-Bridge metadata, as it will be written")
st.code(json.dumps([result.metadata]), language="json", wrap_lines=True)
for note in result.notes:
    st.info(note)
with st.spinner("sweeping pack sizes"):
    sweep = dashboard.packing_sweep(hist, dashboard.sweep_sizes(hist), ["first_fit_shuffle", "first_fit_decreasing",
                                                                         "best_fit_decreasing"])
metric = st.radio("Curve", ["packing_efficiency", "padding_fraction", "packing_factor"], horizontal=True)
st.plotly_chart(charts.sweep_curves(sweep, metric, int(size)), width="stretch")
a, b = st.columns(2)
a.plotly_chart(charts.pack_fill_histogram(result), width="stretch")
b.plotly_chart(charts.attention_work_histogram(result), width="stretch")
st.plotly_chart(charts.pack_strip(result), width="stretch")
