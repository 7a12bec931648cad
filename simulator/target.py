"""The door to the targets: the :class:`Target` record, its typed plug-in bindings, the
registry of targets and the lookups on it.

A target is what a profile's ``runtime.name`` selects: a runtime on a kind of device (TFLite
Micro on a microcontroller, LiteRT on a phone, LiteRT plus a Coral Edge TPU). Everything the
simulator and the SDK need to know about it is one :class:`Target` record, ``TARGET``, in
the ``__init__`` of its package. :data:`TARGETS` finds the records itself: in the packages
of ``simulator/targets/`` (the built-in targets, found by the package name
:data:`BUILTIN_PACKAGE`: this is the one module that names them), and where installed
distributions name them in the ``devicefit.targets`` entry-point group (a target of one's
own, see ``docs/internals.md``). So adding a target is its package, its profiles and its
tests, and no line elsewhere; generic code reaches a target only through its record
(``pyproject.toml``'s import contracts hold it). The registries keyed by target
(``CHECKERS``, ``SECTIONS``, ``RUNNERS``, the profile schema's runtime names, kernels,
delegates, op tables and device classes) are views of this one (:class:`TargetView`,
:func:`union`), and the questions asked of all targets at once (:func:`compiled_for`,
:func:`accelerator_op`, :func:`section_type`, :func:`runner_for`) are answered here.

A record binds its plug-in functions as ``lazy(Planner, "module:function")``: the protocol
(:class:`Planner`, :class:`OpTable` ...) types the field, so a type checker and an IDE check
every call and that a record gives each field a binding of its kind, and the string defers
the import to the first call, so reading the registry — which validating a profile does —
imports the records and what they declare (their profile keys are schema leaves), and no
planner, op table, report, model reader, native runtime or :mod:`simulator.profiles`
(``tests/simulator/test_targets.py`` holds the list, and checks every binding of every
registered target against its protocol's signature). This module imports
:mod:`simulator.errors` when it runs, and the classes its protocols name for the type checker
only.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from devicefit.simulator.errors import ProfileError, UsageError
from devicefit.simulator.infra import distributions

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import numpy as np

    from devicefit.simulator.infra.schema import Leaf
    from devicefit.simulator.profile_types import Profile
    from devicefit.simulator.read.model import Model
    from devicefit.simulator.report.report import (
        CrossCheck,
        MeasuredReport,
        MemoryReport,
        Report,
        TargetSection,
    )
    from devicefit.simulator.types import (
        BuildRequest,
        ExportedFile,
        MemoryPlan,
        ModelRuns,
        Runner,
        RunResult,
        RuntimeShapes,
        UnsupportedOp,
    )

#: The packages of built-in targets.
BUILTIN_PACKAGE = "devicefit.simulator.targets"
#: The entry-point group a distribution names its targets in: ``name = "module:TARGET"``,
#: the name being the target's (the profile's ``runtime.name``).
ENTRY_POINTS = "devicefit.targets"


# --------------------------------------------------------------------------- the plug-ins
# What a record binds, one protocol per kind. The parameters are positional-only: the
# callers pass them by position, so a plug-in may name them as it likes.


class Planner(Protocol):
    """The arena planner by the runtime's rules; ``order``: the main graph's operators in
    this order (the optimizer's), None: the file's."""

    def __call__(self, model: Model, profile: Profile, order: Sequence[int] | None,
                 /) -> MemoryPlan: ...


class OpTable(Protocol):
    """The target's op table: the operators its runtime cannot run, each with why."""

    def __call__(self, model: Model, profile: Profile, /) -> list[UnsupportedOp]: ...


class HostRuntime(Protocol):
    """Makes the runner of the target's runtime (in the worker process only)."""

    def __call__(self) -> Runner: ...


class SectionMaker(Protocol):
    """The target's own static report section, ``compatibility.<name>``."""

    def __call__(self, model: Model, profile: Profile, /) -> TargetSection: ...


class SectionClass(Protocol):
    """The class of the target's section (a report read back from JSON builds it)."""

    def __call__(self) -> type[TargetSection]: ...


class Settings(Protocol):
    """The target's typed settings from the values of its profile keys the profile sets."""

    def __call__(self, values: Mapping[str, Mapping[str, Any]], /) -> Any: ...


class AfterConvert(Protocol):
    """Run by ``convert`` on the model it wrote: a section for its report, or None."""

    def __call__(self, path: Path, profile: Profile, /) -> TargetSection | None: ...


class Prepare(Protocol):
    """The model the device runs (an NPU's compilation of the file)."""

    def __call__(self, model: Model, profile: Profile, /) -> Model: ...


#: A measuring hook's answer: the section it was given with its figures, and notes.
Measured = tuple["MeasuredReport", list[str]]


class RunReader(Protocol):
    """What the target reads from a run of its own runner beside the prediction."""

    def __call__(self, measured: MeasuredReport, model: Model, profile: Profile,
                 memory: MemoryReport, result: RunResult, /) -> Measured: ...


class CrossChecker(Protocol):
    """A check the target runs on any profile's model it can run; None: not for this one."""

    def __call__(self, model: Model, profile: Profile, setup: ModelRuns, host: RunResult,
                 /) -> tuple[CrossCheck | None, list[str]]: ...


class AcceleratorAsk(Protocol):
    """The target's accelerator asked itself about the model, where one runs on this
    machine: its section back with the answers beside the prediction, and notes."""

    def __call__(self, section: TargetSection, model: Model, profile: Profile,
                 setup: ModelRuns, /) -> tuple[TargetSection, list[str]]: ...


class AcceleratorEval(Protocol):
    """The target's accelerator asked about a model ``convert`` wrote, on the evaluation
    data (``x`` the first input's samples, ``labels`` or None): its section."""

    def __call__(self, path: Path, profile: Profile, x: np.ndarray,
                 labels: np.ndarray | None, /) -> TargetSection: ...


class OnDevice(Protocol):
    """The model measured on the device's own build (``host``: the host run, if it ran)."""

    def __call__(self, measured: MeasuredReport, model: Model, profile: Profile,
                 setup: ModelRuns, host: RunResult | None, memory: MemoryReport,
                 /) -> Measured: ...


class DeviceBuild(Protocol):
    """The device's build ``request`` names, checked now (an ``InputError`` when it cannot
    be made), as the measurement on it."""

    def __call__(self, request: BuildRequest, profile: Profile, /) -> OnDevice: ...


class CodeSize(Protocol):
    """The runtime's code a firmware holds beside the model, and what the figure rests on;
    None: no estimate for this profile."""

    def __call__(self, model: Model, profile: Profile, /) -> tuple[int, str] | None: ...


class Exporter(Protocol):
    """The firmware component a user compiles (``devicefit export``)."""

    def __call__(self, model: Model, profile: Profile, memory: MemoryReport,
                 checkout: str | None, name: str | None, margin: int,
                 verification: Mapping[str, Any] | None, /) -> list[ExportedFile]: ...


class ShapeOracle(Protocol):
    """The shapes the runtime gives every tensor once the inputs are resized and the model
    invoked (input tensor index → shape; a timeout in seconds)."""

    def __call__(self, path: str | Path, inputs: Mapping[int, tuple[int, ...]],
                 timeout_s: float, /) -> RuntimeShapes: ...


T = TypeVar("T")


def load(ref: str) -> Any:
    """The object ``"module:attr"`` names (``attr`` may be dotted: ``"mod:Class.method"``)."""
    module, _, attr = ref.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


class Lazy:
    """A plug-in of the kind ``kind`` (a protocol of this module) at ``ref``
    (``"module:attr"``), imported when first called, then called."""

    def __init__(self, kind: type, ref: str) -> None:
        self.kind = kind
        self.ref = ref
        self._found: Any = None

    def resolve(self) -> Any:
        """The object ``ref`` names, imported once."""
        if self._found is None:
            self._found = load(self.ref)
        return self._found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.kind.__name__}, {self.ref!r})"


