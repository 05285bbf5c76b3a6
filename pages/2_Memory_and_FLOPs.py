"""Memory & FLOPs: memory per GPU by component, Megatron-Bridge's own estimate, attention FLOPs and step time."""

import streamlit as st

from advisor.ui import charts, controls, screens, views
from advisor.ui.explain import help_text as H
from pages._frame import control_rows, errors, estimate_or_stop, explained, frame, place

frame()  # through app.py's frame first (pages/_frame.py says why)
st.title("Memory & FLOPs")
control_rows(controls.MEMORY_PAGE_ROWS)  # what runs, on what; the layout; the step
if st.toggle("Custom model fields", key="custom_model", help=H("custom_model")):
    control_rows(((tuple(f"model.{field}" for field in controls.CUSTOM_FIELDS), None),))
errors("plan_error")
analysis, est = estimate_or_stop()
place(screens.memory(analysis, est))
with st.spinner("memory over pack size and CP"):
    grid = views.memory_grid_frame(analysis)
explained(charts.memory_heatmap(grid), "memory_heatmap")
