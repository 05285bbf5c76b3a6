"""Which chat templates may render without the box's per-operation hooks: the ones that cannot blow up.

Alternatives: render every template with the hooks (``template``: each loop step, lookup, ``+`` and output piece is
a Python call, 2-3x transformers' own render time), or trust every template (a hostile one takes the machine).

A template passes when it is built only from constructs whose cost is bounded by its input: no ``*``, ``**`` or
``%``, no macros, call or filter blocks, block sets, ``range`` or ``lipsum``, filters and string methods from short
lists (the ones that can multiply their input only with constant, small arguments), and every ``{% set %}`` value
refers at most once to a variable some ``{% set %}`` or loop over such a variable made, and only through operations
that do not grow it (``+``, slices, ``trim``, ``split``...; no lists built around it, no ``~``, ``tojson`` or
``string`` of it). Then no value doubles from one step to the next: text and lists grow at most by a piece of the
input per assignment, so the output stream's cap and the deadline (a ``SIGALRM`` timer, which is why this is only
for the main thread) bound everything. Such a template renders in transformers' own environment, so its text is
transformers' by construction.

    >>> plain_ok("{% for m in messages %}{{ '<|' + m.role + '|>' + m.content|trim }}{% endfor %}")
    True
    >>> plain_ok("{% set ns = namespace(s='ab') %}{% for m in messages %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
    False
"""

from __future__ import annotations

import functools

from advisor import caches

# filters whose output is at most linear in their input, given constant arguments (checked in _filter_ok)
LINEAR_FILTERS = frozenset({
    "trim", "length", "count", "lower", "upper", "title", "capitalize", "first", "last", "default", "d", "int",
    "float", "string", "list", "items", "selectattr", "rejectattr", "select", "reject", "map", "tojson", "join",
    "unique", "reverse", "sort", "dictsort", "abs", "bool", "round", "safe", "striptags", "truncate", "wordcount",
    "max", "min", "indent", "e", "escape",
})
# of those, the ones that never make their input bigger (so a variable may pass through them into itself)
SHRINKING_FILTERS = frozenset({
    "trim", "lower", "upper", "title", "capitalize", "first", "last", "default", "d", "selectattr", "rejectattr",
    "select", "reject", "unique", "reverse", "sort", "truncate",
})
SCALAR_FILTERS = frozenset({"length", "count", "int", "float", "abs", "bool", "round", "wordcount"})
# string and dict methods: none builds more than its object and arguments
METHODS = frozenset({
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "lower", "upper", "title",
    "capitalize", "items", "keys", "values", "get", "find", "rfind", "count", "index", "isdigit", "isspace",
    "isalpha", "isalnum", "isupper", "islower",
})
SHRINKING_METHODS = frozenset({"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "lower", "upper",
                               "title", "capitalize", "get"})
SCALAR_METHODS = frozenset({"startswith", "endswith", "find", "rfind", "count", "index", "isdigit", "isspace",
                            "isalpha", "isalnum", "isupper", "islower"})
GLOBALS = frozenset({"raise_exception", "namespace", "strftime_now", "dict"})
UNBOUNDED_NAMES = frozenset({"range", "lipsum", "cycler", "joiner", "self", "caller", "varargs", "kwargs"})
MAX_JOINER = 64  # join separators and indents: formatting, never a multiplier


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


