"""The report every command produces, as typed dataclasses; text/JSON/JUnit/Markdown/HTML
are views of it (:mod:`simulator.report.views`).

One report, many views: a view never computes a number that the report lacks. The driver
(:func:`simulator.simulate.simulate`) builds the report whole — the static half, then the
running half (``measured``, host figures in ``latency``), then a device benchmark's section
(``bench``) — and :func:`simulator.judge.verdict.judge` judges it once. Sections of later stages
are None until the stage that fills them has run. A model the target's compiler refused
has a report too: what the file itself tells and the refusal (``compile_refusal``), with no
memory plan (``memory`` None), since none of the compiled model exists.

:class:`Report` is frozen and so is every section (the static ones, the running half's,
the budgets, the device benchmark's and the target sections): each stage gives a new report
(``dataclasses.replace``) and none changes the one it was given; a report's lists
(``notes``, ``budgets``, ``layers``) are lists, which no stage appends to. Statuses, budget
names, units and bases are ``str`` enums (:mod:`simulator.types`), so a report goes to JSON
as it is (:meth:`Report.to_dict`, with a ``schema_version``) and comes back typed
(:meth:`Report.from_dict`, e.g. the shard results ``check merge`` combines; its docstring
holds the rule for versions and unknown keys).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from devicefit.simulator.errors import CompileRefusal
from devicefit.simulator.report.benchmark import BenchComparison, BenchResult
from devicefit.simulator.types import (
    Basis,
    BudgetName,
    LatencyBasis,
    Status,
    TrainingPlan,
    Unit,
    UnsupportedOp,
)

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile
    from devicefit.simulator.report.display import SectionDisplay

#: Version of the JSON form, a major version: a change an older reader would misread (a
#: field renamed, retyped or meaning something else) raises it; an added field or section
#: does not (see :meth:`Report.from_dict` for what a reader does with either). 1: the
#: untyped sections before it had a version (read back the same way). 2: typed sections,
#: ``schema_version`` and ``unchecked_budgets``.
SCHEMA_VERSION = 2


# --------------------------------------------------------------------------- static half


@dataclass(frozen=True)
class ShapesReport:
    """How the shapes of a model with dynamic dimensions (or given input shapes) were set
    (:mod:`simulator.plan.shapes`); every figure of the report is for these shapes."""

    #: Input name → the shape planned with.
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    #: Where the input shapes come from: "given (--input-shape)" or "stored in the file".
    source: str
    #: Who resolved the other shapes: "devicefit" or "LiteRT".
    resolved_by: str = "devicefit"
    #: Tensors whose planned shape differs from the one stored in the file.
    changed: int = 0
    #: Tensors (name and shape, ? unknown) no rule resolved: their sizes are placeholders.
    unresolved: tuple[str, ...] = ()
    #: Tensors where devicefit's shape inference and LiteRT disagree (LiteRT's are used).
    disagreements: tuple[str, ...] = ()
    #: Why LiteRT did not confirm the shapes, when it was asked and did not.
    runtime_problem: str | None = None

    @property
    def resolved(self) -> bool:
        return not self.unresolved


@dataclass(frozen=True)
class SourceModel:
    """The user's file, when the report describes what a target compiled it into (the
    Ethos-U: Vela's output), so neither is mistaken for the other."""

    size_bytes: int
    sha256: str
    operators: int
    #: Who compiled it (the target's title).
    compiled_for: str


@dataclass(frozen=True)
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
    #: The shapes planned with, when the model has dynamic dimensions or shapes were given.
    shapes: ShapesReport | None = None
    #: Set when the figures are for a compilation of ``path`` (then size, sha256 and
    #: operators above are the compiled model's).
    source: SourceModel | None = None
    #: The file's signatures (its methods: ``infer``, ``train`` ...) → the subgraph each runs.
    signatures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfileSummary:
    name: str
    device_class: str
    runtime: str
    kernels: str
    description: str = ""


@dataclass(frozen=True)
class TimelineStep:
    op_index: int
    op: str
    live_bytes: int
    #: The arena-plan steps the operator spans (a control-flow op spans its bodies' steps;
    #: step 0 holds the inputs): how a picture drawn per step names the operator.
    first_step: int = -1
    last_step: int = -1


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    #: ``flash_bytes`` = the model's bytes (exact) + the runtime's code (an estimate, or 0
    #: when the profile counts none), and where the code figure comes from.
    flash_model_bytes: int = 0
    flash_code_bytes: int = 0
    flash_code_basis: str = ""


