"""The dashboard's frame: the Streamlit pieces every page shares (plan-bound controls, charts with their explanation,
the error banner, a progress bar), so pages only place what the engine computes. ``app.py`` sets the page config
and the session once; pages import from here and never repeat chrome."""

from __future__ import annotations

from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from advisor.ui import blocks as b
from advisor.ui import controls, links, screens, tour, views
from advisor.ui import state as ui
from advisor.ui.explain import help_text as H


def setup() -> None:
    """What every run needs before a page draws: the page config, the session (from a shared link or the default
    sample), the trial's heartbeat, the tour's undo, and the address bar kept a link to the plan as it is now (widget
    callbacks have run before this, so a page's own edits are in it; set before the page, which may stop early)."""
    st.set_page_config(page_title="Sequence packing advisor", layout="wide")
    ui.serve()  # one server, many visitors: scale models past 2M scheduled samples, smaller caches
    ui.warm_up_in_background()  # the packing kernels compile once per server process
    ui.init_state(st.session_state, dict(st.query_params))
    ui.heartbeat(st.session_state)
    if (undo := tour.undo_text(st.session_state)) is not None and st.sidebar.button(
        undo, icon=":material/undo:", key="tour_undo_button"
    ):
        tour.undo_step(st.session_state)  # the tour replaced the visitor's data and plan: one click puts them back
        st.rerun()
    st.query_params.from_dict(links.plan_to_query(st.session_state["plan"], st.session_state["data_name"]))
    if st.session_state.get("link_error"):  # a link's plan refused: said on whichever page it opened, once
        say("error", st.session_state["link_error"])
    if st.session_state.get("plan_notes") or st.session_state.get("link_error"):
        for note in st.session_state.get("plan_notes", ()):  # what reading a plan or link means: until dismissed
            say("info", note, icon=":material/info:")
        if st.button("Understood", key="plan_notes_seen", help="Hide these notes (the next plan or link says its own)"):
            st.session_state.pop("plan_notes", None)
            st.session_state.pop("link_error", None)
            st.rerun()


def frame() -> None:
    """Make sure the frame (``setup``) ran for this page; every page calls it first.

    Why: a folder named ``pages/`` beside app.py makes Streamlit run its scripts the old way (multipage apps v1)
    until app.py calls ``st.navigation`` once in the process: the first request after a server start for a page's
    URL (``/Packing``) ran that page alone, without a session, an exception page for that visitor (Streamlit's
    AppTest resets the flag on every run the same way). Here the page sets up the session itself, once, and turns
    the old way off, so the next run goes through app.py. (A module-level call would run once per process: Python
    imports a module once.)"""
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        setup()
        # and run again at once, now through app.py: this run's sidebar lists the pages/ folder's files ("app",
        # "frame") and its widgets have ids the next run (app.py's) does not know, so a first click was lost
        st.rerun()


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
        say("markdown", H(key))


def say(kind: str, text: str, where=st, **kw) -> None:
    """Text the engine or a visitor wrote, shown as ``st.<kind>`` (caption, info, error, warning, write, markdown,
    subheader) with Markdown escaped (``ui.plain``): an uploaded file's name or a finding's reason is never read as
    Markdown or HTML. Pages show text through this, never ``st.caption(...)`` on engine text directly."""
    getattr(where, kind)(ui.plain(text), **kw)


def on_upload(upload, seen_key: str, use) -> None:
    """Hand a new upload to ``use`` once (Streamlit returns the same file on every rerun); when ``use`` took it, run
    again, so what was drawn before it (the link, the sample selector, the controls) shows the new data or plan."""
    if upload is None:  # removed: the same file uploaded again is new (reloading a plan file undoes edits)
        st.session_state.pop(seen_key, None)
        return
    # each upload has its own id, even of the same file; (name, size) for an uploader without one
    seen = getattr(upload, "file_id", None) or (upload.name, upload.size)
    if st.session_state.get(seen_key) == seen:
        return
    st.session_state[seen_key] = seen
    rerun_if(use(upload))


def rerun_if(took: bool) -> None:
    """Run again when an action took, so what was drawn before it (the link, the sample selector) shows it."""
    if took:
        st.rerun()


def errors(*keys: str) -> None:
    """The last refusal's one-line message for each session key given (``plan_error``, ``upload_error``)."""
    for key in keys:
        if key in st.session_state:
            say("error", st.session_state[key])


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
        say("error", problem)
        st.stop()


def place(blocks: tuple[b.Block, ...], where=st) -> None:
    """Draw the engine's blocks (advisor/ui/blocks.py) in order: the one way engine figures reach a page."""
    for block in blocks:
        if isinstance(block, b.Metrics):
            for column, m in zip(where.columns(len(block.items)), block.items, strict=True):
                column.metric(m.label, m.value, help=H(m.help) if m.help else None)
        elif isinstance(block, b.Text):
            kw = {"help": H(block.help)} if block.help else {}
            getattr(where, block.kind)(block.text, **kw) if block.markdown else say(block.kind, block.text, where, **kw)
        elif isinstance(block, b.Markdown):
            where.markdown(block.text)
        elif isinstance(block, b.Chart):
            explained(block.figure, block.explain, where)
        elif isinstance(block, b.Table):
            where.dataframe(block.frame, hide_index=True, **({"width": "stretch"} if block.stretch else {}))
        elif isinstance(block, b.Code):
            where.code(block.text, language=block.language, wrap_lines=block.wrap)
        elif isinstance(block, b.Row):
            for column, inner in zip(where.columns(len(block.columns)), block.columns, strict=True):
                place(inner, column)
        elif isinstance(block, b.Fold):
            with where.expander(ui.plain(block.label), expanded=block.expanded):
                place(block.body)


def control_rows(rows: tuple[tuple[tuple[str, ...], tuple[int, ...] | None], ...]) -> None:
    """Plan-bound controls in rows: (names, column widths or None for equal) each (advisor/ui/controls.py)."""
    for names, widths in rows:
        for where, name in zip(st.columns(list(widths) if widths else len(names)), names, strict=True):
            control(name, where)


def estimate_or_stop():
    """The session's analysis and its estimate, or the page stops with why (busy, or the plan cannot be estimated)."""
    with st.spinner("estimating"):
        analysis, busy = ui.ready_analysis(st.session_state)
        stop_on(busy)
        est, problem = ui.estimate_of(analysis)
    stop_on(problem)
    return analysis, est


def findings(groups, key: str) -> None:
    """Findings under their group titles, each folded (``screens.finding``) with its "Apply fix" button where it
    has one: a click changes the plan (the old one kept if the change is refused) and reruns."""
    for i, (title, group) in enumerate(groups):
        say("subheader", title, help=H("findings"))
        for j, f in enumerate(group):
            place((screens.finding(f),))
            if f.fix and st.button(ui.plain(f"Apply fix: {views.fix_text(f.fix)}"), key=f"{key}-{i}-{j}"):
                ui.set_plan(st.session_state, f.fix)
                st.rerun()
