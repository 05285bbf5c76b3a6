"""Chat templates and conversations for the template tests: the box's own test templates, Jinja's features as
real templates use them, the attacks a template can make on the renderer, the real templates in
``tests/fixtures/chat_templates/``, and a hypothesis strategy of messages."""

from __future__ import annotations

import threading

from hypothesis import strategies as st

from tests.support import FIXTURES

GENERATION_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|eot_id|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|eot_id|>{% endif %}\n{% endfor %}"
)
PLAIN_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"

USER = {"role": "user", "content": "Hello there"}
CHATS = [
    [{"role": "system", "content": "Be brief."}, USER, {"role": "assistant", "content": "Hi ~ {{ x }} %s"}],
    [
        USER,
        {
            "role": "assistant",
            "content": None,
            "reasoning": "think",
            "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "content": {"result": [1, 2]}},
        {"role": "assistant", "content": "done"},
    ],
    [{"role": "user", "content": "é ✓ \U0001f600 " * 20}, {"role": "assistant", "content": "  padded  "}],
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "description": "d",
            "parameters": {"type": "object", "properties": {"a": {"type": "int"}}},
        },
    }
]
FEATURES_TEMPLATE = (  # the Jinja features real templates use: tojson, loop vars, macros, namespace, ~, %, format
    "{{ bos_token }}{% macro show(m) %}[{{ m.role|upper }}]{% endmacro %}{% set ns = namespace(n=0) %}"
    "{% for m in messages %}{{ show(m) }}{{ loop.index }}/{{ loop.length }}{% if loop.last %}!{% endif %}"
    "{% if m.content is mapping %}{{ m.content|tojson(indent=2) }}{% elif m.content is defined %}"
    "{{ m.content|trim }}{% endif %}{{ m.reasoning_content|default('') }}{% set ns.n = ns.n + 1 %}"
    "{% endfor %}{{ '%-5s|%3d' % ('a', ns.n) }}{{ '{:>6}'.format('x') }}{{ 'ab' * 3 }}{{ [1, 2] + [3] }}"
    "{{ tools|tojson if tools else '' }}{{ messages|map(attribute='role')|join(', ') }}{{ 'x'|center(7) }}"
    "{% for k, v in {'a': 1}.items() %}{{ k ~ v }}{% endfor %}{{ dict(a=1)|tojson }}{{ range(3)|list }}"
    "{% set block %}<b>{{ messages|length }}</b>{% endset %}{{ block }}{% filter upper %}up & <i>{% endfilter %}"
    "{% autoescape true %}<p>{{ '<x>' }}{{ '&' ~ '<' }}</p>{% endautoescape %}{% raw %}{{ raw }}{% endraw %}"
)

# templates that try to outgrow the renderer's limits: (template, a fragment of the message that stops it)
ATTACKS = {
    "string product": ("{{ 'a' * 10**9 }}", "a string of 1,000,000,000 characters"),
    "range product": ("{{ (range(100000)|list) * 100000 }}", "a list of 10,000,000,000 items"),
    "huge power": ("{{ 7 ** 1000000 }}", "an integer of over"),
    "nested loops": (
        "{% set x = range(100000)|list %}{% for a in x %}{% for b in x %}{% endfor %}{% endfor %}",
        "loop iterations",
    ),
    "strftime loop": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ strftime_now('%Y') }}{% endfor %}{% endfor %}",
        "over",
    ),  # its output cap or its deadline, whichever comes first
    "lipsum": ("{{ lipsum(10**8) }}", "lipsum(n=100,000,000)"),
    "macro fan-out": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}x{% endmacro %}{{ f(60) }}",
        "over",
    ),
    "tojson indent": ("{{ messages|tojson(indent=10**8) }}", "tojson indent"),
    "concat doubling": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "a string of",
    ),
    "list of references": (
        "{% set ns = namespace(s=['x' * 1000]) %}{% for i in range(64) %}"
        "{% set ns.s = [ns.s, ns.s] %}{% endfor %}{{ ns.s }}",
        "a string of",
    ),
    "block set": (
        "{% set ns = namespace(s='') %}{% set ns.s %}{% for i in range(100000) %}"
        + "x" * 5000
        + "{% endfor %}{% endset %}",
        "more than its total allowance",
    ),
    "macro body": (
        "{% macro f() %}{% for i in range(100000) %}{{ messages[0].content * 500 }}{% endfor %}"
        "{% endmacro %}{% set y = f() %}",
        "more than its total allowance",
    ),
    "format width": ("{{ '{:>999999999}'.format('a') }}", "a field width"),
    "percent width": ("{{ '%999999999s' % 'a' }}", "a field width"),
    "padding method": ("{{ 'a'.ljust(10**9) }}", "a string of 1,000,000,000"),
    "center filter": ("{{ 'a'|center(10**9) }}", "a string of 1,000,000,000"),
    "replace filter": ("{{ ('a' * 100000)|replace('a', 'b' * 100000) }}", "a string of"),
    "join filter": ("{{ (['x' * 100000] * 10000)|join }}", "a string of"),
    "join of a lazy select": (
        "{{ dict.fromkeys(range(100000), messages[0].content * 50).values()|select|join }}",
        "a string of",
    ),
    "str.join of a view": (
        "{{ ''.join(dict.fromkeys(range(100000), messages[0].content * 50).values()) }}",
        "a string of",
    ),
    "slice filter": ("{{ [1]|slice(10**9)|list }}", "a list of 1,000,000,000"),
    "translate": ("{{ ('a' * 100000).translate({97: 'b' * 100000}) }}", "a string of"),
}

# the constructs of real templates (Llama 3.1 and Qwen 3 style): reassigned messages, namespaces set in loops,
# reasoning split out of the content, tool calls as JSON
QWEN_LIKE = (
    "{%- if tools %}<|im_start|>system\n{% for t in tools %}{{ t|tojson }}\n{% endfor %}<|im_end|>\n{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' %}{%- set ns.multi_step_tool = false %}"
    "{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}{%- set content = message.content if message.content is string else '' %}"
    "{%- if message.role == 'assistant' %}{%- set reasoning_content = '' %}"
    "{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}{%- if loop.index0 > ns.last_query_index and reasoning_content %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}"
    "{%- set tool_call = tool_call.function if tool_call.function else tool_call %}"
    "{{- '\\n<tool_call>\\n' }}{{- tool_call.arguments|tojson }}{{- '\\n</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
REAL = {p.stem: p.read_text(encoding="utf-8") for p in sorted((FIXTURES / "chat_templates").glob("*.jinja"))}


def off_main_thread(fn):
    """``fn()`` on another thread, where the box always renders with its hooks."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001 - compared by type and text
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.one_of(TEXT, st.none())}
)
