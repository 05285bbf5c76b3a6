"""The dashboard's frame: page config, the session (from a shared link or the default sample) and the pages in the
order a newcomer visits them (advisor/ui/pages.py). Pages place what the engine computes and share their chrome from
pages/_frame.py."""

import streamlit as st

from advisor.ui.pages import PAGES
from pages._frame import setup

setup()  # page config, the session, the link (pages/_frame.py)
st.navigation([st.Page(p.path, title=p.title, icon=p.icon, default=p.default) for p in PAGES]).run()
