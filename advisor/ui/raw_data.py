"""The home page's "from raw data": an uploaded JSONL or Parquet file tokenized on the server with a tokenizer the
operator installed, then used like any lengths upload.

Alternatives: a tokenizer path typed in the browser (a visitor could make the server read any folder) or no raw
data in the dashboard (the command line only). Here: the browser picks a tokenizer by name among the folders the
operator listed in ``ADVISOR_TOKENIZER_DIRS`` (and the bundled sample tokenizer); uploads are written to a fresh
temporary folder under a fixed name, checked before any parser sees them, and tokenized within a budget.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from advisor.data.guard import open_parquet
from advisor.data.lengths import check_expandable
from advisor.errors import InputError
from advisor.vocabulary import DataFormat

BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "tokenizers"
ENV = "ADVISOR_TOKENIZER_DIRS"  # os.pathsep-separated folders: tokenizer folders, or folders of them
RAW_UPLOAD_LIMIT_MB = 64
MAX_RAW_RECORDS = 200_000  # a dashboard visitor's tokenization budget (the command line has none)
# Loss masks are read up to this many records: building them takes about twice the time of lengths alone (chat:
# the assistant turns' spans), and 200,000 chats with masks would pass the child's 120 CPU seconds
MAX_MASKED_RECORDS = 50_000
RAW_SUFFIXES = (".jsonl", ".parquet")
MAX_RECORD_MB = 4  # one JSON line or Parquet row's text: a chat of 4 MB is already far past any context
MAX_BATCH_MB = 4  # text handed to the tokenizer at once (it keeps ~60 bytes a token while encoding)
# the upload's formats: each is Megatron-Bridge's dataset with its settings (``settings_of``), and the plan's
# data.format (chat samples longer than the pack are skipped by offline packing, SFT ones cut)
FORMATS: dict[str, DataFormat] = {
    "sft": "sft",
    "sft, prompt-completion": "sft",
    "chat": "chat",
    "chat, legacy <extra_id_*>": "chat",
}


def settings_of(choice: str, max_seq_length: int):
    """The tokenize settings of an upload format (``FORMATS``); Megatron-Bridge's defaults otherwise.

    >>> pc = settings_of("sft, prompt-completion", 512).prompt_completion
    >>> type(settings_of("chat", 1024)).__name__, pc.prompt_column, pc.completion_column
    ('ChatSettings', 'prompt', 'completion')
    """
    from advisor.data.tokenize.chat import ChatSettings
    from advisor.data.tokenize.sft import PromptCompletion, SftSettings

    if choice not in FORMATS:
        raise InputError("Format", None, f"must be one of {', '.join(map(repr, FORMATS))}, not {str(choice)[:60]!r}")
    if FORMATS[choice] == "chat":
        return ChatSettings(use_hf_tokenizer_chat_template=choice == "chat")
    pc = PromptCompletion() if choice == "sft, prompt-completion" else None
    return SftSettings(max_seq_length=max_seq_length, prompt_completion=pc)


MAX_DECODED_MB = 4 * RAW_UPLOAD_LIMIT_MB  # all of an upload's values decoded: a JSONL upload's text is its size
MAX_ROW_GROUPS = 2_000  # an upload of 200,000 records needs no more; each one costs a footer entry and a read


def tokenizer_choices(env: str | None = None) -> dict[str, str]:
    """Tokenizer name -> server folder: the bundled sample tokenizer and the operator's (``ADVISOR_TOKENIZER_DIRS``).
    Only names reach the browser.

    >>> "tiny-bpe" in tokenizer_choices("")
    True
    """
    roots = [BUNDLED] + [Path(p) for p in (os.environ.get(ENV, "") if env is None else env).split(os.pathsep) if p]
    out: dict[str, str] = {}
    for root in roots:
        candidates = (
            [root]
            if (root / "tokenizer.json").is_file()
            else sorted(p for p in root.iterdir() if p.is_dir())
            if root.is_dir()
            else []
        )
        for folder in candidates:
            if (folder / "tokenizer.json").is_file():
                out.setdefault(folder.name, str(folder))
    return out


def tokenize_upload(
    data: bytes,
    name: str,
    tokenizer: str,
    fmt: str,
    max_seq_length: int,
    progress: Callable[[str, float], None] | None = None,
    env: str | None = None,
):
    """The lengths (a ``LengthHistogram`` keeping the file's order) of an uploaded raw data set; ``InputError`` for
    anything wrong with the file, the tokenizer's name or the budget. Parquet: the row groups are counted and the
    decoded size summed from the footer before anything is decompressed (``parquet_decoded_bytes``)."""
    shown = name[:80]
    if not name.lower().endswith(RAW_SUFFIXES):
        raise InputError(
            shown,
            None,
            f"raw data must be {' or '.join(RAW_SUFFIXES)} here (the command line also "
            "reads .gz/.zst, folders of shards and datasets folders)",
        )
    if len(data) > RAW_UPLOAD_LIMIT_MB * 2**20:
        raise InputError(
            shown,
            None,
            f"is {len(data) / 2**20:,.0f} MB, over the dashboard's {RAW_UPLOAD_LIMIT_MB} MB "
            "for raw data: use python -m advisor tokenize (or --sample) and upload its lengths file",
        )
    choices = tokenizer_choices(env)
    if tokenizer not in choices:
        raise InputError(
            "tokenizer", None, f"{tokenizer[:60]!r} is not one of the server's tokenizers ({', '.join(choices)})"
        )
    suffix = ".parquet" if name.lower().endswith(".parquet") else ".jsonl"
    if suffix == ".parquet":
        groups = parquet_row_groups(data, shown)
        if groups > MAX_ROW_GROUPS:
            raise InputError(
                shown,
                None,
                f"has {groups:,} row groups, over the dashboard's {MAX_ROW_GROUPS:,}: "
                "rewrite it with larger row groups (pyarrow: row_group_size=100_000) or use python -m "
                "advisor tokenize",
            )
        open_parquet(data, shown)  # the footer is checked in Python before pyarrow reads the file
        decoded = parquet_decoded_bytes(data, MAX_DECODED_MB << 20)
        if decoded > MAX_DECODED_MB << 20:
            raise InputError(
                shown,
                None,
                f"decodes to over {MAX_DECODED_MB} MB of values (the file is "
                f"{len(data) / 2**20:,.1f} MB: dictionary-encoded or highly compressed): too much to "
                "tokenize here; use python -m advisor tokenize --sample N",
            )
    try:
        hist = _tokenized(data, suffix, shown, choices[tokenizer], fmt, max_seq_length, progress)
    except InputError as e:  # named by the server's temporary file: renamed to the upload
        raise InputError(
            shown, e.where and _without_server_names(e.where, shown), _without_server_names(e.what, shown)
        ) from None
    check_expandable(hist.num_samples, shown, "pack")
    return _renamed(hist, f"{shown} ({tokenizer}, {fmt})", shown)


def _tokenized(data: bytes, suffix: str, shown: str, tokenizer: str, fmt: str, max_seq_length: int, progress):
    """The upload written to a fresh temporary folder under a fixed name, tokenized in this process."""
    from advisor.data.tokenize.engine import TokenizeJob, tokenize
    from advisor.data.tokenize.records import Limits, plan_shards

    with tempfile.TemporaryDirectory(prefix="advisor-raw-") as folder:
        path = Path(folder) / f"upload{suffix}"  # a fixed name: nothing of the visitor's reaches a path
        path.write_bytes(data)
        records = sum(s.records or 0 for s in plan_shards([str(path)]))
        if records > MAX_RAW_RECORDS:
            raise InputError(
                shown,
                None,
                f"holds {records:,} records, over the dashboard's {MAX_RAW_RECORDS:,}: use "
                "python -m advisor tokenize --sample N",
            )
        settings = settings_of(fmt, max_seq_length)
        # loss_tokens: the loss weighting then counts the answer-only loss the data's masks give
        masked = records <= MAX_MASKED_RECORDS
        job = TokenizeJob(
            data=str(path),
            tokenizer=tokenizer,
            fmt=FORMATS[fmt],
            settings=settings,
            on_bad="skip",
            loss_tokens=masked,
            limits=Limits(
                max_record_bytes=MAX_RECORD_MB << 20,
                max_batch_bytes=MAX_BATCH_MB << 20,
                max_file_bytes=MAX_DECODED_MB << 20,
            ),
        )
        # one process: the server is multi-threaded (forking it is unsafe) and serves other sessions meanwhile
        result = tokenize(job, workers=1, progress=progress)
        hist = result.histogram()
        if not masked:
            note = (
                f"loss mask not read: {records:,} records, over the {MAX_MASKED_RECORDS:,} whose masks the "
                "dashboard builds (the loss weighting counts every label); python -m advisor prepare writes a "
                "packed folder whose masks a plan reads"
            )
            hist = dataclasses.replace(hist, notes=(*hist.notes, note))
        return hist


def parquet_row_groups(data: bytes, shown: str) -> int:
    """How many row groups a Parquet file's footer lists, counted before the footer is parsed: parsing 50,000 of
    them (in Python, as ``open_parquet`` does to stay safe from pyarrow's aborts) takes seconds of a server thread.
    """
    from advisor.data.parquet_footer import FooterError, count_row_groups

    try:
        return count_row_groups(data)
    except FooterError as e:
        raise InputError(shown, None, f"is not a readable Parquet file: {e}") from None


def parquet_decoded_bytes(data: bytes, budget: int) -> int:
    """Bytes of every value of a Parquet file once decoded, stopping as soon as ``budget`` is passed: first from
    the footer (every chunk's uncompressed size, 8 bytes a value, the strings' decoded size where recorded), then,
    when some columns have dictionary pages, batch by batch with those columns kept as dictionaries (nested ones
    too: ``messages.list.element.content``), so counting never builds the text they stand for.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO(); pq.write_table(pa.table({"t": ["ab"] * 100}), buf)
    >>> parquet_decoded_bytes(buf.getvalue(), 1 << 20) < 4096
    True
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from advisor.data.parquet_footer import read_footer, row_groups
    from advisor.data.tokenize.records import decoded_bytes

    _, groups = row_groups(read_footer(data))
    footer = sum(g.decoded_estimate() for g in groups)
    leaves = {c.leaf for g in groups for c in g.chunks if c.dictionary}
    if footer > budget or not leaves:
        return footer
    total = 0
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        strings = sorted(
            leaves & {c.path for c in pf.schema if c.physical_type in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")}
        )
        pf = pq.ParquetFile(pa.BufferReader(data), read_dictionary=strings)
        for rb in pf.iter_batches(batch_size=64):
            total += decoded_bytes(rb)
            if total > budget:
                break
    except Exception:  # noqa: BLE001 - a damaged page: counted up to it; the reader then says where it stopped
        pass
    return max(total, footer)


def _renamed(hist, source: str, shown: str):
    """The histogram under the upload's name, its exclusions too (the temporary file's name is the server's)."""
    import dataclasses

    excluded = tuple(dataclasses.replace(e, first_at=_without_server_names(e.first_at, shown)) for e in hist.excluded)
    return dataclasses.replace(hist, source=source, excluded=excluded)


def _without_server_names(message: str, shown: str) -> str:
    """A message with the temporary file's name (and folder) replaced by the upload's name."""
    import re

    message = re.sub(r"/\S*advisor-raw-[^/\s]*/", "", message)
    return message.replace("upload.jsonl", shown).replace("upload.parquet", shown)


def use_raw_upload(
    state, data: bytes, name: str, tokenizer: str, fmt: str, max_seq_length: int, progress=None, env: str | None = None
) -> bool:
    """Tokenize an upload into the session's data; on any problem keep the data in use and store one message.

    The work runs in a child process with CPU, memory and wall-clock limits (advisor/ui/isolated.py), admitted by
    the server's gate and charged to the session (advisor/ui/fair.py): a template that loops or an upload that
    decodes to gigabytes costs its visitor a message, not the server."""
    from advisor.ui import fair, isolated

    args = {"name": name, "tokenizer": tokenizer, "fmt": fmt, "max_seq_length": int(max_seq_length), "env": env}
    limits = isolated.Limits()
    cpu = [0.0]
    try:
        # the child's memory is its own (bounded by its RLIMIT_AS): the server only holds the upload and the lengths
        with fair.GATE.heavy(
            fair.meter_of(state), "tokenizing the upload", memory=2 * len(data) + (64 << 20), child_cpu=lambda: cpu[0]
        ):
            outcome = isolated.run("tokenize", args, {"upload": data}, limits=limits, progress=progress, name=name[:80])
            cpu[0] = outcome.cpu_seconds
    except fair.Busy as e:
        state["upload_error"] = str(e)
        return False
    if outcome.hist is None:
        state["upload_error"] = _without_server_names(outcome.error or "no lengths came back", name[:80])
        return False
    hist = outcome.hist
    state["hist"], state["data_name"] = hist, hist.source
    # the format goes into the plan: chat samples longer than the pack are skipped by offline packing, SFT ones cut
    state["plan"] = state["plan"].changed(
        {"data": {"lengths": name[:200], "column": None, "format": FORMATS.get(fmt, fmt)}}
    )
    state.pop("upload_error", None)
    return True