@dataclass(frozen=True)
class LayerRow:
    """One operator's row of the per-layer table (:func:`simulator.report.layers.layer_rows`)."""

    index: int
    subgraph: int
    op: str
    #: Shapes of the operator's non-constant inputs and of its outputs.
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    #: The dtype the operator computes in (its first input's, as the cost model uses).
    dtype: str
    #: Constant (weight, bias) elements and bytes among its inputs.
    params: int
    param_bytes: int
    macs: int | None = None
    #: Bytes of the tensors it reads and writes (the cost model's memory traffic).
    bytes_moved: int | None = None
    #: Bytes live in the arena while it runs (the memory timeline's figure).
    live_bytes: int | None = None
    estimated_ms: float | None = None
    #: Median host time of a ``--run`` (the interpreter's profiler).
    host_ms: float | None = None
    #: Average device time of ``devicefit bench --op-profiling``.
    device_ms: float | None = None

    @property
    def key(self) -> str:
        """``op 3`` in the main graph, ``op 1:3`` in subgraph 1: the numbering every view
        uses (the CLI's, the JSON's ``op_index``, the PNG's x axis)."""
        return f"{self.subgraph}:{self.index}" if self.subgraph else str(self.index)


@dataclass(frozen=True)
class OpCompute:
    op_index: int
    op: str
    macs: int
    bytes_moved: int


@dataclass(frozen=True)
class ComputeReport:
    macs: int
    per_op: list[OpCompute] = field(default_factory=list)


# --------------------------------------------------------------------------- compatibility


@dataclass(frozen=True)
class Disagreement:
    """The op table and the runtime answered differently for one operator; the runtime's
    answer stands. ``source``: "probe" (its one-op model, :mod:`simulator.run.probe`)
    or "run" (the whole model, ``--run``)."""

    op_index: int
    op: str
    #: The table's answer: "supported", or why it refused the op.
    table: str
    #: What the runtime did: "runs ...", or its refusal.
    runtime: str
    source: str = "probe"
    subgraph: int = 0

    def line(self) -> str:
        where = f"{self.subgraph}:{self.op_index}" if self.subgraph else str(self.op_index)
        return (f"op {where} {self.op}: the table says {self.table!r}; the runtime "
                f"({self.source}) {self.runtime}")


@dataclass(frozen=True)
class ProbeSummary:
    """What asking the runtime took (``compatibility.probe``)."""

    runtime: str
    #: Distinct operator signatures of the model, answered from the cache, probed now.
    signatures: int
    cached: int
    probed: int
    #: Child processes started for it (0 when every answer was cached).
    children: int
    #: Operators the runtime was not asked about, each with why (the table's answer stands).
    not_probed: tuple[str, ...] = ()


#: Op table name → the class of its target section (None: the table has none).
SectionTypes = Callable[[str], "type | None"]


class TargetSection(Protocol):
    """A target's own static section (the Edge TPU partition), ``compatibility.<table>``.

    A frozen dataclass of the target's figures that gives the views data to show — the
    text view and ``convert`` print its lines, the HTML view renders its
    :class:`~simulator.report.display.SectionDisplay` — and may carry the target's own
    device-latency estimate.
    """

    def to_dict(self) -> dict[str, Any]: ...

    def text_lines(self) -> list[str]:
        """Its part of the text report: a heading line, then indented detail lines."""
        ...

    def display(self) -> SectionDisplay:
        """Its part of a page, as data: facts, charts, the partition (the views render and
        escape it)."""
        ...

    def summary_lines(self) -> list[str]:
        """The section in a line or a few, for a command that shows it beside its own
        output (``convert``, after the target's ``after_convert`` hook)."""
        ...

    def supported_line(self) -> str:
        """What "every operator supported" means on this target, in one line."""
        ...

    def latency_report(self, profile: Profile, split: str) -> LatencyReport | None:
        """``report.latency`` from the section's own estimate (``split``: where the report
        holds its parts), else None: the CPU cost model estimates the model."""
        ...


