"""Each page's read-only part as blocks (advisor/ui/blocks.py): what a page shows of the engine's results, in order,
built and tested here without Streamlit; the pages keep only their controls and buttons and call ``place``.

The alternative, each page writing ``st.metric``/``st.caption`` itself, left 35-87 lines of layout per page that
only a browser test reached.
"""

from __future__ import annotations

import json

import pandas as pd

from advisor.advice.traps import GROUP_TITLE, OUTCOMES, TRAPS
from advisor.data.lengths import LengthHistogram
from advisor.findings import Finding, by_severity
from advisor.model.loss_expectation import LossWeighting
from advisor.plan import Plan
from advisor.ui import charts, trial_view, views
from advisor.ui.blocks import Block, Chart, Code, Fold, Markdown, Metric, Metrics, Row, Table, Text, metrics
from advisor.ui.text import plain

# the pages' own words, in the engine so the pages stay placement
HOME_INTRO = Text(
    kind="caption",
    markdown=True,
    text=(
        "Plan packed-sequence and long-context training on Megatron-Bridge / Megatron-LM from your data's "
        "sequence lengths. New here? Start with the Tour in the sidebar."
    ),
)
LINK_NOTE = Text(
    kind="caption",
    markdown=True,
    text=(
        "The address bar is a link to this plan on every page: it reopens the dashboard on the same plan "
        "(sample data by name; uploaded data is not in the link, and the link says so when opened)."
    ),
)
TRIAL_INTRO = Text(
    kind="caption",
    markdown=True,
    text=(
        "Trains a small GPT with the plan's head dimension, GQA ratio and SwiGLU on synthetic tokens of your "
        "length distribution; checks packed loss and gradients against each sample alone. CPU runs are small "
        "and slow; on a GPU node run `python -m advisor trial PLAN --device cuda --out DIR` and upload trial.json. "
        "One trial runs on this server at a time; it stops when you close the page."
    ),
)


def data_summary(hist: LengthHistogram, name: str, plan: Plan, log_x: bool, log_y: bool) -> tuple[Block, ...]:
    """The Data page's right-hand side: the data's name, its four figures, the length histogram, the summary table,
    what reading it noted and every row left out (counted, with the first place)."""
    return (
        Text(kind="subheader", text=name),  # an uploaded file's name: escaped when drawn
        metrics([(label, value, label) for label, value in views.summary_numbers(hist).items()]),
        Chart(figure=charts.length_histogram(hist, plan.pack_size, log_x, log_y), explain="length_histogram"),
        Table(frame=views.summary_table(hist), stretch=True),
        *(Text(kind="info", text=note) for note in hist.notes),
        *(
            Text(kind="warning", text=f"left out {e.count:,} rows: {e.reason} (first at {e.first_at})")
            for e in hist.excluded
        ),
    )


def headline(shown: dict) -> Metrics:
    """The Packing page's headline row from ``views.packing_headline`` or ``micro_batch_headline``."""
    return metrics(shown["figures"])


def waiting_caption(previous: dict, plan: Plan) -> Text:
    """Said above the previous packing's figures while the plan's pack size is packed."""
    return Text(
        kind="caption",
        text=f"Showing pack size {previous['pack_size']:,} ({previous['algorithm']}) while pack size "
        f"{plan.pack_size:,} is packed",
    )


def micro_batches(plan: Plan, est) -> tuple[Block, ...]:
    """The Packing page when the plan does not pack offline (in-batch, online, global-batch, none): no packs, the
    micro batches (and, for a scheduled mode, what its scheduler gives per step)."""
    schedule = views.schedule_caption(plan, est)
    return (
        headline(views.micro_batch_headline(plan, est.micro_batches)),
        Text(kind="caption", text=views.global_batch_example_text(plan, None)),
        *(() if schedule is None else (Text(kind="caption", text=schedule),)),
        Chart(figure=charts.micro_batch_tokens(est.micro_batches), explain="micro_batch_tokens"),
    )


def packing_details(plan: Plan, result) -> tuple[Block, ...]:
    """Under the Packing page's headline: the global batch in packs, the CP example, the metadata Megatron-Bridge
    will write (exactly), and the packing's notes."""
    return (
        Text(
            kind="caption",
            text=views.global_batch_example_text(plan, result.packing_factor) + " " + views.cp_example_text(plan),
        ),
        Text(kind="subheader", text="Megatron-Bridge metadata, as it will be written", help="metadata"),
        Code(text=json.dumps([result.metadata]), language="json", wrap=True),
        *(Text(kind="info", text=note) for note in result.notes),
    )


