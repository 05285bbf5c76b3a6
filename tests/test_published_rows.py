"""Every published run the step-time model is fitted on, as a plan with its layout as published: ``estimate`` answers
for each (no row refused), in under a second, with the step the calibration computes."""

from __future__ import annotations

import csv
import time

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
    systems = {row.get("system") for _, row in ROWS}
    assert {"H100-80GB", "B200", "B300", "GB200", "GB300"} <= systems
    assert {row["precision"] for _, row in ROWS} == {"bf16", "fp8", "mxfp8", "nvfp4"}


@pytest.mark.parametrize("table,row", ROWS, ids=[f"{n[:3]}-{r.get('release', '')}-{r['model']}-{r.get('system', '')}"
                                                  f"-{r['precision']}-{r['gpus']}" for n, r in ROWS])
def test_estimate_answers_for_every_published_row(table, row):
    plan = plan_of_row(row, table)
    p = plan.parallel
    assert (p.gpus, p.tp, p.pp, p.cp, p.ep) == tuple(int(row[k]) for k in ("gpus", "tp", "pp", "cp", "ep"))
    assert p.fsdp is (row.get("fsdp") == "yes")
    assert plan.training.precision == row["precision"]
    start = time.perf_counter()
    est = estimate(plan, CORPUS)
    assert time.perf_counter() - start < 1.0
    t = est.time
    assert t.step_seconds > 0 and sum(t.breakdown.values()) == pytest.approx(t.step_seconds)
    # the same step the calibration fits: full rows of seq_length, the published batch
    measured = next(m for m in load_measurements() if m.plan == plan)
    assert t.step_seconds == pytest.approx(step_time(plan, measured.work, EFFICIENCY).step_seconds, rel=1e-6)
    assert 0.3 < t.step_seconds / float(row["step_seconds"]) < 3
