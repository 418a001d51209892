"""Ablations: the same training with and without attention blocks, over seeds, as ordinary run folders,
and a report of the paired differences with their uncertainty (docs/ablation.md)."""
from vision_attn.ablation.plan import PLAN_FILE, SITES, AblationPlan, RunSpec, make_plan, read_plan

__all__ = ["PLAN_FILE", "SITES", "AblationPlan", "RunSpec", "make_plan", "read_plan"]
