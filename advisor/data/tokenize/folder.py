"""A tokenizer folder is data, never code: its files checked by size, depth and type before transformers sees them.

``transformers`` reads ``tokenizer_config.json`` (and ``special_tokens_map.json``, ``chat_template.jinja``,
``added_tokens.json``, ``config.json``) and trusts what it finds: ``auto_map`` names Python files in the folder to
import (refused here: Megatron-Bridge loads with ``trust_remote_code=False``, and the advisor never runs a folder's
code), a ``tokenizer_class`` it does not ship sends it looking for remote code, a string where a flag goes is
read as true, and tens of thousands of special tokens take it minutes to add (its loop over them is quadratic).
Each problem is one ``InputError`` naming the file and the field.

    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> config = {"auto_map": {"AutoTokenizer": ["evil.Tok", None]}}
    >>> _ = (folder / "tokenizer_config.json").write_text(json.dumps(config))
    >>> check_folder(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: .../tokenizer_config.json, auto_map: names Python code in the tokenizer folder to run ...
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from advisor.errors import InputError, excerpt
from advisor.limits import json_too_deep

MAX_CONFIG_BYTES = 64 << 20  # tokenizer_config.json / added_tokens.json: Gemma's, 6k added tokens, is ~1 MB
MAX_SMALL_JSON_BYTES = 16 << 20  # special_tokens_map.json, config.json, chat_template.json
MAX_TOKENIZER_JSON_BYTES = 160 << 20  # tokenizer.json: 262k-token vocabularies are ~35 MB; the Rust library
# needs several times a file's size to load it (and aborts the process when an allocation fails)
MAX_TEMPLATE_BYTES = 4 << 19  # chat_template.jinja: 512 Ki characters of at most 4 bytes
MAX_EXTRA_TEMPLATES = 64  # additional_chat_templates/*.jinja
MAX_SPECIAL_TOKENS = 16384  # additional_special_tokens / extra_special_tokens: transformers adds them in O(n^2)
MAX_ADDED_TOKENS = 1 << 16  # added_tokens_decoder / added_tokens.json entries
MAX_TOKEN_CHARS = 1024  # one special token's text (real ones are under 100; whitespace runs under 100)
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
FLAGS = (
    "split_special_tokens",
    "add_bos_token",
    "add_eos_token",
    "add_prefix_space",
    "clean_up_tokenization_spaces",
    "legacy",
    "do_lower_case",
    "use_default_system_prompt",
    "spaces_between_special_tokens",
    "remove_space",
    "keep_accents",
    "tokenize_chinese_chars",
    "do_basic_tokenize",
    "fix_mistral_regex",
    "use_fast",
)
TOKEN_FLAGS = ("lstrip", "rstrip", "single_word", "normalized", "special")
# the classes the advisor uses tokenizer.json for as written; any other name must be one transformers ships
GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}\Z")
NO_CODE = (
    "the advisor never runs a tokenizer folder's code (Megatron-Bridge loads tokenizers with "
    "trust_remote_code=False): use a tokenizer class transformers ships"
)


def check_folder(folder: Path) -> dict:
    """Check every file transformers reads from ``folder``; returns tokenizer_config.json's object."""
    _check_size(folder / "tokenizer.json", MAX_TOKENIZER_JSON_BYTES)
    config = read_json_object(folder / "tokenizer_config.json", MAX_CONFIG_BYTES)
    check_config(config, folder / "tokenizer_config.json")
    if (folder / "special_tokens_map.json").is_file():
        check_config(
            read_json_object(folder / "special_tokens_map.json", MAX_SMALL_JSON_BYTES),
            folder / "special_tokens_map.json",
        )
    _check_added_tokens(folder / "added_tokens.json")
    _check_model_config(folder / "config.json")
    _check_templates(folder)
    return config


def read_json_object(path: Path, limit: int = MAX_CONFIG_BYTES) -> dict:
    """A JSON object from ``path``, refused when over ``limit`` bytes or nested deeper than the advisor reads
    (Python's json module recurses once a level: a deep file would overflow the stack, or take minutes)."""
    _check_size(path, limit)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), None, f"cannot be read: {e.strerror or e}") from e
    if json_too_deep(data):
        raise InputError(str(path), None, "nested too deeply to be a tokenizer file")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InputError(str(path), None, f"not valid JSON: {str(e).splitlines()[0][:200]}") from e
    if not isinstance(value, dict):
        raise InputError(str(path), None, f"must hold a JSON object, not {excerpt(value)}")
    return value


def _check_size(path: Path, limit: int) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return  # a missing file is named by whoever needs it
    if size > limit:
        raise InputError(str(path), None, f"{size:,} bytes is more than a tokenizer file needs (at most {limit:,})")


