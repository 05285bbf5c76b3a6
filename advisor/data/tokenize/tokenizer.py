"""Load a tokenizer from local files and count tokens the way Megatron-Bridge 0.6.2's tokenizer wrappers do.

Alternatives: a Hugging Face folder (``tokenizer.json`` + ``tokenizer_config.json``, Rust ``tokenizers``) or a
SentencePiece ``.model`` file (``sentencepiece``); a hub name is refused, nothing is ever downloaded.

Megatron-Bridge builds an ``HuggingFaceTokenizer`` tokenizer as Megatron-Core's ``HuggingFaceTokenizer`` wrapper
around ``AutoTokenizer`` (megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py). Its ``text_to_ids``
calls ``tokenizer(text).input_ids``, so by default (``include_special_tokens=True``, Megatron's
``tokenizer_hf_no_include_special_tokens=False``) every text it encodes gets the special tokens of the
tokenizer's post-processor: Llama 3's ``<|begin_of_text|>`` is put before each piece. ``mb_lengths`` counts that
way; ``lengths(texts, special=False)`` counts as ``encode(text, add_special_tokens=False)`` (chat templates and
prompt-completion preprocessing). Loading follows transformers 5's ``TokenizersBackend`` for a ``tokenizer.json``:
truncation and padding off, named special tokens missing from the file added as special tokens,
``split_special_tokens`` honoured, ``add_bos_token``/``add_eos_token`` ignored (transformers drops them when a
``tokenizer.json`` exists). ``use_transformers=True`` takes the encoder transformers itself builds instead.

    >>> load_tokenizer("meta-llama/Llama-3.1-8B")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: meta-llama/Llama-3.1-8B: not a local file or folder (it looks like a Hugging Face ...
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from advisor.data.tokenize.folder import check_added, check_folder, read_json_object
from advisor.errors import InputError

ENCODE_CHUNK = 16384  # texts per encode_batch call: one call for most data sets, bounded memory for huge ones
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
GET_ONE = (
    "pass a local folder holding tokenizer.json and tokenizer_config.json (or a SentencePiece .model "
    "file); the advisor never downloads. To get one, run `huggingface-cli download NAME --local-dir DIR` "
    "on a machine with network access and copy DIR here"
)


class Tokenizer:
    """A local tokenizer, counting tokens as Megatron-Bridge 0.6.2 does. Build it with ``load_tokenizer``.

    ``kind`` is ``"huggingface"`` or ``"sentencepiece"``; ``space_sensitive`` is Megatron's flag (does ``"x y"``
    encode differently from ``"x"`` then ``"y"``), which decides whether prompt-template pieces keep a leading
    space. Picklable: the encoder travels with it (the Rust tokenizer and the SentencePiece model pickle
    themselves); the ``transformers`` tokenizer that only chat templates need is loaded again from ``path``.

        >>> import pickle
        >>> tok = load_tokenizer(_example_folder())
        >>> tok.kind, tok.lengths(["Hello world"], special=False).tolist(), tok.mb_lengths(["Hello world"]).tolist()
        ('huggingface', [2], [3])
        >>> pickle.loads(pickle.dumps(tok)).mb_lengths(["Hello world", ""]).tolist()
        [3, 1]
    """

    def __init__(
        self,
        path: Path,
        kind: Literal["huggingface", "sentencepiece"],
        backend: Any,
        *,
        include_special_tokens: bool = True,
        special: dict[str, str | None] | None = None,
        chat_template: str | None = None,
        tokenizer_class: str | None = None,
    ):
        self.path = path
        self.kind = kind
        self.backend = backend
        self.include_special_tokens = include_special_tokens
        self.special = dict(special or {})
        self.chat_template = chat_template
        self.tokenizer_class = tokenizer_class  # tokenizer_config.json's: a model class may rebuild the pipeline
        self._hf = None
        self.space_sensitive = self._space_sensitive()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_hf"] = None  # transformers' tokenizer is rebuilt on demand, from path
        return state

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, kind={self.kind!r})"

    # Megatron-Core's HuggingFaceTokenizer: bos falls back to cls, eos to sep and sep to eos (its __init__)
    @property
    def has_bos(self) -> bool:
        if self.kind == "sentencepiece":
            return self.backend.bos_id() >= 0
        return bool(self.special.get("bos_token") or self.special.get("cls_token"))

    @property
    def has_eos(self) -> bool:
        if self.kind == "sentencepiece":
            return self.backend.eos_id() >= 0
        return bool(self.special.get("eos_token") or self.special.get("sep_token"))

    @property
    def has_sep(self) -> bool:
        return self.kind == "huggingface" and bool(self.special.get("sep_token") or self.special.get("eos_token"))

    def _encoded(self, texts: Sequence[str], special: bool):
        """The texts encoded ``ENCODE_CHUNK`` at a time: (first index, that chunk's encodings: Hugging Face
        ``Encoding``s or SentencePiece id lists, both sized by ``len``). ``special`` adds the post-processor's
        special tokens (Hugging Face only: SentencePiece's ``encode_as_ids`` never adds any)."""
        for start in range(0, len(texts), ENCODE_CHUNK):
            chunk = list(texts[start : start + ENCODE_CHUNK])
            if self.kind == "huggingface":
                yield (
                    start,
                    native(
                        str(self.path), "encoding", self.backend.encode_batch_fast, chunk, add_special_tokens=special
                    ),
                )
            else:
                yield start, self.backend.encode(chunk)

    def lengths(self, texts: Sequence[str], *, special: bool) -> np.ndarray:
        """Tokens per text, encoded in batches (``_encoded``)."""
        out = np.empty(len(texts), dtype=np.int64)
        for start, encodings in self._encoded(texts, special):
            out[start : start + len(encodings)] = [len(e) for e in encodings]
        return out

    def ids(self, texts: Sequence[str], *, special: bool) -> tuple[np.ndarray, np.ndarray]:
        """The token ids of each text, back to back (int32), and where each text's start (int64, one more than
        texts): ``lengths`` with the ids kept. Flat arrays, not lists of lists: a million records stay compact.

            >>> tok = load_tokenizer(_example_folder())
            >>> flat, offsets = tok.ids(["Hello world", "x"], special=True)
            >>> flat.tolist(), offsets.tolist()
            ([0, 3, 4, 0, 5], [0, 3, 5])
        """
        parts: list[np.ndarray] = []
        lengths = np.empty(len(texts), dtype=np.int64)
        for start, encodings in self._encoded(texts, special):
            lists = [e.ids for e in encodings] if self.kind == "huggingface" else encodings
            lengths[start : start + len(lists)] = [len(x) for x in lists]
            parts.append(
                np.fromiter(
                    itertools.chain.from_iterable(lists),
                    dtype=np.int32,
                    count=int(lengths[start : start + len(lists)].sum()),
                )
            )
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return (np.concatenate(parts) if parts else np.zeros(0, np.int32)), offsets

    def mb_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``ids`` as Megatron-Bridge's ``_tokenize`` encodes (see ``mb_lengths``)."""
        return self.ids(texts, special=self.include_special_tokens and self.kind == "huggingface")

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can produce, added tokens included: every id it writes is below this.

        >>> load_tokenizer(_example_folder()).vocab_size > 5
        True
        """
        if self.kind == "sentencepiece":
            return int(self.backend.get_piece_size())
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def special_id(self, name: Literal["bos", "eos", "sep"]) -> int | None:
        """The id Megatron-Core's wrapper gives ``bos_id`` / ``eos_id`` (its ``eod`` too) / ``sep_id``, or None:
        Hugging Face's named token, bos falling back to cls, eos to sep and sep to eos
        (``HuggingFaceTokenizer.__init__``); SentencePiece's
        own (``bos_id()``/``eos_id()``, None when the model has none).

            >>> tok = load_tokenizer(_example_folder())
            >>> tok.special_id("bos"), tok.special_id("eos")
            (0, 1)
        """
        if self.kind == "sentencepiece":
            if name == "sep":  # Megatron-Core's SentencePiece wrapper has no SEP
                return None
            value = self.backend.bos_id() if name == "bos" else self.backend.eos_id()
            return value if value >= 0 else None
        if name == "sep":  # the wrapper's sep_token: the tokenizer's, else its EOS
            content = self.special.get("sep_token") or self.special.get("eos_token")
        else:
            content = (
                self.special.get("bos_token") or self.special.get("cls_token")
                if name == "bos"
                else self.special.get("eos_token") or self.special.get("sep_token")
            )
        return None if content is None else self.backend.token_to_id(content)

    def mb_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens per text as Megatron-Bridge's ``_tokenize`` (megatron/bridge/data/datasets/utils.py) counts them:
        ``tokenizer.tokenize(text)``, i.e. ``text_to_ids``, with the special tokens when ``include_special_tokens``."""
        return self.lengths(texts, special=self.include_special_tokens and self.kind == "huggingface")

    def tokens(self, text: str) -> list[str]:
        """The token strings of one text, without special tokens (``text_to_tokens``)."""
        if self.kind == "huggingface":
            return native(str(self.path), "encoding", self.backend.encode, text, add_special_tokens=False).tokens
        return self.backend.encode_as_pieces(text)

    def _space_sensitive(self) -> bool:
        # HuggingFaceTokenizer.__init__ / SentencePieceTokenizer.__init__: text_to_tokens('x y') != 'x' + 'y'
        return self.tokens("x y") != self.tokens("x") + self.tokens("y")

    def transformers_tokenizer(self):
        """The ``transformers`` tokenizer of this folder, loaded once (only chat templates need it), as
        Megatron-Core's wrapper loads it: ``AutoTokenizer.from_pretrained(path, use_fast=True,
        trust_remote_code=False)``, here with ``local_files_only``."""
        if self.kind != "huggingface":
            raise InputError(
                str(self.path),
                None,
                "chat templates need a Hugging Face tokenizer folder "
                "(tokenizer.json + tokenizer_config.json with a chat_template), not a SentencePiece model",
            )
        if self._hf is None:
            from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, and only the chat path needs it

            # checked again here: a pickled Tokenizer reloads transformers' copy in a worker, from the folder as it
            # is now; trust_remote_code=False and local_files_only=True: nothing imported, nothing downloaded
            check_folder(self.path)
            try:
                self._hf = native(
                    str(self.path),
                    "loading",
                    AutoTokenizer.from_pretrained,
                    str(self.path),
                    use_fast=True,
                    trust_remote_code=False,
                    local_files_only=True,
                )
            except InputError:
                raise
            except Exception as e:  # transformers raises many kinds; each means the folder cannot be used
                raise InputError(
                    str(self.path), None, f"transformers cannot load this tokenizer: {_first_line(e)}"
                ) from e
        return self._hf


def load_tokenizer(
    path: str | os.PathLike, *, include_special_tokens: bool = True, use_transformers: bool = False
) -> Tokenizer:
    """Load a local Hugging Face tokenizer folder (or its ``tokenizer.json``) or a SentencePiece ``.model`` file.

    ``include_special_tokens`` mirrors Megatron's ``tokenizer_hf_no_include_special_tokens`` (negated): when True
    (Megatron's default) each text Megatron-Bridge encodes through ``tokenizer.tokenize`` gets the post-processor's
    special tokens. ``use_transformers`` takes the Rust encoder from ``transformers``' own loading of the folder
    instead of ``tokenizer.json`` as written: slower to start (seconds), but exact also for a ``tokenizer_class``
    whose transformers-5 class rebuilds the pipeline from the vocabulary (``Qwen2Tokenizer``, ``GemmaTokenizer``...
    keep their own pre-tokenizer, which a hand-edited ``tokenizer.json`` may not match). Raises ``InputError`` for a
    hub name or missing path (saying how to get a local copy), a folder without
    ``tokenizer.json``/``tokenizer_config.json``, or a file that cannot be read, naming the file.

        >>> load_tokenizer(_example_folder()).space_sensitive  # a whitespace-split vocabulary: spaces never matter
        False
    """
    text = os.fspath(path)
    p = Path(text).expanduser()
    if not p.exists():
        hub = "/" in text and not text.startswith(("/", ".", "~")) and text.count("/") == 1
        why = " (it looks like a Hugging Face Hub name)" if hub else ""
        raise InputError(text, None, f"not a local file or folder{why}; {GET_ONE}")
    if p.is_file() and p.name == "tokenizer.json":
        p = p.parent
    if p.is_file():
        if p.suffix == ".model":
            return _load_sentencepiece(p)
        raise InputError(str(p), None, f"not a tokenizer; {GET_ONE}")
    tok = _load_huggingface(p, include_special_tokens)
    if use_transformers:
        hf = tok.transformers_tokenizer()
        backend = hf.backend_tokenizer
        backend.no_truncation()
        backend.no_padding()
        tok = Tokenizer(
            p,
            "huggingface",
            backend,
            include_special_tokens=include_special_tokens,
            special={name: _content(getattr(hf, name, None)) for name in SPECIAL_NAMES},
            chat_template=hf.chat_template if isinstance(hf.chat_template, str) else tok.chat_template,
            tokenizer_class=tok.tokenizer_class,
        )
        tok._hf = hf
    return tok


def _load_huggingface(folder: Path, include_special_tokens: bool) -> Tokenizer:
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as RustTokenizer

    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not (folder / name).is_file():
            has_model = (folder / "tokenizer.model").is_file()
            also = " (a SentencePiece tokenizer.model is here: pass that file)" if has_model else ""
            raise InputError(
                str(folder / name),
                None,
                "missing: a Hugging Face tokenizer folder holds tokenizer.json "
                f"and tokenizer_config.json{also}; {GET_ONE}",
            )
    config = check_folder(folder)  # sizes, depth, types, and no code: before anything parses the files
    try:
        backend = native(
            str(folder / "tokenizer.json"), "loading", RustTokenizer.from_file, str(folder / "tokenizer.json")
        )
    except InputError:
        raise
    except Exception as e:  # the Rust library raises a bare Exception for every parse error
        raise InputError(
            str(folder / "tokenizer.json"), None, f"the tokenizers library cannot read it: {_first_line(e)}"
        ) from e
    backend.no_truncation()  # transformers encodes with DO_NOT_TRUNCATE / DO_NOT_PAD (set_truncation_and_padding)
    backend.no_padding()
    if "added_tokens_decoder" not in config and (folder / "special_tokens_map.json").is_file():
        # transformers reads the legacy special_tokens_map.json only without added_tokens_decoder, and it wins
        config.update(read_json_object(folder / "special_tokens_map.json"))
    special = {name: _content(config.get(name)) for name in SPECIAL_NAMES}
    # TokenizersBackend.__init__ / _post_init: named special tokens the file lacks are added as special tokens
    present = {t.content for t in backend.get_added_tokens_decoder().values()}
    check_added(list(present), folder / "tokenizer.json")
    wanted = [config.get(name) for name in SPECIAL_NAMES]
    for key in ("extra_special_tokens", "additional_special_tokens"):
        extra = config.get(key)
        wanted += list(extra.values()) if isinstance(extra, dict) else extra if isinstance(extra, list) else []
    decoder = config.get("added_tokens_decoder")
    wanted += list(decoder.values()) if isinstance(decoder, dict) else []
    to_add = []
    for token in wanted:
        content = _content(token)
        if content and content not in present:
            flags = (
                {k: v for k, v in token.items() if k in ("lstrip", "rstrip", "single_word", "normalized")}
                if isinstance(token, dict)
                else {"normalized": False}
            )
            to_add.append(AddedToken(content, special=True, **flags))
            present.add(content)
    if to_add:
        native(str(folder / "tokenizer_config.json"), "adding its special tokens", backend.add_special_tokens, to_add)
    if config.get("split_special_tokens") is True:
        backend.encode_special_tokens = True
    tokenizer_class = config.get("tokenizer_class") if isinstance(config.get("tokenizer_class"), str) else None
    return Tokenizer(
        folder,
        "huggingface",
        backend,
        include_special_tokens=include_special_tokens,
        special=special,
        chat_template=_chat_template(folder, config),
        tokenizer_class=tokenizer_class,
    )


def _load_sentencepiece(path: Path) -> Tokenizer:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError) as e:
        raise InputError(str(path), None, f"sentencepiece cannot read it: {_first_line(e)}") from e
    return Tokenizer(path, "sentencepiece", processor, include_special_tokens=False)


