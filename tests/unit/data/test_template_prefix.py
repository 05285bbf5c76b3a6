"""Prefixes read off one render (template_prefix): only templates whose shape makes a prefix's text the start of
the whole text qualify, and for them every prefix equals its own render."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.data.tokenize.template import render_prefixes
from advisor.data.tokenize.template_prefix import prefix_stable
from tests.support.templates import MESSAGE, PLAIN_TEMPLATE, QWEN_LIKE, REAL, TOOLS, off_main_thread
from tests.support.tokenizer_fixture import CHAT_TEMPLATE

STABLE = {
    "bundled (Llama 3.1 style)": CHAT_TEMPLATE,
    "plain": PLAIN_TEMPLATE,
    "gemma-2": REAL["google-gemma-2-2b-it"],
    "counters and a namespace": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "[{{ loop.index }}/{{ ns.n }}{% if loop.first %}*{% endif %}]{{ m.content }}"
    "{% if loop.previtem %}<{{ loop.previtem.role }}>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<go>{% endif %}",
    "a cut at the top": "{% set first = messages[0].content %}{% set messages = messages[1:] %}({{ first }})"
    "{% for m in messages %}<{{ m.content }}>{% endfor %}",
}
LOOKS_AHEAD = {
    "loop.last": "{% for m in messages %}{{ m.content }}{% if loop.last %}<eos>{% endif %}{% endfor %}",
    "loop.length": "{% for m in messages %}{{ loop.length }}{% endfor %}",
    "loop.nextitem": "{% for m in messages %}{{ loop.nextitem }}{% endfor %}",
    "loop passed whole": "{% for m in messages %}{{ loop|string }}{% endfor %}",
    "messages|length before": "{% if messages|length > 2 %}x{% endif %}"
    "{% for m in messages %}{{ m.content }}{% endfor %}",
    "messages[-1] before": "{{ messages[-1].role }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "messages[1] before": "{{ messages[1].role }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "messages inside": "{% for m in messages %}{{ messages[0].content }}{% endfor %}",
    "for-else": "{% for m in messages %}{{ m.content }}{% else %}empty{% endfor %}",
    "output after": "{% for m in messages %}{{ m.content }}{% endfor %}<eos>",
    "else after": "{% for m in messages %}{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}a{% else %}b{% endif %}",
    "break": "{% for m in messages %}{% if m.role == 'x' %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
    "two loops": "{% for m in messages %}{{ m.role }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
    "a nested loop": "{% if messages %}{% for m in messages %}{{ m.content }}{% endfor %}{% endif %}",
    "a cut from 2": "{% set messages = messages[2:] %}{% for m in messages %}{{ m.content }}{% endfor %}",
    "Phi-3.5 (eos after)": REAL["microsoft-Phi-3.5-mini-instruct"],
    # found by review: message 1 read after the cut, the generation prompt switched on
    "messages[0] after a cut": "{% if messages[0].role == 'system' %}{% set messages = messages[1:] %}{% endif %}"
    "{% if messages[0] is defined %}[{{ messages[0].content }}]{% endif %}"
    "{% for m in messages %}<{{ m.content }}>{% endfor %}",
    "add_generation_prompt set": "{% set add_generation_prompt = true %}{% for m in messages %}<{{ m.content }}>"
    "{% endfor %}{% if add_generation_prompt %}<eos>{% endif %}",
    "Qwen-like (looks back from the end)": QWEN_LIKE,
}


@pytest.mark.parametrize("name", list(STABLE))
def test_templates_built_message_by_message_qualify(name):
    assert prefix_stable(STABLE[name])


@pytest.mark.parametrize("name", list(LOOKS_AHEAD))
def test_templates_that_look_ahead_do_not(name):
    assert not prefix_stable(LOOKS_AHEAD[name])


@settings(max_examples=80, deadline=None)
@given(
    conversation=st.lists(MESSAGE, min_size=1, max_size=7),
    tools=st.sampled_from([None, TOOLS]),
    name=st.sampled_from(sorted(STABLE)),
)
def test_every_prefix_equals_its_own_render(conversation, tools, name):
    """Read off the whole render on the main thread; rendered one by one in the box on another thread."""
    counts = list(range(1, len(conversation) + 1))

    def render():
        try:
            return render_prefixes(STABLE[name], conversation, counts, tools=tools, special_tokens={"bos_token": "<s>"})
        except Exception as e:  # noqa: BLE001 - a template's error must be the same one
            return type(e).__name__, str(e)

    assert render() == off_main_thread(render)


def test_a_later_messages_error_is_not_a_shorter_prefixs():
    """Only the prefixes asked for are rendered: an error in a message after them is not theirs."""
    template = (
        "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no') }}{% endif %}"
        "{{ m.content }}{% endfor %}"
    )
    conversation = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "bad", "content": "c"}]
    assert prefix_stable(template)
    expected = {1: "a", 2: "ab"}
    assert render_prefixes(template, conversation, [1, 2]) == expected
    assert off_main_thread(lambda: render_prefixes(template, conversation, [1, 2])) == expected
