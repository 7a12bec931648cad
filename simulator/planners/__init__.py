"""Arena planners, one module per runtime; a profile's target (:mod:`simulator.targets`)
names the planner its runtime uses."""

from __future__ import annotations

from collections.abc import Sequence

from devicefit.simulator.model import Model
from devicefit.simulator.planners.base import MemoryPlan, PlanError, check_plan
from devicefit.simulator.profiles import Profile
from devicefit.simulator.targets.litert.planner import plan_litert
from devicefit.simulator.targets.registry import TargetView, target_for
from devicefit.simulator.targets.tflm.planner import greedy_plan, plan_tflm

#: Target name → its planner: a view of the target registry.
PLANNERS = TargetView(lambda t: t.planner)


def plan_memory(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """Plan ``model``'s arena with the planner of ``profile``'s target."""
    return target_for(profile).planner(model, profile, order)


__all__ = ["PLANNERS", "MemoryPlan", "PlanError", "check_plan", "greedy_plan", "plan_memory",
           "plan_tflm", "plan_litert"]
