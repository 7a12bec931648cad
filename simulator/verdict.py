"""Budgets → checks → verdict. Every budget the profile sets becomes one :class:`BudgetCheck`.

A figure measured on the real runtime wins over the static prediction of the same thing
(``report.measured["arena_bytes"]``, ``report.measured["device_latency_ms"]`` from a device
benchmark); latency is judged only once a stage has filled
``report.latency["estimated_device_ms"]`` (a latency budget with no figure yet is left out
and noted, never passed silently). A latency budget the estimate meets but the top of its
error band (``report.latency["band_ms"]``) does not is "at-risk": it passes the verdict, and
``check --fail-on-risk`` fails on it. When the running half reports an unsupported operator
(``report.compatibility["supported"] is False``) the verdict fails whatever the budgets say.
"""

from __future__ import annotations

from simulator.profiles import Profile
from simulator.report import BudgetCheck, MemoryReport, Report


def flash_bytes(model_bytes: int, profile: Profile) -> int:
    """What the model needs in flash: its bytes plus the runtime's code, if the profile says."""
    return model_bytes + (profile.runtime.code_bytes or 0)


def _check(name: str, limit: float, value: float, unit: str, basis: str,
           limit_from: str = "budgets") -> BudgetCheck:
    return BudgetCheck(name=name, limit=limit, value=value, ok=value <= limit, unit=unit,
                       margin=limit - value, basis=basis, limit_from=limit_from)


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
        limits["arena"] = max(rams)
    if d.flash_bytes is not None:
        limits["flash"] = (d.flash_bytes, "device.flash")
    return limits


def _bounded(name: str, budget: float | None, profile: Profile,
             notes: list[str]) -> tuple[float | None, str]:
    """The limit to judge ``name`` against: the budget, capped by the device's memory."""
    device = device_limits(profile).get(name)
    if device is None:
        return budget, "budgets"
    size, key = device
    if budget is None or budget > size:
        if budget is not None:
            notes.append(f"profile '{profile.name}': budgets.{name} ({int(budget):,} B) is larger "
                         f"than {key} ({size:,} B); judged against the device")
        return size, key
    return budget, "budgets"


def device_warnings(profile: Profile) -> list[str]:
    """The profile's budgets that promise more memory than its device has."""
    notes: list[str] = []
    for name, budget in (("flash", profile.budgets.flash_bytes),
                         ("arena", profile.budgets.arena_bytes)):
        _bounded(name, budget, profile, notes)
    return notes


def budget_checks(profile: Profile, memory: MemoryReport, measured: dict | None = None,
                  latency: dict | None = None) -> tuple[list[BudgetCheck], list[str]]:
    """The checks of ``profile``'s budgets against these figures, and notes on any skipped."""
    b = profile.budgets
    checks: list[BudgetCheck] = []
    notes: list[str] = []
    flash_limit, flash_from = _bounded("flash", b.flash_bytes, profile, notes)
    if flash_limit is not None:
        checks.append(_check("flash", flash_limit, memory.flash_bytes, "bytes", "predicted",
                             flash_from))
    arena_limit, arena_from = _bounded("arena", b.arena_bytes, profile, notes)
    if arena_limit is not None:
        # The runtime must also be able to start: TFLM needs extra room while planning,
        # which neither the final allocation nor a run's recorded total includes.
        if measured and measured.get("arena_bytes") is not None:
            needed = max(measured["arena_bytes"], memory.arena_required_bytes)
            basis = measured.get("arena_basis", "measured")
        else:
            needed = max(memory.arena_bytes, memory.arena_required_bytes)
            basis = "predicted" if "arena_tail" in memory.exact else "estimated"
        checks.append(_check("arena", arena_limit, needed, "bytes", basis, arena_from))
    if b.latency_ms is not None:
        # A time measured on the device itself (``bench``) beats any estimate.
        on_device = (measured or {}).get("device_latency_ms")
        value = on_device if on_device is not None else (latency or {}).get("estimated_device_ms")
        if value is None:
            notes.append("latency budget not checked: no latency estimate in this report")
        else:
            check = _check("latency", b.latency_ms, float(value), "ms",
                           "estimated" if on_device is None else "measured")
            # A measured time has no error band; only an estimate can be "at risk".
            band = (latency or {}).get("band_ms") if on_device is None else None
            if band:
                check.band = (float(band[0]), float(band[1]))
                # Met by the estimate, not by the top of its band: its own status.
                if check.ok and check.band[1] > b.latency_ms:
                    check.status = "at-risk"
            checks.append(check)
    return checks, notes


def overall(checks: list[BudgetCheck], compatibility: dict | None = None) -> str:
    """"fail" if a budget fails or the runtime lacks an operator the model uses."""
    if compatibility is not None and compatibility.get("supported") is False:
        return "fail"
    return "pass" if all(c.ok for c in checks) else "fail"


def judge(report: Report, profile: Profile) -> Report:
    """(Re)compute ``report.budgets`` and ``report.verdict`` from the report's figures."""
    checks, notes = budget_checks(profile, report.memory, report.measured, report.latency)
    report.budgets = checks
    report.verdict = overall(checks, report.compatibility)
    report.notes = [n for n in report.notes if n not in notes
                    and not n.startswith("latency budget not checked")]
    report.notes.extend(notes)
    return report
