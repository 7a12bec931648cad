"""What the architecture search optimises (a module of its own: the CLI reads its choices
without importing the search)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devicefit.simulator.types import StrEnum

if TYPE_CHECKING:
    from devicefit.sdk.study import Direction


class Objective(StrEnum):
    """What the study optimises: accuracy alone, or accuracy against a cost (two values)."""

    ACCURACY = "accuracy"
    LATENCY = "accuracy,latency"
    ARENA = "accuracy,arena"

    @property
    def directions(self) -> tuple[Direction, ...]:
        return ("maximize",) if self is Objective.ACCURACY else ("maximize", "minimize")

    @property
    def cost(self) -> str | None:
        """The figure traded against accuracy ("latency", "arena"), None for one objective."""
        return None if self is Objective.ACCURACY else self.value.split(",")[1]
