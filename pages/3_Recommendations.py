"""Recommendations & export: findings with their fixes, better layouts, and the config to paste."""

import streamlit as st

from advisor.analysis import ALL_FORMATS
from advisor.ui import state as ui
from advisor.ui import views
from advisor.ui.explain import help_text as H

st.set_page_config(page_title="Recommendations & export", layout="wide")

ui.init_state(st.session_state)
st.title("Recommendations & export")
analysis = ui.analysis_of(st.session_state)
if "plan_error" in st.session_state:
    st.error(ui.plain(st.session_state["plan_error"]))
for severity in ("error", "warning", "info"):
    group = [f for f in analysis.findings if f.severity == severity]
    st.subheader(f"{severity.title()}s ({len(group)})", help=H("findings"))
    for i, f in enumerate(group):
        with st.expander(f"{f.id}: {f.message}", expanded=severity == "error"):
            st.write(f.reason)
            st.caption(f"Source: {f.source}")
            if f.fix and st.button(f"Apply fix {f.fix}", key=f"fix-{severity}-{i}"):
                ui.set_plan(st.session_state, f.fix)
                st.rerun()
st.subheader("Best candidates", help=H("candidates"))
bar = st.progress(0.0, text="searching layouts")
analysis.searched(progress=lambda what, done: bar.progress(done, text=f"searching layouts: {what}"))
bar.empty()
table = views.candidates_table(analysis)
st.dataframe(table, hide_index=True, width="stretch")
if note := views.search_note(analysis):
    st.caption(note)
st.subheader("Export")
v, f, r = st.columns(3)
version = v.selectbox("Megatron-Bridge version", ["0.6.2", "0.6.0", "0.5.1", "0.4.2", "0.3.1"], help=H("mb_version"))
fmt = f.selectbox("Format", ALL_FORMATS, help=H("export_format"))
recommended = r.toggle("Export the best candidate instead", help=H("export_recommended"))
try:
    text, filename = views.export_text(analysis, fmt, version, recommended)
except ValueError as e:  # the data cannot be estimated under this plan (say, fewer samples than a micro batch)
    text, filename = f"# cannot export: {e}\n", "error.txt"
st.code(text, language=views.code_language(fmt))
st.download_button(f"Download {filename}", text, file_name=filename)
