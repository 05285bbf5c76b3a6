"""Launch scripts for the trial on GPU nodes: one node with torchrun, several with Slurm (data parallelism, NCCL).

>>> 'torchrun --nproc-per-node 8' in trial_torchrun()
True
"""

from __future__ import annotations

import shlex

from advisor.plan import Plan


def trial_torchrun(plan_file: str = "plan.yaml", gpus_per_node: int = 8, steps: int = 20) -> str:
    """The trial on one node's GPUs as data parallelism (NCCL); the plan file name is shell-quoted."""
    plan_file = shlex.quote(plan_file)
    return (
        f"torchrun --nproc-per-node {gpus_per_node} -m advisor trial {plan_file} --device cuda "
        f"--model-scale medium --steps {steps} --out trial_out --json\n"
    )


def trial_slurm(plan: Plan, plan_file: str = "plan.yaml", gpus_per_node: int = 8, steps: int = 20) -> str:
    """A Slurm batch script for a multi-node trial: one torchrun per node, rendezvous on the first node."""
    nodes = max(1, -(-plan.parallel.gpus // gpus_per_node))
    plan_file = shlex.quote(plan_file)
    return f"""#!/bin/bash
#SBATCH --job-name=packing-trial
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --time=00:30:00
#SBATCH --output=trial_%j.log
# The sequence packing advisor's trial as data parallelism over {nodes} node(s) x {gpus_per_node} GPUs (NCCL).
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes {nodes} --nproc-per-node {gpus_per_node} --rdzv-backend c10d --rdzv-endpoint "$head:29500" \
  --rdzv-id "$SLURM_JOB_ID" -m advisor trial {plan_file} --device cuda --model-scale medium --steps {steps} \
  --out "trial_out_$SLURM_JOB_ID" --json
"""
