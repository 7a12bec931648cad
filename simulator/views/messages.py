"""One sentence per judged figure, shared by the views that explain a verdict (JUnit,
Markdown, the check and bench commands): the limit, the value and the margin in words."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devicefit.simulator.report import BudgetCheck, CompatibilityReport, Report, Status
from devicefit.simulator.units import format_estimate
from devicefit.simulator.units import format_figure as fmt


def budget_message(b: BudgetCheck) -> str:
    limit = "budget" if b.limit_from == "budgets" else f"limit ({b.limit_from})"
    if b.status == Status.AT_RISK and b.band:
        return (f"{b.name} {format_estimate(b.value, b.unit, b.band)} "
                f"is AT RISK: within its {fmt(b.limit, b.unit)} "
                f"{limit}, but the error band reaches {fmt(b.band[1] - b.limit, b.unit)} past it "
                f"({b.basis})")
    if b.ok:
        return (f"{b.name} {fmt(b.value, b.unit)} within its {fmt(b.limit, b.unit)} {limit} "
                f"({fmt(b.margin, b.unit)} left, {b.basis})")
    return (f"{b.name} {fmt(b.value, b.unit)} exceeds its {fmt(b.limit, b.unit)} {limit} by "
            f"{fmt(-b.margin, b.unit)} ({b.basis})")


def compatibility_message(compat: CompatibilityReport | None) -> str | None:
    """Why the target runtime cannot run the model, or None if it can (or was not checked)."""
    if compat is None or compat.supported:
        return None
    ops = compat.unsupported_ops
    names = ", ".join(sorted({op.op for op in ops})) or "some operators"
    text = (f"{compat.table or 'the runtime'} cannot run this model: unsupported "
            f"{names} ({len(ops)} op{'s' if len(ops) != 1 else ''})")
    if ops and ops[0].reason:
        reason = ops[0].reason
        text += f"; op {ops[0].op_index}: {reason[:150]}{'...' if len(reason) > 150 else ''}"
    return text


def disagreement_messages(report: Report) -> list[str]:
    """One line per operator on which the op table and the runtime (its one-op probe or the
    run) answered differently; the runtime's answer is the report's."""
    c = report.compatibility
    return [f"op support: {d.line()}" for d in c.disagreements] if c is not None else []


def problems(report: Report) -> list[str]:
    """One line per budget not passed or not checked and per unsupported op set; never an
    unexplained fail."""
    found = [budget_message(b) for b in report.budgets if b.status != Status.PASS]
    found += [f"{name} budget not checked: {why}" for name, why in report.unchecked_budgets.items()]
    compat = compatibility_message(report.compatibility)
    found += [compat] if compat else []
    if not report.ok and not found:
        found.append("the simulator's verdict is fail; see the JSON report")
    return found


def figures(check: Any, names: Sequence[str]) -> dict[str, str]:
    """Exact numbers and readable ones of ``check``'s fields ``names``, for a failure's text."""
    return {n: f"{getattr(check, n):g} {check.unit} ({fmt(getattr(check, n), check.unit)})"
            for n in names}


def budget_figures(b: BudgetCheck) -> dict[str, str]:
    out = figures(b, ("limit", "value", "margin"))
    out["basis"] = b.basis
    if b.band:
        out["likely"] = f"{fmt(b.band[0], b.unit)} to {fmt(b.band[1], b.unit)}"
    return out


def details(fields: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in fields.items())
