"""Home: the data set (sample, upload or lognormal), the plan file, a shareable link, and the length summary."""

import streamlit as st

from advisor.ui import charts, raw_data, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control, errors, explained, frame, number, progress, say

frame()  # through app.py's frame first (pages/_frame.py says why)

st.title("Sequence packing advisor")
st.caption(
    "Plan packed-sequence and long-context training on Megatron-Bridge / Megatron-LM from your data's "
    "sequence lengths. New here? Start with the Tour in the sidebar."
)

left, right = st.columns([1, 2])
with left:
    st.subheader("Data")
    st.session_state.setdefault(
        "sample_choice",
        st.session_state["data_name"] if st.session_state["data_name"] in ui.SAMPLES else ui.DEFAULT_SAMPLE,
    )
    st.selectbox(
        "Bundled sample",
        list(ui.SAMPLES),
        key="sample_choice",
        help=H("sample"),
        on_change=lambda: ui.use_sample(st.session_state, st.session_state["sample_choice"]),
    )
    upload = st.file_uploader(
        f"Or upload lengths (csv, tsv, json, jsonl, npy, parquet; up to {ui.UPLOAD_LIMIT_MB} MB)",
        key="upload",
        help=H("upload"),
    )
    if upload is not None and st.session_state.get("last_upload") != (upload.name, upload.size):
        st.session_state["last_upload"] = (upload.name, upload.size)
        ui.use_upload(st.session_state, upload.getvalue(), upload.name)
    with st.expander("Or draw Megatron-LM's mock lognormal"):
        mean, sigma, lo, hi = (number(f, help=H("lognormal")) for f in ui.LOGNORMAL_INPUTS)
        if st.button("Draw"):
            ui.use_lognormal(st.session_state, mean, sigma, int(lo), int(hi))
    with st.expander("Or from raw data: JSONL or Parquet and a tokenizer"):
        raw = st.file_uploader("SFT or chat records", type=["jsonl", "parquet"], key="raw_upload", help=H("raw_upload"))
        tokenizer = st.selectbox(
            "Tokenizer (installed on the server)", list(raw_data.tokenizer_choices()), help=H("raw_tokenizer")
        )
        fmt = st.radio("Format", list(raw_data.FORMATS), horizontal=True, help=H("raw_format"))
        max_len = int(number(ui.RAW_MAX_SEQ_LENGTH, help=H("raw_max_seq_length")))
        if st.button("Tokenize", disabled=raw is None, help=H("raw_tokenize")):
            with progress("tokenizing") as bar:
                raw_data.use_raw_upload(
                    st.session_state, raw.getvalue(), raw.name, tokenizer, fmt, max_len, progress=bar
                )
    control("data.format")
    errors("upload_error")
    st.subheader("Plan")
    plan_file = st.file_uploader(
        "Load a plan file (YAML or JSON)", type=["yaml", "yml", "json"], key="plan_upload", help=H("plan_file")
    )
    if plan_file is not None and st.session_state.get("last_plan") != (plan_file.name, plan_file.size):
        st.session_state["last_plan"] = (plan_file.name, plan_file.size)
        if ui.use_plan_file(st.session_state, plan_file.getvalue(), plan_file.name):
            st.rerun()  # the controls drawn above show the loaded plan's values, not the previous plan's
    errors("plan_error")
    st.download_button("Save plan (YAML)", ui.saved_plan(st.session_state), file_name="plan.yaml")
    st.caption(
        "The address bar is a link to this plan on every page: it reopens the dashboard on the same plan "
        "(sample data by name; uploaded data is not in the link, and the link says so when opened)."
    )

with right:
    hist, plan = st.session_state["hist"], st.session_state["plan"]
    say("subheader", st.session_state["data_name"])  # an uploaded file's name
    c1, c2 = st.columns(2)
    log_x, log_y = c1.toggle("log x", key="log_x", help=H("log_x")), c2.toggle("log y", key="log_y", help=H("log_y"))
    for col, (label, value) in zip(st.columns(4), views.summary_numbers(hist).items(), strict=True):
        col.metric(label, value, help=H(label))
    explained(charts.length_histogram(hist, plan.pack_size, log_x, log_y), "length_histogram")
    st.dataframe(views.summary_table(hist), hide_index=True, width="stretch")
    for note in hist.notes:
        say("info", note)
    for e in hist.excluded:
        say("warning", f"left out {e.count:,} rows: {e.reason} (first at {e.first_at})")
