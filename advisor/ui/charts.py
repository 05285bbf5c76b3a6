"""Plotly figures for the dashboard, built from engine results (no Streamlit here, so they are tested like the rest)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from advisor.advice.compare import PackingComparison
from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import Estimate
from advisor.model.loss_expectation import LossWeighting
from advisor.packing.metrics import even_histogram, integer_counts
from advisor.packing.offline import PackingResult
from advisor.packing.online.results import RunSchedule, StepSchedule

COLORS = {
    "weights": "#4c78a8",
    "gradients": "#72b7b2",
    "optimizer": "#54a24b",
    "activations": "#f58518",
    "logits_and_loss": "#e45756",
    "overhead": "#bab0ac",
    "communicators": "#9d755d",
}


def _mark(fig: go.Figure, x: float, log: bool, text: str, dash: str = "dash", color: str = "#e45756") -> None:
    """A vertical line at x with a label. On a log axis plotly places shapes by value but annotations by exponent:
    ``add_vline(x=256, annotation_text=...)`` put the label at 10^256 and stretched the axis to 10^279 (seen on the
    Packing page), so the label is added apart."""
    fig.add_vline(x=x, line_dash=dash, line_color=color)
    fig.add_annotation(
        x=math.log10(x) if log else x,
        y=1,
        yref="paper",
        yanchor="bottom",
        text=text,
        showarrow=False,
        font=dict(color=color),
    )


def length_histogram(
    hist: LengthHistogram, pack_size: int | None = None, log_x: bool = False, log_y: bool = False, bins: int = 80
) -> go.Figure:
    """Samples by length, with the pack size marked."""
    lo, hi = max(1, int(hist.lengths[0])), int(hist.lengths[-1])
    edges = np.geomspace(lo, hi + 1, bins + 1) if log_x and hi > lo else np.linspace(lo, hi + 1, bins + 1)
    counts, edges = np.histogram(hist.lengths, bins=edges, weights=hist.counts)
    fig = go.Figure(
        go.Bar(
            x=(edges[:-1] + edges[1:]) / 2,
            y=counts,
            width=np.diff(edges),
            name="samples",
            marker_color="#4c78a8",
            hovertemplate="%{x:.0f} tokens: %{y:,} samples<extra></extra>",
        )
    )
    if pack_size:
        _mark(fig, pack_size, log_x, f"pack size {pack_size:,}")
    fig.update_layout(
        title="Sequence lengths",
        xaxis_title="tokens per sample",
        yaxis_title="samples",
        bargap=0,
        margin=dict(t=50, b=40),
    )
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return fig


def sweep_curves(sweep: pd.DataFrame, metric: str = "packing_efficiency", pack_size: int | None = None) -> go.Figure:
    """A metric against pack size, one curve per algorithm (and the no-packing baselines, dashed); the chosen pack
    size marked."""
    fig = go.Figure()
    for name, part in sweep.groupby("algorithm", sort=False):
        dashed = name.startswith("no packing")
        fig.add_trace(
            go.Scatter(
                x=part["pack_size"],
                y=part[metric],
                mode="lines+markers",
                name=name,
                line=dict(dash="dash" if dashed else "solid"),
            )
        )
    if pack_size:
        _mark(fig, pack_size, True, f"chosen {pack_size:,}", dash="dot")
    labels = {
        "packing_efficiency": "efficiency %",
        "padding_fraction": "padding fraction",
        "packing_factor": "packing factor n",
    }
    model = f" (scale model of the data, {sweep.attrs['samples']:,} samples)" if sweep.attrs.get("scale_model") else ""
    fig.update_layout(
        title=f"{labels.get(metric, metric)} against pack size{model}",
        xaxis_title="pack size",
        yaxis_title=labels.get(metric, metric),
        margin=dict(t=50, b=40),
    )
    fig.update_xaxes(type="log")
    return fig


def _binned_bars(values: np.ndarray, edges: np.ndarray, color: str, what: str, weights=None) -> go.Bar:
    """A histogram binned here with numpy, so the browser gets one bar per bin, never one value per pack: 8M packs
    of Wikipedia were 87 MB of JSON as a plotly Histogram, and are a few kB as these bars. ``edges`` are evenly
    spaced: numpy then bins by arithmetic, not by sorting the values (0.3 s for 8M packs)."""
    if weights is None:
        counts, edges = even_histogram(values, edges[0], edges[-1], edges.size - 1)
    else:
        counts, edges = np.histogram(values, bins=edges.size - 1, range=(edges[0], edges[-1]), weights=weights)
    counts = counts.astype(np.int64)
    hover = f"{what} %{{customdata[0]:,.0f}}-%{{customdata[1]:,.0f}}: %{{y:,}} packs<extra></extra>"
    return go.Bar(
        x=(edges[:-1] + edges[1:]) / 2,
        y=counts,
        width=np.diff(edges),
        marker_color=color,
        customdata=np.stack([edges[:-1], edges[1:]], axis=1),
        hovertemplate=hover,
    )


def pack_fill_histogram(result: PackingResult, bins: int = 50) -> go.Figure:
    """Packs by how full they are (binned on the server)."""
    fill, _, _ = result.per_pack
    packs = integer_counts(fill)  # packs per fill in tokens: each distinct fill binned once, weighted by its packs
    fig = go.Figure(
        _binned_bars(
            np.arange(packs.size) / result.config.pack_size * 100,
            np.linspace(0, 100, bins + 1),
            "#54a24b",
            "fill %",
            weights=packs,
        )
    )
    fig.update_layout(
        title="How full the packs are",
        xaxis_title="pack fill %",
        yaxis_title="packs",
        bargap=0,
        margin=dict(t=50, b=40),
    )
    return fig


def micro_batch_tokens(mb, bins: int = 50) -> go.Figure:
    """Micro batches by tokens: the data's against what the GEMMs compute (padding included), binned on the server."""
    top = max(1.0, float(mb.computed_tokens.max())) * (1 + 1e-9)
    edges = np.linspace(0, top, bins + 1)
    bars = []
    for values, color, name in (
        (mb.real_tokens, "#54a24b", "data tokens"),
        (mb.computed_tokens, "#e45756", "computed tokens"),
    ):
        bar = _binned_bars(values, edges, color, name)
        bar.update(
            name=name,
            hovertemplate=f"{name} %{{customdata[0]:,.0f}}-%{{customdata[1]:,.0f}}: %{{y:,}} "
            "micro batches<extra></extra>",
        )
        bars.append(bar)
    fig = go.Figure(bars)
    fig.update_layout(
        title="Tokens per micro batch: data against computed (padding)",
        xaxis_title="tokens",
        yaxis_title="micro batches",
        bargap=0,
        barmode="overlay",
        margin=dict(t=50, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    fig.update_traces(opacity=0.7)
    return fig


def attention_work_histogram(result: PackingResult, bins: int = 60) -> go.Figure:
    """Packs by attention work sum(s_i^2) (binned on the server), the mean and the heaviest marked."""
    _, _, work = result.per_pack
    m = result.metrics
    top = max(1.0, float(m.attention_work_max))  # the packing's own maximum: no pass over millions of packs
    fig = go.Figure(_binned_bars(work, np.linspace(0, top * (1 + 1e-9), bins + 1), "#f58518", "sum(s^2)"))
    fig.add_vline(x=m.attention_work_mean, line_dash="dash", annotation_text="mean")
    fig.add_vline(
        x=m.attention_work_max,
        line_dash="dot",
        line_color="#e45756",
        annotation_text=f"max = {m.straggler_ratio:.2f} x mean",
    )
    fig.update_layout(
        title="Attention work per pack, sum(s_i^2)",
        xaxis_title="sum of squared sample lengths",
        yaxis_title="packs",
        bargap=0,
        margin=dict(t=50, b=40),
    )
    return fig


def payload_bytes(fig: go.Figure) -> int:
    """What the figure sends to the browser (its JSON), to keep every chart under a budget."""
    return len(fig.to_json().encode())


STRIP_SEGMENTS = 32  # samples drawn one by one in a pack's bar; the rest of a pack is one segment


def pack_strip(result: PackingResult, n: int = 40) -> go.Figure:
    """The first packs as stacked bars of their samples: each pack's first ``STRIP_SEGMENTS - 1`` samples, and
    the rest of it as one segment. Why the cap: a pack can hold any number of samples (at pack size 1 every
    sample is cut to one token, whose label position is the next one, and all 88,641 of SQuAD share pack 0), and
    one trace per depth drew a figure of 88,641 traces: the page never finished."""
    rows = []
    for i in range(min(n, result.num_packs)):
        pack = result.pack(i)
        shown = list(pack[: STRIP_SEGMENTS - 1]) if len(pack) > STRIP_SEGMENTS else list(pack)
        for j, s in enumerate(shown):
            rows.append((i, j, int(s), f"sample {j + 1}"))
        if len(pack) > len(shown):
            rest = pack[len(shown) :]
            rows.append((i, len(shown), int(sum(rest)), f"{len(rest):,} more samples"))
    fig = go.Figure()
    depth = max((r[1] for r in rows), default=0) + 1
    for j in range(depth):
        at = [r for r in rows if r[1] == j]
        fig.add_trace(
            go.Bar(
                x=[r[0] for r in at],
                y=[r[2] for r in at],
                name=f"sample {j + 1}",
                showlegend=False,
                customdata=[r[3] for r in at],
                hovertemplate="pack %{x}, %{customdata}: %{y} tokens<extra></extra>",
            )
        )
    fig.add_hline(y=result.config.pack_size, line_dash="dash", annotation_text="pack size")
    fig.update_layout(
        barmode="stack",
        title=f"The first {min(n, result.num_packs)} packs",
        xaxis_title="pack",
        yaxis_title="tokens",
        margin=dict(t=50, b=40),
    )
    return fig


def memory_bar(est: Estimate) -> go.Figure:
    """Memory per GPU by component against the GPU's capacity, with Megatron-Bridge's own estimate beside it."""
    m = est.memory
    fig = go.Figure()
    for name, value in m.breakdown.items():
        fig.add_trace(
            go.Bar(
                x=["advisor"],
                y=[value / 2**30],
                name=name,
                marker_color=COLORS[name],
                hovertemplate=f"{name}: %{{y:.2f}} GiB<extra></extra>",
            )
        )
    mb = m.megatron_bridge
    fig.add_trace(
        go.Bar(
            x=["Megatron-Bridge 0.6.2"],
            y=[mb.weight_and_optimizer_bytes / 2**30],
            name="MB weights + optimizer",
            marker_color="#9d755d",
        )
    )
    fig.add_trace(
        go.Bar(
            x=["Megatron-Bridge 0.6.2"], y=[mb.activation_bytes / 2**30], name="MB activations", marker_color="#ff9da6"
        )
    )
    fig.add_hline(y=m.capacity / 2**30, line_color="#e45756", annotation_text=f"GPU {m.capacity / 2**30:.0f} GiB")
    fig.update_layout(
        barmode="stack",
        title=f"Memory per GPU: {m.total / 2**30:.1f} GiB ({'fits' if m.fits else 'does not fit'})",
        yaxis_title="GiB",
        margin=dict(t=50, b=40),
    )
    return fig


def attention_flops_bars(est: Estimate) -> go.Figure:
    a = est.flops.attention
    names = {"thd": "THD: sum(s_i^2)", "block_mask": "block-masked: (sum s_i)^2", "padded": "padded: b x s^2"}
    fig = go.Figure(
        go.Bar(
            x=[names[k] for k in ("thd", "block_mask", "padded")],
            y=[a[k] / 1e12 for k in ("thd", "block_mask", "padded")],
            marker_color=["#54a24b", "#f58518", "#e45756"],
        )
    )
    fig.update_layout(
        title=f"Attention core TFLOPs per step (THD / block-masked = {est.flops.attention_ratio:.2f})",
        yaxis_title="TFLOPs per step",
        margin=dict(t=50, b=40),
    )
    return fig


# what each step-time term models, in the order a step runs them (advisor/model/perf/step.py)
STEP_TERMS = {
    "gemm": "GEMMs",
    "attention": "attention",
    "memory_bound": "norms, activations, loss",
    "recompute": "recompute",
    "quantize": "FP8/FP4 casts",
    "tp_comm": "TP comm (exposed)",
    "cp_comm": "CP comm (exposed)",
    "moe_all_to_all": "MoE all-to-all",
    "moe_dispatch": "MoE dispatch overhead",
    "fsdp_comm": "FSDP gathers (exposed)",
    "pp_bubble": "pipeline bubble",
    "pp_p2p": "pipeline sends",
    "dp_comm": "DP sync (exposed)",
    "optimizer": "optimizer",
    "straggler": "straggler wait",
    "slowest_gpu": "slowest GPU's pace",
    "dataloader": "waiting for the data loader",
    "compute": "compute (fixed MFU)",
}


def step_breakdown(est: Estimate) -> go.Figure:
    """Where a step's seconds go, one stacked horizontal bar: compute, each exposed communication, the bubble, the
    optimizer and the straggler wait. Terms under 0.1 % of the step are left out of the bar and named in the title.

    >>> from advisor.plan import plan_from_dict
    >>> from advisor.data.lengths import LengthHistogram
    >>> import numpy as np
    >>> from advisor.model.estimate import estimate
    >>> est = estimate(plan_from_dict({"model": "llama3.1-8b", "training": {"seq_length": 2048}}),
    ...                LengthHistogram(lengths=np.array([300, 900]), counts=np.array([500, 500]), source="x"))
    >>> [t.name for t in step_breakdown(est).data][:2]
    ['GEMMs', 'attention']
    """
    t = est.time
    fig = go.Figure()
    small = []
    for key, seconds in t.breakdown.items():
        if seconds <= 0.001 * t.step_seconds:
            if seconds > 0:
                small.append(STEP_TERMS.get(key, key))
            continue
        name = STEP_TERMS.get(key, key)
        fig.add_trace(
            go.Bar(
                y=["step"],
                x=[seconds],
                name=name,
                orientation="h",
                hovertemplate=f"{name}: %{{x:.3f}} s ({seconds / t.step_seconds:.1%})<extra></extra>",
            )
        )
    tail = f"; under 0.1 %: {', '.join(small)}" if small else ""
    fig.update_layout(
        barmode="stack",
        height=260,
        xaxis_title="seconds per step",
        margin=dict(t=60, b=40),
        title=f"Step {t.step_seconds:.3f} s, MFU {t.mfu:.0%} of the {t.peak_format.upper()} peak ({t.model}){tail}",
        legend=dict(orientation="h", y=-0.45, traceorder="normal"),
    )
    return fig


def memory_heatmap(grid: pd.DataFrame) -> go.Figure:
    """Memory per GPU (GiB) over pack size and CP; cells that do not fit (✗) or that break a rule Megatron enforces
    (!, the rule named on hover) are marked."""
    if "breaks" not in grid:
        grid = grid.assign(breaks="")
    table = grid.pivot(index="cp", columns="pack_size", values="memory_gib")
    fits = grid.pivot(index="cp", columns="pack_size", values="fits")
    breaks = grid.pivot(index="cp", columns="pack_size", values="breaks").fillna("")
    text = [
        [f"{v:.0f}{'' if ok else ' ✗'}{' !' if why else ''}" for v, ok, why in zip(row, frow, brow, strict=True)]
        for row, frow, brow in zip(table.values, fits.values, breaks.values, strict=True)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=table.values,
            x=[str(c) for c in table.columns],
            y=[str(r) for r in table.index],
            text=text,
            texttemplate="%{text}",
            colorscale="Viridis",
            customdata=breaks.values,
            hovertemplate="CP %{y}, pack %{x}: %{z:.1f} GiB %{customdata}<extra></extra>",
            colorbar=dict(title="GiB"),
        )
    )
    fig.update_layout(
        title="Memory per GPU by pack size and CP (✗: does not fit; !: breaks a rule)",
        xaxis_title="pack size",
        yaxis_title="CP",
        margin=dict(t=50, b=40),
    )
    fig.update_xaxes(type="category")  # numbers as labels: one cell per value, not a continuous axis
    fig.update_yaxes(type="category")
    return fig


MAX_STEP_POINTS = 1000  # an epoch of 1M samples is ~4,000 steps: binned to this many points, the band keeps min/max


def online_steps(run: RunSchedule) -> go.Figure:
    """Micro batches per step over the epoch (left axis) and each step's straggler wait (right axis); past 1,000
    steps each point is a bin of steps: its mean, with the min-max band.

    >>> import numpy as np
    >>> from advisor.packing.online import OnlineConfig, schedule
    >>> run = schedule(np.full(64, 100), OnlineConfig(commit="dev", dataset="mock_sft", seq_length=512,
    ...                                               global_batch_size=8, dp=2))
    >>> [t.name for t in online_steps(run).data]
    ['micro batches per step', 'straggler (slowest rank / mean)']
    """
    nmb = run.num_micro_batches.astype(np.float64)
    strag = run.step_straggler
    steps = nmb.size
    bins = max(1, math.ceil(steps / MAX_STEP_POINTS))
    usable = steps // bins * bins
    x = run.step_ids[:usable].reshape(-1, bins).mean(axis=1)  # the run's step numbers (a scale model's spread)
    fig = go.Figure()
    if bins > 1:
        shaped = nmb[:usable].reshape(-1, bins)
        fig.add_trace(
            go.Scatter(
                x=np.r_[x, x[::-1]],
                y=np.r_[shaped.max(axis=1), shaped.min(axis=1)[::-1]],
                fill="toself",
                fillcolor="rgba(76,120,168,0.2)",
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
            )
        )
        nmb_y, strag_y = shaped.mean(axis=1), strag[:usable].reshape(-1, bins).mean(axis=1)
    else:
        nmb_y, strag_y = nmb, strag
    fig.add_trace(
        go.Scatter(
            x=x,
            y=nmb_y,
            mode="lines",
            name="micro batches per step",
            line=dict(color="#4c78a8"),
            hovertemplate="step %{x:.0f}: %{y:.2f} micro batches<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=strag_y,
            mode="lines",
            name="straggler (slowest rank / mean)",
            yaxis="y2",
            line=dict(color="#e45756", width=1),
            hovertemplate="step %{x:.0f}: x%{y:.2f}<extra></extra>",
        )
    )
    s = run.summary
    per = f" (each point a mean of {bins} steps, band min-max)" if bins > 1 else ""
    of = f" of {s.epoch_steps:,}" if s.epoch_steps > s.steps else ""
    fig.update_layout(
        title=f"{s.steps:,}{of} steps: {s.micro_batches_mean:.2f} micro batches per step "
        f"({s.micro_batches_min}-{s.micro_batches_max}){per}",
        xaxis_title="step",
        yaxis=dict(title="micro batches per DP rank", rangemode="tozero"),
        yaxis2=dict(title="straggler", overlaying="y", side="right", rangemode="tozero"),
        legend=dict(orientation="h", y=-0.25),
        margin=dict(t=50, b=40),
    )
    return fig


def online_rank_work(step: StepSchedule, cp: int) -> go.Figure:
    """One step's attention work (sum of s^2 over the sequences, split over the CP group) per micro batch and
    DP x CP rank: the step waits for the rank whose column sums highest."""
    work = np.asarray(step.work, dtype=np.float64)
    tokens = np.asarray(step.tokens, dtype=np.float64)
    ranks = work.shape[1] if work.ndim == 2 else 0
    labels = [f"DP {r // cp} CP {r % cp}" for r in range(ranks)]
    fig = go.Figure(
        go.Heatmap(
            z=work,
            x=labels,
            y=[f"micro batch {m}" for m in range(work.shape[0])],
            customdata=tokens,
            colorscale="Viridis",
            colorbar=dict(title="sum s^2"),
            hovertemplate="%{y}, %{x}: work %{z:.3g}, %{customdata:,.0f} tokens<extra></extra>",
        )
    )
    state = (
        f"REFUSED by the real scheduler: {step.refused[:90]}" if step.refused else f"straggler x{step.straggler:.2f}"
    )
    fig.update_layout(
        title=f"Step {step.step}: {step.num_micro_batches} micro batches, {state}",
        xaxis_title="DP x CP rank",
        margin=dict(t=50, b=40),
        height=max(260, 60 + 40 * work.shape[0]),
    )
    return fig


def packing_comparison(comparison: PackingComparison) -> go.Figure:
    """Real tokens per second per GPU of each way of packing, labelled with step time, straggler and padding (a way
    refused on this layout has no bar)."""
    rows = [r for r in comparison.rows() if not r["refusal"]]
    colors = ["#54a24b" if r["way"] == comparison.recommended else "#9ecae9" for r in rows]
    text = [
        f"{r['step_seconds']:.2f} s/step, x{r['straggler']:.2f}, pad {r['padding']:.1%}"
        + ("" if r["fits"] else ", DOES NOT FIT")
        + (f", {r['refused_steps']} refused" if r["refused_steps"] else "")
        for r in rows
    ]
    fig = go.Figure(
        go.Bar(
            x=[r["way"] for r in rows],
            y=[r["tokens_per_second_per_gpu"] for r in rows],
            marker_color=colors,
            text=text,
            textposition="outside",
            hovertemplate="%{x}: %{y:,.0f} tokens/s/GPU<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{comparison.recommended}: fits, trains fastest per sample (within 2 %), loses fewest tokens",
        yaxis_title="real tokens/s/GPU",
        margin=dict(t=50, b=40),
    )
    return fig


def loss_weight_shares(lw: LossWeighting) -> go.Figure:
    """Share of a step's gradient by sample length (loss tokens): token-uniform (what calculate_per_token_loss
    gives), the plan's run and the same samples unpacked, drawn over the data's length distribution (the share of
    samples in each length bin). One value per bin: a few dozen numbers whatever the data's size."""
    b = lw.bins
    edges = b.edges.astype(np.int64)
    labels = [f"{lo:,}-{hi - 1:,}" if hi - 1 > lo else f"{lo:,}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=b.samples,
            name="samples (the data's lengths)",
            marker_color="#c7c7c7",
            hovertemplate="%{x} loss tokens: %{y:.1%} of the samples<extra></extra>",
        )
    )
    plan_name = lw.packed.name if lw.packed is not None else "the plan (unpacked)"
    # the plan's line wide and half transparent underneath, token-uniform thin and dotted on top: where the two run
    # together (a packing-invariant plan) both stay visible, neither hides the other
    for name, values, color, dash, width, opacity in (
        (f"{plan_name}, your settings", b.plan, "#4c78a8", "solid", 6, 0.55),
        ("same samples unpacked, your settings", b.unpacked, "#e45756", "dash", 2, 1.0),
        ("token-uniform (per-token loss)", b.uniform, "#2ca02c", "dot", 2, 1.0),
    ):
        if lw.packed is None and values is b.unpacked:
            continue
        hover = "%{x} loss tokens: %{y:.1%} of a step's gradient<extra>" + name + "</extra>"
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=values,
                name=name,
                mode="lines+markers",
                hovertemplate=hover,
                opacity=opacity,
                line=dict(color=color, dash=dash, width=width),
            )
        )
    o = lw.objective_same
    title = (
        "Gradient weight by sample length: packing-invariant (every token 1/N)"
        if lw.invariant
        else f"Gradient weight by sample length: {lw.moved_vs_unpacked:.0%} moves when packing is turned on "
        f"(step-0 objective packed/unpacked {o.mean:.3f})"
    )
    axis = "loss tokens per sample" + (" (the data's loss mask)" if lw.masked else " (every label: no loss mask)")
    # the legend above the plot, under the title: below it, it covered the axis title and the tick labels
    fig.update_layout(
        title=title,
        xaxis_title=axis,
        yaxis_title="share",
        yaxis_tickformat=".0%",
        margin=dict(t=110, b=60),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    )
    return fig
