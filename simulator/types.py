"""The simulator's shared vocabulary: the str enums of the report, an unsupported operator,
an arena plan and its buffers (every planner's answer, which a target's planner protocol
names), the protocol of a target's runner, and the options a command hands the driver; the
protocols of a target's other plug-ins are :mod:`simulator.target`'s (their signatures name
report sections), the report section's is :class:`simulator.report.report.TargetSection`.

Every layer names these (the target registry, the op check, the planners, the runtimes,
the report and its views), so this module imports nothing of devicefit at run time: a
module may import it without importing anything else (the way AI Edge Quantizer keeps
``qtyping``). The few devicefit classes the signatures below name (the model's subgraph
and operator) are imported for the type checker only, and neither imports this module's
importers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from devicefit.simulator.read.model import Operator, Subgraph


class StrEnum(str, Enum):
    """``enum.StrEnum`` (Python 3.11+) on 3.10 too: ``str()``, ``format()`` and f-strings
    give the value, as for the plain string it is."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Status(StrEnum):
    """A budget's outcome, and a report's verdict (never "at-risk": ``Report.status`` is)."""

    PASS = "pass"
    FAIL = "fail"
    #: An estimate within its budget whose error band crosses it.
    AT_RISK = "at-risk"


class BudgetName(StrEnum):
    FLASH = "flash"
    ARENA = "arena"
    LATENCY = "latency"
    GPU_MEMORY = "gpu_memory"
    TRAIN_MEMORY = "train_memory"


class Unit(StrEnum):
    BYTES = "bytes"
    MS = "ms"


class Basis(StrEnum):
    """What a figure rests on."""

    #: Static analysis that reproduces the runtime.
    PREDICTED = "predicted"
    #: The real runtime (or the device) gave it.
    MEASURED = "measured"
    #: A model of the runtime with parts it cannot reproduce (cost model, tail estimate).
    ESTIMATED = "estimated"


class LatencyBasis(StrEnum):
    """Where a device-latency estimate comes from."""

    #: A core of :mod:`simulator.estimate.cores` and the kernel tables of
    #: :mod:`simulator.estimate.kernels`.
    REGISTRY = "registry"
    #: The profile's own ``cost_model.cycles_per_mac``.
    PROFILE = "profile"
    #: A target's own estimate, split in its section (the Edge TPU: TPU compute, link
    #: transfers, CPU fallback); ``LatencyReport.split`` names where.
    TARGET = "target split"

    @classmethod
    def _missing_(cls, value: object) -> LatencyBasis | None:
        # Version 1 reports named the target: "edgetpu split".
        return cls.TARGET if isinstance(value, str) and value.endswith(" split") else None


# --------------------------------------------------------------------------- op support


@dataclass(frozen=True)
class UnsupportedOp:
    op_index: int
    op: str
    reason: str
    subgraph: int = 0


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class ScratchRequest:
    """A scratch buffer a kernel requests in ``Prepare`` (TFLM-style arenas plan them in
    the head for their operator's step)."""

    size: int
    what: str


#: The scratch buffers the kernel of one operator requests, in the order it requests them.
ScratchRequests: TypeAlias = "Callable[[Subgraph, Operator], Sequence[ScratchRequest]]"


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Buffer:
    tensor: int  # tensor index in the subgraph, -1 for a scratch buffer
    name: str
    size: int  # bytes, already aligned as TFLM aligns them (16)
    first: int  # first step it is live (inclusive)
    last: int  # last step it is live (inclusive)
    kind: str = "tensor"  # or "scratch"
    offline_offset: int | None = None  # from OfflineMemoryAllocation metadata, if any
    #: Subgraph that owns the tensor (or whose operator requested the scratch buffer).
    subgraph: int = 0
    #: Operator (index in its subgraph) that requested a scratch buffer; -1 for tensors.
    op: int = -1


@dataclass(frozen=True)
class MemoryPlan:
    """An arena plan: where each head buffer goes, and the head/tail sizes it implies.

    ``offsets[i]`` is the offset of ``buffers[i]`` from the start of the head. ``exact`` and
    ``estimated`` name the figures (``"arena_head"``, ``"arena_tail"`` ...) that reproduce
    the runtime to the byte and those that are estimates, each with a reason in ``notes``.
    """

    planner: str
    buffers: tuple[Buffer, ...]
    offsets: tuple[int, ...]
    head_bytes: int
    tail_bytes: int
    lower_bound_bytes: int
    #: The smallest arena the runtime can start in: head + tail, or more when it needs
    #: extra room while it loads (TFLM's planning); None means head + tail.
    required_bytes: int | None = None
    #: Bytes live at each step (step 0: graph inputs; step k: k-th operator run, main graph).
    live_bytes: tuple[int, ...] = ()
    #: Main-graph operator index → (first step, last step) it spans (more than one step for
    #: control-flow ops whose subgraphs run inside it).
    op_steps: dict[int, tuple[int, int]] = field(default_factory=dict)
    tail_breakdown: dict[str, int] = field(default_factory=dict)
    exact: tuple[str, ...] = ()
    estimated: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def arena_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes

    @property
    def arena_required_bytes(self) -> int:
        return max(self.required_bytes or 0, self.arena_bytes)


