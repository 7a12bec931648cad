"""The report every command produces, as dataclasses; text/JSON/JUnit/Markdown/HTML are views.

One report, many views: a view never computes a number that the report lacks. Sections of
later stages (``measured``, ``latency``, ``compatibility``, ``bench``) are None until the
stage that fills them has run. ``to_dict`` is the JSON view's source.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
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
    #: "pass", "fail" or "at-risk" (an estimate within its budget whose error band crosses it).
    status: str = ""
    #: (low, high) where an estimated value likely lies; None for predicted/measured figures.
    band: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "pass" if self.ok else "fail"
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

    @property
    def at_risk(self) -> list[str]:
        """Budgets met by the estimate but not by the top of its error band."""
        return [b.name for b in self.budgets if b.status == "at-risk"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """The inverse of :meth:`to_dict` (for reports read back from JSON, e.g. the shard
        results that ``check merge`` combines); ``KeyError``/``TypeError`` if malformed."""
        return _build(cls, data)


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved annotation) of each field; resolving is slow, so once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _build(cls: type, data: Any) -> Any:
    """A dataclass from its ``asdict`` form, following the field annotations."""
    # A field missing from the JSON (added since it was written) keeps its default.
    return cls(**{name: _value(hint, data[name]) for name, hint in _fields(cls) if name in data})


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return [_value(item, v) for v in value]
    return value
