"""The dashboard's frame: page config, the session (from a shared link or the default sample) and the pages in the
order a newcomer visits them. Pages place what the engine computes and share their chrome from pages/_frame.py."""

import streamlit as st

from pages._frame import setup

setup()  # page config, the session, the link (pages/_frame.py)
pages = [
    st.Page("pages/5_Tour.py", title="Tour: start here", icon=":material/school:"),
    st.Page("pages/0_Data_and_plan.py", title="Data and plan", icon=":material/dataset:", default=True),
    st.Page("pages/1_Packing.py", title="Packing", icon=":material/view_week:"),
    st.Page("pages/6_Online_packing.py", title="Online packing", icon=":material/view_timeline:"),
    st.Page("pages/2_Memory_and_FLOPs.py", title="Memory and FLOPs", icon=":material/memory:"),
    st.Page("pages/3_Recommendations.py", title="Recommendations", icon=":material/checklist:"),
    st.Page("pages/4_Trial.py", title="Trial", icon=":material/science:"),
]
st.navigation(pages).run()
