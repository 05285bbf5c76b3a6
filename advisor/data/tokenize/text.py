"""The one text decoder every raw record passes through, whatever file it came from (JSONL, Parquet, Arrow).

Why one: a record's text reaches the Rust tokenizer as UTF-8, and two kinds of value cannot be encoded: a JSON
string holding a lone surrogate (``"\\ud800"`` is valid JSON, but no UTF-8 text) and, from Parquet or Arrow binary
columns, bytes that are not UTF-8. Each used to fail late, inside the tokenizer, as a traceback for the whole
batch; here each makes its own record a bad record with one message, counted under ``--on-bad skip``.

>>> clean_record({"input": "a", "output": b"b"})
({'input': 'a', 'output': 'b'}, None)
>>> clean_record({"input": "\\ud800"})[1]
'holds a lone surrogate (\\\\ud800) in input: not UTF-8 text'
"""

from __future__ import annotations

import re
from typing import Any

from advisor.errors import excerpt

# a JSON escape of a UTF-16 surrogate (half of a pair, or alone): only lines holding one can decode to a lone
# surrogate, so only those lines' records are walked (a valid pair decodes to one character and passes)
SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_ELEMENTS = 1_000_000  # values in one record (strings, numbers, lists, objects): a chat is a few hundred


class TextProblem(ValueError):
    """A value of a record that is not text the tokenizer can take; the message says which and where."""


def decode_text(value: bytes | bytearray | memoryview | str, path: str = "value") -> str:
    """``value`` as a str fit for UTF-8: bytes decoded strictly, a str checked for lone surrogates.

    >>> decode_text(b"caf\\xc3\\xa9"), decode_text("ok")
    ('café', 'ok')
    >>> try:
    ...     decode_text(b"\\xff", "input")
    ... except TextProblem as e:
    ...     print(e)
    is not UTF-8 text in input (byte 0 of the value: 0xff)
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TextProblem(
                f"is not UTF-8 text in {path} (byte {e.start} of the value: "
                f"0x{bytes(value)[e.start : e.start + 1].hex()})"
            ) from None
    m = _SURROGATE.search(value)
    if m is not None:
        raise TextProblem(f"holds a lone surrogate (\\u{ord(m.group()):04x}) in {path}: not UTF-8 text")
    return value


def clean_record(record: dict, check_strings: bool = True) -> tuple[dict | None, str | None]:
    """(the record with every bytes value decoded, None) or (None, why it is bad). ``check_strings=False`` skips
    the surrogate search in str values (a line with no surrogate escape, or an Arrow string, cannot hold one).

    Iterative, so no record nests deep enough to overflow it (JSON lines are depth-checked before parsing anyway).

    >>> clean_record({"messages": [{"content": b"\\xc3"}]})
    (None, 'is not UTF-8 text in messages[0].content (byte 0 of the value: 0xc3)')
    """
    try:
        return _walk(record, check_strings), None
    except TextProblem as e:
        return None, str(e)


def _walk(record: dict, check_strings: bool) -> dict:
    root = {"": record}
    stack: list[tuple[dict | list, Any, str]] = [(root, "", "")]  # Any: a dict's key, or a list's index
    seen = 0
    while stack:
        parent, key, path = stack.pop()
        value = parent[key]
        seen += 1
        if seen > MAX_ELEMENTS:
            raise TextProblem(f"holds over {MAX_ELEMENTS:,} values: far more than any chat or prompt")
        if isinstance(value, (bytes, bytearray, memoryview)) or (check_strings and isinstance(value, str)):
            parent[key] = decode_text(value, path or "the record")
        elif isinstance(value, dict):
            for k in reversed(list(value)):  # reversed: the first problem in reading order is the one named
                if isinstance(k, str) and check_strings:
                    decode_text(k, f"a key of {path or 'the record'}")
                stack.append((value, k, f"{path}.{_key(k)}" if path else _key(k)))
        elif isinstance(value, list):
            stack.extend((value, i, f"{path}[{i}]") for i in range(len(value) - 1, -1, -1))
    return root[""]


def _key(k) -> str:
    """A key for a message: short and printable (a key is the user's text too)."""
    return k if isinstance(k, str) and len(k) <= 40 and k.isprintable() and not _SURROGATE.search(k) else excerpt(k, 40)
