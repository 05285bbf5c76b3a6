from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.data.lengths import LengthHistogram

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


def _msc_stub():
    class MultiStorageClientFeature:  # Megatron-Core's switch for remote storage: off, as on a plain file system
        @staticmethod
        def is_enabled():
            return False

    return {"MultiStorageClientFeature": MultiStorageClientFeature}


MB_STUBS = {
    "megatron.core.msc_utils": _msc_stub(),
    "megatron.bridge.training.tokenizers.tokenizer": {"MegatronTokenizer": object},
    "megatron.bridge.data.datasets.gpt_sft": {"GPTSFTDataset": object},
    "megatron.bridge.data.packing.gpt_sft": {"GPTSFTPackedDataset": object},
}


@pytest.fixture(scope="session")
def mb_algorithms():
    from tests.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.algorithms")


@pytest.fixture(scope="session")
def mb_offline():
    """Megatron-Bridge's real offline.py, with only its storage switch and tokenizer type stubbed."""
    from tests.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.offline", stubs=MB_STUBS)


@pytest.fixture(scope="session")
def mb_parquet():
    from tests.mb_reference import load_module

    return load_module("megatron.bridge.data.packing.parquet", stubs=MB_STUBS)


def read_hist(name: str) -> LengthHistogram:
    frame = pd.read_csv(SAMPLE / name)
    return LengthHistogram.from_pairs(frame["length"], frame["count"], source=name)


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


def scaled(hist: LengthHistogram, divisor: int) -> LengthHistogram:
    """The same shape with fewer samples (counts divided, rounded up), so Megatron-Bridge's Python packer is quick."""
    return LengthHistogram(lengths=hist.lengths, counts=-(-hist.counts // divisor), source=f"{hist.source}/{divisor}")


class FakeTokenizer(types.SimpleNamespace):
    pass


def fake_sft_builder(lengths: np.ndarray, truncate: bool = True):
    """A dataset builder for ``prepare_gpt_sft_packed_data`` that yields samples of the given token counts.

    It stands in for GPTSFTDataset only where a real tokenizer and text would be needed: each sample is
    ``input_ids`` of its length (token i = i, so packs can be checked), cut at the ``seq_length`` the
    pipeline asks for, as GPTSFTDataset truncates to its max length. ``truncate=False`` stands in for
    GPTSFTChatDataset, whose ``_process_example`` (``_chat_preprocess``) never cuts (Megatron-Bridge 0.6.2
    data/datasets/gpt_sft.py).
    """

    def build(path, *, tokenizer, seq_length, pad_seq_to_mult=None, dataset_kwargs=None, **_):
        class Dataset(list):
            pass

        def kept(n) -> int:
            return min(int(n), seq_length) if truncate else int(n)

        ds = Dataset({"input_ids": list(range(kept(n))), "loss_mask": [1] * kept(n)} for n in lengths)
        ds.tokenizer = FakeTokenizer(eod=0)
        ds.pad_seq_length_to_mult = (dataset_kwargs or {}).get("pad_seq_length_to_mult", 16)
        return ds

    return build


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


def slow_after(values, fast: int = 1) -> list:
    """Values for ``pytest.mark.parametrize``: the first ``fast`` run in the fast tier (``-m "not slow"``), the
    others, the same check on more inputs, only in the full suite."""
    return [
        v if i < fast else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow)
        for i, v in enumerate(values)
    ]


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
