"""Tour: the concepts of packed and long-context training in order, one step per screen."""

import streamlit as st

st.title("Tour")
