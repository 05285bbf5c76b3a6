"""Home: the data set (sample, upload or lognormal), the plan file, a shareable link, and the length summary."""

import streamlit as st

from advisor.ui import raw_data, screens
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control, errors, frame, number, on_upload, place, progress, rerun_if

frame()  # through app.py's frame first (pages/_frame.py says why)
st.title("Sequence packing advisor")
place((screens.HOME_INTRO,))
left, right = st.columns([1, 2])
with left:
    st.subheader("Data")
    st.session_state.setdefault("sample_choice", ui.sample_choice(st.session_state))
    on_change = {"on_change": ui.use_chosen_sample, "args": (st.session_state,)}
    st.selectbox("Bundled sample", list(ui.SAMPLES), key="sample_choice", help=H("sample"), **on_change)
    upload = st.file_uploader(ui.UPLOAD_LABEL, key="upload", help=H("upload"))
    on_upload(upload, "last_upload", lambda f: ui.use_upload(st.session_state, f.getvalue(), f.name))
    with st.expander("Or draw Megatron-LM's mock lognormal"):
        mean, sigma, lo, hi = (number(f, help=H("lognormal")) for f in ui.LOGNORMAL_INPUTS)
        if st.button("Draw"):
            rerun_if(ui.use_lognormal(st.session_state, mean, sigma, int(lo), int(hi)))
    with st.expander("Or from raw data: JSONL or Parquet and a tokenizer"):
        raw = st.file_uploader("SFT or chat records", type=["jsonl", "parquet"], key="raw_upload", help=H("raw_upload"))
        tok = st.selectbox(
            "Tokenizer (installed on the server)", list(raw_data.tokenizer_choices()), help=H("raw_tokenizer")
        )
        fmt = st.radio("Format", list(raw_data.FORMATS), horizontal=True, help=H("raw_format"))
        max_len = int(number(ui.RAW_MAX_SEQ_LENGTH, help=H("raw_max_seq_length")))
        if st.button("Tokenize", disabled=raw is None, help=H("raw_tokenize")):
            with progress("tokenizing") as bar:
                rerun_if(raw_data.use_raw_upload(st.session_state, raw.getvalue(), raw.name, tok, fmt, max_len, bar))
    control("data.format")
    errors("upload_error")
    st.subheader("Plan")
    plan_file = st.file_uploader(
        "Load a plan file (YAML or JSON)", type=["yaml", "yml", "json"], key="plan_upload", help=H("plan_file")
    )
    on_upload(plan_file, "last_plan", lambda f: ui.use_plan_file(st.session_state, f.getvalue(), f.name))
    errors("plan_error")
    st.download_button("Save plan (YAML)", ui.saved_plan(st.session_state), file_name="plan.yaml")
    place((screens.LINK_NOTE,))
with right:
    c1, c2 = st.columns(2)
    log_x, log_y = c1.toggle("log x", key="log_x", help=H("log_x")), c2.toggle("log y", key="log_y", help=H("log_y"))
    hist, plan, name = st.session_state["hist"], st.session_state["plan"], st.session_state["data_name"]
    place(screens.data_summary(hist, name, plan, log_x, log_y))