class _Checker:
    def template_ok(self, tree) -> bool:
        if not all(self.node_ok(n) for n in tree.iter_child_nodes()):
            return False
        self.made = self._made(tree)
        from jinja2 import nodes

        return all(self.refs(a.node) is not None and self.refs(a.node) <= 1 for a in tree.find_all(nodes.Assign))

    # -------------------------------------------------------------------------------------- constructs
    def node_ok(self, node) -> bool:
        from jinja2 import nodes

        allowed = (nodes.Output, nodes.TemplateData, nodes.Const, nodes.Name, nodes.NSRef, nodes.Getattr,
                   nodes.Getitem, nodes.Slice, nodes.Tuple, nodes.List, nodes.Dict, nodes.Pair, nodes.Keyword,
                   nodes.Compare, nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.Neg, nodes.Pos,
                   nodes.CondExpr, nodes.If, nodes.For, nodes.Assign, nodes.Test, nodes.Filter, nodes.Call,
                   nodes.Add, nodes.Sub, nodes.Div, nodes.FloorDiv, nodes.Concat, nodes.Continue, nodes.Break)
        if not isinstance(node, allowed):
            return False  # Mul, Pow, Mod, macros, call/filter blocks, block sets, {% generation %}, includes...
        if isinstance(node, nodes.For) and node.recursive:
            return False
        if isinstance(node, nodes.Name) and node.name in UNBOUNDED_NAMES:
            return False
        if isinstance(node, (nodes.Filter, nodes.Call, nodes.Test)) and (node.dyn_args or node.dyn_kwargs):
            return False
        if isinstance(node, nodes.Filter) and not self._filter_ok(node):
            return False
        if isinstance(node, nodes.Call) and not self._call_ok(node):
            return False
        return all(self.node_ok(n) for n in node.iter_child_nodes())

    @staticmethod
    def _small_const(node, kind) -> bool:
        from jinja2 import nodes

        return isinstance(node, nodes.Const) and isinstance(node.value, kind) and \
            (len(node.value) if isinstance(node.value, str) else abs(node.value)) <= MAX_JOINER

    def _filter_ok(self, node) -> bool:
        if node.node is None or node.name not in LINEAR_FILTERS:
            return False
        args = [*node.args, *(k.value for k in node.kwargs)]
        if node.name == "tojson":  # tojson(ensure_ascii, indent, separators, sort_keys): only a small indent
            return all(k.key in ("indent", "sort_keys") for k in node.kwargs) and not node.args and \
                all(self._small_const(k.value, (int, bool)) for k in node.kwargs)
        if node.name in ("join", "indent", "truncate"):  # a constant separator / width
            return all(self._small_const(a, (str, int, bool)) for a in args)
        if node.name == "map":  # map(attribute=...) picks; map('filter') would apply any filter
            return not node.args and all(k.key in ("attribute", "default") for k in node.kwargs)
        if node.name in ("select", "reject", "selectattr", "rejectattr", "sort", "dictsort", "unique", "max",
                         "min"):
            from jinja2 import nodes

            return all(isinstance(a, nodes.Const) for a in args)  # tests and attributes by name only
        return True

    @staticmethod
    def _call_ok(node) -> bool:
        from jinja2 import nodes

        callee = node.node
        if isinstance(callee, nodes.Name):
            return callee.name in GLOBALS
        return isinstance(callee, nodes.Getattr) and callee.attr in METHODS

    # ------------------------------------------------------------------------------------------ growth
    def _made(self, tree) -> set[str]:
        """Names a ``{% set %}`` assigns (a namespace's name for ``ns.x``), and the targets of loops over values
        that refer to them, to a fixed point."""
        from jinja2 import nodes

        made: set[str] = set()
        for a in tree.find_all(nodes.Assign):
            made |= _target_names(a.target)
        while True:
            before = len(made)
            for loop in tree.find_all(nodes.For):
                if any(n.name in made for n in loop.iter.find_all(nodes.Name)) or \
                        (isinstance(loop.iter, nodes.Name) and loop.iter.name in made):
                    made |= _target_names(loop.target)
            if len(made) == before:
                return made

    def refs(self, node) -> int | None:
        """How many times ``node``'s value may hold a made variable's value whole (0 for a value that cannot hold
        one: a number, a truth value); None where it may hold it grown (inside a list, stringified, joined)."""
        from jinja2 import nodes

        if isinstance(node, nodes.Name):
            return 1 if node.name in self.made else 0
        if isinstance(node, (nodes.Const, nodes.TemplateData)):
            return 0
        if isinstance(node, (nodes.Compare, nodes.Test, nodes.Not, nodes.Neg, nodes.Pos, nodes.Sub, nodes.Div,
                             nodes.FloorDiv)):
            return 0  # truth values and numbers
        if isinstance(node, (nodes.Getattr, nodes.Getitem, nodes.Slice)):
            return self.refs(node.node) if not isinstance(node, nodes.Slice) else 0
        if isinstance(node, nodes.Add):
            return _add(self.refs(node.left), self.refs(node.right))
        if isinstance(node, (nodes.And, nodes.Or)):
            return _most(self.refs(node.left), self.refs(node.right))
        if isinstance(node, nodes.CondExpr):
            return _most(self.refs(node.expr1), self.refs(node.expr2) if node.expr2 is not None else 0)
        if isinstance(node, nodes.Filter):
            inner = self.refs(node.node)
            if node.name in SCALAR_FILTERS:
                return 0
            extra = [self.refs(a) for a in [*node.args, *(k.value for k in node.kwargs)]]
            if node.name in SHRINKING_FILTERS:
                return _add(inner, *extra)
            return 0 if inner == 0 and all(e == 0 for e in extra) else None
        if isinstance(node, nodes.Call):
            args = [self.refs(a) for a in [*node.args, *(k.value for k in node.kwargs)]]
            callee = node.node
            if isinstance(callee, nodes.Getattr):
                if callee.attr in SCALAR_METHODS:
                    return 0
                inner = self.refs(callee.node)
                if callee.attr in SHRINKING_METHODS:
                    return _add(inner, *args)
                return 0 if inner == 0 and all(a == 0 for a in args) else None
            if isinstance(callee, nodes.Name) and callee.name == "raise_exception":
                return 0
            return 0 if all(a == 0 for a in args) else None  # namespace(...), dict(...): containers
        # lists, tuples, dicts, ~ (str() of a list is its repr): containers and stringifying
        return 0 if all(self.refs(n) == 0 for n in node.iter_child_nodes()) else None


def _target_names(target) -> set[str]:
    from jinja2 import nodes

    if isinstance(target, nodes.NSRef):
        return {target.name}
    return {n.name for n in target.find_all(nodes.Name)} | ({target.name} if isinstance(target, nodes.Name) else set())


def _add(*counts: int | None) -> int | None:
    return None if any(c is None for c in counts) else sum(counts)


def _most(*counts: int | None) -> int | None:
    return None if any(c is None for c in counts) else max(counts)
