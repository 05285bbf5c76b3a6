"""The dashboard in Streamlit's AppTest, opened as a visitor opens it."""

from __future__ import annotations

from tests.support import ROOT


def open_page(page: str, state: dict | None = None, timeout: int = 300):
    """A dashboard page in AppTest as a visitor opens it: app.py (the frame: page config, the session) runs first,
    then the page; ``state`` is put into the session before anything runs."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for k, v in (state or {}).items():
        at.session_state[k] = v
    at.run()
    if page != "app.py":
        at.switch_page(page)
        at.run()
    return at
