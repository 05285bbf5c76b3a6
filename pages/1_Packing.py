"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import json

import streamlit as st

from advisor.ui import charts, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control, errors, explained, progress, stop_on

st.title("Packing")
c1, c2, c3 = st.columns(3)
control("packing.algorithm", c1)
control("packing.pack_size", c2)
control("packing.pad_seq_to_mult", c3)
errors("plan_error")
hist = st.session_state["hist"]
with progress(f"packing {hist.num_samples:,} samples") as bar:
    result, busy = ui.ready_packing(st.session_state, progress=bar)
stop_on(busy)
plan, m = st.session_state["plan"], result.metrics
k1, k2, k3, k5, k4 = st.columns(5)
k1.metric("packs", f"{m.num_packs:,}", help=H("packs"))
k2.metric("packing factor n", result.metadata["packing_factor"], help=H("packing_factor"))
k3.metric("efficiency", f"{result.metadata['packing_efficiency']} %", help=H("efficiency"))
k5.metric("data share", f"{100 * (1 - m.padding_fraction):.2f} %", help=H("data_share"))
k4.metric("straggler ratio", f"{m.straggler_ratio:.2f}", help=H("straggler_ratio"))
st.caption(ui.plain(views.global_batch_example_text(plan, result.packing_factor) + " " + views.cp_example_text(plan)))
st.subheader("Megatron-Bridge metadata, as it will be written", help=H("metadata"))
st.code(json.dumps([result.metadata]), language="json", wrap_lines=True)
for note in result.notes:
    st.info(ui.plain(note))
with progress("sweeping pack sizes") as bar:
    sweep = views.packing_sweep(hist, views.sweep_sizes(hist), list(views.SWEEP_ALGORITHMS), progress=bar,
                                overlong=result.config.overlong)  # chat data (data.format) is skipped, not cut
metric = st.radio("Curve", ["packing_efficiency", "padding_fraction", "packing_factor"], horizontal=True,
                  help=H("sweep_metric"))
explained(charts.sweep_curves(sweep, metric, plan.pack_size), "sweep")
a, b = st.columns(2)
explained(charts.pack_fill_histogram(result), "pack_fill", a)
explained(charts.attention_work_histogram(result), "attention_work", b)
explained(charts.pack_strip(result), "pack_strip")
