"""Templates rendered without the box's hooks (template_plain): only ones that cannot blow up pass, they render the
text transformers renders, and the deadline and the output cap still stop them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.data.tokenize.template import TemplateLimit, render_chat, render_prefixes
from advisor.data.tokenize.template_plain import plain_ok
from tests.support.templates import (
    ATTACKS,
    CHATS,
    FEATURES_TEMPLATE,
    GENERATION_TEMPLATE,
    MESSAGE,
    PLAIN_TEMPLATE,
    QWEN_LIKE,
    REAL,
    TOOLS,
    off_main_thread,
)
from tests.support.tokenizer_fixture import CHAT_TEMPLATE

# the real templates that pass (the others use |list of a variable, tojson of one into itself, macros...)
REAL_PLAIN = (
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",
    "deepseek-ai-DeepSeek-V3.1",
    "google-gemma-2-2b-it",
    "ibm-granite-granite-3.3-2B-Instruct",
    "meta-llama-Llama-3.1-8B-Instruct",
    "microsoft-Phi-3.5-mini-instruct",
)
REAL_LIKE = {
    "bundled (Llama 3.1 style)": CHAT_TEMPLATE,
    "plain": PLAIN_TEMPLATE,
    "qwen-like": QWEN_LIKE,
    **{name: REAL[name] for name in REAL_PLAIN},
}

# blow-ups with none of *, **, %, range or macros: only the growth rule can see them
GROWTH = {
    "doubling by +": "{% set ns = namespace(s='ab') %}{% for m in messages %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s }}",
    "doubling through a second name": "{% set ns = namespace(s='ab') %}{% for m in messages %}"
    "{% set t = ns.s %}{% set ns.s = t + ns.s %}{% endfor %}",
    "repr growth by tojson": "{% set ns = namespace(s='\\\\') %}{% for m in messages %}{% set ns.s = ns.s|tojson %}"
    "{% endfor %}{{ ns.s }}",
    "repr growth by ~ and split": "{% set ns = namespace(s='a b') %}{% for m in messages %}"
    "{% set ns.s = (ns.s ~ '').split() %}{% endfor %}{{ ns.s }}",
    "nested references": "{% set ns = namespace(s='x') %}{% for m in messages %}{% set ns.s = [ns.s, ns.s] %}"
    "{% endfor %}{{ ns.s }}",
    "a loop over itself": "{% set ns = namespace(l=[1]) %}{% for m in messages %}{% for x in ns.l %}"
    "{% set ns.l = ns.l + [x] %}{% endfor %}{% endfor %}{{ ns.l|length }}",
    "default of itself": "{% set ns = namespace(s='ab') %}{% for m in messages %}"
    "{% set ns.s = ns.s|default('') + ns.s|default('') %}{% endfor %}",
    "string filter": "{% set ns = namespace(s=['\\\\']) %}{% for m in messages %}{% set ns.s = ns.s|string %}"
    "{% endfor %}",
    "join of itself": "{% set ns = namespace(s='ab') %}{% for m in messages %}{% set ns.s = ns.s|join(ns.s) %}"
    "{% endfor %}",
    "map of a filter": "{{ messages|map('tojson')|list }}",
    "a wide join": "{{ messages|map(attribute='content')|join(messages[0].content) }}",
    "a block set": "{% set x %}{% for m in messages %}{{ m.content }}{% endfor %}{% endset %}{{ x }}",
    # found by review: copies in one expression, loops over written lists, loop variables
    "many copies in one expression": "{% set c = messages[0].content %}{{ ([" + ",".join(["c"] * 200) + "]|join)"
    "|length }}",
    "map with a variable default": "{% for m in messages %}{{ (m.content|list|map(attribute='z', "
    "default=m.content)|join)|length }}{% endfor %}",
    "a loop over a written list": "{% for a in [messages[0].content] %}{% for b in [[a, a]] %}{% for c in [[b, b]] %}"
    "{{ c|tojson }}{% endfor %}{% endfor %}{% endfor %}",
    "previtem": "{% set ns = namespace(s='ab') %}{% for m in messages %}{% for x in ns.s.split() %}"
    "{% set ns.s = loop.previtem + x %}{% endfor %}{% endfor %}",
    "% of text": "{{ messages[0].content % 2 }}",
    "a long replacement": "{{ messages[0].content|replace('a', 'aa') }}",
}
# chains of filters in one expression: accepted, and the box's guarded filters stop them
FILTER_CHAINS = {
    "tojson chain": ("{{ '\\\\'" + "|tojson" * 29 + "|length }}", "allowance"),
    "join chain": ("{{ 'ab'" + ("|list|join('" + "x" * 64 + "')") * 5 + "|length }}", "over"),
    "indent chain": ("{{ (messages[0].content" + "|indent(64, true)" * 60 + ")|length }}", "a string of"),
    "tojson of deep input": ("{{ messages|tojson(indent=4) }}", "JSON text of"),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_keeps_the_hooks(name):
    assert not plain_ok(ATTACKS[name][0])


@pytest.mark.parametrize("name", list(GROWTH))
def test_growth_without_operators_keeps_the_hooks(name):
    assert not plain_ok(GROWTH[name])


@pytest.mark.parametrize("name", list(REAL_LIKE))
def test_real_templates_render_without_hooks(name):
    assert plain_ok(REAL_LIKE[name])


def test_the_other_real_templates_keep_the_hooks():
    assert len(REAL) == 10 and set(REAL_PLAIN) < set(REAL)
    assert not any(plain_ok(REAL[name]) for name in set(REAL) - set(REAL_PLAIN))


def _deep(depth: int, width: int):
    value = [0] * width
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.slow  # some run to their deadline
@pytest.mark.parametrize("name", list(FILTER_CHAINS))
def test_filter_chains_are_stopped_by_the_guarded_filters(name):
    template, fragment = FILTER_CHAINS[name]
    assert plain_ok(template)
    content = "\n" * 50_000 if name == "indent chain" else _deep(400, 30_000) if "deep" in name else "hi"
    with pytest.raises(TemplateLimit, match=fragment):
        render_chat(template, [{"role": "user", "content": content}])


def test_generation_blocks_and_macros_keep_the_hooks():
    assert not plain_ok(GENERATION_TEMPLATE)  # their spans are tracked by the box's environment
    assert not plain_ok(FEATURES_TEMPLATE)


@settings(max_examples=60, deadline=None)
@given(
    conversation=st.lists(MESSAGE, min_size=1, max_size=6),
    tools=st.sampled_from([None, TOOLS]),
    name=st.sampled_from(sorted(REAL_LIKE)),
)
def test_plain_renders_equal_the_boxed_ones(conversation, tools, name):
    """The same text (or the same error) with and without the hooks, for every prefix of the conversation."""
    template = REAL_LIKE[name]
    counts = list(range(1, len(conversation) + 1))

    def render():
        try:
            return render_prefixes(template, conversation, counts, tools=tools, special_tokens={"bos_token": "<s>"})
        except Exception as e:  # noqa: BLE001 - the template's own errors must match too
            return type(e).__name__, str(e)

    assert render() == off_main_thread(render)


@pytest.mark.parametrize("conversation", CHATS, ids=["system", "tools-and-reasoning", "unicode"])
def test_the_sample_chats_render_the_same(conversation):
    def render(template):
        try:
            return render_chat(template, conversation, tools=TOOLS)
        except Exception as e:  # noqa: BLE001 - Gemma refuses a system turn: the same error both ways
            return type(e).__name__, str(e)

    for template in REAL_LIKE.values():
        assert render(template) == off_main_thread(lambda t=template: render(t))


def test_the_output_cap_stops_a_plain_template():
    template = "{% for a in messages %}{% for b in messages %}{{ b.content }}{% endfor %}{% endfor %}"
    assert plain_ok(template)
    messages = [{"role": "user", "content": "x" * 1000}] * 3000  # 9 G characters, quadratically
    with pytest.raises(TemplateLimit, match="output over"):
        render_chat(template, messages)


@pytest.mark.slow  # waits for its deadline
def test_the_deadline_stops_a_plain_template():
    template = (
        "{% for a in messages %}{% for b in messages %}{% for c in messages %}{% if a == c %}{% endif %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    )
    assert plain_ok(template)
    with pytest.raises(TemplateLimit, match="over 0.5 s"):
        render_chat(template, [{"role": "user", "content": "x"}] * 2000, seconds=0.5)
