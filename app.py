"""Home page of the dashboard (a first version: the full dashboard is issue 5)."""

import streamlit as st

from advisor.dashboard import SAMPLES, sample_packing_table

st.set_page_config(page_title="Sequence packing advisor", layout="wide")
st.title("Sequence packing advisor")
st.caption("Megatron-Bridge offline packing, simulated from sequence lengths. The full dashboard is on its way; "
           "the command line (`python -m advisor pack …`) has everything shown here.")
sample = st.selectbox("Sample data", list(SAMPLES))
pack_size = st.select_slider("Pack size", options=[256, 384, 512, 1024, 2048, 4096], value=SAMPLES[sample])
summary, metadata = sample_packing_table(sample, pack_size)
st.subheader("Lengths")
st.dataframe(summary, hide_index=True)
st.subheader("Megatron-Bridge packing metadata (first_fit_shuffle, seed 1234)")
st.json(metadata)