class TokenizerPanic(InputError):
    """The Rust tokenizers library panicked (``pyo3_runtime.PanicException``) on a tokenizer or a text."""


def is_panic(e: BaseException) -> bool:
    """Whether ``e`` is a Rust panic surfacing through pyo3: ``pyo3_runtime.PanicException`` derives from
    ``BaseException``, so it passes every ``except Exception`` (and left a dashboard session spinning).

        >>> is_panic(ValueError()), is_panic(KeyboardInterrupt())
        (False, False)
    """
    return any(t.__name__ == "PanicException" and t.__module__ == "pyo3_runtime" for t in type(e).__mro__)


def native(source: str, what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a call into the Rust tokenizers library, with a panic turned into one
    ``TokenizerPanic`` line naming ``source``; every other exception (and KeyboardInterrupt, SystemExit) passes.

        >>> native("t.json", "encoding", len, "abc")
        3
    """
    try:
        return fn(*args, **kwargs)
    except BaseException as e:
        if not is_panic(e):
            raise
        raise TokenizerPanic(
            source, None, f"the tokenizers library crashed while {what} (a Rust panic: {_first_line(e)})"
        ) from None


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict with ``content``."""
    if isinstance(token, dict):
        token = token.get("content")
    token = getattr(token, "content", token)  # an AddedToken object, as transformers holds it
    return str(token) if isinstance(token, str) and token else None


def _chat_template(folder: Path, config: dict) -> str | None:
    """The default chat template: chat_template.jinja wins over tokenizer_config.json, as in transformers."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(str(jinja), None, f"cannot be read as UTF-8 text: {_first_line(e)}") from e
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}] (checked by check_folder)
        template = {t["name"]: t["template"] for t in template}
    if isinstance(template, dict):  # transformers' get_chat_template: the one named "default"
        template = template.get("default")
    return template if isinstance(template, str) else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def _example_folder() -> Path:
    """A tiny word-level tokenizer folder for the doctests (written once into the temporary directory)."""
    import tempfile

    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers, processors

    folder = Path(tempfile.gettempdir()) / f"advisor-doctest-tokenizer-{os.getpid()}-v2"
    if not (folder / "tokenizer.json").is_file():
        folder.mkdir(exist_ok=True)
        vocab = {"<s>": 0, "</s>": 1, "[UNK]": 2, "Hello": 3, "world": 4, "x": 5, "y": 6}
        tok = RustTokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
        tok.save(str(folder / "tokenizer.json"))
        template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": template}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder
