"""What a preparation takes: ``advisor prepare``'s and Megatron-Bridge's own preparation's peak host memory and disk
for a data set, modelled from its records and tokens (the model and its coefficients: advisor/model/preparation.py,
below the advice layer so the pre-flight trap mb-6125 reads it too; fitted by ``python bench/bench_prepare_memory.py``,
2026-11-28), and the note ``prepare`` prints before it starts, where the input's size is cheap to know.

>>> r = preparation_resources(200_000, 165_000_000, 8192)
>>> round(r.mb_memory / 2**30, 1), round(r.advisor_memory / 2**30, 2), round(r.mb_memory / r.advisor_memory)
(19.4, 0.48, 40)
"""

from __future__ import annotations

import os

from advisor.model.preparation import PreparationResources, preparation_resources

# Raw data whose size is counted before a run: plain JSONL of at most this many bytes in all, its lines counted
# (a memchr scan, ~0.1-0.3 s a GiB from the page cache, which the tokenizer's own scan then reads warm). Compressed
# JSONL, Parquet and Arrow are left out (decompressing or footers: not cheap, or not the record count of the lines).
CHEAP_BYTES = 1 << 30
# the tokens are estimated from the bytes (tokenizing is the run itself): ~4 bytes of JSONL a token, English text
# with a 32k-256k vocabulary (the bench's made-up words on tiny-bpe: ~2.4); a note, not a measurement
BYTES_PER_TOKEN = 4.0
_READ = 8 << 20


def input_size(data: str) -> tuple[int, int] | None:
    """(records, tokens) of raw data known cheaply, the tokens estimated from its bytes; None where not cheap (or
    not readable: the run itself reports that).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.jsonl").write_text('{"input": "x", "output": "y"}\\n' * 10)
    >>> input_size(str(d / "a.jsonl")), input_size(str(d / "missing.jsonl"))
    ((10, 75), None)
    """
    from advisor.data.tokenize.records import data_files_and_notes

    try:
        files, _ = data_files_and_notes(data)
        if not files or not all(f.lower().endswith((".jsonl", ".json")) for f in files):
            return None
        total = sum(os.path.getsize(f) for f in files)
        if total > CHEAP_BYTES:
            return None
        records = 0
        for path in files:
            with open(path, "rb") as f:
                last = b"\n"
                while chunk := f.read(_READ):
                    records += chunk.count(b"\n")
                    last = chunk[-1:]
                records += last != b"\n"  # a last line without its newline
    except (OSError, ValueError):  # InputError is a ValueError
        return None
    return records, round(total / BYTES_PER_TOKEN)


def _size(n: float) -> str:
    """
    >>> _size(3 * 2**30), _size(5 * 2**20), _size(3000)
    ('3.0 GiB', '5 MiB', '3 KiB')
    """
    if n >= 2**30 / 10:
        return f"{n / 2**30:,.1f} GiB"
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{max(1, round(n / 2**10))} KiB"


def resources_note(data: str, pack_size: int, workers: int = 1) -> str | None:
    """The note ``prepare`` prints before it starts: its modelled peaks and Megatron-Bridge's for this input, or None
    where its size is not cheap to know.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.jsonl").write_text('{"input": "x", "output": "y"}\\n' * 10)
    >>> resources_note(str(d / "a.jsonl"), 4096)[:62]
    '10 records, ~75 tokens (from the bytes, ~4 a token): prepare i'
    """
    size = input_size(data)
    if not size or not size[0]:
        return None
    records, tokens = size
    r = preparation_resources(records, tokens, pack_size, workers=workers)
    return (
        f"{records:,} records, ~{tokens:,} tokens (from the bytes, ~{BYTES_PER_TOKEN:.0f} a token): prepare is "
        f"modelled at a peak of {_size(r.advisor_memory)} of host memory and {_size(r.advisor_disk)} of disk "
        f"({workers} worker{'s' if workers > 1 else ''}); Megatron-Bridge's own preparation at {_size(r.mb_memory)} "
        f"and {_size(r.mb_disk)} "
        "(docs/limits.md, Preparation memory)"
    )


__all__ = ["PreparationResources", "input_size", "preparation_resources", "resources_note"]
