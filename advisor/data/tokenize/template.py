"""Chat templates rendered in a box: transformers' own Jinja sandbox, with limits on time, size and steps.

A chat template is code from a tokenizer folder (or a user's setting): transformers renders it in Jinja's
``ImmutableSandboxedEnvironment``, which stops a template from reaching Python internals but not from looping for
hours (``{% for a in x %}{% for b in x %}``) or asking for gigabytes (``'a' * 10**9``, ``tojson(indent=10**8)``,
``lipsum(10**9)``). Here the same environment is built as transformers builds it (its filters, globals and
extensions are taken from ``transformers/utils/chat_template_utils.py``'s ``_compile_jinja_template``, and the
inputs are prepared as ``apply_chat_template`` / ``render_jinja_template`` prepare them), so an ordinary template
renders byte for byte the same text, and every place a template can spend time or memory is bounded:

- the output is streamed with ``Template.generate`` and cut off past ``Budget.out_chars``;
- ``*``, ``**``, ``+`` and ``%`` are intercepted (``SandboxedEnvironment.intercepted_binops``) and refuse a result
  over the cap before Python builds it; so do ``~``, ``{{ }}``, string methods and the filters that can multiply
  their input (``center``, ``indent``, ``join``, ``replace``, ``tojson``, ``format``...);
- every ``{% for %}`` iteration, call, attribute and item lookup spends a step and checks the deadline; on the main
  thread a ``SIGALRM`` timer also interrupts plain Python loops between those hooks;
- ``lipsum`` and ``tojson``'s indent are bounded; the template source itself is at most ``MAX_TEMPLATE_CHARS``.

A template over a limit raises ``TemplateLimit`` (one record's problem).

    >>> render_chat("{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}",
    ...             [{"role": "user", "content": "Hi"}], special_tokens={"bos_token": "<s>"})
    'user: Hi\\n'
    >>> render_chat("{{ 'a' * 10**9 }}", [{"role": "user", "content": "Hi"}])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor...TemplateLimit: the chat template exceeded its limits (a string of 1,000,000,000 characters; the cap ...)
"""

from __future__ import annotations

import contextlib
import functools
import re
import signal
import string
import threading
import time
from collections.abc import Callable, ItemsView, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

from advisor import caches
from advisor.data.tokenize.template_plain import plain_ok
from advisor.data.tokenize.template_prefix import prefix_stable

MAX_TEMPLATE_CHARS = 1 << 19  # 512 Ki characters: real templates are 1-40 KiB
MIN_OUT_CHARS = 1 << 20  # every record may render this much, whatever its size
MAX_OUT_CHARS = 1 << 25  # 32 Mi characters: far beyond MAX_TOKENS' worth of useful text per sample
OUT_PER_INPUT = 16  # a template may repeat its input this many times (system prompt copies, tool listings)
MAX_ALLOC_CHARS = 1 << 27  # everything a render may build, in all: bounds memory (at most ~512 MB) and time
MAX_ITEMS = 1 << 20  # items in a list a template builds
MAX_STEPS = 1_000_000  # loop iterations + calls + lookups: real templates need tens per message
CLOCK_STEPS = 32  # the deadline is checked once in this many steps (a power of two)
MAX_INT_BITS = 1 << 16  # integers a template computes (2**65536 is already a 19,729-digit number)
MAX_INDENT = 64  # tojson / indent / center widths beyond this are never formatting
RENDER_SECONDS = 1.0  # per record, plus SECONDS_PER_MB of its size: real templates take ~0.2 s per MB rendered
SECONDS_PER_MB = 10.0
MAX_RENDER_SECONDS = 60.0
QUIET_RINGS = 20  # the alarm's 50 ms rings with no hook run after a hook raised the deadline: then it raises itself
STRIKES = 3  # records in a row a template ran out of time or steps on: then it is not rendered again
MAX_LIPSUM = 100  # lipsum paragraphs (and words per paragraph: 10x)


class TemplateLimit(Exception):  # noqa: N818 - a limit, not a crash: reads better at the call site
    """A chat template went past one of the box's limits, for one record."""

    def __init__(self, why: str, *, costly: bool = False):
        self.why = why
        self.costly = costly  # it ran out of time or steps: seconds were spent finding out
        super().__init__(f"the chat template exceeded its limits ({why})")


@dataclass
class Budget:
    """What one render may still spend. ``deadline`` is a ``time.monotonic()`` value.

    >>> b = Budget.for_input(10)
    >>> b.out_chars == MIN_OUT_CHARS, b.steps == MAX_STEPS
    (True, True)
    """

    out_chars: int
    alloc_chars: int
    steps: int = MAX_STEPS
    seconds: float = RENDER_SECONDS
    deadline: float = field(default=float("inf"))
    expired: bool = False  # the alarm rang: the next hook raises the deadline, in the template's own flow
    told: bool = False  # a hook raised the deadline: it is on its way out

    @classmethod
    def for_input(cls, input_chars: int, seconds: float | None = None) -> Budget:
        if seconds is None:
            seconds = round(min(MAX_RENDER_SECONDS, RENDER_SECONDS + SECONDS_PER_MB * input_chars / 1e6), 1)
        out = min(MAX_OUT_CHARS, max(MIN_OUT_CHARS, OUT_PER_INPUT * input_chars))
        return cls(
            out_chars=out,
            alloc_chars=min(MAX_ALLOC_CHARS, 16 * out),
            seconds=seconds,
            deadline=time.monotonic() + seconds,
        )


