"""Launch scripts for the trial on GPU nodes: one node with torchrun, several with Slurm (data parallelism, NCCL).

Each script carries the plan it was exported from: it writes the plan to a file beside the job (a quoted here
document, so the shell expands nothing in it) and runs the trial on that file. The alternative, naming the plan file
the user loaded, breaks for a recommended plan (in no file yet), a plan edited on the dashboard, or a job started in
another folder.

>>> from advisor.plan import plan_from_dict
>>> script = trial_torchrun(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": 4}}))
>>> 'torchrun --nproc-per-node 4 -m advisor trial "$PLAN"' in script, 'PLAN=trial_plan_$$.yaml' in script
(True, True)
"""

from __future__ import annotations

import shlex

from advisor.plan import Plan, dump_plan

# each run its own plan file (two jobs from one folder would otherwise overwrite each other's): the shell's PID for
# the one-node script, the job's id under Slurm
PLAN_FILE = "trial_plan_$$.yaml"
SLURM_PLAN_FILE = "trial_plan_${SLURM_JOB_ID}.yaml"
END = "END_OF_ADVISOR_PLAN"  # the here document's end; a YAML dump has no line of this bare word


def _gpus(plan: Plan) -> tuple[int, int]:
    """(nodes, GPUs a node): the plan's GPUs exactly, the same number on each node (torchrun's one
    --nproc-per-node), on as few of its system's nodes as hold them (GB200: 4 GPUs a node).

    >>> from advisor.plan import plan_from_dict
    >>> b = {"global_batch_size": 96}
    >>> [_gpus(plan_from_dict({"model": "llama3.1-8b", "parallel": {"gpus": g}, "training": b})) for g in (2, 12, 16)]
    [(1, 2), (2, 6), (2, 8)]
    """
    per_node = int(plan.hardware.table["gpus_per_node"])
    gpus = plan.parallel.gpus
    nodes = max(1, -(-gpus // per_node))
    while gpus % nodes:  # 10 GPUs at 4 a node: 5 nodes of 2, not 3 nodes of 4 (12 ranks)
        nodes += 1
    return nodes, gpus // nodes


def _write_plan(plan: Plan, target: str) -> str:
    """``PLAN=target`` (a shell word: quoted by the caller where it is the user's) and the plan written there."""
    text = dump_plan(plan)
    if END in text.splitlines():  # bash ends the here document only at a line that is exactly END
        raise ValueError(f"the plan holds a line {END!r}, which would end the script's here document")
    return f"PLAN={target}\ncat > \"$PLAN\" <<'{END}'\n{text.rstrip()}\n{END}\n"


def trial_torchrun(plan: Plan, plan_file: str | None = None, steps: int = 20) -> str:
    """The trial as data parallelism over one node's GPUs (the plan's, at most a node's), on the plan written to
    ``plan_file`` (default ``PLAN_FILE``, one per run)."""
    nodes, per_node = _gpus(plan)
    note = (
        f"# The plan asks for {plan.parallel.gpus} GPUs ({nodes} nodes): this runs one node's {per_node}; "
        "the Slurm export runs them all.\n"
        if nodes > 1
        else ""
    )
    return (
        "#!/bin/bash\n# The sequence packing advisor's trial of this plan on one node (NCCL).\nset -euo pipefail\n"
        + note
        + _write_plan(plan, PLAN_FILE if plan_file is None else shlex.quote(plan_file))
        + f'torchrun --nproc-per-node {per_node} -m advisor trial "$PLAN" --device cuda '
        f"--model-scale medium --steps {steps} --out trial_out --json\n"
    )


def trial_slurm(plan: Plan, plan_file: str | None = None, steps: int = 20) -> str:
    """A Slurm batch script for the plan's GPUs: one torchrun per node, rendezvous on the first node; the plan
    written to ``plan_file`` (default ``SLURM_PLAN_FILE``, one per job) in the job's folder, which the nodes share."""
    nodes, per_node = _gpus(plan)
    target = SLURM_PLAN_FILE if plan_file is None else shlex.quote(plan_file)
    return f"""#!/bin/bash
#SBATCH --job-name=packing-trial
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={per_node}
#SBATCH --time=00:30:00
#SBATCH --output=trial_%j.log
# The sequence packing advisor's trial as data parallelism over {nodes} node(s) x {per_node} GPUs (NCCL).
set -euo pipefail
{_write_plan(plan, target)}head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint "$head:29500" \\
  --rdzv-id "$SLURM_JOB_ID" -m advisor trial "$PLAN" --device cuda --model-scale medium \\
  --steps {steps} --out "trial_out_$SLURM_JOB_ID" --json
"""
