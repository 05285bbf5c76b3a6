r"""Text a visitor may have written (plan values from a crafted link, file names, fields of an uploaded plan) made
inert for Streamlit's Markdown widgets: st.error, st.info, st.caption, st.markdown, expander and button labels.

Why more than escaping: Streamlit renders Markdown with GitHub's extensions, whose autolink literals are found in
the *text* after escapes are resolved, so ``http\:\/\/evil\.com`` still became a link. A zero-width space inside
``://``, after ``www`` and after ``@`` breaks those patterns while the visitor reads the same characters.

>>> print(plain("[sign in](x.io)"))
\[sign in\]\(x\.io\)
>>> "http://" in plain("see http://evil.example"), "www." in plain("www.evil.example")
(False, False)
"""

from __future__ import annotations

import re

ZWSP = "\u200b"
# every character Markdown, GFM and Streamlit's own directives (:red[...], :material/x:, $math$) give meaning to
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:=&^\"'])")
# GFM autolink literals: scheme://, www., and e-mail addresses (their @); matched case-insensitively
_AUTOLINK = re.compile(r"(?i)(://|www(?=\.)|@)")
# bidirectional overrides and isolates can show a link text reversed or hide part of a message
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f]")


def plain(text: object, most: int = 2000) -> str:
    r"""``text`` as plain text for a Markdown widget: cut to ``most`` characters, bidirectional controls removed,
    autolink literals broken by a zero-width space, every Markdown character backslash-escaped (so no link, image,
    HTML tag, emphasis, heading or colour directive).

    >>> print(plain("**bold** <b>x</b> :red[y]"))
    \*\*bold\*\* \<b\>x\</b\> \:red\[y\]
    >>> plain("mail me@evil.example").count("\u200b"), plain("x" * 3000)[-2:]
    (1, ' …')
    """
    text = str(text)
    text = text if len(text) <= most else text[:most] + " …"
    text = _BIDI.sub("", text)
    text = _AUTOLINK.sub(lambda m: m.group(1) + ZWSP if m.group(1) != "://" else ":" + ZWSP + "//", text)
    return _MARKDOWN.sub(r"\\\1", text)