def check_config(config: dict, path: Path) -> None:
    """tokenizer_config.json (or special_tokens_map.json): no code, and every field transformers reads of the
    type it expects.

        >>> check_config({"split_special_tokens": "yes"}, Path("tokenizer_config.json"))
        Traceback (most recent call last):
        ...
        advisor.errors.InputError: tokenizer_config.json, split_special_tokens: must be true or false, not 'yes'
    """
    src = str(path)

    def bad(where: str, what: str) -> InputError:
        return InputError(src, where, what)

    if config.get("auto_map"):
        raise bad(
            "auto_map", f"names Python code in the tokenizer folder to run ({excerpt(config['auto_map'])}); {NO_CODE}"
        )
    if config.get("trust_remote_code", False) is not False:
        raise bad(
            "trust_remote_code", f"must be false or absent, not {excerpt(config['trust_remote_code'])}: {NO_CODE}"
        )
    _check_class(config.get("tokenizer_class"), bad)
    for key in FLAGS:
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            raise bad(key, f"must be true or false, not {excerpt(value)}")
    limit = config.get("model_max_length")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))):
        raise bad("model_max_length", f"must be a number, not {excerpt(limit)}")
    for key in ("padding_side", "truncation_side"):
        if config.get(key) is not None and config[key] not in ("left", "right"):
            raise bad(key, f"must be 'left' or 'right', not {excerpt(config[key])}")
    for key in NAMED:
        _check_token(config.get(key), key, bad, allow_none=True)
    for key in ("additional_special_tokens", "extra_special_tokens"):
        _check_token_list(config.get(key), key, bad)
    _check_decoder(config.get("added_tokens_decoder"), bad)
    if "chat_template" in config:
        check_template_value(config["chat_template"], bad)


def _check_class(name: Any, bad) -> None:
    if name is None or name == "":  # no class: transformers' generic fast tokenizer
        return
    if not isinstance(name, str) or not NAME.match(name):
        raise bad("tokenizer_class", f"must be the name of a transformers tokenizer class, not {excerpt(name)}")
    if name in GENERIC_CLASSES or shipped_class(name):
        return
    raise bad(
        "tokenizer_class",
        f"{name!r} is not a tokenizer class transformers ships (a custom class would "
        f"be code from the folder); {NO_CODE}",
    )


def shipped_class(name: str) -> bool:
    """Whether transformers itself has tokenizer class ``name`` (a ``...Fast`` name as its slow class, the way
    transformers 5 resolves it: tokenization_auto.py ``tokenizer_class_from_name``).

        >>> shipped_class("Qwen2Tokenizer"), shipped_class("EvilTokenizer")
        (True, False)
    """
    import transformers  # noqa: PLC0415 - lazy module: only the named class's module is imported

    for candidate in (name, name[:-4] if name.endswith("Fast") else None):
        if candidate and "tokeniz" in candidate.lower() and getattr(transformers, candidate, None) is not None:
            return True
    return False


def _check_token(token: Any, where: str, bad, *, allow_none: bool = False) -> None:
    """A special token: its text, or an AddedToken object ``{"content": ..., "lstrip": false, ...}``."""
    if token is None and allow_none:
        return
    if isinstance(token, dict):
        content = token.get("content")
        if not isinstance(content, str):
            raise bad(f"{where}.content", f"must be the token's text, not {excerpt(content)}")
        for flag in TOKEN_FLAGS:
            if token.get(flag) is not None and not isinstance(token[flag], bool):
                raise bad(f"{where}.{flag}", f"must be true or false, not {excerpt(token[flag])}")
        token = content
    if not isinstance(token, str):
        raise bad(where, f"must be a token's text or an AddedToken object, not {excerpt(token)}")
    if len(token) > MAX_TOKEN_CHARS:
        raise bad(where, f"a special token of {len(token):,} characters (at most {MAX_TOKEN_CHARS:,})")


def _check_token_list(tokens: Any, key: str, bad) -> None:
    if tokens is None:
        return
    if not isinstance(tokens, (list, dict)):
        raise bad(key, f"must be a list of tokens, not {excerpt(tokens)}")
    if len(tokens) > MAX_SPECIAL_TOKENS:
        raise bad(
            key,
            f"{len(tokens):,} special tokens; at most {MAX_SPECIAL_TOKENS:,} (transformers takes minutes "
            "to add that many)",
        )
    if isinstance(tokens, dict):  # extra_special_tokens as {"image_token": "<image>"}: each becomes an attribute
        for name, token in tokens.items():
            if not NAME.match(name) or not name.endswith("_token"):
                raise bad(
                    f"{key}.{excerpt(name)}",
                    "names must look like 'image_token' (letters, digits and '_', "
                    "ending in _token): transformers sets each as an attribute",
                )
            _check_token(token, f"{key}.{name}", bad)
        return
    for i, token in enumerate(tokens):
        _check_token(token, f"{key}[{i}]", bad)


