"""Targets as plug-ins: one module per target, one record each, one registry.

A target is what a profile's ``runtime.name`` selects: a runtime on a kind of device (TFLite
Micro on a microcontroller, LiteRT on a phone, LiteRT plus a Coral Edge TPU). Everything the
simulator and the SDK need to know about it is one :class:`Target` record, ``TARGET``, in a
module of this package; :data:`TARGETS` finds those modules itself (``pkgutil`` over the
package), so adding a target is its module, its profiles and its tests, and no line
elsewhere. The registries that used to list targets by name (``PLANNERS``, ``CHECKERS``,
``SECTIONS``, ``RUNNERS``, the profile schema's runtime names, kernels, delegates, op tables
and device classes) are views of this one.

The record (``section_type`` and the fields from ``cpu_kernels`` on have defaults):

``name``
    The profile's ``runtime.name`` (``"tflm"``), also the name of its op table
    (``ops.table``) and of its runner, if it brings one.
``title``
    The name people know it by ("TensorFlow Lite Micro"), for messages and reports.
``device_kinds`` / ``kernels`` / ``delegates``
    The ``device.class``, ``runtime.kernels`` and ``runtime.delegates`` values a profile of
    this target may use. The profile schema accepts their union across targets.
``planner``
    ``(model, profile, order) -> MemoryPlan``: the arena planner by the runtime's rules.
``check_ops``
    ``(model, profile) -> list[UnsupportedOp]``: the target's op table.
``runner``
    The name of the target whose host runtime runs this target's models in ``--run``
    (the Edge TPU runs its CPU reference in ``"litert"``); None when nothing here can run
    them.
``host_runtime``
    Factory of the :class:`simulator.runtimes.Runner` this target brings (TFLM, LiteRT),
    called in the worker process only; None when it brings none.
``quant_schemes``
    The quantization schemes the target executes (a profile may allow fewer).
``int16_io``
    Whether int16 model inputs and outputs are allowed (int16x8 models).
``sparse_weights``
    None when the target gains from sparse (N:M, zero) weights, else why it does not.
``offline_plan``
    Whether it accepts an offline arena plan (``optimize`` / ``convert --optimize-memory``).
``section``
    ``(model, profile) -> section | None``: the target's own static report section
    (``compatibility.<name>``; the Edge TPU partition), or None for targets without one.
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
    constants under ``cost_model``), validated like the built-in keys; a profile of another
    target may not set them.
``settings``
    ``({section: {key: value}}) -> settings``: the target's typed settings from the
    values of its ``profile_keys`` the profile sets, kept as ``Profile.target_settings``;
    None when it declares no keys.
``prepare``
    ``(model, profile) -> model``: the model the device runs, which simulate reports on
    (the Ethos-U: Vela's compilation of a plain int8 model); None: the model itself.
``after_convert``
    ``(path, profile) -> extra | None``, run by ``convert`` on the written model (the Edge
    TPU partition of the result); None when the target adds nothing.
``resizes_inputs``
    Whether the runtime resizes a dynamic input at run time (LiteRT does; TFLM allocates the
    shapes stored in the file), for ``--input-shape``.
``wheel``
    The Python distribution its ``host_runtime`` lives in (``"tflite-micro"``): the op
    probe asks that runtime and keys its cache by the wheel's version; None: no wheel.
``xnnpack_option``
    Whether its runner honours ``RunOptions.xnnpack`` (LiteRT's default delegate, on when
    the profile's ``runtime.delegates`` list ``xnnpack``); other runners ignore the flag.
``second_opinion``
    The target whose runner, with reference kernels, is a second implementation of this
    target's integer kernels (TFLM: ``"litert"``): ``optimize`` checks its output in both.
``read_run``
    ``(measured, model, profile, memory, result) -> (measured, notes)``: what the target
    reads from a run of its own runner beside the prediction (TFLM: the arena), run by
    :mod:`simulator.measure`; None: the run's outputs and times are all it gives.
``cross_check``
    ``(model, profile, setup, host) -> (CrossCheck | None, notes)``: a check the target
    runs on any profile's model it can run (TFLM against LiteRT's reference kernels, bit for
    bit on integer models); None from the hook: it does not apply to this model.
``device_build``
    ``(build_dir, profile) -> measure``, raising a one-line :class:`InputError` when the
    device's build cannot be made from ``build_dir``; ``measure(measured, model, profile,
    setup, host) -> (measured, notes)`` gives the model measured on that build (TFLM built
    for the core, under QEMU: ``--run --target-build``). None: the target has no device
    build.
``failed_node``
    A regular expression for the operator a failed run stopped at, in its runner's message
    (named groups ``op`` and ``index``: TFLM's "Node CONV_2D (number 3)"); None: its
    messages name none.

The device-latency estimate is the target's section's own split where its section has one
(the Edge TPU: TPU compute, link, CPU fallback), else the CPU cost model of
:mod:`simulator.latency` for ``device.cpu`` and the kernel library (``cpu_kernels``).

Target modules import their planners, op tables and runners inside the small functions
they bind (see :func:`lazy`), so reading the registry — which the profile schema does —
imports no planner, no native runtime and no module that imports :mod:`simulator.profiles`:
only the records and what describes them (schema leaves, units, errors; the Edge TPU's cost
keys are its own ``targets/edgetpu/cost.py``). ``tests/simulator/test_targets.py`` holds it.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from devicefit.simulator.errors import ProfileError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from devicefit.simulator.compat import UnsupportedOp
    from devicefit.simulator.model import Model
    from devicefit.simulator.planners.base import MemoryPlan
    from devicefit.simulator.profiles import Profile
    from devicefit.simulator.report import CrossCheck, MeasuredReport, MemoryReport
    from devicefit.simulator.runtimes import Runner, RunResult, RunSetup
    from devicefit.simulator.schema import Leaf

    Planner = Callable[[Model, Profile, "Sequence[int] | None"], MemoryPlan]
    Checker = Callable[[Model, Profile], list[UnsupportedOp]]
    #: A measuring hook's answer: the section it was given with its figures, and notes.
    Measured = tuple[MeasuredReport, list[str]]
    RunReader = Callable[[MeasuredReport, Model, Profile, MemoryReport, RunResult], Measured]
    CrossChecker = Callable[[Model, Profile, RunSetup, RunResult],
                            tuple["CrossCheck | None", list[str]]]
    OnDevice = Callable[[MeasuredReport, Model, Profile, RunSetup, "RunResult | None"],
                        Measured]
    DeviceBuild = Callable[["str | Path", Profile], OnDevice]


@dataclass(frozen=True)
class Target:
    """One target's bindings and capabilities (see the module docstring for each field)."""

    name: str
    title: str
    device_kinds: tuple[str, ...]
    kernels: tuple[str, ...]
    delegates: tuple[str, ...]
    planner: Planner
    check_ops: Checker
    runner: str | None
    host_runtime: Callable[[], Runner] | None
    quant_schemes: tuple[str, ...]
    int16_io: bool
    sparse_weights: str | None
    offline_plan: bool
    section: Callable[[Model, Profile], Any] | None
    section_type: Callable[[], type] | None = None
    cpu_kernels: Mapping[str, str] = field(default_factory=dict)
    bench_tool: str | None = None
    profile_keys: Mapping[str, Mapping[str, Leaf]] = field(default_factory=dict)
    settings: Callable[[Mapping[str, Mapping[str, Any]]], Any] | None = None
    after_convert: Callable[..., Any] | None = None
    prepare: Callable[[Model, Profile], Model] | None = None  # the model the device runs
    #: Whether the runtime resizes dynamic inputs (LiteRT) or runs the stored shapes (TFLM).
    resizes_inputs: bool = True
    #: The custom op code the target's compiler leaves in a model for its compiled part
    #: (e.g. Vela's ``ethos-u``); on any other target that op is a finding naming this one.
    compiled_op: str | None = None
    wheel: str | None = None
    xnnpack_option: bool = False
    second_opinion: str | None = None
    read_run: RunReader | None = None
    cross_check: CrossChecker | None = None
    device_build: DeviceBuild | None = None
    failed_node: str | None = None


