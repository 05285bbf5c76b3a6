"""The sizes the advisor accepts, in one place below every layer, and the JSON depth scan that enforces one of them
for data files and plans alike (numpy is imported only inside the scan: the command line reads the limits while it
builds its parser, before anything heavy is loaded).

>>> MAX_PACK < MAX_TOKENS
True
"""

MAX_TOKENS = 1 << 24  # 16M tokens: longer than any context Megatron trains today, small enough to never overflow
MAX_PACK = 1 << 22  # offline packing keeps arrays of pack-size length: 4M-token packs stay well inside 2 GiB
MAX_GPUS = 1 << 17
MAX_JSON_DEPTH = 64  # a lengths file needs 3; Python's json module recurses once a level
_SCAN_CHUNK = 1 << 20


def json_too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    r"""True when ``[`` and ``{`` outside strings nest deeper than ``limit``, found without recursion, so the
    check itself cannot be what overflows: numpy passes over 1 MiB chunks, tracking string state (quotes not
    escaped by an odd run of backslashes) and depth across chunk edges. A few MiB of temporaries whatever the
    file's size.

    >>> json_too_deep(b'[{"a": "[[[[ \\\\"}, [1]]', 2), json_too_deep(b"[" * 100 + b"]" * 100)
    (False, True)
    >>> json_too_deep(b'["\\"[[[[[", 1]', 1)
    False
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # not even that many openers: no scan needed (the common case, and a cheap one)
    import numpy as np  # only when there are that many brackets: the command line starts without it

    depth = 0  # carried across chunks
    for a, outside in _unquoted(data):
        at = np.flatnonzero(((a == 91) | (a == 123) | (a == 93) | (a == 125)) & outside)
        if at.size:
            running = depth + np.cumsum(np.where((a[at] == 91) | (a[at] == 123), 1, -1), dtype=np.int64)
            if running.max() > limit:
                return True
            depth = int(running[-1])
    return False


def _unquoted(data: bytes):
    """Each 1 MiB chunk of ``data`` as uint8, with the mask of its bytes outside JSON strings (quotes not escaped
    by an odd run of backslashes flip the state, carried across chunk edges): the scans count brackets and commas
    only where they are JSON, never inside text."""
    import numpy as np

    escapes = b"\\" in data
    in_string, run = False, 0  # carried across chunks: inside a string, trailing backslashes
    for start in range(0, len(data), _SCAN_CHUNK):
        a = np.frombuffer(data, np.uint8, min(_SCAN_CHUNK, len(data) - start), start)
        quote = a == 34
        if escapes:
            escaped, run = _escaped(a == 92, run)
            quote &= ~escaped
        flips = np.cumsum(quote, dtype=np.int64)
        yield a, ~((flips - quote + in_string) & 1).astype(bool)  # string state just before each byte
        in_string = bool((int(flips[-1]) + in_string) & 1)


def _escaped(backslash, carried: int):
    """Which bytes follow an odd run of backslashes (so a quote there is text), and the run at the chunk's end."""
    import numpy as np

    idx = np.arange(backslash.size)
    last_other = np.maximum.accumulate(np.where(backslash, -1, idx))
    run = idx - last_other + np.where(last_other < 0, carried, 0)  # backslashes ending at each byte
    escaped = np.empty(backslash.size, bool)
    escaped[0] = carried % 2 == 1
    escaped[1:] = run[:-1] % 2 == 1
    return escaped, int(run[-1])


MAX_RECORD_BYTES = 4 << 20  # one raw record's text (a JSON line, a Parquet row): ~1M tokens of ordinary text, and
# encoding it takes the tokenizer up to ~170 bytes a byte of text (a 4 MB record of one-letter words: 0.7 GB)
MAX_BATCH_BYTES = 4 << 20  # raw text handed to the tokenizer at once (16 MB of one-letter words blew 2 GiB)
MAX_EXPANSION = 1100  # decoded bytes per stored byte past which a raw file is a bomb: gzip's format caps at 1032
MAX_STREAM_EXPANSION = 250  # ... of a gzip/zstd JSONL file: real ones compress 3-20x; past 250x it is one line
# repeated, or a bomb (a 3.5 MB gzip of one 3.5 GB line: read to 1100x, it held a core for a minute)
MIN_BOMB_BYTES = 64 << 20  # ... and only when that is this much: tiny files of repeated values are fine
MAX_ELEMENTS = 1_000_000  # values in one raw record (JSON strings, numbers, lists, objects): a chat has hundreds


def json_elements_over(data: bytes, limit: int = MAX_ELEMENTS) -> bool:
    r"""True when ``data`` (one JSON value) holds more than ``limit`` values, counted before parsing as the
    commas, ``[`` and ``{`` outside strings (plus one): ``json.loads`` of a 64 MB line of ``[[],[],...]`` would
    build 20 million lists (1.4 GB). The cheap count of all such bytes decides first; strings are told apart only
    when it is over.

    >>> json_elements_over(b'[1, 2, 3]', 4), json_elements_over(b'["a,b,c,d"]', 4), json_elements_over(b'[1,2,3,4]', 4)
    (False, False, True)
    """
    if data.count(b",") + data.count(b"[") + data.count(b"{") + 1 <= limit:
        return False

    count = 1
    for a, outside in _unquoted(data):
        count += int((((a == 44) | (a == 91) | (a == 123)) & outside).sum())
        if count > limit:
            return True
    return False