_STATE = threading.local()  # the budget of the render running on this thread (None: compiling or idle)


def _budget() -> Budget:
    try:
        budget = _STATE.budget
    except AttributeError:  # a thread that never rendered
        budget = None
    if budget is None:  # compile-time constant folding: sizes are still capped, nothing else is running
        return Budget(out_chars=MIN_OUT_CHARS, alloc_chars=MAX_ALLOC_CHARS)
    return budget


def _step(n: int = 1) -> None:
    """Spend ``n`` steps, and check the clock every ``CLOCK_STEPS``: called by every hook, so a template cannot run
    unchecked for long (a step's own work is bounded by the size caps, so 32 of them are microseconds; reading the
    clock at every one was a tenth of a chat record's tokenizing)."""
    b = getattr(_STATE, "budget", None)
    if b is None:  # compiling: nothing runs yet (sizes are still capped, by _spend)
        return
    b.steps -= n
    if b.steps < 0:
        raise TemplateLimit(f"over {MAX_STEPS:,} loop iterations, calls and lookups", costly=True)
    if b.expired or (b.steps & (CLOCK_STEPS - 1) < n and time.monotonic() > b.deadline):
        b.told = True
        raise TemplateLimit(f"over {b.seconds:g} s", costly=True)


def _spend(chars: int, what: str = "a string") -> None:
    """Refuse a value of ``chars`` characters (or items) before it is built, and count it against the total."""
    b = _budget()
    if chars > b.out_chars:
        raise TemplateLimit(f"{what} of {chars:,} characters; the cap is {b.out_chars:,}")
    b.alloc_chars -= chars
    if b.alloc_chars < 0:
        raise TemplateLimit("it built more than its total allowance of text")


def _items(n: int) -> None:
    if n > MAX_ITEMS:
        raise TemplateLimit(f"a list of {n:,} items; the cap is {MAX_ITEMS:,}")
    _spend(n, "a list")


# -------------------------------------------------------------------------------------------- sizes
def text_size(value: Any, limit: int, indent: int = 0) -> int:
    """About how many characters ``str(value)`` (or its JSON with ``indent``) has, counted without building it;
    stops past ``limit`` (and then returns more than ``limit``). Iterative, so depth cannot overflow it.

        >>> text_size("abc", 100), text_size(["ab", {"k": 1}], 100) >= len(str(["ab", {"k": 1}]))
        (3, True)
        >>> text_size([["x" * 50] * 1000] * 1000, 10**6) > 10**6
        True
    """
    from jinja2.utils import Namespace

    if isinstance(value, str):
        return len(value)
    total, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        total += 4 + indent * depth  # quotes, separators, and the indent of its line
        t = type(v)  # JSON's own types first, by identity: the ABC checks below cost most of a chat record's sizing
        if t is str:
            total += len(v)
        elif t is dict:
            for k, x in v.items():
                stack.append((k, depth + 1))
                stack.append((x, depth + 1))
        elif t is list:
            stack.extend((x, depth + 1) for x in v)
        elif t is int:
            total += v.bit_length() // 3 + 1
        elif isinstance(v, (str, bytes)):
            total += len(v)
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 1
        elif isinstance(v, (list, tuple, set, frozenset, KeysView, ValuesView)):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, (Mapping, ItemsView)):
            for k, x in v.items() if isinstance(v, Mapping) else v:
                stack.append((k, depth + 1))
                stack.append((x, depth + 1))
        elif isinstance(v, Namespace):  # its repr shows its attributes
            stack.append((object.__getattribute__(v, "_Namespace__attrs"), depth + 1))
        else:
            total += 64  # numbers, Undefined, macros, cyclers: short reprs
        if total > limit:
            return total
    return total


def _check_text(value: Any, what: str = "a string", indent: int = 0) -> None:
    b = _budget()
    _spend(text_size(value, b.out_chars, indent), what)


# ------------------------------------------------------------------------------------------ operators
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_widths(widths: list[str], args: Any) -> None:
    """Field widths and precisions of a ``%`` or ``str.format`` pattern: a width is an allocation."""
    cap = _budget().out_chars
    for w in widths:
        if w and w.isdigit() and (len(w) > 9 or int(w) > cap):
            raise TemplateLimit(f"a field width of {w[:12]} characters; the cap is {cap:,}")
    if "*" in widths or "{" in widths:  # widths taken from the arguments
        values = args.values() if isinstance(args, Mapping) else args if isinstance(args, tuple) else (args,)
        for a in values:
            if isinstance(a, int) and abs(a) > cap:
                raise TemplateLimit(f"a field width of {a:,} characters; the cap is {cap:,}")


def _check_percent(fmt: str, args: Any) -> None:
    widths = [w for m in _PERCENT.finditer(fmt) for w in m.groups() if w]
    _check_widths(widths, args)
    _spend(len(fmt) + text_size(args, _budget().out_chars))


