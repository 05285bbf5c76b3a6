"""Recommendations & export: findings with their fixes, better layouts, and the config to paste."""

import streamlit as st

from advisor.advice.exports import FORMATS
from advisor.ui import state as dashboard

st.set_page_config(page_title="Recommendations & export", layout="wide")
dashboard.init_state(st.session_state)
plan, hist = st.session_state["plan"], st.session_state["hist"]
st.title("Recommendations & export")
findings = dashboard.findings_for(plan, hist)
for severity in ("error", "warning", "info"):
    group = [f for f in findings if f.severity == severity]
    st.subheader(f"{severity.title()}s ({len(group)})")
    for i, f in enumerate(group):
        with st.expander(f"{f.id}: {f.message}", expanded=severity == "error"):
            st.write(f.reason)
            st.caption(f"Source: {f.source}")
            if f.fix and st.button(f"Apply fix {f.fix}", key=f"fix-{severity}-{i}"):
                st.session_state["plan"] = dashboard.apply_fix_dict(plan, f.fix)
                st.rerun()
st.subheader("Best candidates")
with st.spinner("searching layouts"):
    table = dashboard.candidates_table(plan, hist)
st.dataframe(table, hide_index=True, width="stretch")
st.subheader("Export")
v, f, r = st.columns(3)
version = v.selectbox("Megatron-Bridge version", ["0.6.2", "0.6.0", "0.5.1", "0.4.2", "0.3.1"])
fmt = f.selectbox("Format", FORMATS)
recommended = r.toggle("Export the best candidate instead")
text, filename = dashboard.export_text(plan, hist, fmt, version, recommended)
st.code(text, language=dashboard.code_language(fmt))
st.download_button(f"Download {filename}", text, file_name=filename)