def _check_decoder(decoder: Any, bad) -> None:
    key = "added_tokens_decoder"
    if decoder is None:
        return
    if not isinstance(decoder, dict):
        raise bad(key, f"must be an object of id: token, not {excerpt(decoder)}")
    if len(decoder) > MAX_ADDED_TOKENS:
        raise bad(key, f"{len(decoder):,} added tokens; at most {MAX_ADDED_TOKENS:,}")
    for ident, token in decoder.items():
        if not (ident.isascii() and ident.isdigit() and len(ident) <= 10):
            raise bad(f"{key}.{excerpt(ident)}", "keys must be token ids (whole numbers)")
        if not isinstance(token, dict):
            raise bad(f"{key}.{ident}", f"must be an AddedToken object, not {excerpt(token)}")
        _check_token(token, f"{key}.{ident}", bad)


def check_template_value(template: Any, bad) -> None:
    """A chat template as tokenizer_config.json holds it: its text, a list of ``{"name", "template"}`` (named
    templates: transformers picks ``default``, or ``tool_use`` with tools) or an object of name: text."""
    from advisor.data.tokenize.template import MAX_TEMPLATE_CHARS

    def text(value: Any, where: str) -> None:
        if not isinstance(value, str):
            raise bad(where, f"must be a Jinja template (text), not {excerpt(value)}")
        if len(value) > MAX_TEMPLATE_CHARS:
            raise bad(where, f"a template of {len(value):,} characters (at most {MAX_TEMPLATE_CHARS:,})")

    if template is None or isinstance(template, str):
        return text(template, "chat_template") if template is not None else None
    if isinstance(template, dict):
        template = [{"name": k, "template": v} for k, v in template.items()]
    if not isinstance(template, list):
        raise bad("chat_template", f"must be a template or a list of named templates, not {excerpt(template)}")
    if len(template) > MAX_EXTRA_TEMPLATES:
        raise bad("chat_template", f"{len(template):,} named templates (at most {MAX_EXTRA_TEMPLATES})")
    seen = set()
    for i, item in enumerate(template):
        where = f"chat_template[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "template" not in item:
            raise bad(where, f'must be {{"name": ..., "template": ...}}, not {excerpt(item)}')
        if item["name"] in seen:
            raise bad(where, f"a second template named {excerpt(item['name'])}")
        seen.add(item["name"])
        text(item["template"], f"{where}.template")


def check_added(contents: list[str], path: Path) -> None:
    """tokenizer.json's added tokens, as the Rust library loaded them: transformers copies each into Python and
    builds a matcher over them all, so their number and length are bounded like the config's."""
    if len(contents) > MAX_ADDED_TOKENS:
        raise InputError(str(path), "added_tokens", f"{len(contents):,} added tokens; at most {MAX_ADDED_TOKENS:,}")
    longest = max(contents, key=len, default="")
    if len(longest) > MAX_TOKEN_CHARS:
        raise InputError(
            str(path), "added_tokens", f"an added token of {len(longest):,} characters (at most {MAX_TOKEN_CHARS:,})"
        )


def _check_added_tokens(path: Path) -> None:
    if not path.is_file():
        return
    tokens = read_json_object(path, MAX_CONFIG_BYTES)
    if len(tokens) > MAX_ADDED_TOKENS:
        raise InputError(str(path), None, f"{len(tokens):,} added tokens; at most {MAX_ADDED_TOKENS:,}")
    for content, ident in tokens.items():
        if len(content) > MAX_TOKEN_CHARS or isinstance(ident, bool) or not isinstance(ident, int):
            raise InputError(
                str(path),
                excerpt(content),
                f"must map a token (at most {MAX_TOKEN_CHARS} characters) to its id, not {excerpt(ident)}",
            )


def _check_model_config(path: Path) -> None:
    """config.json: AutoTokenizer reads it for the tokenizer class when tokenizer_config.json has none."""
    if not path.is_file():
        return
    config = read_json_object(path, MAX_SMALL_JSON_BYTES)
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict) and "AutoTokenizer" in auto_map:
        raise InputError(
            str(path),
            "auto_map",
            f"names tokenizer code in the folder to run ({excerpt(auto_map['AutoTokenizer'])}); {NO_CODE}",
        )
    if config.get("tokenizer_class") is not None:
        _check_class(config["tokenizer_class"], lambda where, what: InputError(str(path), where, what))


def _check_templates(folder: Path) -> None:
    _check_size(folder / "chat_template.jinja", MAX_TEMPLATE_BYTES)
    if (folder / "chat_template.json").is_file():
        value = read_json_object(folder / "chat_template.json", MAX_SMALL_JSON_BYTES)
        check_template_value(
            value.get("chat_template"), lambda where, what: InputError(str(folder / "chat_template.json"), where, what)
        )
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        files = sorted(extra.glob("*.jinja"))
        if len(files) > MAX_EXTRA_TEMPLATES:
            raise InputError(str(extra), None, f"{len(files):,} templates (at most {MAX_EXTRA_TEMPLATES})")
        for f in files:
            _check_size(f, MAX_TEMPLATE_BYTES)
