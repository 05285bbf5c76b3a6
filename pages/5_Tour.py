"""Tour: the concepts of packed and long-context training in order, one step per screen, each linked to its page."""

import streamlit as st

from advisor.ui import tour
from pages._frame import frame, say

frame()  # through app.py's frame first (pages/_frame.py says why)
i = min(st.session_state.get("tour_step", 0), len(tour.STEPS) - 1)
step = tour.STEPS[i]
st.title("Tour")
st.progress((i + 1) / len(tour.STEPS), text=f"Step {i + 1} of {len(tour.STEPS)}")
st.header(step.title)
say("markdown", step.text)
with st.spinner(f"computing on {step.sample}"):
    for line in tour.step_figures(i):
        say("info", line)
back, go, forward = st.columns(3)
if back.button("Back", disabled=i == 0):
    st.session_state["tour_step"] = i - 1
    st.rerun()
if go.button(
    f"Open {step.page_title} with these settings",
    type="primary",
    help="Replaces the data and plan with this step's example; the button below puts yours back",
):
    tour.apply_step(st.session_state, i)
    st.switch_page(step.page)
if forward.button("Next" if i < len(tour.STEPS) - 1 else "Finish the tour"):
    st.session_state["tour_step"] = 0 if i == len(tour.STEPS) - 1 else i + 1
    if i == len(tour.STEPS) - 1:
        st.switch_page("pages/0_Data_and_plan.py")
    st.rerun()
if (undo := tour.undo_text(st.session_state)) is not None:
    if st.button(undo, icon=":material/undo:"):
        tour.undo_step(st.session_state)
        st.rerun()
