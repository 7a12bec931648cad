"""Budgets → checks → verdict, judged once per report, when the report is whole.

Every budget is one entry of :data:`BUDGETS`: its name, its unit, the profile's limit (capped
by the device's own memory), and how its value is chosen from the report. A figure measured
on the real runtime wins over the static prediction of the same thing (the measured arena of
``--run``; the phone's average time from ``devicefit bench``). A budget the report has no
figure for (a latency budget with no estimate) is not judged: it is listed in
``report.unchecked_budgets`` and noted, never passed silently — and with ``strict`` (fit:
only what it can show to fit) it fails the verdict. A latency budget the estimate meets but
the top of its error band does not is "at-risk": it passes the verdict, and ``check
--fail-on-risk`` fails on it. An operator the target's runtime lacks fails the verdict
whatever the budgets say, and so does a model the target's compiler refused (its report has
no figure to judge: every budget is unchecked, the refusal its reason). A training-memory
budget on a target that cannot run the model's train signature (TFLM has no training)
fails too, with that reason; a model with no train signature is not trained on the device,
so the budget does not apply to it (a note says it was not checked; the verdict stands).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.report.report import BudgetCheck, MemoryReport, Report
from devicefit.simulator.types import Basis, BudgetName, Status, Unit


@dataclass(frozen=True)
class Figure:
    """The value a budget is judged on, what it rests on and, for an estimate, its band."""

    value: float
    basis: Basis
    band: tuple[float, float] | None = None


@dataclass(frozen=True)
class Budget:
    """One budget a profile may set."""

    name: BudgetName
    unit: Unit
    #: The profile's limit, None when it sets none.
    limit: Callable[[Profile], float | None]
    #: The report's figure for it, or why the report has none.
    value: Callable[[Report], Figure | str]
    #: Bounded by the device's physical memory of this kind (``device_limits``).
    device_bound: bool = False
    #: Why the budget does not apply to this model (a note, not an unchecked budget: the
    #: verdict stands), None when it does.
    skip: Callable[[Report], str | None] = lambda report: None


def _missing(report: Report, figure: str) -> str:
    """Why the report has no ``figure``."""
    refusal = report.compile_refusal
    if refusal is not None:
        return f"no compiled model: {refusal.compiler} could not compile it"
    return f"the report has no {figure}"


def _flash(report: Report) -> Figure | str:
    # The export linked for the device's core (a target build) measured its image.
    target = report.measured.target_build if report.measured else None
    if target is not None and target.flash is not None:
        return Figure(target.flash.total_bytes, Basis.MEASURED)
    mem = report.memory
    if mem is None:
        return _missing(report, "memory plan")
    return Figure(mem.flash_bytes, Basis.ESTIMATED if mem.flash_code_bytes else Basis.PREDICTED)


def static_arena_bytes(report: Report) -> int | None:
    """The arena a device needs by the planner alone (what the arena budget judges without
    a run, and what a baseline keeps); None without a memory plan."""
    return None if report.memory is None else _to_start(report.memory)


def _to_start(mem: MemoryReport) -> int:
    """The allocation, or TFLM's larger room to start."""
    return max(mem.arena_bytes, mem.arena_required_bytes)


def _arena(report: Report) -> Figure | str:
    # The runtime must also be able to start: TFLM needs extra room while planning, which
    # neither the final allocation nor a run's recorded total includes.
    mem, measured = report.memory, report.measured
    if mem is None:
        return _missing(report, "memory plan")
    if measured is not None and measured.target_build is not None and measured.target_build.ok:
        # The device's own build started in that arena: nothing left to add for planning.
        return Figure(measured.target_build.min_arena_bytes or 0, Basis.MEASURED)
    if measured is not None and measured.arena_bytes is not None:
        if mem.arena_required_bytes > measured.arena_bytes:
            # The predicted room to start is what is judged, and says so (not "measured").
            return Figure(mem.arena_required_bytes, Basis.ESTIMATED)
        return Figure(measured.arena_bytes, measured.arena_basis or Basis.MEASURED)
    return Figure(_to_start(mem),
                  Basis.PREDICTED if "arena_tail" in mem.exact else Basis.ESTIMATED)


def _latency(report: Report) -> Figure | str:
    # A time measured on the device itself (``bench``) beats any estimate, and has no band.
    on_device = report.bench.vs_estimate.measured_ms if report.bench else None
    if on_device is not None:
        return Figure(float(on_device), Basis.MEASURED)
    lat = report.latency
    if lat is not None and lat.estimated_device_ms is None and lat.no_estimate:
        return lat.no_estimate  # the target's own reason (a Mali GPU: no fitted constants)
    if lat is None or lat.estimated_device_ms is None:
        return _missing(report, "latency estimate")
    return Figure(float(lat.estimated_device_ms), Basis.ESTIMATED, lat.band_ms)


def _gpu_memory(report: Report) -> Figure | str:
    # The GPU target's section sums its partitions' weights and tensors in the GPU's
    # precision: every tensor its own buffer, so an upper bound of what the delegate holds.
    section = report.compatibility.section if report.compatibility else None
    held = getattr(section, "gpu_memory_bytes", None)
    if not isinstance(held, int):
        return _missing(report, "GPU memory estimate (only a GPU delegate's partition has one)")
    return Figure(held, Basis.ESTIMATED)
