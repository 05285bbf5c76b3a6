"""Recommendations & export: the pre-flight of known traps, findings with their fixes, better layouts, the config."""

import streamlit as st

from advisor.advice.search import FREEDOMS
from advisor.formats import ALL_FORMATS, EXPORTS
from advisor.ui import screens, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import control_rows, errors, findings, frame, place, progress, say, stop_on

frame()  # through app.py's frame first (pages/_frame.py says why)
st.title("Recommendations & export")
control_rows(((("versions.megatron_bridge", "versions.megatron_core", "versions.transformer_engine"), None),))
analysis, busy = ui.ready_analysis(st.session_state)
errors("plan_error")
stop_on(busy)
say("caption", views.global_batch_example_text(analysis.plan, analysis.packing_factor))
st.subheader("Pre-flight: known traps at these versions", help=H("preflight"))
place(screens.preflight_clean(analysis.plan, analysis.findings))
findings(screens.preflight_groups(analysis.findings), "trap")
findings(screens.other_groups(analysis.findings), "fix")
st.subheader("Will my loss change?", help=H("loss_weights"))
loss, problem = ui.guarded(lambda: analysis.loss)
place((screens.Text(kind="caption", text=problem),) if problem else screens.loss(loss))
st.subheader("Best candidates", help=H("candidates"))
vary = st.multiselect("Let the search change", list(FREEDOMS), key="search_vary", help=H("vary"))
with progress("searching layouts") as bar:
    result, busy = ui.ready_search(st.session_state, analysis, vary, progress=bar)
stop_on(busy)
place(screens.candidates(analysis, result))
st.subheader("Export")
f, r = st.columns(2)
fmt = f.selectbox("Format", ALL_FORMATS, help=H("export_format"))
recommended = r.toggle("Export the best candidate instead", help=H("export_recommended"))
mock = EXPORTS[fmt].mock_lengths and st.toggle(views.MOCK_TOGGLE, help=H("export_mock"))
text, filename = views.export_text(analysis, fmt, None, recommended, vary, mock=mock)
place((screens.Code(text=text, language=views.code_language(fmt)),))
d1, d2 = st.columns(2)
d1.download_button(f"Download {filename}", text, file_name=filename)
if mock:
    label = f"Download {views.MOCK_LENGTHS_FILE} (the lengths the arguments name)"
    d2.download_button(label, views.mock_lengths_file(analysis), file_name=views.MOCK_LENGTHS_FILE)
place(screens.prepare(analysis.plan))
