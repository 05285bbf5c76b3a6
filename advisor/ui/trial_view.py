"""The trial's results as the Trial page shows them: a speed chart and measured-against-predicted tables."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


def results_tables(result: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Speed (measured per way, speed-up against the FLOPs prediction) and memory (measured against predicted)."""
    speed = pd.DataFrame([{"way": w, "tokens/s": result[w]["tokens_per_second"], "step s": result[w]["step_seconds"]}
                          for w in ("packed", "padded", "block_masked") if w in result])
    m = result["memory"]
    memory = pd.DataFrame([
        {"quantity": "packed / padded speed-up", "measured": result.get("speedup"),
         "predicted": result.get("predicted_speedup")},
        {"quantity": "memory, total MiB", "measured": m["measured_bytes"] / 2**20,
         "predicted": m["predicted_bytes"] / 2**20},
        {"quantity": "memory, weights+grads+Adam MiB", "measured": m.get("measured_state_bytes", 0) / 2**20,
         "predicted": m.get("predicted_state_bytes", 0) / 2**20},
        {"quantity": "memory, activations MiB", "measured": m.get("measured_activation_bytes", 0) / 2**20,
         "predicted": m.get("predicted_activation_bytes", 0) / 2**20},
    ])
    memory["measured / predicted"] = memory["measured"] / memory["predicted"]
    return speed, memory.round(3)


def results_chart(result: dict) -> go.Figure:
    speed, memory = results_tables(result)
    fig = go.Figure(go.Bar(x=speed["way"], y=speed["tokens/s"], marker_color=["#54a24b", "#e45756", "#f58518"]))
    fig.update_layout(title=f"Measured tokens/s on {result['device']} (speed-up {result.get('speedup', 0):.2f}x, "
                            f"predicted {result.get('predicted_speedup') or 0:.2f}x)", yaxis_title="real tokens/s",
                      margin=dict(t=50, b=40))
    return fig
