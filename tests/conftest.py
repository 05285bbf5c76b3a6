"""Fixtures for every folder of tests/ (pytest applies this file to all of them): the bundled histograms, Megatron-
Bridge's real packing modules, the tiny tokenizer, and AppTest's navigation as a server has it. What tests import
(paths, generated data, runners, the oracles' loaders) is in tests/support/."""

from __future__ import annotations

import pytest

from advisor.data.lengths import LengthHistogram
from tests.support.histograms import read_hist
from tests.support.mb_reference import MB_STUBS


@pytest.fixture(scope="session")
def mb_algorithms():
    from tests.support.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.algorithms")


@pytest.fixture(scope="session")
def mb_offline():
    """Megatron-Bridge's real offline.py, with only its storage switch and tokenizer type stubbed."""
    from tests.support.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.offline", stubs=MB_STUBS)


@pytest.fixture(scope="session")
def mb_parquet():
    from tests.support.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.parquet", stubs=MB_STUBS)


@pytest.fixture(scope="session")
def squad() -> LengthHistogram:
    return read_hist("squad_v1.1_len384_hist.csv")


@pytest.fixture(scope="session")
def chat() -> LengthHistogram:
    return read_hist("chat_like_hist.csv")


@pytest.fixture(scope="session")
def long_context() -> LengthHistogram:
    return read_hist("long_context_hist.csv")


@pytest.fixture(scope="session")
def wikipedia() -> LengthHistogram:
    return read_hist("wikipedia_bert_len512_hist.csv")


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> str:
    """The tiny byte-level BPE tokenizer folder (tests/support/tokenizer_fixture.py), trained once per module."""
    from tests.support.tokenizer_fixture import build_tokenizer

    return str(build_tokenizer(tmp_path_factory.mktemp("tok")))


@pytest.fixture(autouse=True, scope="session")
def _apptest_keeps_the_navigation_as_a_server_does():
    """Streamlit's AppTest resets PagesManager's "pages/ folder, old multipage mode" flag before every run; a server
    sets it once, and app.py's st.navigation turns it off for good. With the reset, every AppTest run after the
    first ran the page script alone, never app.py (and its sidebar's widgets got other ids). A subclass takes
    AppTest's reset, so runs behave as on a server: the first run of the process finds the old mode on (what a
    page URL opened first after a server start gets: pages/_frame.py frame() handles it), later runs go through
    app.py. ``test_a_page_url_opened_first_after_a_start_works`` resets the real flag to check that first run."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.testing.v1 import app_test
    except ImportError:
        yield
        return

    class _ResetHere(PagesManager):
        pass

    app_test.PagesManager = _ResetHere
    try:
        yield
    finally:
        app_test.PagesManager = PagesManager
