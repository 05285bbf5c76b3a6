"""A small Hugging Face tokenizer folder trained in the tests, so Megatron-Bridge and the advisor read the same files.

``build_tokenizer`` trains a byte-level BPE (about 1,000 tokens) on ``tests/fixtures/tokenizer_corpus.txt`` with the
``tokenizers`` library and writes ``tokenizer.json`` and ``tokenizer_config.json`` with a Llama-3-like Jinja chat
template (system, user, assistant, tool turns and tool definitions). Its special tokens carry Llama 3's names, so
Megatron-Bridge 0.6.2 recognises the turn markers when it builds assistant loss masks, and by default its
post-processor puts ``<|begin_of_text|>`` before every encoded text, as Llama 3's does.

    >>> import tempfile
    >>> folder = build_tokenizer(Path(tempfile.mkdtemp()))
    >>> sorted(p.name for p in folder.iterdir())
    ['tokenizer.json', 'tokenizer_config.json']
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import FIXTURES

CORPUS = FIXTURES / "tokenizer_corpus.txt"

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# Llama 3.1's template, shortened: a system block (with the tool definitions when there are any), then one block
# per turn; assistant tool calls are written as JSON, tool results as an ``ipython`` turn. An unknown role (or a
# system message after the first) raises, as Llama's templates do for conversations they cannot render.
CHAT_TEMPLATE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{%- if system_message or tools %}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
    {%- if tools %}
        {{- 'You have access to the following functions:\\n\\n' }}
        {%- for t in tools %}
            {{- t | tojson(indent=4) }}
            {{- '\\n\\n' }}
        {%- endfor %}
    {%- endif %}
    {{- system_message }}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] not in ['user', 'assistant', 'tool', 'ipython'] %}
        {{- raise_exception('Unknown role ' + message['role'] + ': use system (first), user, assistant, tool') }}
    {%- endif %}
    {%- if message['role'] in ['tool', 'ipython'] %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
        {%- if message['content'] is string %}
            {{- message['content'] }}
        {%- else %}
            {{- message['content'] | tojson }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- elif message['tool_calls'] is defined and message['tool_calls'] %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- for call in message['tool_calls'] %}
            {%- set f = call['function'] if call['function'] is defined else call %}
            {{- '{"name": "' + f['name'] + '", "parameters": ' + (f['arguments'] | tojson) + '}' }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""


def build_tokenizer(
    folder: Path,
    *,
    bos_in_post_processor: bool = True,
    vocab_size: int = 1000,
    chat_template: str | None = CHAT_TEMPLATE,
    config_extra: dict | None = None,
) -> Path:
    """Train the fixture tokenizer and write it into ``folder`` (created if needed); return ``folder``.

    ``bos_in_post_processor`` makes every ``encode(..., add_special_tokens=True)`` start with ``<|begin_of_text|>``
    (Llama 3); without it the post-processor adds nothing (GPT-2, Qwen). ``config_extra`` is merged into
    ``tokenizer_config.json``. Deterministic for a given corpus; well under a second.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(keepends=True), trainer=trainer)
    byte_level = processors.ByteLevel(trim_offsets=False)
    if bos_in_post_processor:
        bos_id = tok.token_to_id(BOS)
        template = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1", special_tokens=[(BOS, bos_id)]
        )
        tok.post_processor = processors.Sequence([byte_level, template])
    else:
        tok.post_processor = byte_level
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    config.update(config_extra or {})
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    return folder
