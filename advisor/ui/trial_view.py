"""The trial's results as the Trial page shows them: a speed chart and measured-against-predicted tables.

The speed figures come from ``advisor.trial.report.speed_report``, the function the command line prints, so the
page and ``python -m advisor trial`` show the same medians, spreads, interval and warnings for the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from advisor.trial import jobs
from advisor.trial.report import SpeedReport, loss_rows, shown, speed_report, speedup_text
from advisor.ui.blocks import Block, Code, Text


def speed_table(rep: SpeedReport) -> pd.DataFrame:
    """Per way: timed steps, median tokens/s with min, max and IQR over the steps, and the median step time."""
    return pd.DataFrame([shown(r) for r in rep.rows])


def results_tables(result: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Speed (the report's rows) and measured against predicted (speed-up from medians, memory)."""
    rep = speed_report(result)
    m = result["memory"]
    s = rep.speedup
    # short names first, then measured, predicted and their ratio, the interval last: at 1280-1440 px the predicted
    # column stays on screen (a long first column pushed it off)
    memory = pd.DataFrame(
        [
            {
                "quantity": "speed-up, packed / padded",
                "measured": s.point,
                "predicted": rep.predicted_speedup,
                "note": f"medians; {s.confidence:.0%} interval {s.low:.2f}x-{s.high:.2f}x",
            },
            {
                "quantity": "memory, total MiB",
                "measured": m["measured_bytes"] / 2**20,
                "predicted": m["predicted_bytes"] / 2**20,
                "note": "",
            },
            {
                "quantity": "memory, state MiB",
                "measured": m.get("measured_state_bytes", 0) / 2**20,
                "predicted": m.get("predicted_state_bytes", 0) / 2**20,
                "note": "weights, gradients, Adam",
            },
            {
                "quantity": "memory, activations MiB",
                "measured": m.get("measured_activation_bytes", 0) / 2**20,
                "predicted": m.get("predicted_activation_bytes", 0) / 2**20,
                "note": "",
            },
        ]
    )
    memory.insert(3, "measured / predicted", memory["measured"] / memory["predicted"])
    return speed_table(rep), memory.round(3)


def speed_notes(result: dict) -> tuple[str, tuple[str, ...], str]:
    """(the speed-up as text, the noise warnings, the note on the packed kernel): what the page writes under the
    tables, the same lines the CLI prints."""
    rep = speed_report(result)
    return speedup_text(rep), rep.warnings, rep.kernel_note


def results_chart(result: dict) -> go.Figure:
    """Median tokens/s per way, whiskers from the slowest to the fastest timed step."""
    rep = speed_report(result)
    speed = speed_table(rep)
    med = speed["median tokens/s"]
    fig = go.Figure(
        go.Bar(
            x=speed["way"],
            y=med,
            marker_color=["#54a24b", "#e45756", "#f58518"][: len(speed)],
            error_y=dict(
                type="data", symmetric=False, array=speed["max tokens/s"] - med, arrayminus=med - speed["min tokens/s"]
            ),
        )
    )
    predicted = f"{rep.predicted_speedup:.2f}x" if rep.predicted_speedup is not None else "n/a"
    fig.update_layout(
        title=f"Median tokens/s on {result['device']} (speed-up {speedup_text(rep)}, predicted {predicted})",
        yaxis_title="real tokens/s, min-max over steps",
        margin=dict(t=50, b=40),
    )
    return fig


def parity_text(result: dict) -> str:
    """The parity line: packed against each sample alone, with the bounds the run checked (its own trial.json's).

    >>> parity_text({"loss_parity": {"max_abs_diff": 2e-7, "bound": 1e-5},
    ...              "grad_parity": {"max_rel_diff": 3e-6, "bound": 1e-4}})
    'Parity: loss 2.00e-07 (bound 1e-05), gradients 3.00e-06 (bound 0.0001)'
    """
    parts = []
    for what, key, diff in (("loss", "loss_parity", "max_abs_diff"), ("gradients", "grad_parity", "max_rel_diff")):
        p = result[key]
        parts.append(f"{what} {p[diff]:.2e}" + (f" (bound {p['bound']:g})" if "bound" in p else ""))
    return "Parity: " + ", ".join(parts)


def loss_table(result: dict) -> pd.DataFrame | None:
    """Step-0 loss ratios packed / unpacked, measured and predicted, per loss setting (None for a trial.json from
    before the loss-weighting check)."""
    rows = loss_rows(result)
    return pd.DataFrame(rows).round(6) if rows else None


# ---------------------------------------------------------------------------------------------- the job, followed
# The Trial page follows its job once a second (a Streamlit fragment); what a poll means for the session is decided
# here, so the page only draws it: polling is also the job's heartbeat (jobs.poll), and a finished job's results move
# into the session before its folder is removed (jobs.collect).


@dataclass(frozen=True, kw_only=True)
class Following:
    state: str  # running, done, failed, cancelled
    log: str

    @property
    def running(self) -> bool:
        return self.state == "running"


def running(session) -> bool:
    """Whether the session's trial job is still running (the Start button waits for it)."""
    job = session.get("trial_job")
    return job is not None and jobs.poll(job)["state"] == "running"


def start(session, plan, hist, *, steps: int, pack_size: int, scale: str) -> str | None:
    """Start the server's one trial for this session; None, or why not (another is running, over the budget)."""
    try:
        session["trial_job"] = jobs.start_trial(plan, hist, steps=steps, pack_size=pack_size, scale=scale)
    except (jobs.JobBusy, ValueError) as e:
        return str(e)
    return None


def follow(session) -> Following | None:
    """Poll the session's job (None without one); a job that ended leaves its results and its last state and log
    in the session (``trial_result``, ``trial_status``) and the job itself is forgotten."""
    job = session.get("trial_job")
    if job is None:
        return None
    status = jobs.poll(job)
    if status["state"] != "running":
        session["trial_result"] = jobs.collect(job)  # the folder is removed
        session["trial_status"] = (status["state"], status["log"])
        del session["trial_job"]
    return Following(state=status["state"], log=status["log"])


def cancel(session) -> None:
    if (job := session.get("trial_job")) is not None:
        jobs.cancel(job)


def following_blocks(f: Following) -> tuple[Block, ...]:
    """What the page shows while it follows a job: its state and the log's last lines."""
    return (Text(kind="write", text=f"Trial {f.state}"), Code(text=f.log or "starting…"))


def outcome_blocks(session) -> tuple[Block, ...]:
    """How the last job ended, once it has (its log too when it did not finish)."""
    if "trial_status" not in session or "trial_job" in session:
        return ()
    state, log = session["trial_status"]
    done = state == "done"
    return (Text(kind="success" if done else "error", text=f"Trial {state}"),) + (() if done else (Code(text=log),))


def use_upload(session, upload) -> str | None:
    """A trial.json from a run elsewhere as the session's result; None, or why it was refused."""
    try:
        session["trial_result"] = jobs.read_results(upload.getvalue(), upload.name)
    except ValueError as e:
        return str(e)
    return None
