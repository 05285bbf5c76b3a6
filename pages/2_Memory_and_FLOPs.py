"""Memory & FLOPs: memory per GPU by component, Megatron-Bridge's own estimate, attention FLOPs and step time."""

import streamlit as st

from advisor.ui import charts, controls, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H
from pages._frame import bullets, control, errors, explained, frame, say, stop_on

frame()  # through app.py's frame first (pages/_frame.py says why)

st.title("Memory & FLOPs")
# three rows, widths so every name reads in full at 1280-1440 px: what runs, on what; the layout; the step
for where, name in zip(
    st.columns([3, 2, 2, 2, 2]),
    ("model.preset", "hardware.gpu", "training.precision", "training.recompute", "parallel.gpus"),
    strict=True,
):
    control(name, where)
for where, name in zip(
    st.columns(8),
    (
        "parallel.tp",
        "parallel.pp",
        "parallel.vpp",
        "parallel.cp",
        "parallel.ep",
        "parallel.sp",
        "parallel.fsdp",
        "training.cpu_offloading_num_layers",
    ),
    strict=True,
):
    control(name, where)
for where, name in zip(
    st.columns([2, 2, 2, 2]),
    ("training.seq_length", "training.micro_batch_size", "training.batch_unit", "training.batch"),
    strict=True,
):
    control(name, where)
if st.toggle("Custom model fields", key="custom_model", help=H("custom_model")):
    for where, field in zip(st.columns(len(controls.CUSTOM_FIELDS)), controls.CUSTOM_FIELDS, strict=True):
        control(f"model.{field}", where)
errors("plan_error")
with st.spinner("estimating"):
    analysis, busy = ui.ready_analysis(st.session_state)
    stop_on(busy)
    est, problem = ui.estimate_of(analysis)
stop_on(problem)
say("caption", views.global_batch_example_text(analysis.plan, analysis.packing_factor))
if (layout := views.pipeline_layout_text(analysis.plan)) is not None:
    say("caption", layout)
if (offload := views.offload_text(est)) is not None:
    say("caption", offload)
if not est.memory.fits:
    say("error", views.memory_error_text(est))
k = st.columns(4)
k[0].metric(
    "memory per GPU (fits)" if est.memory.fits else "memory per GPU: DOES NOT FIT",
    f"{est.memory.total / 2**30:.1f} of {est.memory.capacity / 2**30:.0f} GiB",
    help=H("memory"),
)
k[1].metric(
    f"step time (straggler x{est.time.straggler_factor:.2f})", f"{est.time.step_seconds:.3f} s", help=H("step_time")
)
k[2].metric("tokens/s/GPU", f"{est.time.tokens_per_second_per_gpu:,.0f}", help=H("tokens_per_second"))
k[3].metric("time per epoch", f"{est.time.epoch_seconds / 3600:.2f} h", help=H("epoch_time"))
a, b = st.columns(2)
explained(charts.memory_bar(est), "memory_bar", a)
explained(charts.attention_flops_bars(est), "attention_flops", b)
say("caption", views.attention_example_text(), b)
explained(charts.step_breakdown(est), "step_breakdown")
with st.expander("Why the advisor and Megatron-Bridge differ"):
    bullets(est.memory.differences)
with st.spinner("memory over pack size and CP"):
    grid = views.memory_grid_frame(analysis)
explained(charts.memory_heatmap(grid), "memory_heatmap")