def _check_format(fmt: str, args: tuple, kwargs: Mapping) -> None:
    widths: list[str] = []
    try:
        for _, _, spec, _ in string.Formatter().parse(fmt):
            if spec:
                widths += re.findall(r"\d+", spec) + (["{"] if "{" in spec else [])
    except ValueError:
        return  # str.format raises the same error itself
    _check_widths(widths, (*args, *kwargs.values()))
    _spend(len(fmt) + text_size((args, kwargs), _budget().out_chars))


def _sized(x: Any) -> int | None:
    return len(x) if isinstance(x, (str, bytes, list, tuple)) else None


def _check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be over the caps, before it is computed."""
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "*":
        if ints:
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateLimit(f"an integer of over {MAX_INT_BITS:,} bits")
            return
        for seq, n in ((left, right), (right, left)):
            if _sized(seq) is not None and isinstance(n, int):
                size = len(seq) * max(0, n)
                (_spend(size) if isinstance(seq, (str, bytes)) else _items(size))
    elif op == "**" and ints and right > 0 and abs(left) > 1:
        if right > MAX_INT_BITS or right * left.bit_length() > MAX_INT_BITS:
            raise TemplateLimit(f"an integer of over {MAX_INT_BITS:,} bits")
    elif op == "+" and _sized(left) is not None and _sized(right) is not None:
        size = len(left) + len(right)
        (_spend(size) if isinstance(left, (str, bytes)) else _items(size))
    elif op == "%" and isinstance(left, str):
        _check_percent(left, right)


# ------------------------------------------------------------------------------------ string methods
_PADDERS = {"ljust", "rjust", "center", "zfill", "expandtabs"}


def _check_method(obj: Any, args: tuple, kwargs: dict) -> None:
    """Pre-check the string methods that can build far more than they are given."""
    target = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format in a function
    owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
    if not isinstance(owner, str):
        return
    if name in _PADDERS:
        for a in (*args, *kwargs.values()):
            if isinstance(a, int):
                _spend(max(len(owner), a * (1 + owner.count("\t")) if name == "expandtabs" else a))
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        hits = len(owner) + 1 if not args[0] else owner.count(args[0])
        _spend(len(owner) + hits * len(args[1]))
    elif name == "join" and args:
        seq = args[0]
        n = len(seq) if hasattr(seq, "__len__") else 0
        _spend(text_size(seq, _budget().out_chars) + n * len(owner))
    elif name in ("format", "format_map"):
        _check_format(
            owner,
            args if name == "format" else (),
            kwargs if name == "format" else (args[0] if args and isinstance(args[0], Mapping) else {}),
        )
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        _spend(len(owner) * max(1, longest))


def _check_result(value: Any) -> Any:
    """Count what a call or filter built (its size was checked before when it could be large)."""
    if isinstance(value, (str, bytes)):
        _spend(len(value))
    elif isinstance(value, (list, tuple)):
        _items(len(value))
    return value


# ------------------------------------------------------------------------------------------- filters
def _guard_filters(filters: dict) -> dict:
    """Transformers' filters, each counting what it builds, the ones that multiply their input pre-checked."""
    out = {}
    for name, fn in filters.items():
        out[name] = _guarded(fn, _FILTER_CHECKS.get(name), materialize=name in _MATERIALIZE)
    return out


def _listed(value: Any) -> Any:
    """A generator as a list (same items, same order), so its size can be checked before joining: ``select``
    yields the same long string again and again without building anything the budget would see.

        >>> _listed(x for x in "ab"), _listed("ab")
        (['a', 'b'], 'ab')
    """
    if hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        return value
    items = []
    for item in value:
        _step()
        items.append(item)
    return items


def _guarded(fn: Callable, check: Callable | None, materialize: bool = False) -> Callable:
    from jinja2.utils import _PassArg

    passes = _PassArg.from_obj(fn) is not None  # context / eval context / environment comes first

    @functools.wraps(fn)  # keeps jinja_pass_arg, so Jinja passes the same arguments
    def wrapper(*args, **kwargs):
        _step()
        if materialize:
            at = 1 if passes else 0
            if len(args) > at:
                args = (*args[:at], _listed(args[at]), *args[at + 1 :])
        if check is not None:
            value_args = args[1:] if passes else args
            check(*value_args, **kwargs)
        return _check_result(fn(*args, **kwargs))

    return wrapper


def _width(w: Any) -> int:
    return len(w) if isinstance(w, str) else w if isinstance(w, int) else 0


def _chk_center(value: Any = "", width: Any = 80, *_, **__) -> None:
    _spend(max(len(str(value)) if isinstance(value, str) else 0, _width(width)))


def _chk_indent(s: Any = "", width: Any = 4, *_, **kw) -> None:
    w = _width(kw.get("width", width))
    if w > MAX_INDENT:
        raise TemplateLimit(f"an indent of {w:,}; the cap is {MAX_INDENT}")
    text = s if isinstance(s, str) else ""
    _spend(len(text) + (text.count("\n") + 1) * w)


