"""The plan: one typed, validated description of a training run (``schema``), its presets and its files (``io``)."""

from advisor.plan.io import dump_plan, load_plan, plan_from_text
from advisor.plan.schema import ModelSpec, Plan, PlanError, plan_from_dict

__all__ = ["ModelSpec", "Plan", "PlanError", "dump_plan", "load_plan", "plan_from_dict", "plan_from_text"]