@dataclass(frozen=True)
class CompatibilityReport:
    """Can the target's runtime run every operator? The op table's answer, plus the
    target's own section where it has one (JSON: under the table's name, as
    ``compatibility.edgetpu``)."""

    table: str
    supported: bool
    unsupported_ops: tuple[UnsupportedOp, ...] = ()
    section: TargetSection | None = None
    #: Where the runtime (probe or run) answered otherwise than the table; the runtime won.
    disagreements: tuple[Disagreement, ...] = ()
    #: What the per-operator probe took; None when the runtime was not asked.
    probe: ProbeSummary | None = None

    def summary(self) -> str:
        """One line naming each unsupported op, where it is and why, for messages."""
        by_op: dict[tuple[str, str], list[str]] = {}
        for u in self.unsupported_ops:
            where = f"{u.subgraph}:{u.op_index}" if u.subgraph else str(u.op_index)
            by_op.setdefault((u.op, u.reason), []).append(where)
        return "; ".join(f"{op} (op{'s' if len(at) > 1 else ''} {', '.join(at)}: {reason})"
                         for (op, reason), at in by_op.items())

    def disagreement_lines(self, since: int = 0) -> list[str]:
        """One line per operator on which the op table and the runtime (its one-op probe or
        the run) answered differently, from the ``since``-th on; the runtime's answer is
        the report's."""
        return [f"op support: {d.line()}" for d in self.disagreements[since:]]

    def to_dict(self) -> dict[str, Any]:
        out = {"table": self.table, "supported": self.supported,
               "unsupported_ops": [dataclasses.asdict(u) for u in self.unsupported_ops],
               "disagreements": [dataclasses.asdict(d) for d in self.disagreements],
               "probe": None if self.probe is None else plain_fields(self.probe)}
        if self.section is not None:
            out[self.table] = self.section.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any],
                  section_type: SectionTypes | None = None) -> CompatibilityReport:
        """``section_type`` names the class of a table's section (the targets know them)."""
        table = data["table"]
        kind = section_type(table) if section_type and data.get(table) is not None else None
        if data.get(table) is not None and kind is None:
            raise ValueError(f"compatibility.{table}: no section type to read it with")
        return cls(table, data["supported"],
                   tuple(UnsupportedOp(**u) for u in data.get("unsupported_ops") or ()),
                   build(kind, data[table]) if kind is not None else None,
                   tuple(Disagreement(**d) for d in data.get("disagreements") or ()),
                   build(ProbeSummary, data["probe"]) if data.get("probe") else None)


# --------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class OpLatencyRow:
    """One operator's estimated device time."""

    op_index: int
    op: str
    dtype: str
    macs: int
    bytes_moved: int
    estimated_ms: float
    #: Where a target with its own split runs it ("tpu" | "cpu"); None on a plain CPU.
    device: str | None = None


@dataclass(frozen=True)
class HostLatency:
    """Host wall-clock time of the timed invokes of a real run."""

    median: float
    p90: float
    min: float
    runs: int
    runtime: str
    threads: int


@dataclass(frozen=True)
class HostOpTime:
    op_index: int
    op: str
    ms: float


class SplitEstimate(Protocol):
    """A target's latency split as :meth:`LatencyReport.of_split` reads it."""

    @property
    def total_ms(self) -> float: ...
    @property
    def band(self) -> tuple[float, float]: ...
    @property
    def band_basis(self) -> str: ...
    @property
    def per_op(self) -> tuple[OpLatencyRow, ...]: ...


