"""Online packing: the THD schedulers (Megatron-Bridge 0.7's global-batch packing, Megatron-LM's online packing) on
this data and layout, beside Megatron-Bridge's offline and in-batch packing, and the way to use."""

import streamlit as st

from advisor.ui import charts, screens, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import explained, frame, place, say, stop_on

frame()  # through app.py's frame first (pages/_frame.py says why)
plan, hist = st.session_state["plan"], st.session_state["hist"]
st.title("Online packing (Megatron-Bridge 0.7, Megatron-LM)")
c = st.columns(3)
branch = c[0].selectbox("Megatron-LM", ["dev", "main"], help=H("online_megatron_lm"))
buffer = int(c[1].number_input("max_seqlen_per_dp_cp_rank (0: default)", 0, 1 << 24, 0, help=H("online_max_seqlen")))
with st.spinner("scheduling the global batches"):
    comparison, problem = ui.ready_comparison(st.session_state, branch, buffer or None)
stop_on(problem)
place(screens.online(comparison))
online = [r for r in comparison.runs if r.estimate is not None and r.estimate.online is not None]
if online:  # none where every scheduled way is refused on this layout (a VLM plan)
    shown = c[2].selectbox("Schedule shown", [r.label for r in online], help=H("online_shown"))
    chosen = next(r for r in online if r.label == shown)
    run = chosen.estimate.online
    place(screens.online_run(run))
    step = int(st.slider("Step", 0, max(0, run.summary.epoch_steps - 1), 0, help=H("online_step")))
    rank_work = charts.online_rank_work(views.online_step(chosen.plan, hist, run, step), run.config.cp)
    explained(rank_work, "online_rank_work")
labels = [r.label for r in comparison.runs if r.plan is not None and r.refusal is None]  # refused: nothing to use
use = st.selectbox("Put in the plan", labels, index=labels.index(comparison.recommended), help=H("online_use"))
if st.button(f"Use {use}", help=H("online_use")):
    if ui.set_plan(st.session_state, comparison.use(use)):
        st.rerun()
    say("error", st.session_state["plan_error"])