def _chk_wordwrap(s: Any = "", width: Any = 79, break_long_words: Any = True, wrapstring: Any = None, *_, **kw) -> None:
    wrap, width = kw.get("wrapstring", wrapstring), kw.get("width", width)
    text = s if isinstance(s, str) else ""
    lines = len(text) // max(1, width if isinstance(width, int) else 1) + text.count("\n") + 1
    _spend(len(text) + lines * (len(wrap) if isinstance(wrap, str) else 1))


def _chk_replace(s: Any = "", old: Any = "", new: Any = "", *_, **__) -> None:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        hits = len(s) + 1 if not old else s.count(old)
        _spend(len(s) + hits * len(new))


def _chk_join(value: Any = (), d: Any = "", *_, **kw) -> None:
    sep = kw.get("d", d)
    n = len(value) if hasattr(value, "__len__") else 0
    _spend(text_size(value, _budget().out_chars) + n * (len(sep) if isinstance(sep, str) else 0))


def _chk_text(value: Any = None, *_, **__) -> None:
    _check_text(value)


def _chk_tojson(value: Any = None, *args, **kwargs) -> None:
    # transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    ascii_only = kwargs.get("ensure_ascii", args[0] if args else False)
    indent = kwargs.get("indent", args[1] if len(args) > 1 else None)
    separators = kwargs.get("separators", args[2] if len(args) > 2 else None)
    w = (
        _width(indent) + sum(len(x) for x in separators if isinstance(x, str))
        if isinstance(separators, (list, tuple))
        else _width(indent)
    )
    if w > MAX_INDENT:
        raise TemplateLimit(f"a tojson indent or separator of {excerpt_width(w)}; the cap is {MAX_INDENT}")
    size = text_size(value, _budget().out_chars, indent=w)
    _spend(size * (6 if ascii_only else 1), "JSON text")  # ensure_ascii writes \uXXXX for each other character


def excerpt_width(w: Any) -> str:
    return f"{w:,}" if isinstance(w, int) else f"{len(w):,} characters" if isinstance(w, str) else repr(w)[:20]


def _chk_format(value: Any = "", *args, **kwargs) -> None:
    if isinstance(value, str):
        _check_percent(value, kwargs or args)


def _chk_slice(value: Any = (), slices: Any = 1, *_, **__) -> None:
    if isinstance(slices, int):
        _items(slices)


def _chk_batch(value: Any = (), linecount: Any = 1, *_, **__) -> None:
    if isinstance(linecount, int) and linecount > MAX_ITEMS:
        _items(linecount)


def _chk_sum(value: Any = (), *_, **__) -> None:
    if isinstance(value, (list, tuple)):
        _spend(sum(len(x) for x in value if isinstance(x, (str, list, tuple))))


_MATERIALIZE = ("join", "sum")  # filters whose output grows with every item of a possibly lazy input
_FILTER_CHECKS: dict[str, Callable] = {
    "center": _chk_center,
    "indent": _chk_indent,
    "wordwrap": _chk_wordwrap,
    "replace": _chk_replace,
    "join": _chk_join,
    "string": _chk_text,
    "pprint": _chk_text,
    "tojson": _chk_tojson,
    "format": _chk_format,
    "slice": _chk_slice,
    "batch": _chk_batch,
    "sum": _chk_sum,
    "urlencode": _chk_text,
    "xmlattr": _chk_text,
}


def _lipsum(lipsum: Callable) -> Callable:
    """Jinja's ``lipsum(n=5, html=True, min=20, max=100)``, with ``n`` and ``max`` bounded (its text is random,
    so no template's real output can depend on it)."""

    def bounded(n: Any = 5, html: Any = True, min: Any = 20, max: Any = 100):  # noqa: A002 - Jinja's names
        for name, value, cap in (("n", n, MAX_LIPSUM), ("max", max, 10 * MAX_LIPSUM), ("min", min, 10 * MAX_LIPSUM)):
            if not isinstance(value, int) or value > cap:
                raise TemplateLimit(f"lipsum({name}={excerpt_width(value)}); the cap is {cap}")
        return _check_result(lipsum(n=n, html=html, min=min, max=max))

    return bounded


