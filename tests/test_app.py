from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT


def test_home_page_renders_sample_metadata_and_follows_pack_size():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert at.json[0].value and '"pack_size": 384' in at.json[0].value
    at.select_slider[0].set_value(512).run()
    assert not at.exception
    assert '"pack_size": 512' in at.json[0].value
