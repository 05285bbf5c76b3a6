"""Every published run the step-time model is fitted on, as a plan with its layout as published: ``estimate`` answers
for each (no row refused) with the step the calibration computes, and the errors are the ones docs/step-time.md
states (median 6.3 %, 90th percentile 19.6 %, max 60.8 % over the 118 rows). How long an estimate takes is
measured by bench/bench_estimate.py, not asserted here."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from advisor.data.lengths import LengthHistogram
from advisor.model.estimate import estimate
from advisor.model.perf.calibration import CALIBRATION_CSVS, EFFICIENCY, load_measurements, plan_of_row
from advisor.model.perf.step import step_time

ROWS = [(path.name, row) for path in CALIBRATION_CSVS for row in csv.DictReader(open(path, encoding="utf-8"))]
# pre-training data: documents long enough to fill whole rows; the sequence length sets the rows, not the documents
CORPUS = LengthHistogram(lengths=np.array([2000, 9000]), counts=np.array([200_000, 200_000]), source="corpus")


def test_both_tables_are_whole():
    names = [name for name, _ in ROWS]
    assert names.count("published_step_times.csv") == 18 and names.count("mb_performance_pretrain.csv") == 83
    assert names.count("long_sequence_tflops.csv") == 17
    systems = {row.get("system") for _, row in ROWS}
    assert {"H100-80GB", "B200", "B300", "GB200", "GB300"} <= systems
    assert {row["precision"] for _, row in ROWS} == {"bf16", "fp8", "mxfp8", "nvfp4"}


@pytest.mark.parametrize(
    "table,row",
    ROWS,
    ids=[
        f"{n[:3]}-{r.get('release', '')}-{r['model']}-{r.get('system', '')}-{r['precision']}-{r['gpus']}"
        for n, r in ROWS
    ],
)
def test_estimate_answers_for_every_published_row(table, row):
    plan = plan_of_row(row, table)
    p = plan.parallel
    assert (p.gpus, p.tp, p.pp, p.cp, p.ep) == tuple(int(row[k]) for k in ("gpus", "tp", "pp", "cp", "ep"))
    assert p.fsdp is (row.get("fsdp") == "yes")
    assert plan.training.precision == row["precision"]
    est = estimate(plan, CORPUS)
    t = est.time
    assert t.step_seconds > 0 and sum(t.breakdown.values()) == pytest.approx(t.step_seconds)
    # the same step the calibration fits: full rows of seq_length, the published batch
    measured = next(m for m in load_measurements() if m.plan == plan)
    assert t.step_seconds == pytest.approx(step_time(plan, measured.work, EFFICIENCY).step_seconds, rel=1e-6)
    assert abs(t.step_seconds / float(row["step_seconds"]) - 1) <= DOCUMENTED["max"] + 5e-4  # as the docs round


DOCUMENTED = {"median": 0.061, "p90": 0.195, "max": 0.612}  # docs/step-time.md, "All 118 rows", rounded as it is


def test_the_errors_over_every_published_row_are_the_documented_ones():
    errors = np.array(
        [
            abs(estimate(plan_of_row(row, table), CORPUS).time.step_seconds / float(row["step_seconds"]) - 1)
            for table, row in ROWS
        ]
    )
    assert np.median(errors) <= DOCUMENTED["median"] + 5e-4
    assert np.percentile(errors, 90) <= DOCUMENTED["p90"] + 5e-4
    assert errors.max() <= DOCUMENTED["max"] + 5e-4