def packing_charts(result) -> tuple[Block, ...]:
    """The Packing page's charts of one packing: pack fill and attention work side by side, then the pack strip."""
    return (
        Row(
            columns=(
                (Chart(figure=charts.pack_fill_histogram(result), explain="pack_fill"),),
                (Chart(figure=charts.attention_work_histogram(result), explain="attention_work"),),
            )
        ),
        Chart(figure=charts.pack_strip(result), explain="pack_strip"),
    )


def memory(analysis, est) -> tuple[Block, ...]:
    """The Memory & FLOPs page under its controls: the global batch, the layout, offloading, the memory verdict,
    the four headline figures, the memory and attention charts, the step breakdown and why the advisor's memory
    differs from Megatron-Bridge's own estimate."""
    m, t = est.memory, est.time
    notes = (views.pipeline_layout_text(analysis.plan), views.offload_text(est))
    return (
        Text(kind="caption", text=views.global_batch_example_text(analysis.plan, analysis.packing_factor)),
        *(Text(kind="caption", text=n) for n in notes if n is not None),
        *(() if m.fits else (Text(kind="error", text=views.memory_error_text(est)),)),
        Metrics(
            items=(
                Metric(
                    label="memory per GPU (fits)" if m.fits else "memory per GPU: DOES NOT FIT",
                    value=f"{m.total / 2**30:.1f} of {m.capacity / 2**30:.0f} GiB",
                    help="memory",
                ),
                Metric(
                    label=f"step time (straggler x{t.straggler_factor:.2f})",
                    value=f"{t.step_seconds:.3f} s",
                    help="step_time",
                ),
                Metric(label="tokens/s/GPU", value=f"{t.tokens_per_second_per_gpu:,.0f}", help="tokens_per_second"),
                Metric(label="time per epoch", value=f"{t.epoch_seconds / 3600:.2f} h", help="epoch_time"),
            )
        ),
        Row(
            columns=(
                (Chart(figure=charts.memory_bar(est), explain="memory_bar"),),
                (
                    Chart(figure=charts.attention_flops_bars(est), explain="attention_flops"),
                    Text(kind="caption", text=views.attention_example_text()),
                ),
            )
        ),
        Chart(figure=charts.step_breakdown(est), explain="step_breakdown"),
        *logged(est),
        Fold(
            label="Why the advisor and Megatron-Bridge differ",
            body=(Markdown(text=bullet_list(m.differences)),),
        ),
    )


def bullet_list(items) -> str:
    """Engine text as a Markdown bullet list, each item escaped (never read as Markdown).

    >>> bullet_list(["a *b*", "c"])
    '- a \\\\*b\\\\*\\n- c'
    """
    return "\n".join(f"- {plain(item)}" for item in items)


def logged(est) -> tuple[Block, ...]:
    """What Megatron-Bridge's and Megatron-LM's logs will print for this step (their own formulas), beside the
    useful figures: the table a user holds against their logs."""
    if est.logged is None:
        return ()
    frame = pd.DataFrame(
        [
            {"framework": g.framework, "log line": g.line, "value": f"{g.value:,.1f} {g.unit}", "counts": g.counts}
            for g in est.logged.figures()
        ]
    )
    return (Text(kind="subheader", text="What your logs will print", help="logged"), Table(frame=frame, stretch=True))


def finding(f: Finding) -> Fold:
    """One finding as the Recommendations page folds it: the reason, its source (a known trap's upstream thread
    as a link); errors open."""
    source = (
        Text(kind="caption", markdown=True, text=f"Upstream: [{f.link}]({f.link})")
        if f.link and f.link.startswith("https://")  # the catalogue's own addresses, never a visitor's text
        else Text(kind="caption", text=f"Source: {f.source}")
    )
    return Fold(
        label=f"{f.id}: {f.message}",
        expanded=f.severity == "error",
        body=(Text(kind="error" if f.severity == "error" else "write", text=f.reason), source),
    )


