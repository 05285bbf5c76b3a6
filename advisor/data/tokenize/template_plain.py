"""Which chat templates may render without the box's per-operation hooks: the ones that cannot blow up.

Alternatives: render every template with the hooks (``template``: each loop step, lookup, ``+`` and output piece is
a Python call, 2-3x transformers' own render time), or trust every template (a hostile one takes the machine).

Such a template renders in transformers' own environment with the box's filters (each counts and pre-checks what
it builds, against the render's allowance) and its ``finalize`` (an output's size is checked before ``str()``
builds it); what goes unchecked is ``+``, ``~``, lookups, loops and the string methods, so those are what the rules
bound. A template passes when it is built only from constructs whose cost is bounded by its input:

- no ``*`` or ``**``, ``%`` only as ``loop.index0 % 2`` (a number by a small constant), no macros, call or filter
  blocks, block sets, ``range``, ``lipsum``; filters and string methods from short lists;
- every expression names at most ``MAX_NAMES`` values where its result can hold them whole (``a + b`` holds both,
  ``a == b`` neither), so one ``{{ }}`` or ``+`` chain builds at most that many copies of the input;
- every ``{% set %}`` value holds at most one variable some ``{% set %}`` or loop made (``loop`` itself included),
  and never inside a list, a ``~`` or a call that builds a container: no value doubles from one step to the next;
- no loop runs over a list written in the template around names (``[[a, a]]``: shared structures that compare or
  print in exponential time in C, where no timer reaches).

Then the output stream's cap, the filters' allowance and the deadline (a ``SIGALRM`` timer, which is why this is
only for the main thread) bound everything, and the text is transformers' by construction.

    >>> plain_ok("{% for m in messages %}{{ '<|' + m.role + '|>' + m.content|trim }}{% endfor %}")
    True
    >>> plain_ok("{% set ns = namespace(s='ab') %}{% for m in messages %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
    False
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from advisor import caches

# filters the plain path may call (each is the box's guarded filter there: it counts what it builds)
FILTERS = frozenset(
    {
        "trim",
        "length",
        "count",
        "lower",
        "upper",
        "title",
        "capitalize",
        "first",
        "last",
        "default",
        "d",
        "int",
        "float",
        "string",
        "list",
        "items",
        "selectattr",
        "rejectattr",
        "select",
        "reject",
        "map",
        "tojson",
        "join",
        "unique",
        "reverse",
        "sort",
        "dictsort",
        "abs",
        "bool",
        "round",
        "safe",
        "truncate",
        "wordcount",
        "max",
        "min",
        "indent",
        "e",
        "escape",
        "replace",
    }
)
SCALAR_FILTERS = frozenset({"length", "count", "int", "float", "abs", "bool", "round", "wordcount"})
# string and dict methods (not guarded): none builds more than its object and arguments
METHODS = frozenset(
    {
        "strip",
        "lstrip",
        "rstrip",
        "split",
        "rsplit",
        "splitlines",
        "startswith",
        "endswith",
        "lower",
        "upper",
        "title",
        "capitalize",
        "items",
        "keys",
        "values",
        "get",
        "find",
        "rfind",
        "count",
        "index",
        "isdigit",
        "isspace",
        "isalpha",
        "isalnum",
        "isupper",
        "islower",
    }
)
SCALAR_METHODS = frozenset(
    {
        "startswith",
        "endswith",
        "find",
        "rfind",
        "count",
        "index",
        "isdigit",
        "isspace",
        "isalpha",
        "isalnum",
        "isupper",
        "islower",
    }
)
GLOBALS = frozenset({"raise_exception", "namespace", "strftime_now", "dict"})
UNBOUNDED_NAMES = frozenset({"range", "lipsum", "cycler", "joiner", "self", "caller", "varargs", "kwargs"})
LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"})
MAX_SMALL = 64  # join separators, indents, % divisors: formatting, never a multiplier
MAX_NAMES = 8  # values one expression may hold whole: real templates' longest + chains hold two or three


@functools.lru_cache(maxsize=16)
def plain_ok(source: str) -> bool:
    """Whether ``source`` may render in transformers' own environment under a deadline (see the module)."""
    from jinja2 import TemplateSyntaxError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from advisor.data.tokenize.template import MAX_TEMPLATE_CHARS

    if len(source) > MAX_TEMPLATE_CHARS:
        return False  # the box refuses it
    try:
        tree = _compile_jinja_template("").environment.parse(source)
    except TemplateSyntaxError:
        return False  # the box reports it
    return _Checker().template_ok(tree)


caches.listed("templates that render without hooks", plain_ok)


