"""The trial's launch scripts run as written: bash runs each, with torchrun, srun and scontrol replaced by stubs that
record their arguments; the plan the script writes reads back as the plan exported, on the GPUs it asks for."""

from __future__ import annotations

import os
import subprocess

import pytest

from advisor.analysis import analyze
from advisor.data.lengths import LengthHistogram
from advisor.plan import load_plan, plan_from_dict

DATA = LengthHistogram.from_samples([100, 200, 300, 4000] * 50)
STUB = '#!/bin/bash\nprintf "%s\\n" "$(basename "$0")" "$@" > "$RECORD.$(basename "$0")"\n'


def _run(script: str, tmp_path) -> dict[str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("torchrun", "srun", "scontrol"):
        (bin_dir / tool).write_text(STUB)
        (bin_dir / tool).chmod(0o755)
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sh").write_text(script)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RECORD": str(tmp_path / "called"),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_ID": "7",
    }
    proc = subprocess.run(["bash", "job.sh"], cwd=job, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {p.name.split(".")[-1]: p.read_text().splitlines() for p in tmp_path.glob("called.*")}


@pytest.mark.parametrize(
    ("gpu", "gpus", "nodes", "per_node"),
    [("H100-80GB", 2, 1, 2), ("H100-80GB", 16, 2, 8), ("H100-80GB", 12, 2, 6), ("GB200", 8, 2, 4), ("GB200", 6, 2, 3)],
)
@pytest.mark.parametrize("fmt", ["torchrun", "slurm"])
def test_the_script_writes_the_plan_it_was_exported_from_and_runs_it_on_its_gpus(
    fmt, gpu, gpus, nodes, per_node, tmp_path
):
    plan = plan_from_dict(
        {
            "model": "llama3.1-8b",
            "parallel": {"gpus": gpus},
            "hardware": {"gpu": gpu},
            "training": {"seq_length": 4096, "global_batch_size": 96},
        }
    )
    analysis = analyze(plan, DATA)
    called = _run(analysis.export(fmt), tmp_path)
    argv = called["srun" if fmt == "slurm" else "torchrun"]
    if fmt == "slurm":
        argv = argv[1:]  # srun's own name, then torchrun's command line
        assert argv[argv.index("--nnodes") + 1] == str(nodes)
    assert argv[0] == "torchrun" and argv[argv.index("--nproc-per-node") + 1] == str(per_node)
    plan_file = argv[argv.index("trial") + 1]
    assert load_plan(str(tmp_path / "job" / plan_file)) == analysis.plan  # the plan exported, not a file named alike
    assert argv[argv.index("--device") + 1] == "cuda"


def test_a_recommended_plan_is_the_plan_the_script_runs(tmp_path):
    plan = plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 8}, "training": {"seq_length": 4096}})
    analysis = analyze(plan, DATA)
    recommended = analysis.searched(vary=("gpu",)).recommended
    called = _run(analysis.export("torchrun", recommended=True, vary=("gpu",)), tmp_path)
    argv = called["torchrun"]
    assert load_plan(str(tmp_path / "job" / argv[argv.index("trial") + 1])) == recommended