@dataclass(frozen=True)
class LatencyReport:
    """The device-latency estimate with its error band, and the host's measured times."""

    #: None: no estimate (``no_estimate`` says why).
    estimated_device_ms: float | None = None
    #: (low, high) in ms where the real latency likely lies.
    band_ms: tuple[float, float] | None = None
    #: The same band as multipliers of the estimate.
    band: tuple[float, float] | None = None
    band_basis: str = ""
    basis: LatencyBasis | None = None
    no_estimate: str | None = None
    cpu: str | None = None
    kernels: str | None = None
    runtime_version: str | None = None
    clock_hz: float | None = None
    threads: int | None = None
    per_op: tuple[OpLatencyRow, ...] = ()
    sources: tuple[str, ...] = ()
    #: Filled by a run (``--run``).
    host_ms: HostLatency | None = None
    host_per_op_ms: tuple[HostOpTime, ...] | None = None
    #: Where a target's own estimate is split up (e.g. ``compatibility.edgetpu.latency``).
    split: str | None = None

    @classmethod
    def of_split(cls, profile: Profile, split: str, lat: SplitEstimate | None,
                 no_estimate: str) -> LatencyReport:
        """A target's own estimate, its parts in the target's section at ``split`` (None:
        no estimate, ``no_estimate`` says why)."""
        clock_hz, threads = profile.device.clock_hz, profile.runtime.threads
        if lat is None:
            return cls(no_estimate=no_estimate, clock_hz=clock_hz, threads=threads)
        low, high = lat.band
        return cls(
            estimated_device_ms=lat.total_ms, band_ms=(lat.total_ms * low, lat.total_ms * high),
            band=lat.band, band_basis=lat.band_basis, basis=LatencyBasis.TARGET,
            cpu=profile.device.cpu, kernels=profile.runtime.kernels,
            runtime_version=profile.runtime.version, per_op=lat.per_op,
            sources=tuple(profile.cost_model.sources), split=split, clock_hz=clock_hz,
            threads=threads)


# --------------------------------------------------------------------------- running half


@dataclass(frozen=True)
class CrossCheck:
    """TFLM against LiteRT's reference kernels on the same inputs (integer models)."""

    #: The runtimes compared, as the target that cross-checks names them.
    runtimes: tuple[str, ...]
    bit_exact: bool | None = None
    max_abs_difference: float | None = None
    #: A runtime refused or crashed on the file: a finding of the check.
    error: str | None = None
    #: Why it was not done.
    skipped: str | None = None


@dataclass(frozen=True)
class RunFailure:
    """What the runtime did when a ``--run`` did not complete: the stage, its message, and
    the operator it stopped at when the runtime names it or probing finds it."""

    stage: str
    message: str
    #: True when the runtime died (a signal, e.g. TFLM's SIGABRT) instead of refusing.
    crashed: bool = False
    op_index: int | None = None
    op: str | None = None
    subgraph: int = 0
    #: How the operator was found: "the runtime's message" or "probing each operator".
    op_found_by: str | None = None

    def line(self) -> str:
        where = "" if self.op is None else f" at op {self.op_index} {self.op}"
        found = f" [operator found by {self.op_found_by}]" if self.op_found_by else ""
        return (f"{'crashed' if self.crashed else 'failed'} during '{self.stage}'{where}: "
                f"{self.message}{found}")


@dataclass(frozen=True)
class TailCategory:
    """One RecordingMicroAllocator category of the tail: bytes used (aligned), requested."""

    used: int
    requested: int
    count: int


@dataclass(frozen=True)
class PlannerBuffer:
    """One buffer TFLM's memory planner was given: a tensor, or a kernel's scratch buffer."""

    size: int
    first: int
    last: int
    offline: int | None = None


@dataclass(frozen=True)
class FlashPart:
    """What one part of a linked firmware image takes in flash."""

    name: str  # "model", "tflm core", "kernels", "kernel library", "export", "c runtime"
    bytes: int


@dataclass(frozen=True)
class FirmwareFlash:
    """Flash of the export's example linked as a firmware image for the device's core
    (:mod:`simulator.targets.tflm.firmware`): measured from the linker's map."""

    #: Everything the image keeps in flash: code, constants, the initial values of data.
    total_bytes: int
    parts: tuple[FlashPart, ...]
    #: How the image was linked ("cortex-m4, newlib-nano, soft float, --gc-sections").
    image: str

    def part(self, name: str) -> int:
        return sum(p.bytes for p in self.parts if p.name == name)


@dataclass(frozen=True)
class OutputDiff:
    """One output of the device build against the host run on the same inputs."""

    index: int
    dtype: str
    #: Elements that differ, of how many.
    differing: int
    elements: int
    #: The largest difference in the output's quantization steps (integer outputs: its raw
    #: integers); None for a float output.
    max_steps: int | None = None
    #: The largest absolute difference in real values (a quantized output's dequantized).
    max_abs: float = 0.0
    #: ``max_abs`` over the host output's largest magnitude (0 when that is 0).
    relative: float = 0.0