def _train_memory(report: Report) -> Figure | str:
    if report.training is not None:
        return Figure(report.training.total_bytes, report.training.basis)
    return report.no_training or "the model has no train signature"


def _inference_only(report: Report) -> str | None:
    """A model with no train signature is not trained on the device: a phone profile's
    training budget says nothing about it."""
    if report.training is None and report.no_training is None:
        return "the model has no train signature"
    return None


#: Every budget, in the order reports list them.
BUDGETS: tuple[Budget, ...] = (
    Budget(BudgetName.FLASH, Unit.BYTES, lambda p: p.budgets.flash_bytes, _flash,
           device_bound=True),
    Budget(BudgetName.ARENA, Unit.BYTES, lambda p: p.budgets.arena_bytes, _arena,
           device_bound=True),
    Budget(BudgetName.LATENCY, Unit.MS, lambda p: p.budgets.latency_ms, _latency),
    Budget(BudgetName.GPU_MEMORY, Unit.BYTES, lambda p: p.budgets.gpu_memory_bytes,
           _gpu_memory),
    Budget(BudgetName.TRAIN_MEMORY, Unit.BYTES, lambda p: p.budgets.train_memory_bytes,
           _train_memory, skip=_inference_only),
)


def device_limits(profile: Profile) -> dict[str, tuple[int, str]]:
    """Physical memory of the device, ``{"arena" | "flash": (bytes, profile key)}``.

    An arena is one contiguous block, so it lives in a single memory: the largest of the
    device's SRAM, PSRAM and RAM bounds it (PSRAM is slower, which the latency model
    does not see).
    """
    d = profile.device
    limits: dict[str, tuple[int, str]] = {}
    rams = [(v, f"device.{k}") for k, v in (("sram", d.sram_bytes), ("psram", d.psram_bytes),
                                             ("ram", d.ram_bytes)) if v is not None]
    if rams:
        limits[BudgetName.ARENA] = max(rams)
    if d.flash_bytes is not None:
        limits[BudgetName.FLASH] = (d.flash_bytes, "device.flash")
    return limits


def _bounded(budget: Budget, profile: Profile, notes: list[str]) -> tuple[float | None, str]:
    """The limit to judge ``budget`` against: the profile's, capped by the device's memory."""
    limit = budget.limit(profile)
    device = device_limits(profile).get(budget.name) if budget.device_bound else None
    if device is None:
        return limit, "budgets"
    size, key = device
    if limit is None or limit > size:
        if limit is not None:
            notes.append(f"profile '{profile.name}': budgets.{budget.name} ({int(limit):,} B) "
                         f"is larger than {key} ({size:,} B); judged against the device")
        return size, key
    return limit, "budgets"


def device_warnings(profile: Profile) -> list[str]:
    """The profile's budgets that promise more memory than its device has."""
    notes: list[str] = []
    for budget in BUDGETS:
        _bounded(budget, profile, notes)
    return notes


def _check(budget: Budget, limit: float, figure: Figure, limit_from: str) -> BudgetCheck:
    ok = figure.value <= limit
    status = Status.PASS if ok else Status.FAIL
    # Met by the estimate, not by the top of its band: its own status.
    if ok and figure.band is not None and figure.band[1] > limit:
        status = Status.AT_RISK
    return BudgetCheck(name=budget.name, limit=limit, value=figure.value, ok=ok,
                       unit=budget.unit, margin=limit - figure.value, basis=figure.basis,
                       status=status, band=figure.band, limit_from=limit_from)


def judge(report: Report, profile: Profile, *, strict: bool = False) -> Report:
    """``report`` with its budget checks, unchecked budgets and verdict: call it once, on
    the whole report. ``strict``: a budget without a figure fails the verdict."""
    if report.budgets or report.unchecked_budgets:
        raise ValueError("judge: this report is judged already")
    checks: list[BudgetCheck] = []
    unchecked: dict[BudgetName, str] = {}
    notes: list[str] = list(profile.warnings)
    for budget in BUDGETS:
        limit, limit_from = _bounded(budget, profile, notes)
        if limit is None:
            continue
        if (why := budget.skip(report)) is not None:
            notes.append(f"{budget.name} budget not checked: {why}")
            continue
        figure = budget.value(report)
        if isinstance(figure, str):
            unchecked[budget.name] = figure
            notes.append(f"{budget.name} budget not checked: {figure}")
        else:
            checks.append(_check(budget, limit, figure, limit_from))
    unsupported = report.compatibility is not None and not report.compatibility.supported
    target = report.measured.target_build if report.measured else None
    refused = report.compile_refusal is not None or (target is not None and not target.verified)
    # A training budget on a target that cannot train is no "not checked": it cannot be met.
    cannot_train = report.no_training is not None and BudgetName.TRAIN_MEMORY in unchecked
    failed = unsupported or refused or cannot_train or any(not c.ok for c in checks) \
        or (strict and bool(unchecked))
    return dataclasses.replace(report, budgets=checks, unchecked_budgets=unchecked,
                               verdict=Status.FAIL if failed else Status.PASS,
                               notes=[*report.notes, *notes])
