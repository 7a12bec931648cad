"""Budgets → checks → verdict. Every budget the profile sets becomes one :class:`BudgetCheck`.

A figure measured on the real runtime wins over the static prediction of the same thing
(``report.measured["arena_bytes"]``); latency is judged only once a stage has filled
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


def _check(name: str, limit: float, value: float, unit: str, basis: str) -> BudgetCheck:
    return BudgetCheck(name=name, limit=limit, value=value, ok=value <= limit, unit=unit,
                       margin=limit - value, basis=basis)


def budget_checks(profile: Profile, memory: MemoryReport, measured: dict | None = None,
                  latency: dict | None = None) -> tuple[list[BudgetCheck], list[str]]:
    """The checks of ``profile``'s budgets against these figures, and notes on any skipped."""
    b = profile.budgets
    checks: list[BudgetCheck] = []
    notes: list[str] = []
    if b.flash_bytes is not None:
        checks.append(_check("flash", b.flash_bytes, memory.flash_bytes, "bytes", "predicted"))
    if b.arena_bytes is not None:
        # The runtime must also be able to start: TFLM needs extra room while planning,
        # which neither the final allocation nor a run's recorded total includes.
        if measured and measured.get("arena_bytes") is not None:
            needed = max(measured["arena_bytes"], memory.arena_required_bytes)
            basis = measured.get("arena_basis", "measured")
        else:
            needed = max(memory.arena_bytes, memory.arena_required_bytes)
            basis = "predicted" if "arena_tail" in memory.exact else "estimated"
        checks.append(_check("arena", b.arena_bytes, needed, "bytes", basis))
    if b.latency_ms is not None:
        value = (latency or {}).get("estimated_device_ms")
        if value is None:
            notes.append("latency budget not checked: no latency estimate in this report")
        else:
            check = _check("latency", b.latency_ms, float(value), "ms", "estimated")
            band = (latency or {}).get("band_ms")
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
    report.notes = [n for n in report.notes if not n.startswith("latency budget not checked")]
    report.notes.extend(notes)
    return report