@dataclass(frozen=True)
class TargetMeasurement:
    """The model on a TFLM build for the device's core and kernel library, run under QEMU
    (``simulate --run --target-build DIR``; :mod:`simulator.targets.tflm.qemu`)."""

    #: "TFLM <commit> cortex-m4 cmsis-nn (qemu)": the build the figures were measured on.
    build: str
    core: str
    kernels: str
    #: The checkout's commit, or ``tree-<hash>`` of its files.
    tflm: str
    #: "ok", "unsupported" (the build lacks an operator), "failed at <stage>" (TFLM refused
    #: the model: init, allocate = a kernel's Prepare, invoke), "not runnable here".
    status: str
    unsupported_ops: tuple[str, ...] = ()
    head: int | None = None
    tail: int | None = None
    #: head + tail as the RecordingMicroAllocator counted them (the start arena).
    total: int | None = None
    #: The smallest arena (a multiple of 16) an application's own set-up works in.
    min_arena_bytes: int | None = None
    #: Whether one Invoke also succeeds at ``min_arena_bytes``.
    min_arena_invokes: bool | None = None
    probes: int = 0
    tail_breakdown: dict[str, TailCategory] = field(default_factory=dict)
    planner_buffers: tuple[PlannerBuffer, ...] = ()
    #: How many of ``planner_buffers`` are tensors; the rest are scratch buffers.
    planned_tensors: int | None = None
    #: sha256 of the output tensors' bytes, back to back.
    output_hash: str | None = None
    #: The outputs against the host run's on the same inputs (None: not compared).
    outputs_agree: bool | None = None
    max_abs_difference: float | None = None
    compared_with: str | None = None
    #: TFLM's own last messages when a stage failed.
    message: str | None = None
    #: The export the build compiled and ran (:func:`~simulator.targets.tflm.export.
    #: export_digest`): "verified as exported" names it. None: not an export's run.
    export_sha256: str | None = None
    #: The export's arena constant, and whether the export ran in exactly that array
    #: (AllocateTensors and one Invoke).
    arena_constant: int | None = None
    arena_constant_starts: bool | None = None
    #: The export's example program ran to its end under QEMU.
    example_ok: bool | None = None
    #: The example linked as firmware for the core: flash measured from its map.
    flash: FirmwareFlash | None = None
    #: Each output against the host run (empty: not compared), and the profile's tolerance.
    output_diffs: tuple[OutputDiff, ...] = ()
    tolerance: str | None = None
    #: Every output within the tolerance (None: not compared).
    outputs_within_tolerance: bool | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def verified(self) -> bool:
        """The device build ran the export as exported: its arena constant started and
        its outputs are within the profile's tolerance of the host run's (or were not
        compared: the host run failed, which fails the verdict by itself). Anything else
        — a refusal, an error, a build that cannot run here — measured nothing to pass."""
        return (self.ok and self.arena_constant_starts is not False
                and self.outputs_within_tolerance is not False)

    @property
    def setup_failed(self) -> bool:
        """Nothing measured for a reason of the set-up (the build, the toolchain, QEMU), not
        of the model: the command exits 2."""
        return self.status in ("error", "not runnable here")

    @property
    def refused(self) -> bool:
        """The device's build cannot run the model (an op it lacks, a Prepare that fails);
        not a build or QEMU problem ("error", "not runnable here")."""
        return self.status == "unsupported" or self.status.startswith("failed at")

    @property
    def scratch_buffers(self) -> tuple[PlannerBuffer, ...]:
        if self.planned_tensors is None:
            return ()
        return self.planner_buffers[self.planned_tensors:]