# ------------------------------------------------------------------------------------- the environment
@functools.lru_cache(maxsize=1)
def _environment_class() -> type:
    """An ``ImmutableSandboxedEnvironment`` whose hooks spend the render's budget."""
    from jinja2 import nodes
    from jinja2.runtime import markup_join, str_join
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import pass_context
    from markupsafe import Markup

    class LimitedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+", "%"])

        def call_binop(self, context, operator, left, right):
            _step()
            if operator == "+" and type(left) is str and type(right) is str:  # most of a chat template's operators
                _spend(len(left) + len(right))  # what _check_binop does for two strings, without its dispatch
                return left + right  # the sandbox's own "+" (binop_table: operator.add)
            _check_binop(operator, left, right)  # sizes checked and counted before: not counted again after
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
            _step()
            if (
                args
                and getattr(getattr(__obj, "__self__", None), "__class__", None) is str
                and getattr(__obj, "__name__", "") == "join"
            ):
                args = (_listed(args[0]), *args[1:])  # str.join of a generator: sized first, then checked
            _check_method(__obj, args, kwargs)
            return _check_result(super().call(__context, __obj, *args, **kwargs))

        def getattr(self, obj, attribute):
            _step()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            _step()
            return super().getitem(obj, argument)

        def _parse(self, source, name, filename):
            # Every {% for %} iterates through loop_guard, and every `~` goes through concat_guard: neither
            # passes through any sandbox hook otherwise, and a loop over a precomputed list runs with none
            tree = super()._parse(source, name, filename)
            for node in tree.find_all(nodes.For):
                node.iter = nodes.Filter(node.iter, "advisor_loop_guard", [], [], None, None, lineno=node.lineno)
            # Literal text becomes an expression, so finalize counts it too: inside {% set %}...{% endset %}, a
            # macro or a filter block, output is collected in memory, where the stream's cap never sees it
            for node in list(tree.find_all(nodes.Output)):
                node.nodes = [
                    nodes.Filter(
                        nodes.Const(n.data, lineno=n.lineno), "advisor_literal", [], [], None, None, lineno=n.lineno
                    )
                    if isinstance(n, nodes.TemplateData)
                    else n
                    for n in node.nodes
                ]
            for node in list(tree.find_all(nodes.Concat)):
                node.nodes = [
                    nodes.Filter(
                        nodes.List(node.nodes, lineno=node.lineno),
                        "advisor_concat_guard",
                        [],
                        [],
                        None,
                        None,
                        lineno=node.lineno,
                    )
                ]
            return tree

        @staticmethod
        @pass_context
        def loop_guard(context, iterable):
            for item in iterable:
                _step()
                yield item

        @staticmethod
        @pass_context
        def concat_guard(context, parts):
            _spend(sum(text_size(p, _budget().out_chars) for p in parts))
            # the join Jinja's Concat node compiles to (compiler.py visit_Concat), so the text is the same
            return (markup_join if context.eval_ctx.autoescape else str_join)(parts)

        @staticmethod
        @pass_context
        def literal(context, data):
            # template data is never escaped, even under {% autoescape true %} (compiler.py visit_Output)
            return Markup(data) if context.eval_ctx.autoescape else data

    return LimitedEnvironment


caches.listed("template sandbox class", _environment_class)


@functools.lru_cache(maxsize=1)
def _environment():
    """Our environment, configured from the one transformers builds (trim_blocks, lstrip_blocks, its
    extensions: the ``{% generation %}`` AssistantTracker and loopcontrols; its ``tojson`` filter,
    ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace``): taken from
    ``transformers/utils/chat_template_utils.py`` ``_compile_jinja_template`` itself, so they cannot drift."""
    env = _like_transformers(_environment_class())
    env.filters["advisor_loop_guard"] = env.loop_guard
    env.filters["advisor_concat_guard"] = env.concat_guard
    env.filters["advisor_literal"] = env.literal
    return env


caches.listed("template sandbox environment", _environment)


def _finalize(value: Any) -> Any:
    """Every ``{{ }}`` and every piece of literal text: ``str(value)`` of a list holding a million references to
    one long string is a huge string built at once, so its size is checked first, and every piece is counted
    against the render's allowance (the value itself is returned unchanged)."""
    if isinstance(value, str):
        _spend(len(value))  # counted even where the stream's cap does not look: block sets, macros, filter blocks
    else:
        _check_text(value)
    return value


@functools.lru_cache(maxsize=1)
def _plain_environment():
    """transformers' own environment (``_compile_jinja_template``'s class, options, extensions and globals), with
    the box's guarded filters and ``finalize`` but none of its per-operation hooks: for ``template_plain``'s
    templates."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _like_transformers(type(_compile_jinja_template("").environment))


def _like_transformers(cls: type):
    """An environment of class ``cls`` configured as transformers configures its own (options, extensions,
    globals), with the guarded filters, a bounded ``lipsum`` and ``_finalize``: shared by the box and the plain
    path, so the two cannot drift apart."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    theirs = _compile_jinja_template("").environment
    env = cls(
        trim_blocks=theirs.trim_blocks,
        lstrip_blocks=theirs.lstrip_blocks,
        extensions=[type(e) for e in theirs.extensions.values()],
    )
    env.filters.update(_guard_filters(dict(theirs.filters)))
    env.globals.update(theirs.globals)
    env.globals["lipsum"] = _lipsum(theirs.globals["lipsum"])
    env.finalize = _finalize
    return env


caches.listed("plain template environment", _plain_environment)


@functools.lru_cache(maxsize=16)
def compile_plain(source: str):
    """A ``template_plain`` template compiled in ``_plain_environment`` (cached like ``compile_template``)."""
    return _plain_environment().from_string(source)


caches.listed("plain compiled chat templates", compile_plain)


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    """The compiled template (cached: a data set renders one template many times).

    >>> compile_template("x" * (MAX_TEMPLATE_CHARS + 1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor...TemplateLimit: the chat template exceeded its limits (its source has 524,289 characters; the cap ...)
    """
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateLimit(f"its source has {len(source):,} characters; the cap is {MAX_TEMPLATE_CHARS:,}")
    return _environment().from_string(source)


caches.listed("chat templates compiled", compile_template)


