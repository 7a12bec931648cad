"""Views of a :class:`~sdk.check.gate.CheckResult`: JUnit XML, Markdown, JSON, table rows.

They only format what the result holds (one report, many views). JUnit: one testsuite per
model × profile, one testcase per budget and per regression rule; a target that could not be
simulated is one ``simulate`` testcase with an ``<error>``. Failures carry the limit, the
value and the margin in both the message and the text, since CI viewers show one or the
other.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from simulator.escape import clean
from simulator.escape import markdown as md_literal
from simulator.escape import markdown_code as md_code
from simulator.report import BudgetCheck
from simulator.units import format_figure as fmt

from .baseline import METRIC_KEYS, RegressionCheck, report_metrics
from .gate import CheckResult, Outcome
from .junit_meta import testsuite_attributes
from .project import METRICS

MARKS = {"pass": "✅", "at-risk": "🟠", "fail": "❌", "error": "⚠️"}


def budget_message(b: BudgetCheck) -> str:
    limit = "budget" if b.limit_from == "budgets" else f"limit ({b.limit_from})"
    if b.status == "at-risk" and b.band:
        return (f"{b.name} {fmt(b.value, b.unit)} (likely {fmt(b.band[0], b.unit)}–"
                f"{fmt(b.band[1], b.unit)}) is AT RISK: within its {fmt(b.limit, b.unit)} "
                f"{limit}, but the error band reaches {fmt(b.band[1] - b.limit, b.unit)} past it "
                f"({b.basis})")
    if b.ok:
        return (f"{b.name} {fmt(b.value, b.unit)} within its {fmt(b.limit, b.unit)} {limit} "
                f"({fmt(b.margin, b.unit)} left, {b.basis})")
    return (f"{b.name} {fmt(b.value, b.unit)} exceeds its {fmt(b.limit, b.unit)} {limit} by "
            f"{fmt(-b.margin, b.unit)} ({b.basis})")


def regression_message(r: RegressionCheck) -> str:
    change = _change(r)
    if r.ok:
        return (f"{r.name} {fmt(r.value, r.unit)} vs baseline {fmt(r.baseline, r.unit)} "
                f"({change}; allowed +{r.rule})")
    return (f"{r.name} grew from {fmt(r.baseline, r.unit)} to {fmt(r.value, r.unit)} "
            f"({change}), over the +{r.rule} allowed ({fmt(r.limit, r.unit)}) by "
            f"{fmt(-r.margin, r.unit)}")


def _change(r: RegressionCheck) -> str:
    if r.baseline == 0:
        return f"{'+' if r.value >= 0 else ''}{fmt(r.value, r.unit)}"
    return f"{(r.value - r.baseline) / r.baseline:+.1%}"


def _details(fields: dict[str, Any]) -> str:
    return "\n".join(f"{k}: {v}" for k, v in fields.items())


def _figures(check: BudgetCheck | RegressionCheck) -> dict[str, str]:
    """Exact numbers and readable ones, for a failure's text."""
    names = ["baseline"] if isinstance(check, RegressionCheck) else []
    out = {n: f"{getattr(check, n):g} {check.unit} ({fmt(getattr(check, n), check.unit)})"
           for n in [*names, "limit", "value", "margin"]}
    if isinstance(check, RegressionCheck):
        out["rule"] = f"may grow by {check.rule}"
    else:
        out["basis"] = check.basis
        if check.band:
            out["likely"] = (f"{fmt(check.band[0], check.unit)} to "
                             f"{fmt(check.band[1], check.unit)}")
    return out


# --------------------------------------------------------------------------- cells
def metric_cell(o: Outcome, metric: str) -> tuple[str, bool | None]:
    """``value / limit`` of a metric (just the value without a budget) and its verdict."""
    if o.report is None:
        return "-", None
    budget = next((b for b in o.report.budgets if b.name == metric), None)
    if budget is not None:
        likely = (f" (likely {fmt(budget.band[0], budget.unit)}–{fmt(budget.band[1], budget.unit)})"
                  if budget.band else "")
        risk = " at risk" if budget.status == "at-risk" else ""
        return (f"{fmt(budget.value, budget.unit)}{likely} / {fmt(budget.limit, budget.unit)}"
                f"{risk}", budget.ok)
    if metric in o.unchecked_budgets:
        return "not checked", None
    key, unit = METRIC_KEYS[metric]
    value = report_metrics(o.report)[key]
    return ("-", None) if value is None else (fmt(value, unit), None)


