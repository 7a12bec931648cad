"""What the static half of a report promises every later stage and view, checked by the
driver before anyone reads it (as Vela's ``verify_graph_health`` between its passes).

The planners check their own plans (:func:`simulator.plan.planners.base.check_plan`); these are
the promises between the stages: the arena plan is no smaller than the bytes live at once,
the memory timeline has a step for every operator the views draw, and the per-operator MACs
add up to the figure the report gives. Each is true by construction, so a broken one is a
bug in devicefit, never the user's input: an :class:`InvariantError` (an
``AssertionError``) that names the model, the invariant and the figures.
"""

from __future__ import annotations

from collections import Counter

from devicefit.simulator.read.model import Model
from devicefit.simulator.report.report import ComputeReport, MemoryReport, Report


class InvariantError(AssertionError):
    """A stage handed on a result that breaks an invariant: a bug in devicefit."""


def check_static(model: Model, report: Report) -> None:
    """Raise :class:`InvariantError` when ``report`` (the static half of ``model``'s) breaks
    an invariant; a report without a memory plan (its compiler refused the model) has its
    compute checked only."""
    found = _compute_problems(report.compute)
    if report.memory is not None:
        found += _memory_problems(model, report.memory)
    if found:
        raise InvariantError(f"{model.path}: " + "; ".join(found)
                             + " (a bug in devicefit: please report it with the model)")


def _memory_problems(model: Model, memory: MemoryReport) -> list[str]:
    found = []
    if memory.arena_head_bytes < memory.lower_bound_bytes:
        found.append(f"the arena head ({memory.arena_head_bytes:,} B, {memory.planner}) is "
                     f"below the lower bound of the bytes live at once "
                     f"({memory.lower_bound_bytes:,} B)")
    steps = Counter(step.op_index for step in memory.timeline)
    operators = range(len(model.main.operators))
    missing = [i for i in operators if i not in steps]
    extra = sorted(i for i, n in steps.items() if n > 1 or i not in operators)
    if missing or extra:
        found.append(f"the memory timeline does not cover each of the "
                     f"{len(operators)} operators once (missing: {missing[:8]}, "
                     f"repeated or unknown: {extra[:8]})")
    return found


def _compute_problems(compute: ComputeReport) -> list[str]:
    total = sum(op.macs for op in compute.per_op)
    if total != compute.macs:
        return [f"the per-operator MACs add up to {total:,}, the report says {compute.macs:,}"]
    return []
