"""A device profile, typed: what :func:`simulator.profiles.load_profile` makes of a validated
YAML file. Only data, importing nothing of devicefit, so the target registry, whose records
plan, check and report for a profile, can name the type below the loader that reads the
registry to validate a profile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Device:
    kind: str
    cpu: str | None = None
    clock_hz: float | None = None
    cores: int = 1
    sram_bytes: int | None = None
    flash_bytes: int | None = None
    ram_bytes: int | None = None
    psram_bytes: int | None = None


@dataclass(frozen=True)
class Runtime:
    name: str
    threads: int = 1
    delegates: tuple[str, ...] = ()
    kernels: str = "reference"
    #: Pointer width of the target; TFLM's persistent tail depends on it.
    pointer_bytes: int = 8
    #: Flash taken by the runtime's own code, added to the model bytes for the flash budget.
    code_bytes: int | None = None
    #: The runtime's version where kernel speed depends on it (e.g. TFLM "2.3.1"); None: current.
    version: str | None = None


@dataclass(frozen=True)
class Budgets:
    flash_bytes: int | None = None
    arena_bytes: int | None = None
    latency_ms: float | None = None
    #: The GPU memory the delegate's partitions may hold (a ``mobile-gpu`` profile's).
    gpu_memory_bytes: int | None = None
    #: What running the model's train signature once may allocate (on-device training).
    train_memory_bytes: int | None = None


@dataclass(frozen=True)
class Firmware:
    """What the firmware linked around the model needs (``devicefit link-check``)."""

    #: RAM the firmware keeps free beyond its static data, for stack and heap: the RAM
    #: region holding the arena must have at least this much left after the link.
    reserve_bytes: int | None = None


@dataclass(frozen=True)
class Quantization:
    schemes: tuple[str, ...] = ("int8",)
    default: str = "int8"
    io_types: tuple[str, ...] = ("int8",)
    per_channel: bool = True


@dataclass(frozen=True)
class Sparsity:
    kinds: tuple[str, ...] = ("none",)
    #: The N:M pattern the target can use, e.g. ``"2:4"``.
    n_m: str | None = None


@dataclass(frozen=True)
class Ops:
    #: A named op table (the runtime's own support), or None for the runtime's default.
    table: str | None = None
    #: An explicit allow-list of builtin op names (e.g. ``CONV_2D``); None allows the table.
    allow: tuple[str, ...] | None = None
    #: Accelerator targets (Edge TPU): the largest share of the model's MACs that may fall
    #: back to the host CPU before the model counts as not running on the accelerator.
    max_cpu_share: float = 0.1


#: The factors a ``kernel_scale`` may hold. The kernel tables are within a few times of every
#: board published; a factor outside is a typo (2**70 made every estimate a failed budget)
#: or a wrong clock, and ``devicefit calibrate`` writes no profile that holds one.
KERNEL_SCALE = (0.001, 1000.0)


@dataclass(frozen=True)
class CostModel:
    """Numbers the device-latency estimate uses (see simulator/estimate/latency.py for the formula).

    ``cycles_per_mac`` keys are ``"<dtype>"`` or ``"<OP_NAME>.<dtype>"`` (the latter wins),
    with ``"default"`` as the last resort.
    """

    cycles_per_mac: Mapping[str, float] = field(default_factory=dict)
    cycles_per_byte: float | None = None
    op_overhead_ms: float = 0.0
    parallel_efficiency: float = 1.0
    #: (low, high): the real latency likely lies in [estimate × low, estimate × high].
    error_band: tuple[float, float] | None = None
    sources: tuple[str, ...] = ()
    #: ``"<kind>.<dtype>"`` → multiplier of the cycles of those ops, as ``devicefit
    #: calibrate`` fits it on the board's own timings (kinds of
    #: ``simulator.estimate.kernels.KINDS``); ``"default"`` applies to the ops no key names.
    kernel_scale: Mapping[str, float] = field(default_factory=dict)
    #: What the calibration rests on (shown as the band's basis); None: not calibrated.
    calibration: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    path: Path
    device: Device
    runtime: Runtime
    budgets: Budgets = field(default_factory=Budgets)
    quantization: Quantization = field(default_factory=Quantization)
    sparsity: Sparsity = field(default_factory=Sparsity)
    ops: Ops = field(default_factory=Ops)
    cost_model: CostModel = field(default_factory=CostModel)
    firmware: Firmware = field(default_factory=Firmware)
    #: The target's own settings, from the profile keys it declares (the Edge TPU's
    #: :class:`simulator.targets.edgetpu.cost.EdgeTpuCost`); None for targets without any.
    target_settings: Any = None
    abstract: bool = False
    #: Names of the profiles this one inherits from, nearest first.
    extends: tuple[str, ...] = ()
    #: The merged YAML mapping after inheritance, kept for ``profiles show``.
    resolved: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: Every file read for this profile (itself, then its parents): inputs no output may replace.
    files: tuple[Path, ...] = field(default=(), compare=False, repr=False)
    #: Values that are valid but may not mean what their writer meant (a size without a
    #: unit, a RAM size in decimal units), each as ``file:line: warning: key: why``.
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)
