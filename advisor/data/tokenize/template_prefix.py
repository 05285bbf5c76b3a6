"""Which chat templates render a conversation's first m messages as the start of the whole conversation's text.

Alternatives: render every prefix on its own (Bridge renders them all: one render per assistant turn's start and
end), or read them off one render of the whole conversation where the template's structure says they are its start.

A template qualifies when its text is built by one top-level ``{% for message in messages %}`` loop whose output at
message i depends only on messages up to i: before the loop, ``messages`` is read only as ``messages[0]`` (the same
in every prefix) or cut to ``messages[1:]``; inside it, not at all beyond the loop's own ``message``, and no
``loop.last``, ``loop.length``, ``loop.revindex*`` or ``loop.nextitem`` (they look ahead), no ``{% break %}`` and no
``{% else %}``; after it, only ``{% if add_generation_prompt %}`` (false for these renders). Then rendering
``messages[:m]`` runs the same statements as rendering all of them, up to the loop's turn for message m, and stops
there: its text is the whole text up to that point (``template.render_prefixes`` marks where each turn starts).

    >>> prefix_stable("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    True
    >>> prefix_stable("{% for m in messages %}{{ m.content }}{% if loop.last %}<eos>{% endif %}{% endfor %}")
    False
"""

from __future__ import annotations

import functools

from advisor import caches
from advisor.data.tokenize.template_plain import plain_ok

LOOKING_AHEAD = frozenset({"last", "length", "revindex", "revindex0", "nextitem", "changed"})


@functools.lru_cache(maxsize=16)
def prefix_stable(source: str) -> bool:
    """Whether ``source``'s render of ``messages[:m]`` is the start of its render of ``messages`` (see the module);
    only for templates that render without hooks (``plain_ok``), where the marks can be taken."""
    if not plain_ok(source):
        return False
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _stable(_compile_jinja_template("").environment.parse(source))


caches.listed("templates whose prefixes are the start of the whole render", prefix_stable)


def _stable(tree) -> bool:
    from jinja2 import nodes

    body = tree.body
    loops = [i for i, n in enumerate(body) if isinstance(n, nodes.For) and _is_messages(n.iter)]
    if len(loops) != 1:
        return False
    at = loops[0]
    loop = body[at]
    if loop.else_ or loop.test is not None or loop.recursive or not isinstance(loop.target, nodes.Name):
        return False
    if any(_is_messages(n) for n in loop.find_all(nodes.Name) if n is not loop.iter):
        return False
    if any(True for _ in loop.find_all(nodes.Break)):
        return False
    for ref in loop.find_all(nodes.Getattr):
        if isinstance(ref.node, nodes.Name) and ref.node.name == "loop" and ref.attr in LOOKING_AHEAD:
            return False
    for ref in loop.find_all(nodes.Name):  # loop passed whole somewhere could be asked anything
        if ref.name == "loop" and not _read_as_attribute(loop, ref):
            return False
    if any(name.name == "add_generation_prompt" for name in tree.find_all(nodes.Name) if name.ctx == "store"):
        return False  # the statement after the loop is read as false
    if not _before_ok(body[:at]):
        return False
    return all(_after_ok(n) for n in body[at + 1 :])


def _is_messages(node) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Name) and node.name == "messages" and node.ctx == "load"


def _read_as_attribute(tree, name) -> bool:
    from jinja2 import nodes

    return any(isinstance(g, nodes.Getattr) and g.node is name for g in tree.find_all(nodes.Getattr))


def _before_ok(statements) -> bool:
    """The statements before the loop read ``messages`` only as ``messages[0]...`` before any cut, and cut it only
    to ``messages[1:]``: after a cut, ``messages[0]`` is message 1, which a prefix of one message does not have."""
    from jinja2 import nodes

    cut = False

    def ok(node) -> bool:
        nonlocal cut
        if isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name) and node.target.name == "messages":
            value = node.node
            if not (
                isinstance(value, nodes.Getitem)
                and _is_messages(value.node)
                and isinstance(value.arg, nodes.Slice)
                and isinstance(value.arg.start, nodes.Const)
                and value.arg.start.value == 1
                and value.arg.stop is None
                and value.arg.step is None
            ):
                return False
            cut = True  # a cut statement reads messages only to cut it
            return True
        if isinstance(node, nodes.Getitem) and _is_messages(node.node):
            return (
                not cut
                and isinstance(node.arg, nodes.Const)
                and node.arg.value == 0
                and not isinstance(node.arg.value, bool)
                and all(ok(n) for n in node.arg.iter_child_nodes())
            )
        if _is_messages(node):
            return False  # messages read whole: its length, its last message...
        return all(ok(n) for n in node.iter_child_nodes())  # in source order: an if's test before its branches

    return all(ok(n) for n in statements)


def _after_ok(node) -> bool:
    """A statement after the loop: ``{% if add_generation_prompt %}...{% endif %}`` (nothing in these renders)."""
    from jinja2 import nodes

    return (
        isinstance(node, nodes.If)
        and isinstance(node.test, nodes.Name)
        and node.test.name == "add_generation_prompt"
        and not node.elif_
        and not node.else_
    )
