"""The report every command produces, as dataclasses; text/JSON/JUnit/Markdown/HTML are views.

One report, many views: a view never computes a number that the report lacks. Sections of
later stages (``measured``, ``latency``, ``compatibility``, ``bench``) are None until the
stage that fills them has run. ``to_dict`` is the JSON view's source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelSummary:
    path: str
    sha256: str
    size_bytes: int
    operators: int
    op_types: dict[str, int]
    #: Parameter (constant) element counts by dtype.
    parameters: dict[str, int] = field(default_factory=dict)
    #: Conversion settings stored by ``devicefit convert`` in the model metadata, if any.
    conversion: dict[str, Any] | None = None


@dataclass
class ProfileSummary:
    name: str
    device_class: str
    runtime: str
    kernels: str
    description: str = ""


@dataclass
class TimelineStep:
    op_index: int
    op: str
    live_bytes: int


@dataclass
class PlannedBuffer:
    """One buffer placed in the arena head: a tensor or a kernel's scratch buffer."""

    kind: str  # "tensor" | "scratch"
    tensor: int  # tensor index, or -1 for a scratch buffer
    name: str
    size_bytes: int
    offset: int
    first_step: int
    last_step: int
    shape: list[int] = field(default_factory=list)
    dtype: str = ""
    offline: bool = False


@dataclass
class MemoryReport:
    planner: str
    arena_head_bytes: int
    arena_tail_bytes: int
    arena_bytes: int
    flash_bytes: int
    lower_bound_bytes: int
    #: The smallest arena the runtime can start in (≥ arena_bytes: TFLM needs extra head
    #: room while it plans); the arena budget is checked against this.
    arena_required_bytes: int = 0
    timeline: list[TimelineStep] = field(default_factory=list)
    plan: list[PlannedBuffer] = field(default_factory=list)
    tail_breakdown: dict[str, int] = field(default_factory=dict)
    #: Which figures are exact (reproduce the runtime) and which are estimates.
    exact: list[str] = field(default_factory=list)
    estimated: list[str] = field(default_factory=list)


@dataclass
class OpCompute:
    op_index: int
    op: str
    macs: int
    bytes_moved: int


@dataclass
class ComputeReport:
    macs: int
    per_op: list[OpCompute] = field(default_factory=list)


@dataclass
class BudgetCheck:
    name: str  # "flash" | "arena" | "latency" | ...
    limit: float
    value: float
    ok: bool
    unit: str  # "bytes" | "ms"
    #: limit − value: how much room is left (negative: by how much it is missed).
    margin: float = 0.0
    #: "predicted" (static), "measured" (real runtime) or "estimated" (cost model).
    basis: str = "predicted"
    #: Where the limit comes from: "budgets", or the device key (e.g. "device.sram") when
    #: the device's memory is tighter than the budget or no budget is set.
    limit_from: str = "budgets"


@dataclass
class Report:
    model: ModelSummary
    profile: ProfileSummary
    memory: MemoryReport
    compute: ComputeReport
    budgets: list[BudgetCheck]
    verdict: str  # "pass" | "fail"
    measured: dict[str, Any] | None = None
    latency: dict[str, Any] | None = None
    compatibility: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
