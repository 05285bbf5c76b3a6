"""Trial: a short real training run in the background, packed vs padded vs block-masked, against the estimates."""

import streamlit as st

from advisor.trial import jobs as trial_jobs
from advisor.trial.config import TrialConfig
from advisor.ui import trial_view
from advisor.ui.explain import help_text as H
from pages._frame import explained, frame, say

frame()  # through app.py's frame first (pages/_frame.py says why)

st.title("Trial")
st.caption(
    "Trains a small GPT with the plan's head dimension, GQA ratio and SwiGLU on synthetic tokens of your "
    "length distribution; checks packed loss and gradients against each sample alone. CPU runs are small "
    "and slow; on a GPU node run `python -m advisor trial PLAN --device cuda --out DIR` and upload trial.json. "
    "One trial runs on this server at a time; it stops when you close the page."
)
lim = trial_jobs.TRIAL_LIMITS
c1, c2, c3 = st.columns(3)
default = TrialConfig()  # the command line's defaults: the job runs `python -m advisor trial` with all of them
steps = c1.number_input("Timed steps", 1, lim["steps"], default.steps, help=H("trial_steps"))
pack_size = c2.number_input(
    "Trial pack size", 64, lim["pack_size"], default.pack_size, step=64, help=H("trial_pack_size")
)
scale = c3.selectbox("Model scale", list(lim["scales"]), help=H("trial_scale"))
job = st.session_state.get("trial_job")
if st.button("Start trial", disabled=job is not None and trial_jobs.poll(job)["state"] == "running"):
    try:
        st.session_state["trial_job"] = trial_jobs.start_trial(
            st.session_state["plan"], st.session_state["hist"], steps=int(steps), pack_size=int(pack_size), scale=scale
        )
    except (trial_jobs.JobBusy, ValueError) as e:
        say("error", str(e))


@st.fragment(run_every=1.0)
def follow():
    job = st.session_state.get("trial_job")
    if job is None:
        return
    status = trial_jobs.poll(job)  # also the job's heartbeat: it stops when no page follows it
    say("write", f"Trial {status['state']}")
    st.code(status["log"] or "starting…", language="text")
    if status["state"] == "running" and st.button("Cancel"):
        trial_jobs.cancel(job)
    if status["state"] != "running":
        st.session_state["trial_result"] = trial_jobs.collect(job)  # the folder is removed
        st.session_state["trial_status"] = (status["state"], status["log"])
        del st.session_state["trial_job"]
        st.rerun()  # the results are drawn by the whole page, outside this fragment


follow()
if "trial_status" in st.session_state and "trial_job" not in st.session_state:
    state, log = st.session_state["trial_status"]
    (st.success if state == "done" else st.error)(f"Trial {state}")
    if state != "done":
        st.code(log, language="text")
uploaded = st.file_uploader(
    "Or show a trial.json from a run elsewhere", type=["json"], key="trial_upload", help=H("trial_upload")
)
if uploaded is not None:
    try:
        st.session_state["trial_result"] = trial_jobs.read_results(uploaded.getvalue(), uploaded.name)
    except ValueError as e:
        say("error", str(e))
result = st.session_state.get("trial_result")
if result:
    speed, memory = trial_view.results_tables(result)
    explained(trial_view.results_chart(result), "trial_chart")
    a, b = st.columns(2)
    a.dataframe(speed, hide_index=True)
    b.dataframe(memory, hide_index=True)
    speedup, warnings, kernel_note = trial_view.speed_notes(result)
    say("write", f"Speed-up packed/padded (median tokens/s): {speedup}")  # from an uploaded trial.json
    for w in warnings:
        say("warning", w)
    if kernel_note:
        say("info", kernel_note)
    say("write", trial_view.parity_text(result))
    loss = trial_view.loss_table(result)
    if loss is not None:
        st.subheader("Loss at step 0, packed / unpacked", help=H("trial_loss"))
        st.dataframe(loss, hide_index=True)
        say("caption", result["loss_weighting"]["how"])
