"""Arena planners: the generic parts (:mod:`simulator.planners.base`) and the dispatch to a
profile's target (:mod:`simulator.targets`), whose package holds the planner its runtime
uses (``TARGETS[name].planner``)."""

from __future__ import annotations

from collections.abc import Sequence

from devicefit.simulator.model import Model
from devicefit.simulator.planners.base import MemoryPlan
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.target import target_for


def plan_memory(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """Plan ``model``'s arena with the planner of ``profile``'s target."""
    return target_for(profile).planner(model, profile, order)
