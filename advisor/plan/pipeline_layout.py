"""Which layers each pipeline stage holds: Megatron-Core's ``pipeline_model_parallel_layout``.

Alternatives: the even split (``num_layers / (pp x vpp)`` layers a stage, the embedding and the loss optionally
counted as layers: ``account_for_*_in_pipeline_split``), or this explicit layout, which DeepSeek-V3 and Kimi-K2 need
(61 layers divide by no pipeline). Followed: megatron/core/transformer/pipeline_parallel_layer_layout.py
(``PipelineParallelLayerLayout``: ``parse_str_to_list``, ``__init__``, ``validate_layer_layout``), Megatron-Core
0.19.2, and the recipes' default layouts in Megatron-Bridge 0.6.2 (recipes/deepseek/h100/deepseek_v3.py
``set_deepseek_v3_pipeline_model_parallel_layout``, recipes/kimi/h100/kimi_k2.py ``_get_kimi_k2_pipeline_layout``).

A layout lists the virtual stages in schedule order: stage ``v x pp + r`` is virtual stage v of pipeline rank r.

    >>> stages = parse_layout("Et|(tt|)*2L")
    >>> stages
    (('embedding', 'decoder'), ('decoder', 'decoder'), ('decoder', 'decoder'), ('loss',))
    >>> [(r.decoders, r.embedding, r.loss) for r in rank_layers(stages, pp=2)]
    [((0, 3, 4), True, False), ((1, 2), False, True)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
KINDS = ("embedding", "loss", "decoder", "mtp")
MAX_STAGES = 4096


@dataclass(frozen=True, kw_only=True)
class RankLayers:
    """What one pipeline rank holds over its virtual stages: its decoder layers (0-based ids), whether it holds
    the input embedding and the loss (with the output layer), and how many MTP layers."""

    decoders: tuple[int, ...]
    embedding: bool
    loss: bool
    mtp: int


def parse_layout(layout: str | list) -> tuple[tuple[str, ...], ...]:
    """The stages of a layout string (``parse_str_to_list``: commas dropped, ``(...)*n`` then ``x*n`` unrolled,
    ``|`` between stages; E embedding, t decoder, m MTP, L loss) or list of lists of layer names (case and spaces
    ignored, as Megatron-Core's ``LayerType[name.strip().lower()]``). Raises ValueError saying what is wrong.

        >>> parse_layout([["Embedding", "decoder"], ["decoder ", "loss"]])
        (('embedding', 'decoder'), ('decoder', 'loss'))
        >>> parse_layout("Ex|L")
        Traceback (most recent call last):
        ...
        ValueError: invalid layer character 'x' in stage 'Ex' (known: E, L, t, m)
    """
    if isinstance(layout, str):
        text = _unrolled(layout.replace(",", ""))
        stages = []
        for stage in text.split("|"):
            bad = next((c for c in stage if c not in CHARS), None)
            if bad is not None:
                raise ValueError(f"invalid layer character {bad!r} in stage {stage[:40]!r} (known: {', '.join(CHARS)})")
            stages.append(tuple(CHARS[c] for c in stage))
        out = tuple(stages)
    elif isinstance(layout, list) and all(isinstance(row, list) for row in layout):
        rows: list[tuple[str, ...]] = []
        for row in layout:
            names: list[str] = []
            for name in row:
                if not isinstance(name, str) or (key := name.strip().lower()) not in KINDS:
                    raise ValueError(f"{str(name)[:40]!r} is not a layer type ({', '.join(KINDS)})")
                names.append(key)
            rows.append(tuple(names))
        out = tuple(rows)
    else:
        raise ValueError("must be a layout string such as 'Et*3|(t*4|)*6tL' or a list of lists of layer names")
    if len(out) > MAX_STAGES:
        raise ValueError(f"{len(out):,} stages: at most {MAX_STAGES:,}")
    return out


MAX_CHARS = 1_000_000  # unrolled layout characters: a pipeline of 4,096 stages of 244 layers


def _unrolled(text: str) -> str:
    """``(...)*n`` then ``x*n`` unrolled, as ``parse_str_to_list`` does, within ``MAX_CHARS`` in all: 16 characters
    such as "(t*99999|)*99999" would otherwise unroll to 10^10 (the growth is counted as each repeat is made, so
    a pass stops at the first repeat past the budget)."""
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, _Repeats(len(text)), text)
    return text


class _Repeats:
    """``re.sub``'s replacement for one pass: each repeat made, the text's size kept, refused past the budget."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, x: re.Match) -> str:
        n = int(x.group(2)) if len(x.group(2)) <= 7 else MAX_CHARS + 1
        self.size += len(x.group(1)) * n - len(x.group(0))
        if self.size > MAX_CHARS:
            raise ValueError(f"unrolls past {MAX_CHARS:,} characters ({x.group(0)[:40]!r} and before it)")
        return x.group(1) * n


def layout_problems(
    stages: tuple[tuple[str, ...], ...], pp: int, vpp: int | None, num_layers: int, mtp_num_layers: int
) -> list[str]:
    """What Megatron-Core refuses in a parsed layout for this pipeline (``__init__``: stages a multiple of pp;
    ``validate_layer_layout``), plus the plan's vpp against the layout's, one message per rule.

        >>> layout_problems(parse_layout("Ett|tL"), pp=2, vpp=None, num_layers=4, mtp_num_layers=0)
        ['has 3 decoder layers (t), the model 4 (model.num_layers)']
    """
    out = []
    if not stages or len(stages) % pp:
        return [f"has {len(stages)} stages, not a multiple of parallel.pp {pp}"]
    v = len(stages) // pp
    if (vpp or 1) != v:
        out.append(
            f"has {len(stages)} stages: {v} virtual stage(s) per pipeline rank, and parallel.vpp is "
            f"{vpp} (set vpp to {v if v > 1 else 'null'})"
        )
    flat = [k for stage in stages for k in stage]
    if not flat or flat[0] != "embedding":
        out.append("must start with the embedding (E)")
    if not flat or flat[-1] != "loss":
        out.append("must end with the loss (L)")
    for kind, letter in (("embedding", "E"), ("loss", "L")):
        if flat.count(kind) != 1:
            out.append(f"must hold the {kind} ({letter}) exactly once, not {flat.count(kind)} times")
    if flat.count("decoder") != num_layers:
        out.append(f"has {flat.count('decoder')} decoder layers (t), the model {num_layers} (model.num_layers)")
    if flat.count("mtp") != mtp_num_layers:
        out.append(f"has {flat.count('mtp')} MTP layers (m), the model {mtp_num_layers} (model.mtp_num_layers)")
    if "mtp" in flat and "decoder" in flat[flat.index("mtp") :]:
        out.append("places a decoder layer after an MTP layer")
    grid = [[stages[u * pp + r] for u in range(v)] for r in range(pp)]
    if any("mtp" in grid[r][u] for r in range(pp) for u in range(v - 1)):
        out.append("places MTP layers before a rank's last virtual stage (Megatron-Core keeps them in the last)")
    if any("mtp" in grid[r][-1] and grid[r][-1].count("mtp") != mtp_num_layers for r in range(pp)):
        out.append("splits the MTP layers over stages (Megatron-Core needs them in one)")
    return out


def rank_layers(stages: tuple[tuple[str, ...], ...], pp: int) -> list[RankLayers]:
    """Each pipeline rank's layers (layer ids counted in schedule order, as ``get_layer_offset``). The embedding
    and the output layer with the loss are where Megatron-Core builds them, on the first and the last rank
    (GPTModel's pre_process and post_process), whatever stage the E and L of a valid layout sit in ("|Et|tL" leaves
    stage 0 empty); the MTP layers where the layout puts them (``mtp_on_this_rank``)."""
    held: list[dict] = [{"decoders": [], "mtp": 0} for _ in range(pp)]
    layer = 0
    for s, stage in enumerate(stages):
        h = held[s % pp]
        for kind in stage:
            if kind == "decoder":
                h["decoders"].append(layer)
                layer += 1
            elif kind == "mtp":
                h["mtp"] += 1
    return [
        RankLayers(decoders=tuple(h["decoders"]), embedding=r == 0, loss=r == pp - 1, mtp=h["mtp"])
        for r, h in enumerate(held)
    ]


def layout_string(stages: tuple[tuple[str, ...], ...]) -> str:
    """The stages as a layout string both Megatron-LM's ``--pipeline-model-parallel-layout`` and Megatron-Core
    parse back to the same stages (runs of one layer written ``t*4``).

        >>> layout_string(parse_layout([["embedding", "decoder", "decoder", "decoder"], ["decoder", "mtp", "loss"]]))
        'Et*3|tmL'
    """
    letter = {v: k for k, v in CHARS.items()}
    out = []
    for stage in stages:
        text, k = "", 0
        while k < len(stage):
            j = k
            while j < len(stage) and stage[j] == stage[k]:
                j += 1
            text += letter[stage[k]] + (f"*{j - k}" if j - k > 2 else letter[stage[k]] * (j - k - 1))
            k = j
        out.append(text)
    return "|".join(out)


def layout_summary(stages: tuple[tuple[str, ...], ...], pp: int) -> dict:
    """What a layout places, for people: the layout string and each rank's decoder layers and MTP layers.

    >>> layout_summary(parse_layout("Et*3|tmL"), 2)
    {'layout': 'Et*3|tmL', 'layers_per_rank': [3, 1], 'mtp_per_rank': [0, 1]}
    """
    ranks = rank_layers(stages, pp)
    return {
        "layout": layout_string(stages),
        "layers_per_rank": [len(r.decoders) for r in ranks],
        "mtp_per_rank": [r.mtp for r in ranks],
    }


def ranks_text(summary: dict) -> str:
    """Each rank's layers from ``layout_summary``, as the CLI and the dashboard say them.

    >>> ranks_text(layout_summary(parse_layout("Et*3|tmL"), 2))
    'decoder layers per rank 3, 1, MTP 1 on rank 1'
    """
    mtp = "".join(f", MTP {k} on rank {r}" for r, k in enumerate(summary["mtp_per_rank"]) if k)
    return f"decoder layers per rank {', '.join(map(str, summary['layers_per_rank']))}{mtp}"


# Megatron-Bridge's recipes set these when no layout is given (the performance scripts pass layout=None with
# their pp and vp): DeepSeek-V3 with its MTP layers before the loss, Kimi-K2 without
_LAST = object()  # where the recipe puts ["mtp"] * mtp_num_layers + ["loss"]


def _recipe_map(*, two_by_eight: bool) -> dict[tuple[int, int], list]:
    e = ["embedding"]
    d = ["decoder"]
    return {
        (4, 1): [e + d * 16, d * 16, d * 16, d * 13 + [_LAST]],
        (8, 1): [e + d * 8] + [d * 8] * 6 + [d * 5 + [_LAST]],
        (4, 2): [e + d * 8] + [d * 8] * 6 + [d * 5 + [_LAST]],
        (16, 1): [e + d * 4] + [d * 4] * 14 + [d + [_LAST]],
        (8, 2): [e + d * 4] + [d * 4] * 14 + [d + [_LAST]],
        (4, 4): [e + d * 4] + [d * 4] * 14 + [d + [_LAST]],
        **({(2, 8): [e + d * 4] + [d * 4] * 14 + [d + [_LAST]]} if two_by_eight else {}),
    }


RECIPE_LAYOUTS = {"deepseek-v3": _recipe_map(two_by_eight=False), "kimi-k2": _recipe_map(two_by_eight=True)}


def recipe_layout(preset: str | None, pp: int, vpp: int | None, mtp_num_layers: int) -> list[list[str]] | None:
    """The layout Megatron-Bridge's recipe for ``preset`` sets at this pp and vpp, or None (no such recipe or
    pipeline: the even split applies).

        >>> recipe_layout("kimi-k2", 16, None, 0)[-1]
        ['decoder', 'loss']
        >>> recipe_layout("deepseek-v3", 16, None, 1)[-1]
        ['decoder', 'mtp', 'loss']
    """
    table = RECIPE_LAYOUTS.get(preset or "")
    rows = table.get((pp, vpp or 1)) if table else None
    if rows is None:
        return None
    tail = ["mtp"] * mtp_num_layers + ["loss"]
    return [[x for k in row for x in (tail if k is _LAST else [k])] for row in rows]
