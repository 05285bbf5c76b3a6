"""Generated raw data: SFT records, conversations (messages, ShareGPT, tool calls) and legacy ``<extra_id_*>``
chats in the fixture tokenizer's words, with the few records Megatron-Bridge rejects mixed in. Seeded: the same
seed gives the same records, so the oracle tests and the tests beside them read the same data."""

from __future__ import annotations

import json
import random

from tests.support.tokenizer_fixture import CORPUS

WORDS = CORPUS.read_text(encoding="utf-8").split()
SPECIAL_TEXT = ["<|eot_id|>", "<|begin_of_text|>", "<extra_id_1>", "{output}", "\\n"]  # tokens and braces in data


def text(rng: random.Random, max_words: int) -> str:
    """Words of the corpus with its spacing habits: sometimes long, sometimes empty, odd spaces and specials."""
    n = rng.choice([0, 1, 2, 5, 12, 30, max_words, rng.randint(0, max_words)])
    words = [rng.choice(WORDS) for _ in range(n)]
    if words and rng.random() < 0.15:
        words.insert(rng.randrange(len(words)), rng.choice(SPECIAL_TEXT))
    sep = rng.choice([" ", " ", " ", "\n", "  ", "\t"])
    out = sep.join(words)
    if rng.random() < 0.2:
        out = " " * rng.randint(1, 3) + out
    if rng.random() < 0.2:
        out += rng.choice([" ", "  ", "\n", " \n"])
    return out


def sft_records(seed: int, n: int, max_words: int = 120) -> list[dict]:
    """Records with every key the templates below use; a few lack one or hold a number instead of text."""
    rng = random.Random(seed)
    keys = ("input", "output", "context", "question", "answer", "a", "b")
    records = [{k: text(rng, max_words) for k in keys} for _ in range(n)]
    for i in rng.sample(range(n), 4):
        del records[i][rng.choice(keys)]
    records[rng.randrange(n)]["output"] = 42
    return records


# (Bridge's GPTSFTDataset keyword arguments, the advisor's settings)
SFT_CASES = {
    "defaults": dict(),
    "bos_sep_no_eos_left": dict(add_bos=True, add_sep=True, add_eos=False, truncation_method="left"),
    "three_fields": dict(
        prompt_template="Context: {context}\n\nQuestion: {question}\n\nAnswer: {answer}",
        label_key="answer",
        truncation_field="context,question",
    ),
    "escaped_no_field_right": dict(
        prompt_template="Q: {question}\\nA:{answer}", label_key="answer", truncation_field=None
    ),
    "escaped_no_field_left": dict(
        prompt_template="Q: {question}\\nA:{answer}",
        label_key="answer",
        truncation_field=None,
        truncation_method="left",
    ),
    "legacy_context_name": dict(prompt_template="{input}\n### {output}", truncation_field="context"),
    "virtual_generate_right": dict(virtual_tokens=3, tokens_to_generate=20, add_bos=True),
    "generate_left": dict(tokens_to_generate=40, truncation_method="left", add_sep=True),
    "label_truncated_too": dict(truncation_field="input,output"),
    "spaces_in_template": dict(prompt_template="  {a}   {b}  x{input} \t {output}", truncation_field="b,a"),
    "is_test": dict(is_test=True),
}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
]


def chat_records(seed: int, n: int) -> list[dict]:
    """messages (system prompts, multi-turn, tool calls and results, row tools), singular ``conversation``,
    ShareGPT ``conversations`` (human/gpt, User/Assistant, a top-level system), and a few Bridge rejects."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        roll = rng.random()
        turns = []
        if rng.random() < 0.5:
            turns.append({"role": "system", "content": text(rng, 40)})
        for _ in range(rng.randint(1, 4)):
            turns.append({"role": "user", "content": text(rng, 60)})
            if rng.random() < 0.2:
                call = {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": rng.choice(WORDS)}},
                }
                turns.append({"role": "assistant", "content": None, "tool_calls": [call]})
                turns.append({"role": "tool", "content": json.dumps({"temp": rng.randint(-10, 30)})})
            turns.append({"role": "assistant", "content": text(rng, 80)})
        if roll < 0.55:
            rec = {"messages": turns}
            if rng.random() < 0.3:
                rec["tools"] = TOOLS[: rng.randint(0, 2)]
        elif roll < 0.65:
            rec = {"conversation": turns}
        else:
            names = rng.choice([("human", "gpt"), ("User", "Assistant"), ("user", "assistant")])
            plain = [t for t in turns if t["role"] in ("user", "assistant") and t["content"] is not None]
            rec = {"conversations": [{"from": names[t["role"] == "assistant"], "value": t["content"]} for t in plain]}
            if rng.random() < 0.5:
                rec["system"] = text(rng, 20)
        records.append(rec)
    bad = [
        {"messages": [{"role": "user", "content": "no answer"}]},  # no assistant turn
        {"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]},  # template raises
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": []}]},  # no content
        {"messages": []},
        {"text": "not a chat"},
        {"messages": "hello"},
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "system", "content": "late"},
                {"role": "assistant", "content": "b"},
            ]
        },
    ]
    for rec in bad:
        records.insert(rng.randrange(len(records) + 1), rec)
    return records


def legacy_records(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        speakers = rng.choice([("User", "Assistant"), ("User", "Bot"), ("Human", "Assistant")])
        turns = [{"from": speakers[j % 2], "value": text(rng, 50)} for j in range(rng.randint(2, 6))]
        rec = {"system": text(rng, 20), "conversations": turns}
        roll = rng.random()
        if roll < 0.15:
            rec["mask"] = speakers[1]
        elif roll < 0.25:
            rec["mask"] = f"{speakers[0]},{speakers[1]}"
        elif roll < 0.3:
            rec["type"] = "VALUE_TO_TEXT"
            for t in turns:
                t["label"] = "quality:" + str(rng.randint(0, 9))
        records.append(rec)
    records += [
        {"system": "", "conversations": [{"from": "User", "value": "only the user"}]},  # all masked
        {"system": "s", "conversations": [{"from": "Assistant", "value": "a"}]},  # mask role User absent
        {"conversations": [{"from": "User", "value": "a"}, {"from": "Assistant", "value": "b"}]},  # no system
        {"system": "s", "messages": [{"role": "user", "content": "a"}]},
        {"system": "s", "type": "SUMMARY", "conversations": [{"from": "User", "value": "a"}]},
        {"system": None, "conversations": [{"from": "User", "value": "a"}, {"from": "Assistant", "value": ""}]},
        {"system": "s", "conversations": [{"from": "User", "value": "a"}, {"from": "Assistant", "value": 3}]},
    ]
    return records
