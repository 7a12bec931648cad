"""Types the sdk's modules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devicefit.simulator.report.report import Report

#: Told ``(stage, done, total)`` as a long step advances: the CLI's progress bar, or the
#: conversion child's events to its parent.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class GpuFallback:
    """An operator the predicted partition leaves on the CPU."""

    op: str
    #: The delegate's rule that leaves it there (a refusal, or a partition beyond its limit).
    rule: str


@dataclass(frozen=True)
class GpuAsked:
    """What ``--run`` asked LiteRT's GPU delegate (measured)."""

    #: Why it was not asked or did not compile the model; "" when it answered.
    not_asked: str
    #: Where its partition differs from the predicted one, each named.
    disagreements: tuple[str, ...]


@dataclass(frozen=True)
class GpuPartitionSummary:
    """The phone GPU partition a report predicts, as ``check`` and ``bench`` show it."""

    gpu_ops: int
    total_ops: int
    #: How many partitions the delegate runs on the GPU (its largest, up to its limit).
    partitions: int
    #: The operators left on the CPU, in the model's order.
    fallbacks: tuple[GpuFallback, ...]
    #: None: the delegate was not asked (no ``--run``).
    asked: GpuAsked | None


def gpu_partition(report: Report | None) -> GpuPartitionSummary | None:
    """The report's predicted GPU partition; None when its target predicts none.

    Read from the target section's JSON form (``gpu_ops``, ``partitions``, ``ops``,
    ``live``), its public face: the sdk reaches no target's package."""
    section = report.compatibility.section if report and report.compatibility else None
    data: dict[str, Any] = section.to_dict() if section is not None else {}
    if not {"gpu_ops", "total_ops", "partitions", "ops"} <= data.keys():
        return None
    live = data.get("live")
    return GpuPartitionSummary(
        gpu_ops=data["gpu_ops"], total_ops=data["total_ops"],
        partitions=len(data["partitions"]),
        fallbacks=tuple(GpuFallback(o["op"], o["rule"]) for o in data["ops"]
                        if o["device"] == "cpu"),
        asked=None if live is None else GpuAsked(live["not_asked"],
                                                 tuple(live["disagreements"])))