def preflight_clean(plan: Plan, findings) -> tuple[Block, ...]:
    """Said when no known trap bites the plan: at which releases, and how many traps were checked."""
    if any(f.outcome for f in findings):
        return ()
    v = plan.versions
    return (
        Text(
            kind="success",
            text=f"No known trap bites this plan at Megatron-Bridge {v.megatron_bridge}, Megatron-Core "
            f"{v.megatron_core}, Transformer Engine {v.transformer_engine} ({len(TRAPS)} checked).",
        ),
    )


def preflight_groups(findings) -> list[tuple[str, list[Finding]]]:
    """The known traps among the findings, grouped by what they would do ("Would crash", "Would train wrong", ...),
    in the catalogue's order of outcomes; groups with none left out."""
    groups = {o: [f for f in findings if f.outcome == o] for o in OUTCOMES}
    return [(f"{GROUP_TITLE[o]} ({len(g)})", g) for o, g in groups.items() if g]


def other_groups(findings) -> list[tuple[str, list[Finding]]]:
    """The advisor's other findings by severity, most severe first (every severity shown, empty or not)."""
    rest = [f for f in findings if f.outcome is None]
    return [(f"{s.title()}s ({len(g)})", g) for s, g in by_severity(rest).items()]


def loss(lw: LossWeighting) -> tuple[Block, ...]:
    """ "Will my loss change?": the loss weighting's headline figures, the chart of weight shares, what it models."""
    return (
        metrics(views.loss_metrics(lw)),
        Chart(figure=charts.loss_weight_shares(lw), explain="loss_weights"),
        Text(kind="caption", text=views.loss_caption(lw)),
    )


def candidates(analysis, result) -> tuple[Block, ...]:
    """The layout search's best candidates, and what the search could not change or try."""
    note = views.search_note(analysis, result)
    return (Table(frame=views.candidates_table(result), stretch=True),) + (
        (Text(kind="caption", text=note),) if note else ()
    )


def prepare(plan: Plan) -> tuple[Block, ...]:
    """The command that writes the packed data set as the plan packs it (offline packing only)."""
    command = views.prepare_text(plan)
    if not command:
        return ()
    return (
        Text(
            kind="caption",
            text="Write the packed data set yourself, packed as this plan says (then point data.lengths at OUT):",
            help="prepare",
        ),
        Code(text=command, language="bash"),
    )


def online(comparison) -> tuple[Block, ...]:
    """The Online packing page's comparison of the modes on this data, and the recommendation in one sentence."""
    return (
        Chart(figure=charts.packing_comparison(comparison), explain="packing_comparison"),
        Text(kind="caption", text=f"The ways of packing: {comparison.basis}."),
        Table(frame=views.comparison_table(comparison)),
        Text(kind="info", text=f"Recommended: {comparison.recommended}. {comparison.why}"),
    )


def online_run(run) -> tuple[Block, ...]:
    """One online schedule: its steps, and what the estimate of it stands on."""
    note = views.online_estimate_text(run)
    return (
        Chart(figure=charts.online_steps(run), explain="online_steps"),
        *(() if note is None else (Text(kind="caption", text=note),)),
    )


def trial_results(result: dict) -> tuple[Block, ...]:
    """A trial's results (run here or uploaded): the speed chart, speed and memory measured against predicted, the
    speed-up and its warnings, parity, and the step-0 loss against the loss-weighting model."""
    speed, memory_table = trial_view.results_tables(result)
    speedup, warnings, kernel_note = trial_view.speed_notes(result)
    loss_table = trial_view.loss_table(result)
    return (
        Chart(figure=trial_view.results_chart(result), explain="trial_chart"),
        Row(columns=((Table(frame=speed),), (Table(frame=memory_table),))),
        Text(kind="write", text=f"Speed-up packed/padded (median tokens/s): {speedup}"),
        *(Text(kind="warning", text=w) for w in warnings),
        *((Text(kind="info", text=kernel_note),) if kernel_note else ()),
        Text(kind="write", text=trial_view.parity_text(result)),
        *(
            ()
            if loss_table is None
            else (
                Text(kind="subheader", text="Loss at step 0, packed / unpacked", help="trial_loss"),
                Table(frame=loss_table),
                Text(kind="caption", text=result["loss_weighting"]["how"]),
            )
        ),
    )
