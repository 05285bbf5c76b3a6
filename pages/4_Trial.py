"""Trial: a short real training run that checks the plan against measurement (not built yet)."""

import streamlit as st

st.set_page_config(page_title="Trial", layout="wide")
st.title("Trial")
st.info("The trial job (issue 6) is not built yet. It will train a small GPT-style model packed, padded and "
        "block-masked on your length distribution, check loss and gradient parity, and compare measured memory and "
        "throughput with the estimates here.")