# ------------------------------------------------------------------------------------------- rendering
def select_template(own: str | Mapping[str, str] | None, given: str | None, tools: Any) -> str:
    """The template ``apply_chat_template`` uses (``get_chat_template`` in transformers/tokenization_utils_base.py):
    with named templates, ``given`` may name one, else ``tool_use`` when there are tools, else ``default``.

        >>> select_template({"default": "D", "tool_use": "T"}, None, [{"name": "f"}]), select_template("A", "B", None)
        ('T', 'B')
        >>> select_template({"rag": "R"}, None, None)
        Traceback (most recent call last):
        ...
        ValueError: the tokenizer has several chat templates and none is named 'default' (names: rag); pass one
    """
    if isinstance(own, Mapping):
        if given is not None:
            return own.get(given, given)  # a name of one of them, else the template itself
        if tools is not None and "tool_use" in own:
            return own["tool_use"]
        if "default" in own:
            return own["default"]
        names = ", ".join(sorted(map(str, own)))
        raise ValueError(
            f"the tokenizer has several chat templates and none is named 'default' (names: {names}); pass one"
        )
    if given is not None:
        return given
    if own is None:
        raise ValueError("the tokenizer has no chat template")
    return own


def render_chat(
    template: str,
    messages: list,
    *,
    tools: Any = None,
    documents: Any = None,
    special_tokens: Mapping[str, str] | None = None,
    add_generation_prompt: bool = False,
    seconds: float | None = None,
) -> str:
    """The text ``apply_chat_template(messages, tools=tools, tokenize=False)`` renders, within the limits.

    Mirrors transformers 5's ``apply_chat_template`` (tokenization_utils_base.py) and ``render_jinja_template``
    (utils/chat_template_utils.py): an empty conversation is refused, keys whose value is None are dropped, tools
    must be JSON-schema dicts, every input is rebuilt from plain JSON types, reasoning fields are aliased, and the
    special tokens map is passed as variables. ``seconds``: the deadline (default ``RENDER_SECONDS`` plus
    ``SECONDS_PER_MB`` per MB of the record). Raises ``TemplateLimit`` over a limit, the template's own errors as
    transformers would.
    """
    prepared = _prepared(messages, tools, documents, special_tokens)
    return _render(template, prepared, prepared[0], add_generation_prompt, seconds)


def render_prefixes(
    template: str,
    messages: list,
    counts,
    *,
    tools: Any = None,
    special_tokens: Mapping[str, str] | None = None,
    seconds: float | None = None,
    track: list | None = None,
    keep: list | None = None,
    emptied_last: tuple | None = None,
) -> dict[int, str]:
    """``render_chat`` of ``messages[:m]`` for each m in ``counts`` (each at least 1), sharing the preparation of
    the inputs (rebuilt from plain JSON types and measured once, for the whole conversation: each prefix's budget
    is the whole conversation's, at least its own). Each render has its own deadline and limits.

        >>> render_prefixes("{% for m in messages %}{{ m.content }};{% endfor %}",
        ...                 [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], [1, 2])
        {1: 'a;', 2: 'a;b;'}

    ``track``: a list that receives the (start, end) characters of every ``{% generation %}`` block of the whole
    conversation's render, as transformers' ``AssistantTracker`` records them (``return_assistant_tokens_mask``).

        >>> spans = []
        >>> render_prefixes("{% for m in messages %}{{ m.role }}:{% generation %}{{ m.content }}{% endgeneration %};"
        ...                 "{% endfor %}", [{"role": "user", "content": "ab"}], [1], track=spans), spans
        ({1: 'user:ab;'}, [(5, 7)])

    ``keep``: a list that receives the prepared inputs; ``emptied_last``: inputs ``keep`` received for this
    conversation with its last message's content emptied, prepared anew for that message only (Bridge's render
    to find the last reply's start, ``chat_tokens._terminal_probe``; measured as the whole conversation).
    """
    if emptied_last is not None:
        prepared = _with_emptied_last(emptied_last, messages[-1])
    else:
        prepared = _prepared(messages, tools, None, special_tokens)
    if keep is not None:
        keep.append(prepared)
    whole = len(messages)

    def tracked(m: int):
        return track if m == whole else None

    if threading.current_thread() is not threading.main_thread():
        return {m: _render(template, prepared, prepared[0][:m], False, seconds, track=tracked(m)) for m in counts}
    # one alarm for the record's renders, for all their time (arming and disarming a timer is two system calls a
    # render, a tenth of a small one); each render still has its own budget and deadline, kept by the hooks
    each = Budget.for_input(prepared[4], seconds).seconds
    with _running(Budget.for_input(prepared[4], each * len(counts))):
        if track is None and len(counts) > 1 and prefix_stable(template):
            return _prefixes_of_whole(template, prepared, counts, seconds)
        return {
            m: _render(template, prepared, prepared[0][:m], False, seconds, alarm=False, track=tracked(m))
            for m in counts
        }


