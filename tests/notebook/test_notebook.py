"""The walk-through notebook: stored without outputs, and it runs top to bottom."""

from __future__ import annotations

import nbformat
import pytest

from tests.support import ROOT

NOTEBOOK = ROOT / "notebooks" / "tour.ipynb"


def test_outputs_are_stripped_in_git():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.slow  # a Jupyter kernel and a CPU trial
@pytest.mark.timeout(300)
def test_the_notebook_runs_top_to_bottom():
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=170, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "packing factor n" in text and "loss parity" in text and "PackedSequenceSpecs" in text
    assert "loss weighting (calculate_per_token_loss=False" in text and "packing-invariant" in text
    assert "loss weighting, calculate_per_token_loss=True: step-0 objective packed/unpacked measured 1.0000" in text
    assert any(
        "application/vnd.plotly.v1+json" in o.get("data", {}) or "text/html" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )  # the figures were drawn
