"""Arena planners, one module per runtime, looked up by the profile's runtime name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simulator.errors import ProfileError
from simulator.model import Model
from simulator.planners.base import MemoryPlan, PlanError, check_plan
from simulator.planners.litert import plan_litert
from simulator.planners.tflm import greedy_plan, plan_tflm
from simulator.profiles import Profile

Planner = Callable[[Model, Profile, "Sequence[int] | None"], MemoryPlan]

#: runtime name (``profile.runtime.name``) → planner.
PLANNERS: dict[str, Planner] = {
    "tflm": plan_tflm,
    "litert": plan_litert,
    # The Edge TPU runs its ops on the TPU, the rest in LiteRT on the host CPU.
    "edgetpu": plan_litert,
}


def plan_memory(model: Model, profile: Profile, order: Sequence[int] | None = None) -> MemoryPlan:
    """Plan ``model``'s arena with the planner of ``profile``'s runtime."""
    try:
        planner = PLANNERS[profile.runtime.name]
    except KeyError:
        raise ProfileError(f"profile '{profile.name}': no arena planner for runtime "
                           f"'{profile.runtime.name}' (known: {', '.join(PLANNERS)})") from None
    return planner(model, profile, order)


__all__ = ["PLANNERS", "MemoryPlan", "PlanError", "check_plan", "greedy_plan", "plan_memory",
           "plan_tflm", "plan_litert"]