class _Marked(list):
    """``messages`` for a ``prefix_stable`` render: notes how much text was out when each message's turn began
    (``starts``: index in the whole conversation -> characters), through ``messages[1:]`` too."""

    __slots__ = ("offset", "starts", "out")
    offset: int
    starts: dict[int, int]
    out: list[int]

    def __getitem__(self, key):
        got = list.__getitem__(self, key)
        if not isinstance(key, slice):
            return got
        cut = _Marked(got)
        cut.offset, cut.starts, cut.out = self.offset + key.indices(len(self))[0], self.starts, self.out
        return cut

    def __iter__(self):
        for k, item in enumerate(list.__iter__(self)):
            self.starts.setdefault(self.offset + k, self.out[0])
            yield item


def _prefixes_of_whole(template: str, prepared: tuple, counts, seconds: float | None) -> dict[int, str]:
    """``render_prefixes`` for a ``prefix_stable`` template, under the caller's alarm: the whole conversation is
    rendered once, each prefix is its text up to where the next message's turn began (rendered on its own where
    no turn began, which the template's shape rules out)."""
    whole = max(counts)  # the longest prefix asked for: a later message's error is not this call's
    chat = _Marked(prepared[0][:whole])
    chat.offset, chat.starts, chat.out = 0, {}, [0]
    budget = Budget.for_input(prepared[4], seconds)
    pieces: list[str] = []
    with _budgeted(budget):
        _stream(
            compile_plain(template).generate(
                messages=chat, tools=prepared[1], documents=prepared[2], add_generation_prompt=False, **prepared[3]
            ),
            pieces,
            budget,
            out=chat.out,
        )
    text = "".join(pieces)
    return {
        m: text
        if m == whole
        else text[: chat.starts[m]]
        if m in chat.starts
        else _render(template, prepared, prepared[0][:m], False, seconds, alarm=False)
        for m in counts
    }


def _prepared(messages: list, tools: Any, documents: Any, special_tokens: Mapping[str, str] | None) -> tuple:
    """The inputs as transformers' ``apply_chat_template`` prepares them: (chat, tools, documents, variables,
    size of them all)."""
    from transformers.utils import chat_template_utils as ctu

    if len(messages) == 0:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    chat = [{k: v for k, v in msg.items() if v is not None} for msg in messages]
    if tools is not None:
        for tool in tools:
            if not isinstance(tool, dict):
                raise ValueError(
                    "Tools should either be a JSON schema, or a callable function with type hints "
                    "and a docstring suitable for auto-conversion to a schema."
                )
        tools = list(tools)
    if documents is not None:
        for document in documents:
            if not isinstance(document, dict):
                raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    plain = ctu._plain_template_data
    kwargs = plain(dict(special_tokens or {}))
    chat = ctu._alias_reasoning_fields(plain(chat))
    tools, documents = plain(tools), plain(documents)
    return chat, tools, documents, kwargs, text_size((chat, tools, documents), MAX_OUT_CHARS)


def _with_emptied_last(prepared: tuple, last: dict) -> tuple:
    """``prepared`` with its last message replaced by ``last`` with content "", prepared as ``_prepared`` prepares
    each message (None values dropped, plain JSON types, reasoning aliases), so its keys keep their order."""
    from transformers.utils import chat_template_utils as ctu

    message = {k: v for k, v in last.items() if v is not None or k == "content"}
    message["content"] = ""
    chat = prepared[0][:-1] + ctu._alias_reasoning_fields(ctu._plain_template_data([message]))
    return (chat, *prepared[1:])


def _render(
    template: str,
    prepared: tuple,
    chat: list,
    add_generation_prompt: bool,
    seconds: float | None,
    alarm: bool = True,
    track: list | None = None,
) -> str:
    """One render in its budget; ``alarm=False``: under an alarm the caller armed (``render_prefixes``);
    ``track``: receives the generation blocks' character spans (``render_prefixes``)."""
    _, tools, documents, kwargs, size = prepared
    if len(chat) == 0:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    budget = Budget.for_input(size, seconds)
    if track is None and _alarmed() and plain_ok(template):
        # a template that cannot blow up renders in transformers' own environment with the guarded filters and
        # finalize: the deadline's timer, the output cap and the filters' allowance are its limits
        # (template_plain); the per-operation hooks below would double its time
        pieces: list[str] = []
        with _running(budget) if alarm else _budgeted(budget):
            _stream(
                compile_plain(template).generate(
                    messages=chat,
                    tools=tools,
                    documents=documents,
                    add_generation_prompt=add_generation_prompt,
                    **kwargs,
                ),
                pieces,
                budget,
            )
        return "".join(pieces)
    with _running(budget) if alarm else _budgeted(budget):
        compiled = compile_template(template)
        pieces = []
        # transformers' _render_with_assistant_indices: the tracker measures the pieces yielded so far, so they
        # are appended to the very list it holds before the stream goes on. Its state lives on the environment
        # all renders share: one tracked render at a time
        # any render of a template with generation blocks takes the lock: an untracked one would otherwise add its
        # spans to a tracked render's list (or find the tracker switched off mid-block)
        with _TRACKING if track is not None or _has_generation(template) else contextlib.nullcontext():
            tracker = (
                compiled.environment.activate_tracker(pieces, track) if track is not None else contextlib.nullcontext()
            )
            with tracker:
                _stream(
                    compiled.generate(
                        messages=chat,
                        tools=tools,
                        documents=documents,
                        add_generation_prompt=add_generation_prompt,
                        **kwargs,
                    ),
                    pieces,
                    budget,
                )
    return "".join(pieces)