def regression_cell(o: Outcome) -> tuple[str, bool | None]:
    """The failed rules, else the figures that moved, else ``unchanged``: kept compact."""
    if not o.regressions:
        return ("not checked" if o.rules else "-"), None
    failed = [r for r in o.regressions if not r.ok]
    shown = failed or [r for r in o.regressions if r.value != r.baseline]
    return ", ".join(f"{r.name} {_change(r)}" for r in shown) or "unchanged", not failed


def notes(result: CheckResult) -> list[str]:
    """Why something was not checked, each reason once."""
    found = [f"{name} budget not checked: {why}" for o in result.outcomes
             for name, why in o.unchecked_budgets.items()]
    found += [n for o in result.outcomes for n in o.regression_notes]
    return list(dict.fromkeys(found))


def compatibility_message(compat: dict[str, Any]) -> str | None:
    """Why the target runtime cannot run the model, or None if it can (or was not checked)."""
    if compat.get("supported") is not False:
        return None
    ops = compat.get("unsupported_ops") or []
    names = ", ".join(sorted({str(op.get("op")) for op in ops})) or "some operators"
    text = (f"{compat.get('table') or 'the runtime'} cannot run this model: unsupported "
            f"{names} ({len(ops)} op{'s' if len(ops) != 1 else ''})")
    if ops and ops[0].get("reason"):
        reason = str(ops[0]["reason"])
        text += f"; op {ops[0].get('op_index')}: {reason[:150]}{'...' if len(reason) > 150 else ''}"
    return text


def problems(o: Outcome) -> list[str]:
    """One line per failed budget, unsupported op set or regression, or the error."""
    if o.report is None:
        return [o.error or "simulation failed"]
    found = [budget_message(b) for b in o.report.budgets if b.status != "pass"]
    compat = compatibility_message(o.report.compatibility or {})
    found += [compat] if compat else []
    found += [f"regression: {regression_message(r)}" for r in o.regressions if not r.ok]
    if not o.report.ok and not found:  # a verdict must never fail unexplained
        found.append("the simulator's verdict is fail; see the JSON report")
    return found


# --------------------------------------------------------------------------- JUnit
def junit_xml(result: CheckResult) -> str:
    root = ET.Element("testsuites", name="devicefit check")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    ran = testsuite_attributes(result.seconds)
    for o in result.outcomes:
        suite = ET.SubElement(root, "testsuite", name=f"{o.model} @ {o.profile}", **ran)
        props = ET.SubElement(suite, "properties")
        for name, value in (("model", o.model_path), ("profile", o.profile),
                            ("run", str(result.run).lower()),
                            ("overridden_budgets", ",".join(o.overridden))):
            ET.SubElement(props, "property", name=name, value=value)
        counts = _suite_cases(suite, o, f"devicefit.{o.model}@{o.profile}", result.fail_on_risk)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{o.seconds:.3f}")
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{result.seconds:.3f}")
    _clean_tree(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _clean_tree(root: ET.Element) -> None:
    """Names and messages quote the project and the models: ElementTree escapes ``<&"`` but
    writes control characters as they are, which no XML parser accepts."""
    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, clean(value))
        if element.text:
            element.text = clean(element.text)


def _suite_cases(suite: ET.Element, o: Outcome, classname: str,
                 fail_on_risk: bool = False) -> dict[str, int]:
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(name: str) -> ET.Element:
        counts["tests"] += 1
        return ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")

    if o.report is None:
        err = ET.SubElement(case("simulate"), "error", type="DevicefitError",
                            message=o.error or "simulation failed")
        err.text = o.error
        counts["errors"] += 1
        return counts
    for b in o.report.budgets:
        tc = case(f"budget.{b.name}")
        if not b.ok or (fail_on_risk and b.status == "at-risk"):
            failure = ET.SubElement(tc, "failure", type="BudgetExceeded" if not b.ok
                                    else "BudgetAtRisk", message=budget_message(b))
            failure.text = _details(_figures(b))
            counts["failures"] += 1
        elif b.status == "at-risk":  # JUnit has no warning: CI viewers show system-out
            ET.SubElement(tc, "system-out").text = budget_message(b)
    if o.report.compatibility is not None:
        tc = case("compatibility")
        message = compatibility_message(o.report.compatibility)
        if message:
            failure = ET.SubElement(tc, "failure", type="UnsupportedOperator", message=message)
            failure.text = "\n".join(
                f"op {op.get('op_index')} {op.get('op')}: {op.get('reason')}"
                for op in o.report.compatibility.get("unsupported_ops") or [])
            counts["failures"] += 1
    for name, why in o.unchecked_budgets.items():
        ET.SubElement(case(f"budget.{name}"), "skipped", message=f"{name} budget not checked: {why}")
        counts["skipped"] += 1
    checked = {r.name for r in o.regressions}
    for r in o.regressions:
        tc = case(f"regression.{r.name}")
        if not r.ok:
            failure = ET.SubElement(tc, "failure", type="Regression",
                                    message=regression_message(r))
            failure.text = _details(_figures(r))
            counts["failures"] += 1
    for name in o.rules:
        if name not in checked:
            ET.SubElement(case(f"regression.{name}"), "skipped",
                          message="; ".join(o.regression_notes) or "not checked")
            counts["skipped"] += 1
    if counts["tests"] == 0:  # no budget and no rule: still say it simulated
        case("simulate")
    return counts


