"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import json

import streamlit as st

from advisor.ui import charts, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control, errors, explained, frame, progress, say, stop_on

frame()  # through app.py's frame first (pages/_frame.py says why)


def headline(shown: dict, where) -> None:
    for column, (label, value, key) in zip(where.columns(len(shown["figures"])), shown["figures"], strict=True):
        column.metric(label, value, help=H(key))


st.title("Packing")
c1, c2, c3 = st.columns(3)
if st.session_state["plan"].packing_mode == "offline":  # packs and their size exist only under offline packing
    control("packing.algorithm", c1)
    control("packing.pack_size", c2)
control("packing.pad_seq_to_mult", c3)
errors("plan_error")
hist = st.session_state["hist"]
if st.session_state["plan"].packing_mode != "offline":  # in-batch, online, none: no packs, no metadata file
    plan = st.session_state["plan"]
    say("info", views.no_packs_text(plan))
    with st.spinner("estimating"):
        analysis, busy = ui.ready_analysis(st.session_state)
        stop_on(busy)
        est, problem = ui.estimate_of(analysis)
    stop_on(problem)
    shown = views.micro_batch_headline(plan, est.micro_batches)
    headline(shown, st)
    say("caption", views.global_batch_example_text(plan, None))
    explained(charts.micro_batch_tokens(est.micro_batches), "micro_batch_tokens")
    st.stop()
figures = st.empty()  # the headline's place: the last figures shown stay there while a new pack size is packed
previous = st.session_state.get("packing_shown")
same_data = previous and previous.get("data") == st.session_state.get("data_name")
if same_data and not ui.packing_kept(st.session_state):
    with figures.container():
        say(
            "caption",
            f"Showing pack size {previous['pack_size']:,} ({previous['algorithm']}) while pack size "
            f"{st.session_state['plan'].pack_size:,} is packed",
        )
        headline(previous, st)
with progress(f"packing {hist.num_samples:,} samples") as bar:
    result, busy = ui.ready_packing(st.session_state, progress=bar)
if busy:
    figures.empty()
stop_on(busy)
plan, m = st.session_state["plan"], result.metrics
shown = views.packing_headline(result)
st.session_state["packing_shown"] = {**shown, "data": st.session_state.get("data_name")}
with figures.container():
    headline(shown, st)
say("caption", views.global_batch_example_text(plan, result.packing_factor) + " " + views.cp_example_text(plan))
st.subheader("Megatron-Bridge metadata, as it will be written", help=H("metadata"))
st.code(json.dumps([result.metadata]), language="json", wrap_lines=True)
for note in result.notes:
    say("info", note)
with progress("sweeping pack sizes") as bar:
    sweep = views.packing_sweep(
        hist, views.sweep_sizes(hist), list(views.SWEEP_ALGORITHMS), progress=bar, overlong=result.config.overlong
    )  # chat data (data.format) is skipped, not cut
metric = st.radio(
    "Curve", ["packing_efficiency", "padding_fraction", "packing_factor"], horizontal=True, help=H("sweep_metric")
)
explained(charts.sweep_curves(sweep, metric, plan.pack_size), "sweep")
a, b = st.columns(2)
explained(charts.pack_fill_histogram(result), "pack_fill", a)
explained(charts.attention_work_histogram(result), "attention_work", b)
explained(charts.pack_strip(result), "pack_strip")
ui.pack_ahead(st.session_state)  # on big data, the next pack sizes are packed while nobody waits