class LazyClass(Lazy):
    """The class at ``ref`` itself, imported when first asked for (a section's class)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()


def lazy(kind: Callable[..., T], ref: str) -> T:
    """``ref`` (``"module:attr"``, see :func:`load`) bound as a plug-in of the kind
    ``kind``, a protocol of this module: ``lazy(Planner, "my_npu.planner:plan")``.

    To a type checker the result is a ``kind`` (a protocol class is a callable that gives
    one), so the record's field and every call of it are checked; at run time it is a
    :class:`Lazy`, which imports ``ref`` on its first call. Target records bind their
    planners, op tables and runners through this so that reading a record imports none of
    them (they import :mod:`simulator.profiles`, which reads the registry).
    """
    return cast(T, Lazy(cast(type, kind), ref))


def lazy_class(ref: str) -> SectionClass:
    """The class ``"module:Class"`` of a target's section, imported when first asked for:
    a record names it without importing its module."""
    return cast(SectionClass, LazyClass(cast(type, SectionClass), ref))


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class Target:
    """One target's bindings and capabilities (``section_type`` and the fields from
    ``cpu_kernels`` on have defaults).

    ``name``
        The profile's ``runtime.name`` (``"tflm"``), also the name of its op table
        (``ops.table``) and of its runner, if it brings one.
    ``title``
        The name people know it by ("TensorFlow Lite Micro"), for messages and reports.
    ``device_kinds`` / ``kernels`` / ``delegates``
        The ``device.class``, ``runtime.kernels`` and ``runtime.delegates`` values a profile
        of this target may use. The profile schema accepts their union across targets.
    ``planner``
        ``(model, profile, order) -> MemoryPlan``: the arena planner by the runtime's rules.
    ``check_ops``
        ``(model, profile) -> list[UnsupportedOp]``: the target's op table.
    ``runner``
        The name of the target whose host runtime runs this target's models in ``--run``
        (the Edge TPU runs its CPU reference in ``"litert"``); None when nothing here can
        run them.
    ``host_runtime``
        Factory of the :class:`simulator.types.Runner` this target brings (TFLM, LiteRT),
        called in the worker process only; None when it brings none.
    ``quant_schemes``
        The quantization schemes the target executes (a profile may allow fewer).
    ``int16_io``
        Whether int16 model inputs and outputs are allowed (int16x8 models).
    ``sparse_weights``
        None when the target gains from sparse (N:M, zero) weights, else why it does not.
    ``offline_plan``
        Whether it accepts an offline arena plan (``optimize`` / ``convert
        --optimize-memory``).
    ``section``
        ``(model, profile) -> section``: the target's own static report section
        (``compatibility.<name>``, a :class:`simulator.report.report.TargetSection`: the Edge TPU
        partition), or None for targets without one.
    ``section_type``
        ``() -> type``: the class of that section, to read a report back from JSON; None
        for targets without a section.
    ``cpu_kernels``
        ``runtime.kernels`` values that name an accelerator rather than a CPU library, each
        mapped to the library the ops left on the host CPU run on (Edge TPU: ``{"edgetpu":
        "xnnpack"}``); other values are CPU libraries themselves.
    ``bench_tool``
        The on-device benchmark program ``devicefit bench`` drives over adb for this target
        (LiteRT's ``benchmark_model``); None when bench cannot measure it.
    ``profile_keys``
        Extra YAML keys the target declares, ``{section: {key: Leaf}}`` (the Edge TPU's
        constants under ``cost_model``), validated like the built-in keys; a profile of
        another target may not set them.
    ``settings``
        ``({section: {key: value}}) -> settings``: the target's typed settings from the
        values of its ``profile_keys`` the profile sets, kept as
        ``Profile.target_settings``; None when it declares no keys.
    ``after_convert``
        ``(path, profile) -> section | None``, run by ``convert`` on the written model (the
        Edge TPU partition of the result, the Ethos-U's Vela compilation); ``convert``
        prints the section's ``summary_lines()``. None when the target adds nothing.
    ``prepare``
        ``(model, profile) -> model``: the model the device runs, which simulate reports on
        (the Ethos-U: Vela's compilation of a plain int8 model); None: the model itself.
    ``resizes_inputs``
        Whether the runtime resizes a dynamic input at run time (LiteRT does; TFLM
        allocates the shapes stored in the file), for ``--input-shape``.
    ``compiled_op``
        The custom op code the target's compiler leaves in a model for its compiled part
        (e.g. Vela's ``ethos-u``); on any other target that op is a finding naming this one.
    ``wheel``
        The Python distribution its ``host_runtime`` lives in (``"tflite-micro"``): the op
        probe asks that runtime and keys its cache by the wheel's version; None: no wheel.
    ``xnnpack_option``
        Whether its runner honours ``RunOptions.xnnpack`` (LiteRT's default delegate, on
        when the profile's ``runtime.delegates`` list ``xnnpack``); other runners ignore it.
    ``second_opinion``
        The target whose runner, with reference kernels, is a second implementation of this
        target's integer kernels (TFLM: ``"litert"``): ``optimize`` checks its output in
        both.
    ``read_run``
        ``(measured, model, profile, memory, result) -> (measured, notes)``: what the target
        reads from a run of its own runner beside the prediction (TFLM: the arena), run by
        :mod:`simulator.run.measure`; None: the run's outputs and times are all it gives.
    ``cross_check``
        ``(model, profile, setup, host) -> (CrossCheck | None, notes)``: a check the target
        runs on any profile's model it can run (TFLM against LiteRT's reference kernels, bit
        for bit on integer models); None from the hook: it does not apply to this model.
    ``ask_accelerator``
        ``(section, model, profile, setup) -> (section, notes)``: ``--run`` asks the
        target's accelerator itself where one runs on this machine (the phone GPU: LiteRT's
        GPU delegate on a Vulkan adapter, its partition and its outputs against the CPU's)
        and gives its section back with the answers, or with why it was not asked; run by
        :mod:`simulator.run.measure` after the host run. None: nothing to ask.
    ``accelerator_eval``
        ``(path, profile, x, labels) -> section``: ``convert --eval`` asks the target's
        accelerator about the written model on the evaluation data, as ``ask_accelerator``
        does in ``--run`` (the phone GPU: fp16's and the GPU path's accuracy beside the
        CPU's fp32); ``convert`` prints the section's ``summary_lines()`` in place of
        ``after_convert``'s. None: nothing to ask.
    ``device_build``
        ``(request, profile) -> measure``, raising a one-line :class:`InputError` when the
        device's build cannot be made from ``request.checkout``; ``measure(measured, model,
        profile, setup, host, memory) -> (measured, notes)`` gives the model measured on
        that build (TFLM: the model exported and built for the core, run under QEMU:
        ``--run --target-build``). None: the target has no device build.
    ``code_size``
        ``(model, profile) -> (bytes, basis) | None``: the runtime's code a firmware holds
        beside the model, estimated for the model's operators (TFLM: the kernels it
        registers, from code sizes measured per kernel library and core), with what the
        figure rests on; None from the hook: no estimate for this profile (the profile's
        ``runtime.code_size`` is used then).
    ``export``
        ``(model, profile, memory, checkout, name, margin, verification) -> files``: the
        firmware component a user compiles (``devicefit export``; TFLM: the model array, its
        op resolver, the arena, a header, an example and build files), the op resolver's
        names from the runtime ``checkout`` when given, the arena the report's ``memory``
        judged plus ``margin``; ``verification``: what the device build measured of those
        files, recorded in them. None: the target exports nothing.
    ``shapes``
        ``(path, input index → shape, timeout_s) -> RuntimeShapes``: the shapes its runtime
        gives every tensor once the inputs are resized and the model invoked (LiteRT, in a
        child); :mod:`simulator.plan.shapes` confirms its own inference with the first target
        that has one. None: its runtime runs the stored shapes only.
    ``failed_node``
        A regular expression for the operator a failed run stopped at, in its runner's
        message (named groups ``op`` and ``index``: TFLM's "Node CONV_2D (number 3)");
        None: its messages name none.

    The device-latency estimate is the target's section's own split where its section has
    one (the Edge TPU: TPU compute, link, CPU fallback), else the CPU cost model of
    :mod:`simulator.estimate.latency` for ``device.cpu`` and the kernel library (``cpu_kernels``).
    """

    name: str
    title: str
    device_kinds: tuple[str, ...]
    kernels: tuple[str, ...]
    delegates: tuple[str, ...]
    planner: Planner
    check_ops: OpTable
    runner: str | None
    host_runtime: HostRuntime | None
    quant_schemes: tuple[str, ...]
    int16_io: bool
    sparse_weights: str | None
    offline_plan: bool
    section: SectionMaker | None
    section_type: SectionClass | None = None
    cpu_kernels: Mapping[str, str] = field(default_factory=dict)
    bench_tool: str | None = None
    profile_keys: Mapping[str, Mapping[str, Leaf]] = field(default_factory=dict)
    settings: Settings | None = None
    after_convert: AfterConvert | None = None
    prepare: Prepare | None = None
    resizes_inputs: bool = True
    compiled_op: str | None = None
    wheel: str | None = None
    xnnpack_option: bool = False
    second_opinion: str | None = None
    read_run: RunReader | None = None
    cross_check: CrossChecker | None = None
    ask_accelerator: AcceleratorAsk | None = None
    accelerator_eval: AcceleratorEval | None = None
    device_build: DeviceBuild | None = None
    code_size: CodeSize | None = None
    export: Exporter | None = None
    failed_node: str | None = None
    shapes: ShapeOracle | None = None


# --------------------------------------------------------------------------- the registry


def _add(targets: dict[str, Target], target: Target) -> None:
    if target.name in targets:
        raise ValueError(f"target '{target.name}' is registered twice")
    targets[target.name] = target


def _builtin() -> Iterator[Target]:
    package = importlib.import_module(BUILTIN_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.ispkg:
            target = getattr(importlib.import_module(f"{BUILTIN_PACKAGE}.{info.name}"),
                             "TARGET", None)
            if isinstance(target, Target):
                yield target


def _installed() -> Iterator[Target]:
    if not distributions.may_declare(ENTRY_POINTS):
        return
    import importlib.metadata  # tens of milliseconds: only when a distribution may declare

    for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINTS),
                        key=lambda e: e.name):
        target = entry.load()
        if not isinstance(target, Target):
            raise ValueError(f"entry point '{entry.name} = {entry.value}' ({ENTRY_POINTS}) "
                             f"names a {type(target).__name__}, not a Target record")
        if target.name != entry.name:
            raise ValueError(f"entry point '{entry.name} = {entry.value}' ({ENTRY_POINTS}) "
                             f"names target '{target.name}': name the entry point after it")
        yield target


class Registry(Mapping[str, Target]):
    """Target name → :class:`Target`: the built-in packages and the installed entry points,
    read on first use (and again on :meth:`reload`)."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] | None = None
        self._lock = threading.Lock()

    def _all(self) -> dict[str, Target]:
        targets = self._targets
        if targets is None:
            with self._lock:
                if self._targets is None:
                    self._targets = self._discover()
                targets = self._targets
        return targets

    @staticmethod
    def _discover() -> dict[str, Target]:
        # Into a new dict: a record that fails to import leaves the registry as it was.
        found: dict[str, Target] = {}
        for target in (*_builtin(), *_installed()):
            _add(found, target)
        return found

    def reload(self) -> None:
        """Read the packages and entry points again, e.g. after a target's distribution
        was installed into (or removed from) the running interpreter's path. A record that
        fails to load raises and leaves the registry as it was."""
        importlib.invalidate_caches()  # the path's folders may have new entries
        found = self._discover()
        with self._lock:
            self._targets = found

    def __getitem__(self, name: str) -> Target:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Every target by name: the built-in packages, then the ``devicefit.targets`` entry points.
TARGETS = Registry()


V = TypeVar("V")


class TargetView(Mapping[str, V], Generic[V]):
    """A read-only view of the registry: target name → ``pick(target)``, skipping targets
    for which ``pick`` gives None. Registries keyed by target (planners, op tables,
    runners) are such views, so they follow :meth:`Registry.reload`."""

    def __init__(self, pick: Callable[[Target], V | None]) -> None:
        self._pick = pick

    def _items(self) -> dict[str, V]:
        return {name: value for name, t in TARGETS.items()
                if (value := self._pick(t)) is not None}

    def __getitem__(self, name: str) -> V:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())


def union(pick: Callable[[Target], tuple[str, ...]]) -> tuple[str, ...]:
    """Every value ``pick`` gives over the registered targets, once each, in order."""
    return tuple(dict.fromkeys(v for t in TARGETS.values() for v in pick(t)))


# --------------------------------------------------------------------------- the lookups


def target_for(profile: Profile) -> Target:
    """The target ``profile``'s ``runtime.name`` selects."""
    try:
        return TARGETS[profile.runtime.name]
    except KeyError:
        raise ProfileError(f"profile '{profile.name}': no target '{profile.runtime.name}' "
                           f"(known: {', '.join(TARGETS)})") from None


def runner_for(target: Target | str) -> Target:
    """The target whose host runtime runs the models of ``target`` (a record, or a target's
    name): its ``runner`` (the Edge TPU's CPU reference runs in LiteRT); a
    :class:`UsageError` when there is none here."""
    record = TARGETS.get(target) if isinstance(target, str) else target
    if record is not None and record.runner is None:
        raise UsageError(f"the {record.name} target ({record.title}) has no runner here, so "
                         f"its models cannot be run; the static figures need no run")
    runner = TARGETS.get(record.runner) if record is not None and record.runner else None
    if runner is None or runner.host_runtime is None:
        name = target if isinstance(target, str) else target.name
        known = sorted(n for n, t in TARGETS.items() if t.host_runtime is not None)
        raise UsageError(f"no runner for runtime '{name}' (known: {', '.join(known)})")
    return runner


def compiled_for(code: str) -> Target | None:
    """The target whose compiler leaves custom op ``code`` in a model, if any."""
    return next((t for t in TARGETS.values() if t.compiled_op == code), None)


def accelerator_op(code: str) -> str | None:
    """The compatibility finding for a custom op a target's compiler left in the model (its
    compiled part, which only that accelerator's driver runs), else None."""
    target = compiled_for(code)
    if target is None:
        return None
    return (f"compiled for the {target.title}: this op is the accelerator's part of the graph "
            f"and runs only where its driver is; give the uncompiled .tflite or a profile for "
            f"that accelerator")


def section_type(table: str) -> type | None:
    """The class of ``compatibility.<table>`` (to read a report back from JSON), None for a
    table without a section."""
    target = TARGETS.get(table)
    return target.section_type() if target is not None and target.section_type else None


def read_report(data: dict[str, Any]) -> Report:
    """A report from its JSON form (``--json``; the shard results ``check merge`` combines),
    each target's section as its own class: :meth:`Report.from_dict` with
    :func:`section_type`. A newer ``schema_version`` is refused; keys no field names are
    dropped (why: there)."""
    from devicefit.simulator.report.report import Report

    return Report.from_dict(data, section_type)
