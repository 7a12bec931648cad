"""Arena planners: the generic parts (:mod:`simulator.plan.planners.base`) and, for a caller
without the profile's target at hand, the dispatch to it (its package holds the planner its
runtime uses, ``target.planner``; the simulate driver calls that itself, with the target it
resolved once)."""

from __future__ import annotations

from collections.abc import Sequence

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.target import target_for
from devicefit.simulator.types import MemoryPlan


def plan_memory(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """Plan ``model``'s arena with the planner of ``profile``'s target."""
    return target_for(profile).planner(model, profile, order)
