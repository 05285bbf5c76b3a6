"""Memory & FLOPs: memory per GPU by component, Megatron-Bridge's own estimate, attention FLOPs and step time."""

import streamlit as st

from advisor.plan.presets import GPU_PRESETS
from advisor.ui import charts, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H

st.set_page_config(page_title="Memory & FLOPs", layout="wide")


def explained(fig, key: str) -> None:
    """A chart and, under it, what it shows (advisor/ui/explain.py)."""
    st.plotly_chart(fig, width="stretch")
    with st.expander("What am I looking at?"):
        st.markdown(ui.plain(H(key)))


ui.init_state(st.session_state)
plan = st.session_state["plan"]
st.title("Memory & FLOPs")
c = st.columns(7)
presets = ui.model_presets() + ([] if plan.model.preset else ["custom"])
preset = c[0].selectbox("Model", presets, index=ui.index_of(presets, plan.model.preset or "custom"), help=H("model"))
model = {"preset": preset} if preset not in (plan.model.preset, "custom") else {}
if st.toggle("Custom model fields", key="custom_model", help=H("custom_model")):
    cols = st.columns(len(ui.CUSTOM_FIELDS))
    model |= {k: int(col.number_input(k, 1, 1 << 20, v, key=f"model_{k}", help=H("custom_model")))
              for col, (k, v) in zip(cols, ui.model_fields(plan).items(), strict=True)}
gpu = c[1].selectbox("GPU", list(GPU_PRESETS), index=ui.index_of(GPU_PRESETS, plan.hardware.gpu), help=H("gpu"))
labels = {"gpus": ("GPUs", ui.MAX_GPUS), "tp": ("TP", 1024), "pp": ("PP", 1024), "cp": ("CP", 1024)}
layout = {k: int(c[i + 2].number_input(label, 1, most, getattr(plan.parallel, k), help=H(k)))
          for i, (k, (label, most)) in enumerate(labels.items())}
mbs = int(c[6].number_input("micro batch", 1, 4096, plan.training.micro_batch_size, help=H("micro_batch")))
if not ui.set_plan(st.session_state, ui.only_changes(plan, {"model": model, "hardware": {"gpu": gpu},
                                                           "parallel": layout, "training": {"micro_batch_size": mbs}})):
    st.error(ui.plain(st.session_state["plan_error"]))
    st.stop()
with st.spinner("estimating"):
    analysis = ui.analysis_of(st.session_state)
    est, problem = ui.estimate_of(analysis)
if problem:
    st.error(ui.plain(problem))
    st.stop()
k = st.columns(4)
k[0].metric("memory per GPU (fits)" if est.memory.fits else "memory per GPU: DOES NOT FIT",
            f"{est.memory.total / 2**30:.1f} of {est.memory.capacity / 2**30:.0f} GiB", help=H("memory"))
k[1].metric(f"step time (straggler x{est.time.straggler_factor:.2f})", f"{est.time.step_seconds:.3f} s",
            help=H("step_time"))
k[2].metric("tokens/s/GPU", f"{est.time.tokens_per_second_per_gpu:,.0f}", help=H("tokens_per_second"))
k[3].metric("time per epoch", f"{est.time.epoch_seconds / 3600:.2f} h", help=H("epoch_time"))
a, b = st.columns(2)
with a:
    explained(charts.memory_bar(est), "memory_bar")
with b:
    explained(charts.attention_flops_bars(est), "attention_flops")
    example = views.attention_example_text()
    st.caption(example)
explained(charts.step_breakdown(est), "step_breakdown")
with st.expander("Why the advisor and Megatron-Bridge differ"):
    st.markdown("\n".join(f"- {d}" for d in est.memory.differences))
with st.spinner("memory over pack size and CP"):
    grid = views.memory_grid_frame(analysis)
explained(charts.memory_heatmap(grid), "memory_heatmap")
