"""The dashboard: the pages in the order a newcomer visits them, the home page named for what it is."""

import streamlit as st

st.set_page_config(page_title="Sequence packing advisor", layout="wide")
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