@dataclass(frozen=True)
class _Held:
    """What an expression's value may hold whole: made variables, names of any kind, and whether a made variable
    went into a container, a ``~`` or a grown copy (then a ``{% set %}`` of it may double)."""

    made: int = 0
    names: int = 0
    grown: bool = False

    def __add__(self, other: _Held) -> _Held:
        return _Held(self.made + other.made, self.names + other.names, self.grown or other.grown)

    def most(self, other: _Held) -> _Held:
        return _Held(max(self.made, other.made), max(self.names, other.names), self.grown or other.grown)

    def contained(self) -> _Held:
        return _Held(self.made, self.names, self.grown or self.made > 0)


NOTHING = _Held()


class _Checker:
    def template_ok(self, tree) -> bool:
        from jinja2 import nodes

        if not all(self.node_ok(n) for n in tree.iter_child_nodes()):
            return False
        self.made = self._made(tree)
        for loop in tree.find_all(nodes.For):
            if any(lit.find(nodes.Name) is not None for lit in _literals(loop.iter)):
                return False  # a loop over [[a, a]]: shared structures
        for assign in tree.find_all(nodes.Assign):
            held = self.held(assign.node)
            if held.made > 1 or held.grown:
                return False
        return all(self.held(e).names <= MAX_NAMES for e in tree.find_all(nodes.Expr))

    # -------------------------------------------------------------------------------------- constructs
    def node_ok(self, node) -> bool:
        from jinja2 import nodes

        allowed = (
            nodes.Output,
            nodes.TemplateData,
            nodes.Const,
            nodes.Name,
            nodes.NSRef,
            nodes.Getattr,
            nodes.Getitem,
            nodes.Slice,
            nodes.Tuple,
            nodes.List,
            nodes.Dict,
            nodes.Pair,
            nodes.Keyword,
            nodes.Compare,
            nodes.Operand,
            nodes.And,
            nodes.Or,
            nodes.Not,
            nodes.Neg,
            nodes.Pos,
            nodes.CondExpr,
            nodes.If,
            nodes.For,
            nodes.Assign,
            nodes.Test,
            nodes.Filter,
            nodes.Call,
            nodes.Add,
            nodes.Sub,
            nodes.Div,
            nodes.FloorDiv,
            nodes.Mod,
            nodes.Concat,
            nodes.Continue,
            nodes.Break,
        )
        if not isinstance(node, allowed):
            return False  # Mul, Pow, macros, call/filter blocks, block sets, {% generation %}, includes...
        if isinstance(node, nodes.For) and node.recursive:
            return False
        if isinstance(node, nodes.Mod) and not (_number(node.left) and _small(node.right, int)):
            return False  # '%999999999d' % 2 is a gigabyte: only a loop counter by a small constant
        if isinstance(node, nodes.Name) and node.name in UNBOUNDED_NAMES:
            return False
        if isinstance(node, (nodes.Filter, nodes.Call, nodes.Test)) and (node.dyn_args or node.dyn_kwargs):
            return False
        if isinstance(node, nodes.Filter) and not _filter_ok(node):
            return False
        if isinstance(node, nodes.Call) and not _call_ok(node):
            return False
        return all(self.node_ok(n) for n in node.iter_child_nodes())

    # ------------------------------------------------------------------------------------------ growth
    def _made(self, tree) -> set[str]:
        """Names a ``{% set %}`` assigns (a namespace's name for ``ns.x``), ``loop``, and the targets of loops over
        values that refer to them, to a fixed point."""
        from jinja2 import nodes

        made: set[str] = {"loop"}
        for a in tree.find_all(nodes.Assign):
            made |= _target_names(a.target)
        while True:
            before = len(made)
            for loop in tree.find_all(nodes.For):
                if any(n.name in made for n in _names(loop.iter)):
                    made |= _target_names(loop.target)
            if len(made) == before:
                return made

    def held(self, node) -> _Held:
        """What ``node``'s value may hold whole (see ``_Held``); truth values and numbers hold nothing."""
        from jinja2 import nodes

        if isinstance(node, nodes.Name):
            return _Held(made=int(node.name in self.made), names=1)
        if isinstance(node, (nodes.Const, nodes.TemplateData)):
            return NOTHING
        if isinstance(
            node,
            (
                nodes.Compare,
                nodes.Test,
                nodes.Not,
                nodes.Neg,
                nodes.Pos,
                nodes.Sub,
                nodes.Div,
                nodes.FloorDiv,
                nodes.Mod,
                nodes.Slice,
            ),
        ):
            return NOTHING  # truth values and numbers (a Slice is only the bounds of a subscript)
        if isinstance(node, (nodes.Getattr, nodes.Getitem)):
            return self.held(node.node)
        if isinstance(node, nodes.Add):
            return self.held(node.left) + self.held(node.right)
        if isinstance(node, (nodes.And, nodes.Or)):
            return self.held(node.left).most(self.held(node.right))
        if isinstance(node, nodes.CondExpr):
            return self.held(node.expr1).most(self.held(node.expr2) if node.expr2 is not None else NOTHING)
        if isinstance(node, nodes.Filter):
            if node.name in SCALAR_FILTERS:
                return NOTHING
            held = self.held(node.node)
            for a in [*node.args, *(k.value for k in node.kwargs)]:
                held = held + self.held(a)
            # the guarded filter counts what it builds; a made value through tojson, string, join or list may
            # come back bigger each time it is set again, so it counts as grown
            return held if node.name in _KEEPING_FILTERS else held.contained()
        if isinstance(node, nodes.Call):
            callee = node.node
            held = NOTHING
            for a in [*node.args, *(k.value for k in node.kwargs)]:
                held = held + self.held(a)
            if isinstance(callee, nodes.Getattr):
                if callee.attr in SCALAR_METHODS:
                    return NOTHING
                return self.held(callee.node) + held
            if isinstance(callee, nodes.Name) and callee.name == "raise_exception":
                return NOTHING
            return held.contained()  # namespace(...), dict(...): containers
        held = NOTHING  # lists, tuples, dicts, ~ (str() of a list is its repr): containers and stringifying
        for n in node.iter_child_nodes():
            held = held + self.held(n)
        return held.contained()


