"""Packing: what Megatron-Bridge's offline packing does to this data, against pack size and algorithm."""

import streamlit as st

from advisor.ui import charts, screens, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control, errors, estimate_or_stop, explained, frame, place, progress, say, stop_on

frame()  # through app.py's frame first (pages/_frame.py says why)
st.title("Packing")
c1, c2, c3 = st.columns(3)
plan, hist = st.session_state["plan"], st.session_state["hist"]
if plan.packing_mode == "offline":  # packs and their size exist only under offline packing
    control("packing.algorithm", c1)
    control("packing.pack_size", c2)
control("packing.pad_seq_to_mult", c3)
errors("plan_error")
if plan.packing_mode != "offline":  # in-batch, online, none: no packs, no metadata file
    say("info", views.no_packs_text(plan))
    place(screens.micro_batches(plan, estimate_or_stop()[1]))
    st.stop()
figures = st.empty()  # the headline's place: the last figures shown stay there while a new pack size is packed
if (previous := ui.packing_shown_before(st.session_state)) is not None:
    place((screens.waiting_caption(previous, plan), screens.headline(previous)), figures.container())
with progress(f"packing {hist.num_samples:,} samples") as bar:
    result, busy = ui.ready_packing(st.session_state, progress=bar)
if busy:
    figures.empty()
stop_on(busy)
place((screens.headline(ui.packing_shown(st.session_state, result)),), figures.container())
place(screens.packing_details(plan, result))
with progress("sweeping pack sizes") as bar:
    sweep = views.packing_sweep(
        hist, views.sweep_sizes(hist), list(views.SWEEP_ALGORITHMS), progress=bar, overlong=result.config.overlong
    )  # chat data (data.format) is skipped, not cut
metric = st.radio("Curve", list(views.SWEEP_METRICS), horizontal=True, help=H("sweep_metric"))
explained(charts.sweep_curves(sweep, metric, plan.pack_size), "sweep")
place(screens.packing_charts(result))
ui.pack_ahead(st.session_state)  # on big data, the next pack sizes are packed while nobody waits