def load(ref: str) -> Any:
    """The object ``"module:attr"`` names (``attr`` may be dotted: ``"mod:Class.method"``)."""
    module, _, attr = ref.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def lazy(ref: str) -> Callable[..., Any]:
    """A function that imports ``"module:attr"`` (see :func:`load`) when first called and
    calls it.

    Target modules bind their planners, op tables and runners through this so that reading
    a target's record imports none of them (they import :mod:`simulator.profiles`, which
    reads the registry).
    """
    found: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not found:
            found.append(load(ref))
        return found[0](*args, **kwargs)

    call.__name__ = ref.rpartition(".")[2].rpartition(":")[2]
    call.__qualname__ = ref
    call.__doc__ = f"{ref}, imported on first use."
    return call


def lazy_type(ref: str) -> Callable[[], type]:
    """A function that imports and returns the class ``"module:Class"`` (not an instance),
    for fields that name a type without importing its module."""

    def get() -> type:
        return load(ref)

    get.__qualname__ = ref
    return get


def _add(targets: dict[str, Target], target: Target) -> None:
    if target.name in targets:
        raise ValueError(f"target '{target.name}' is registered twice")
    targets[target.name] = target


class _Registry(Mapping[str, Target]):
    """Target name → :class:`Target`; the package's modules are imported on first read."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] = {}
        self._discovered = False
        self._lock = threading.Lock()

    def _all(self) -> dict[str, Target]:
        if not self._discovered:
            with self._lock:
                if not self._discovered:
                    self._discover()
                    self._discovered = True
        return self._targets

    def _discover(self) -> None:
        # Into a new dict: a module that fails to import leaves the registry as it was.
        found: dict[str, Target] = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            target = getattr(module, "TARGET", None)
            if isinstance(target, Target):
                _add(found, target)
        self._targets = found

    def register(self, target: Target) -> None:
        _add(self._all(), target)

    def unregister(self, name: str) -> None:
        self._all().pop(name)

    def __getitem__(self, name: str) -> Target:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Every registered target by name: the built-in modules of this package, plus any
#: :func:`register` added.
TARGETS: Mapping[str, Target] = _Registry()


def register(target: Target) -> None:
    """Add a target that is not a module of this package (a test's dummy target)."""
    TARGETS.register(target)  # type: ignore[attr-defined]


def unregister(name: str) -> None:
    """Remove a target :func:`register` added."""
    TARGETS.unregister(name)  # type: ignore[attr-defined]


def target_for(profile: Profile) -> Target:
    """The target ``profile``'s ``runtime.name`` selects."""
    try:
        return TARGETS[profile.runtime.name]
    except KeyError:
        raise ProfileError(f"profile '{profile.name}': no target '{profile.runtime.name}' "
                           f"(known: {', '.join(TARGETS)})") from None


V = TypeVar("V")


class TargetView(Mapping[str, V], Generic[V]):
    """A read-only view of the registry: target name → ``pick(target)``, skipping targets
    for which ``pick`` gives None. Registries keyed by target (planners, op tables,
    runners) are such views, so they follow :func:`register`."""

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


__all__ = ["TARGETS", "Target", "TargetView", "lazy", "lazy_type", "load", "register",
           "target_for", "union", "unregister"]