# filters whose result is a part of their input, never a bigger copy (a made value may go through them into itself)
_KEEPING_FILTERS = frozenset(
    {
        "trim",
        "lower",
        "upper",
        "title",
        "capitalize",
        "first",
        "last",
        "default",
        "d",
        "selectattr",
        "rejectattr",
        "select",
        "reject",
        "unique",
        "reverse",
        "sort",
        "truncate",
        "items",
        "map",
        "replace",
    }
)


def _filter_ok(node) -> bool:
    from jinja2 import nodes

    if node.node is None or node.name not in FILTERS:
        return False
    args = [*node.args, *(k.value for k in node.kwargs)]
    if node.name == "tojson":  # tojson(ensure_ascii, indent, separators, sort_keys): constants, a small indent
        return not node.args and all(
            k.key in ("indent", "sort_keys", "ensure_ascii") and _small(k.value, (int, bool)) for k in node.kwargs
        )
    if node.name in ("join", "indent", "truncate"):  # a constant separator / width
        return all(_small(a, (str, int, bool)) for a in args)
    if node.name == "replace":  # constant text, never longer than what it replaces
        return (
            len(node.args) == 2
            and not node.kwargs
            and all(_small(a, str) for a in node.args)
            and 0 < len(node.args[0].value) >= len(node.args[1].value)
        )
    if node.name == "map":  # map(attribute=...) picks; map('filter') would apply any filter
        return not node.args and all(
            k.key in ("attribute", "default") and isinstance(k.value, nodes.Const) for k in node.kwargs
        )
    if node.name in ("select", "reject", "selectattr", "rejectattr", "sort", "dictsort", "unique", "max", "min"):
        return all(isinstance(a, nodes.Const) for a in args)  # tests and attributes by name
    return True


def _call_ok(node) -> bool:
    from jinja2 import nodes

    callee = node.node
    if isinstance(callee, nodes.Name):
        return callee.name in GLOBALS
    return isinstance(callee, nodes.Getattr) and callee.attr in METHODS


def _small(node, kind) -> bool:
    from jinja2 import nodes

    return (
        isinstance(node, nodes.Const)
        and isinstance(node.value, kind)
        and (len(node.value) if isinstance(node.value, str) else abs(node.value)) <= MAX_SMALL
    )


def _number(node) -> bool:
    """An expression that is a number: a loop counter, a length, a constant, or arithmetic on those."""
    from jinja2 import nodes

    if isinstance(node, nodes.Getattr):
        return isinstance(node.node, nodes.Name) and node.node.name == "loop" and node.attr in LOOP_NUMBERS
    if isinstance(node, nodes.Filter):
        return node.name in SCALAR_FILTERS
    if isinstance(node, nodes.Const):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, (nodes.Add, nodes.Sub)):
        return _number(node.left) and _number(node.right)
    return False


def _names(node):
    from jinja2 import nodes

    return [node] if isinstance(node, nodes.Name) else list(node.find_all(nodes.Name))


def _literals(node):
    """List, tuple and dict literals in an expression (``node`` included)."""
    from jinja2 import nodes

    kinds = (nodes.List, nodes.Tuple, nodes.Dict)
    return ([node] if isinstance(node, kinds) else []) + list(node.find_all(kinds))


def _target_names(target) -> set[str]:
    from jinja2 import nodes

    if isinstance(target, nodes.NSRef):
        return {target.name}
    return {n.name for n in _names(target)}