@dataclass(frozen=True)
class TrainingPlan:
    """The memory a runtime allocates to run a model's train signature once: its subgraph's
    arena and the model's resource variables (:func:`simulator.plan.training.plan_training`).

    ``parts`` name where the bytes go and add up to ``total_bytes``: the variables
    (``trainable weights``, ``optimizer state``, ``other variables``), the arena at its
    fullest step (``batch``, ``saved activations``, ``gradients``, ``variable copies``,
    ``kernel temporaries``, ``arena gaps``: what the placement leaves unused there) and what
    the runtime keeps beside it (LiteRT: ``kernel persistent``, ``kernel dynamic``, ``ruy
    workspace``, ``interpreter``).
    """

    signature: str
    subgraph: int
    #: The leading dimension of the signature's first input.
    batch: int
    arena_bytes: int
    variables_bytes: int
    total_bytes: int
    parts: dict[str, int]
    basis: Basis = Basis.ESTIMATED
    notes: tuple[str, ...] = ()


@dataclass
class RunResult:
    """What one run of a model in a real runtime gave back."""

    runtime: str
    outputs: list[np.ndarray]
    #: Wall-clock time of each timed invoke (after the warm-up runs), host CPU.
    host_ms: list[float]
    #: TFLM's RecordingMicroAllocator figures; None for runtimes without an arena.
    arena_head_bytes: int | None = None
    arena_tail_bytes: int | None = None
    arena_total_bytes: int | None = None
    #: Tail allocations by RecordingMicroAllocator category → bytes used (with alignment).
    arena_categories: dict[str, int] = field(default_factory=dict)
    #: Per-op host times ``{"op_index", "op", "ms"}`` where the runtime reports them.
    per_op_ms: list[dict] | None = None
    #: The arena size the interpreter was created with (TFLM), for the record.
    arena_size_used: int | None = None


@dataclass(frozen=True)
class RuntimeShapes:
    """A runtime's shapes of the main subgraph's tensors (index → shape) after it resized
    the inputs, or why there are none."""

    shapes: dict[int, tuple[int, ...]]
    #: True when the shapes are read after an invoke (value-dependent shapes included).
    invoked: bool = False
    #: Why the runtime did not invoke (then ``shapes`` are what allocate set, if anything).
    problem: str | None = None


@dataclass(frozen=True)
class RunOptions:
    """How one run goes: timed invokes after the warm-up ones, and the runtime's set-up."""

    runs: int = 1
    warmup: int = 1
    threads: int = 1
    #: LiteRT's default delegate (a runner whose target has no ``xnnpack_option`` ignores it).
    xnnpack: bool = True
    reference_kernels: bool = False
    #: TFLM arena size to start from; None lets the runner pick (and grow on failure).
    arena_size: int | None = None

    def __post_init__(self) -> None:
        if self.runs < 1 or self.warmup < 0:
            # Imported here: this module imports nothing of devicefit when it loads.
            from devicefit.simulator.errors import UsageError

            raise UsageError(f"runs must be >= 1 and warmup >= 0 (got runs={self.runs}, "
                             f"warmup={self.warmup})")


@dataclass(frozen=True)
class ExportedFile:
    """One file of a firmware export (a target's ``export``), relative to its folder."""

    path: str
    text: str


@dataclass(frozen=True)
class BuildRequest:
    """``--target-build``: the device's own build to measure on, and the export it builds
    (``devicefit export``'s name and arena margin; a plain ``simulate`` takes the
    defaults: the model file's name, no margin)."""

    checkout: str
    export_name: str | None = None
    arena_margin: int = 0


#: An input shape given for a model's dynamic dimensions: (input name, or None for a
#: model's only input; its shape).
InputShape: TypeAlias = "tuple[str | None, tuple[int, ...]]"


@dataclass(frozen=True)
class MeasureOptions:
    """How ``--run`` measures a model: what a command (``simulate``, ``export``, ``check``)
    hands the driver's measuring stage (:func:`simulator.run.measure.measure`), one frozen
    object from the command line to the runner, as Vela's ``CompilerOptions``.
    :class:`RunOptions` is the set-up of one run inside it."""

    #: Timed invokes after ``warmup`` untimed ones.
    runs: int = 10
    warmup: int = 1
    #: Input data (``.npy`` for one input, ``.npz`` by input name); None: random data
    #: within each input's range, fixed seed.
    input_path: str | Path | None = None
    #: Seconds before a hanging runtime is killed.
    timeout_s: float = 60.0
    #: Run the cross-check of a target that has one (TFLM against LiteRT's reference
    #: kernels, on an integer model).
    cross_check: bool = True
    #: ``--target-build``: also measure on the device's own build; None: the host only.
    target_build: BuildRequest | None = None


class ModelRuns(Protocol):
    """What a target's measuring hook may do with the model being measured: run it again,
    on the same inputs (:class:`simulator.run.runtimes.RunSetup` is one)."""

    @property
    def input_path(self) -> str | Path | None: ...

    @property
    def timeout_s(self) -> float: ...

    def run(self, runtime: str, options: RunOptions) -> RunResult: ...

    def input_request(self, work: Path) -> dict[str, Any]: ...


class Runner(Protocol):
    """One runtime. ``run`` executes inside the worker (child) process only."""

    name: str

    def run(self, model_path: str, inputs: list[np.ndarray], num_outputs: int,
            options: RunOptions, stage: Callable[[str], None]) -> RunResult: ...
