"""The dashboard's frame: the Streamlit pieces every page shares (plan-bound controls, charts with their explanation,
the error banner, a progress bar), so pages only place what the engine computes. ``app.py`` sets the page config
and the session once; pages import from here and never repeat chrome."""

from __future__ import annotations

from contextlib import contextmanager

import streamlit as st

from advisor.ui import controls
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H


def control(name: str, where=st):
    """Draw plan-bound control ``name`` (advisor/ui/controls.py): keyed, showing the plan's value, every edit applied
    through the plan (a refused edit keeps the plan and shows why in the error banner)."""
    c = controls.CONTROLS[name]
    controls.current(st.session_state, name)
    kw = {"key": c.key, "help": H(c.help), "on_change": controls.apply, "args": (st.session_state, name)}
    if c.kind == "number":
        return where.number_input(c.label, min_value=c.lo, max_value=c.hi, step=c.step or 1, **kw)
    if c.kind == "toggle":
        return where.toggle(c.label, **kw)
    if c.kind == "radio":
        return where.radio(c.label, controls.options(st.session_state, name), horizontal=True, **kw)
    return where.selectbox(c.label, controls.options(st.session_state, name), **kw)


def number(spec, where=st, **kw):
    """A number input with the bounds and default of ``spec`` (advisor/ui/samples.py Number), which the server
    checks again: integers stay integers."""
    cast = int if all(float(v).is_integer() for v in (spec.lo, spec.hi, spec.default)) else float
    return where.number_input(spec.label, cast(spec.lo), cast(spec.hi), cast(spec.default), **kw)


def explained(fig, key: str, where=st) -> None:
    """A chart and, under it, what it shows (advisor/ui/explain.py)."""
    where.plotly_chart(fig, width="stretch")
    with where.expander("What am I looking at?"):
        st.markdown(ui.plain(H(key)))


def errors(*keys: str) -> None:
    """The last refusal's one-line message for each session key given (``plan_error``, ``upload_error``)."""
    for key in keys:
        if key in st.session_state:
            st.error(ui.plain(st.session_state[key]))


@contextmanager
def progress(text: str):
    """A progress bar for the engine's ``progress(what, fraction)`` callbacks, removed when the work is done."""
    bar = st.progress(0.0, text=text)
    try:
        yield lambda what, done: bar.progress(min(1.0, max(0.0, done)), text=what)
    finally:
        bar.empty()


def stop_on(problem: str | None) -> None:
    """Show why the page cannot go on (data that cannot be estimated under this plan, say) and stop there."""
    if problem:
        st.error(ui.plain(problem))
        st.stop()
