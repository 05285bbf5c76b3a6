"""Visitor-derived text never renders as a link, an autolink, HTML or emphasis: one escaping (advisor/ui/text.py)
for every Markdown widget, checked on the text itself and on a page opened from a crafted share link."""

from __future__ import annotations

import base64
import json
import re
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from advisor.ui.text import ZWSP, plain
from tests.support import ROOT

# what Markdown or Streamlit would turn into something other than text, in the source
MARKUP = [
    re.compile(r"(?<!\\)\]\("),
    re.compile(r"(?<!\\)<[a-z/!]"),
    re.compile(r"(?<!\\)\*\*"),
    re.compile(r"(?<!\\)_(?<!\\)_"),
    re.compile(r"(?<!\\):[a-z]+(?<!\\)\["),
    re.compile(r"(?<!\\)!\["),
]
# GitHub's autolink literals, found after the escapes are resolved (why escaping alone did not stop them)
AUTOLINK = [re.compile(r"(?i)https?://"), re.compile(r"(?i)www\."), re.compile(r"[\w.+-]@[\w-]+\.\w")]


def _live(text: str) -> list[str]:
    resolved = re.sub(r"\\(.)", r"\1", text)
    return [p.pattern for p in MARKUP if p.search(text)] + [p.pattern for p in AUTOLINK if p.search(resolved)]


def _unescaped(text: str) -> str:
    """What the reader sees: backslash escapes resolved, zero-width spaces dropped."""
    return re.sub(r"\\(.)", r"\1", text).replace(ZWSP, "")


ATTACKS = [
    "[click](http://evil.example)",
    "![img](https://evil.example/x.png)",
    "<a href='x'>y</a>",
    "<script>alert(1)</script>",
    "www.evil.example",
    "HTTPS://EVIL.EXAMPLE",
    "mail me@evil.example",
    "**bold** __under__ ~~gone~~",
    ":red[alarm] :material/warning:",
    "[x][1]\n\n[1]: http://evil.example",
    "&#91;x&#93;(http://e)",
    "\u202eevil\u202c",
    "# heading\n===",
    "`code` $x^2$",
]


def test_each_attack_is_inert_and_reads_the_same():
    for attack in ATTACKS:
        out = plain(attack)
        assert not _live(out), (attack, out, _live(out))
        assert _unescaped(out) == attack.replace("\u202e", "").replace("\u202c", ""), (attack, out)


@given(st.text(max_size=200))
def test_any_text_is_inert_and_keeps_its_characters(text):
    out = plain(text)
    assert not _live(out)
    if len(text) <= 2000:
        kept = re.sub("[\u202a-\u202e\u2066-\u2069\u200e\u200f]", "", text)
        assert _unescaped(out) == kept.replace(ZWSP, "")


def _link(plan: dict) -> str:
    return base64.urlsafe_b64encode(zlib.compress(json.dumps(plan).encode())).decode()


@pytest.mark.slow  # AppTest
def test_a_crafted_share_link_renders_no_link_markup():
    """A link whose plan names a model '[x](http://e.vil) www.e.vil <b>': the page shows the refusal as text."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["plan"] = _link(
        {
            "model": "[x](http://e.vil)<b>**",
            "parallel": {"gpus": 8},
            "training": {"seq_length": 512, "global_batch_samples": 8},
        }
    )
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [e.value for e in at.error]
    assert texts and any("e.vil" in _unescaped(t) for t in texts), texts  # the message names the bad value
    rendered = [
        str(getattr(e, "value", ""))
        for kind in ("error", "warning", "info", "markdown", "caption")
        for e in getattr(at, kind)
    ]
    for text in rendered:
        assert not _live(text), (text, _live(text))