@dataclass(frozen=True)
class MeasuredReport:
    """What the real runtime measured on this host (``--run``)."""

    runtime: str
    #: Where the inputs came from.
    inputs: str
    #: Why the runtime was not started.
    skipped: str | None = None
    #: The run was started and did not complete: what the runtime did.
    failure: RunFailure | None = None
    #: The interpreter's arena (TFLM's RecordingMicroAllocator); None without one.
    arena_head_bytes: int | None = None
    arena_tail_bytes: int | None = None
    arena_total_bytes: int | None = None
    arena_categories: dict[str, int] = field(default_factory=dict)
    #: The planner's head for the kernels the wheel runs, and the difference from it.
    predicted_head_bytes: int | None = None
    predicted_head_basis: str | None = None
    head_difference_bytes: int | None = None
    tail_basis: str | None = None
    #: The head that ``arena_bytes`` adds up (measured where the wheel runs the device's
    #: kernels, else the prediction for them) and what it rests on, as ``tail_basis``.
    device_head_bytes: int | None = None
    device_head_basis: str | None = None
    #: The arena the device needs: ``device_head_bytes`` + the tail of ``tail_basis`` (the
    #: interpreter's own total on a host-like profile).
    arena_bytes: int | None = None
    arena_basis: Basis | None = None
    arena_budget_bytes: int | None = None
    over_budget_bytes: int | None = None
    #: TFLM and LiteRT's reference kernels agree bit for bit; None: not cross-checked.
    outputs_agree: bool | None = None
    cross_check: CrossCheck | None = None
    #: The model on a TFLM build for the device (``--target-build``); None: not asked.
    target_build: TargetMeasurement | None = None


# --------------------------------------------------------------------------- device benchmark


