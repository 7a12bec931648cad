"""One sentence per judged figure, shared by the views that explain a verdict (JUnit,
Markdown, the check and bench commands): the limit, the value and the margin in words."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from devicefit.simulator.infra.units import (
    decimal_prefixes,
    format_bytes,
    format_estimate,
    format_figure,
)
from devicefit.simulator.report.diff import ACCURACY_KEYS
from devicefit.simulator.report.report import BudgetCheck, CompatibilityReport, Report
from devicefit.simulator.types import BudgetName, Status


def budget_format(b: BudgetCheck) -> Callable[[float], str]:
    """How the figures of budget ``b`` print: in its unit, sizes in the prefix family its
    limit was written in (a 50MB budget's figures in MB)."""
    return lambda v: format_figure(v, b.unit, decimal_budget(b))


def decimal_budget(check: Any) -> bool:
    """Whether ``check`` (a budget or a regression rule) is a size written in kB/MB."""
    return check.unit == "bytes" and decimal_prefixes(check.limit)


def decimal_sizes(report: Report, budget: BudgetName) -> bool:
    """Whether the sizes ``budget`` judges print in kB/MB wherever a view shows them (the
    model file and flash for ``flash``, the arena's figures for ``arena``): its limit was
    written so, and one figure reads the same beside the budget table as in it."""
    return any(b.name == budget and decimal_budget(b) for b in report.budgets)


def training_heading(report: Report) -> str | None:
    """The heading of the training-memory section; None when the report has no plan."""
    t = report.training
    if t is None:
        return None
    return (f"Training memory ('{t.signature}' signature, batch {t.batch}, {t.basis}: "
            f"LiteRT's allocation, planned)")


def training_rows(report: Report) -> list[tuple[str, int]]:
    """The planned training memory as (label, bytes) rows: the total, the variables, the
    arena and what the runtime keeps beside it, each followed by its non-zero parts (labels
    indented two spaces)."""
    t = report.training
    if t is None:
        return []
    variables = [(f"  {k}", v) for k, v in t.parts.items() if k in VARIABLE_PARTS and v]
    beside = [(f"  {k}", v) for k, v in t.parts.items() if k in BESIDE_ARENA_PARTS and v]
    arena = [(f"  {k}", v) for k, v in t.parts.items()
             if k not in VARIABLE_PARTS | BESIDE_ARENA_PARTS and v]
    rest = t.total_bytes - t.variables_bytes - t.arena_bytes
    return [("total", t.total_bytes), ("variables", t.variables_bytes), *variables,
            ("arena", t.arena_bytes), *arena,
            *([("beside the arena", rest), *beside] if rest else [])]


#: The training plan's parts that are resource variables.
VARIABLE_PARTS = frozenset({"trainable weights", "optimizer state", "other variables"})
#: The parts the runtime holds outside the arena and the variables (LiteRT's kernels'
#: persistent and dynamic buffers, ruy's workspace, the interpreter); the others are the
#: arena's.
BESIDE_ARENA_PARTS = frozenset({"kernel persistent", "kernel dynamic", "ruy workspace",
                                "interpreter"})


def signature_line(report: Report) -> str | None:
    """The model's signatures and the subgraph each runs; None when it has none."""
    sigs = report.model.signatures
    return ", ".join(f"{k} (subgraph {v})" for k, v in sigs.items()) if sigs else None


def budget_message(b: BudgetCheck) -> str:
    fmt = budget_format(b)
    limit = "budget" if b.limit_from == "budgets" else f"limit ({b.limit_from})"
    if b.status == Status.AT_RISK and b.band:
        return (f"{b.name} {format_estimate(b.value, b.unit, b.band, decimal_budget(b))} "
                f"is AT RISK: within its {fmt(b.limit)} "
                f"{limit}, but the error band reaches {fmt(b.band[1] - b.limit)} past it "
                f"({b.basis})")
    if b.ok:
        return (f"{b.name} {fmt(b.value)} within its {fmt(b.limit)} {limit} "
                f"({fmt(b.margin)} left, {b.basis})")
    return (f"{b.name} {fmt(b.value)} exceeds its {fmt(b.limit)} {limit} by "
            f"{fmt(-b.margin)} ({b.basis})")


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


def target_build_message(report: Report) -> str | None:
    """Why the device's own build did not verify the model (``--target-build``), or None."""
    t = report.measured.target_build if report.measured else None
    if t is None or t.verified:
        return None
    if t.setup_failed:
        return f"target build not measured ({t.status}): {t.message or 'no message'}"
    if not t.ok:
        lacking = f" ({', '.join(t.unsupported_ops)})" if t.unsupported_ops else ""
        return f"target build {t.status}{lacking}: {t.message or ''}".rstrip(": ")
    if t.arena_constant_starts is False:
        return f"target build: {t.message}"
    return (f"target build: outputs differ from the host run beyond the profile's tolerance "
            f"({t.tolerance})")


def disagreement_messages(report: Report) -> list[str]:
    """One line per operator on which the op table and the runtime (its one-op probe or the
    run) answered differently; the runtime's answer is the report's."""
    c = report.compatibility
    return c.disagreement_lines() if c is not None else []


def problems(report: Report) -> list[str]:
    """One line for a model the target's compiler refused, per budget not passed or not
    checked and per unsupported op set; never an unexplained fail."""
    refusal = report.compile_refusal
    found = [refusal.line()] if refusal is not None else []
    found += [budget_message(b) for b in report.budgets if b.status != Status.PASS]
    found += [f"{name} budget not checked: {why}" for name, why in report.unchecked_budgets.items()]
    compat = compatibility_message(report.compatibility)
    found += [compat] if compat else []
    found += [target] if (target := target_build_message(report)) else []
    if not report.ok and not found:
        found.append("the simulator's verdict is fail; see the JSON report")
    return found


def verdict_causes(report: Report) -> str:
    """Every cause of the verdict, by kind, for the verdict's line: ``over: arena, flash;
    at risk: latency`` — a fail names all that failed, and what is at risk or unchecked
    beside it, never only the mildest ("" for a clean pass)."""
    over = [b.name for b in report.budgets if b.status == Status.FAIL]
    compat = report.compatibility
    unsupported = sorted({op.op for op in compat.unsupported_ops}) if compat else []
    target = report.measured.target_build if report.measured else None
    causes = [
        ("not compiled", report.compile_refusal is not None),
        (f"unsupported: {', '.join(unsupported) or 'some operators'}",
         compat is not None and not compat.supported),
        ("not verified on the target build", target is not None and not target.verified),
        ("no training on this target", report.no_training is not None
         and BudgetName.TRAIN_MEMORY in report.unchecked_budgets),
        (f"over: {', '.join(over)}", bool(over)),
        (f"not checked: {', '.join(report.unchecked_budgets)}",
         bool(report.unchecked_budgets) and not report.ok),
        (f"at risk: {', '.join(report.at_risk)}", bool(report.at_risk)),
    ]
    return "; ".join(text for text, holds in causes if holds)


def conversion_text(conversion: dict[str, Any], prefix: str = "") -> str:
    """The settings ``devicefit convert`` stored in the model, as the text and HTML views
    print them: ``scheme=int8, qat.epochs=2``; a nested setting by its dotted name, a list
    of plain values joined, anything else left out (a view never prints a Python repr). A
    figure of the model's quality in its unit, as ``convert`` and ``diff`` print it
    (``accuracy.accuracy=97.50%``, not the stored 0.975)."""
    parts: list[str] = []
    for key, value in conversion.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            parts.append(conversion_text(value, f"{name}."))
        elif key in ACCURACY_KEYS and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            parts.append(f"{name}={format_figure(value, ACCURACY_KEYS[key][1])}")
        elif isinstance(value, (str, int, float, bool)) or value is None:
            parts.append(f"{name}={value}")
        elif isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            parts.append(f"{name}={'/'.join(map(str, value))}")
    return ", ".join(p for p in parts if p)


def figures(check: Any, names: Sequence[str]) -> dict[str, str]:
    """Exact numbers and readable ones of ``check``'s fields ``names``, for a failure's text:
    ``margin: -55,633 B (-54.3 KiB)``, ``margin: -273.547 ms``."""
    return {n: _exact(getattr(check, n), check.unit, decimal_budget(check)) for n in names}


def _exact(value: float, unit: str, decimal: bool) -> str:
    if unit == "bytes":
        return format_bytes(round(value), decimal)
    if unit == "ms":
        text = format_figure(value, unit)
        return f"{value:,.3f} ms" + ("" if text.endswith(" ms") else f" ({text})")
    return format_figure(value, unit)


def budget_figures(b: BudgetCheck) -> dict[str, str]:
    fmt = budget_format(b)
    out = figures(b, ("limit", "value", "margin"))
    out["basis"] = b.basis
    if b.band:
        out["likely"] = f"{fmt(b.band[0])} to {fmt(b.band[1])}"
    return out


def details(fields: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in fields.items())