# --------------------------------------------------------------------------- Markdown
def _md_escape(text: str) -> str:
    return md_literal(text)


def markdown(result: CheckResult) -> str:
    """A summary for ``$GITHUB_STEP_SUMMARY`` or a merge-request comment."""
    counts = result.counts()
    total = len(result.outcomes)
    bad = counts["fail"] + counts["error"] + counts["at-risk"]
    words = {"fail": "failed", "error": "errors", "at-risk": "at risk"}
    headline = (f"all {total} passed" if not bad else
                ", ".join(f"{counts[k]} {words[k]}" for k in ("fail", "error", "at-risk")
                          if counts[k]) + f" of {total}")
    mode = "static analysis + real inference" if result.run else "static analysis"
    lines = [f"## {MARKS[result.verdict]} devicefit check: {headline}", "",
             f"{md_code(Path(result.project).name)} · {mode}"
             + (f" · baseline {md_code(Path(result.baseline).name)}" if result.baseline
                else "")
             + f" · {result.seconds:.1f} s", "",
             "| | model | profile | " + " | ".join(METRICS) + " | regression |",
             "|---|---|---|" + "---|" * len(METRICS) + "---|"]
    for o in result.outcomes:
        cells = [_md_cell(*metric_cell(o, m)) for m in METRICS] + [_md_cell(*regression_cell(o))]
        lines.append(f"| {MARKS[o.status]} | {_md_escape(o.model)} | {_md_escape(o.profile)} | "
                     + " | ".join(cells) + " |")
    failing = [o for o in result.outcomes if o.status != "pass"]
    if failing:
        lines += ["", "### Problems", ""]
        for o in failing:
            for p in problems(o):
                lines.append(f"- **{_md_escape(o.model)}** on {md_code(o.profile)}: "
                             f"{_md_escape(p)}")
    why = notes(result)
    if why:
        lines += ["", "<details><summary>Not checked</summary>", ""]
        lines += [f"- {_md_escape(n)}" for n in why] + ["", "</details>"]
    return "\n".join(lines) + "\n"


def _md_cell(text: str, ok: bool | None) -> str:
    # Only failures are marked: the row's mark already says when all is well.
    return _md_escape(text) + (" ❌" if ok is False else "")


# --------------------------------------------------------------------------- JSON
def json_text(result: CheckResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def html(result: CheckResult) -> str:
    """One page for the project: the gate's table, then a section per model × profile."""
    from simulator.html import Section, escape, html_table, render_html

    rows = [(o.model, o.profile, *(metric_cell(o, m)[0] for m in METRICS),
             regression_cell(o)[0], "; ".join(problems(o)) if o.status != "pass" else "",
             o.status.upper() if o.status != "pass" else "pass")
            for o in result.outcomes]
    mode = "static analysis + real inference" if result.run else "static analysis"
    intro = (f"<p>{escape(Path(result.project).name)} · {escape(mode)} · verdict "
             f"<b>{escape(result.verdict)}</b></p>"
             + html_table(("model", "profile", *METRICS, "regression", "problems", "status"),
                          rows, [o.status for o in result.outcomes], last_cell_class="status"))
    sections = [Section(f"{o.model} on {o.profile}", o.report)
                for o in result.outcomes if o.report is not None]
    return render_html(f"devicefit check: {Path(result.project).name}", sections, intro)