_TRACKING = threading.RLock()


def _alarmed() -> bool:
    """Whether renders here run under a ``SIGALRM`` deadline (``_running``): the main thread, where timers exist."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@functools.lru_cache(maxsize=16)
def _has_generation(template: str) -> bool:
    return re.search(r"\{%-?\s*generation\s*-?%\}", template) is not None


caches.listed("chat templates with generation blocks", _has_generation)


def _stream(stream, pieces: list, budget: Budget, out: list | None = None) -> None:
    """The stream's pieces into ``pieces``, cut off past the budget's output cap; ``out[0]``: the characters so
    far, kept up to date for ``_Marked``."""
    size = 0
    try:
        for piece in stream:
            size += len(piece)
            if size > budget.out_chars:
                raise TemplateLimit(f"output over {budget.out_chars:,} characters")
            pieces.append(piece)
            if out is not None:
                out[0] = size
    except TemplateLimit:
        raise
    except Exception as e:
        # Jinja rewrites a template's traceback on the way out, and that can fail itself on a frame the alarm
        # interrupted between lines (TypeError in get_corresponding_lineno): the limit is what happened
        limit = _limit_behind(e)
        if limit is None:
            raise
        raise limit from None
    finally:
        stream.close()


def _limit_behind(error: BaseException) -> TemplateLimit | None:
    """The ``TemplateLimit`` an error was raised while handling, if any."""
    seen = error.__context__
    for _ in range(8):
        if seen is None or isinstance(seen, TemplateLimit):
            return seen
        seen = seen.__context__
    return None


class _budgeted:
    """``budget`` for this thread's hooks, the one before put back after (no alarm: see ``_running``)."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.outer = None

    def __enter__(self):
        self.outer = getattr(_STATE, "budget", None)
        _STATE.budget = self.budget
        return self

    def __exit__(self, *exc):
        _STATE.budget = self.outer
        return False


class _running:
    """Installs ``budget`` for this thread and, on the main thread, a ``SIGALRM`` timer that marks the budget
    expired at the deadline, so the next hook raises ``TemplateLimit``; where no hook runs for a whole 50 ms repeat
    after that (a loop no hook sees), the alarm raises it itself. A timer someone else set (pytest-timeout, a
    caller's own alarm) is put back afterwards with its remaining time, or left alone when it is due before ours.
    Another thread cannot take signals: there the hooks alone keep time."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.old_handler = None
        self.old_timer = (0.0, 0.0)
        self.armed = False
        self.started = 0.0
        self.steps_at_ring = budget.steps
        self.rung: Budget | None = None  # the budget the last ring found the hooks spending
        self.quiet = 0  # rings in a row with no hook run on it

    def __enter__(self):
        _STATE.budget = self.budget
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self.old_timer = signal.getitimer(signal.ITIMER_REAL)
            if self.old_timer[0] == 0 or self.old_timer[0] > self.budget.seconds:
                self.started = time.monotonic()
                self.old_handler = signal.signal(signal.SIGALRM, self._alarm)
                self.armed = True
                signal.setitimer(signal.ITIMER_REAL, max(1e-3, self.budget.seconds), 0.05)
        return self

    def _alarm(self, signum, frame):
        # never inside __exit__: an exception there would leave this handler and its 50 ms repeat installed, to
        # fire in whatever code runs next (it did, at interpreter shutdown)
        if not self.armed or frame is None or frame.f_code in _OWN_CODE:
            return
        # the budget the hooks spend now: a record's prefix renders each run on their own (``_budgeted``) under
        # the one alarm of the record's outer budget
        budget = getattr(_STATE, "budget", None) or self.budget
        if budget is not self.rung:  # another render began since the last ring: its hooks have run
            self.rung, self.quiet = budget, 0
        elif budget.steps == self.steps_at_ring:
            self.quiet += 1  # a whole repeat and no hook ran
        else:
            self.quiet = 0
        self.steps_at_ring = budget.steps
        if not budget.expired:
            # First ring: the next hook raises it in the template's own flow, never inside a finalizer
            budget.expired = self.budget.expired = True
            return
        # A hook raised it and the render is unwinding (no hooks run then): raised again here it could land in a
        # generator the unwinding closes, where Python only prints "Exception ignored" (and a test runner's hook
        # for those, slow on a deep template's traceback, failed when the next alarm rang inside it). Unless
        # that raise was swallowed and a loop no hook sees runs on: a second of rings with no hook
        if self.quiet >= (QUIET_RINGS if budget.told else 1):
            raise TemplateLimit(f"over {budget.seconds:g} s", costly=True)

    def __exit__(self, *exc):
        try:
            if self.old_handler is not None:
                self.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, self.old_handler)
                if self.old_timer[0] > 0:  # the caller's timer, less the time spent here
                    left = max(1e-3, self.old_timer[0] - (time.monotonic() - self.started))
                    signal.setitimer(signal.ITIMER_REAL, left, self.old_timer[1])
        finally:
            _STATE.budget = None
        return False


_OWN_CODE = (_running.__enter__.__code__, _running.__exit__.__code__)
