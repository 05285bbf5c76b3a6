"""Trial: a short real training run in the background, packed vs padded vs block-masked, against the estimates."""

import streamlit as st

from advisor.trial import jobs as trial_jobs
from advisor.trial.config import TrialConfig
from advisor.ui import screens, trial_view
from advisor.ui.explain import help_text as H
from pages._frame import frame, place, say

frame()  # through app.py's frame first (pages/_frame.py says why)
st.title("Trial")
place((screens.TRIAL_INTRO,))
lim, default = trial_jobs.TRIAL_LIMITS, TrialConfig()  # the command line's defaults: the job runs `advisor trial`
c1, c2, c3 = st.columns(3)
steps = c1.number_input("Timed steps", 1, lim["steps"], default.steps, help=H("trial_steps"))
pack_size = c2.number_input(
    "Trial pack size", 64, lim["pack_size"], default.pack_size, step=64, help=H("trial_pack_size")
)
scale = c3.selectbox("Model scale", list(lim["scales"]), help=H("trial_scale"))
if st.button("Start trial", disabled=trial_view.running(st.session_state)):
    plan, hist = st.session_state["plan"], st.session_state["hist"]
    if problem := trial_view.start(
        st.session_state, plan, hist, steps=int(steps), pack_size=int(pack_size), scale=scale
    ):
        say("error", problem)


@st.fragment(run_every=1.0)
def follow():
    if (following := trial_view.follow(st.session_state)) is None:  # also the job's heartbeat
        return
    place(trial_view.following_blocks(following))
    if following.running and st.button("Cancel"):
        trial_view.cancel(st.session_state)
    if not following.running:
        st.rerun()  # the results are drawn by the whole page, outside this fragment


follow()
place(trial_view.outcome_blocks(st.session_state))
uploaded = st.file_uploader(
    "Or show a trial.json from a run elsewhere", type=["json"], key="trial_upload", help=H("trial_upload")
)
if uploaded is not None and (problem := trial_view.use_upload(st.session_state, uploaded)):
    say("error", problem)
if result := st.session_state.get("trial_result"):
    place(screens.trial_results(result))