@dataclass(frozen=True)
class BenchSection:
    """``report.bench``: the benchmark's result and its comparison with the estimate (in
    JSON the result's fields and ``vs_estimate`` side by side)."""

    result: BenchResult
    vs_estimate: BenchComparison

    def to_dict(self) -> dict[str, Any]:
        return plain_fields(self.result) | {"vs_estimate": plain_fields(self.vs_estimate)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSection:
        rest = {k: v for k, v in data.items() if k != "vs_estimate"}
        return cls(build(BenchResult, rest), build(BenchComparison, data["vs_estimate"]))


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class BudgetCheck:
    name: BudgetName
    limit: float
    value: float
    ok: bool
    unit: Unit
    #: limit − value: how much room is left (negative: by how much it is missed).
    margin: float = 0.0
    basis: Basis = Basis.PREDICTED
    #: "pass", "fail" or "at-risk" (an estimate within its budget whose error band crosses it).
    status: Status = Status.PASS
    #: (low, high) where an estimated value likely lies; None for predicted/measured figures.
    band: tuple[float, float] | None = None
    #: Where the limit comes from: "budgets", or the device key (e.g. "device.sram") when
    #: the device's memory is tighter than the budget or no budget is set.
    limit_from: str = "budgets"


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class Report:
    model: ModelSummary
    profile: ProfileSummary
    #: None when the target's compiler refused the model (``compile_refusal``): the device
    #: runs the compiled model, and there is none to plan.
    memory: MemoryReport | None
    compute: ComputeReport
    #: Filled by :func:`simulator.judge.verdict.judge`, once the report is whole.
    budgets: list[BudgetCheck] = field(default_factory=list)
    verdict: Status = Status.FAIL
    measured: MeasuredReport | None = None
    latency: LatencyReport | None = None
    compatibility: CompatibilityReport | None = None
    bench: BenchSection | None = None
    notes: list[str] = field(default_factory=list)
    #: Budgets the profile sets that this report has no figure for → why (never a pass).
    unchecked_budgets: dict[BudgetName, str] = field(default_factory=dict)
    #: One row per operator of every subgraph (:mod:`simulator.report.layers`), filled last.
    layers: list[LayerRow] = field(default_factory=list)
    #: The target's compiler refused the model (a finding: the verdict fails); the report
    #: then holds only what the file itself tells.
    compile_refusal: CompileRefusal | None = None
    #: The memory the model's ``train`` signature needs on the device, planned; None when
    #: the model has none or the target cannot run it (``no_training`` says so).
    training: TrainingPlan | None = None
    #: Why the model's train signature cannot run on this target (TFLM has no training).
    no_training: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == Status.PASS

    @property
    def exit_code(self) -> int:
        """0: passes; 2: the device's own build measured nothing for a reason of the set-up
        (the build, the toolchain, QEMU); 1: fails for a reason of the model."""
        target = self.measured.target_build if self.measured else None
        if target is not None and target.setup_failed:
            return 2
        return 0 if self.ok else 1

    @property
    def status(self) -> Status:
        """The verdict, or "at-risk" when it passes on an estimate whose band crosses a budget
        or with a budget it has no figure for (an unknown latency is no pass: a compiled
        Edge TPU model's TPU time is not in the file)."""
        if not self.ok:
            return Status.FAIL
        return Status.AT_RISK if self.at_risk or self.unchecked_budgets else Status.PASS

    @property
    def at_risk(self) -> list[str]:
        """Budgets met by the estimate but not by the top of its error band."""
        return [b.name for b in self.budgets if b.status == Status.AT_RISK]

    def summary(self) -> Report:
        """This report without its per-tensor and per-operator detail (the memory plan and
        timeline, MACs, latency and layer rows by operator): every figure and verdict a
        budget, a regression rule or a CI view reads stays. ``check`` keeps passing targets
        of a large project so (a thousand full reports were 100 MB of JSON)."""
        latency = None if self.latency is None else dataclasses.replace(self.latency, per_op=())
        memory = None if self.memory is None else dataclasses.replace(self.memory, timeline=[],
                                                                      plan=[])
        return dataclasses.replace(
            self, memory=memory,
            compute=dataclasses.replace(self.compute, per_op=[]), latency=latency, layers=[])

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (plain dicts, lists, str, numbers), with its ``schema_version``."""
        return {"schema_version": SCHEMA_VERSION, **plain_fields(self),
                "status": self.status.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any], section_type: SectionTypes) -> Report:
        """The inverse of :meth:`to_dict` (for reports read back from JSON, e.g. the shard
        results that ``check merge`` combines); ``KeyError``/``TypeError``/``ValueError`` if
        malformed. ``section_type`` gives the class of a target's section
        (:func:`simulator.target.read_report` passes the targets' own).

        The rule for keys, by ``schema_version`` (:data:`SCHEMA_VERSION`):

        - a newer version is refused (``ValueError`` saying so): its fields may mean
          something else, and a report misread is worse than none;
        - version 1 (no ``schema_version``) and this version read field by field; a field
          the JSON lacks (added since it was written) keeps its default;
        - a key of this version that no field of its class names is dropped
          (:func:`from_fields`): either a figure derived from the fields, which the class
          computes again (``status``, the Ethos-U section's ``latency``), or an addition of a
          newer devicefit of the same version. A report read back is judged and shown by
          this version's code, which has no figure or view for such a key, and written out
          again it would claim this version's meaning for it; so it is not kept.
        """
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"report schema_version {version!r} is newer than this devicefit "
                             f"reads ({SCHEMA_VERSION}): read it with the devicefit that wrote "
                             f"it, or upgrade this one")
        compat = data.get("compatibility")
        rest = {k: v for k, v in data.items() if k != "compatibility"}
        report = from_fields(cls, rest)
        if compat is None:
            return report
        return dataclasses.replace(
            report, compatibility=CompatibilityReport.from_dict(compat, section_type))


# --------------------------------------------------------------------------- JSON


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data; a dataclass with its own ``to_dict`` decides its form."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own: Callable[[], dict[str, Any]] | None = getattr(value, "to_dict", None)
        return own() if own is not None else plain_fields(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def plain_fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON-ready data (enums as their values), in field order: the
    ``to_dict`` of every typed record here and of the results built on them (check, fit)."""
    return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved annotation) of each field; resolving is slow, so once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def build(cls: type, data: Any) -> Any:
    """A dataclass from its JSON form, following the field annotations. A class with its own
    ``from_dict`` reads itself; a field missing from the JSON (added since it was written)
    keeps its default, and a key the class does not know is dropped (the rule:
    :meth:`Report.from_dict`)."""
    own: Callable[[Any], Any] | None = getattr(cls, "from_dict", None)
    return own(data) if own is not None else from_fields(cls, data)


def from_fields(cls: type, data: Any) -> Any:
    """``cls`` field by field from its JSON form: what a ``from_dict`` builds on when only
    some of its fields need reading by hand. A key no field names is dropped, deliberately
    (:meth:`Report.from_dict` says why), a field the JSON lacks keeps its default."""
    return cls(**{name: _value(hint, data[name]) for name, hint in _fields(cls) if name in data})


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        (hint,) = [h for h in typing.get_args(hint) if h is not type(None)]
        origin = typing.get_origin(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build(hint, value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_value(item, v) for v in value]
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        return tuple(_value(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        key, item = typing.get_args(hint)
        return {_value(key, k): _value(item, v) for k, v in value.items()}
    return value
