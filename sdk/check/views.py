"""Views of a :class:`~sdk.check.gate.CheckResult`: JUnit XML, Markdown, JSON, HTML, table
rows — the project-wide layer over the report views of :mod:`simulator.report.views`.

They only format what the result holds. JUnit: one testsuite per model × profile, with the
report's own testcases (:func:`simulator.report.views.junit.report_cases`: budgets, op support)
and one per regression rule; a target that could not be simulated is one ``simulate``
testcase with an ``<error>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from devicefit.sdk.types import gpu_partition
from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.escape import markdown as md_literal
from devicefit.simulator.infra.escape import markdown_code as md_code
from devicefit.simulator.infra.units import format_band, format_figure, format_percent
from devicefit.simulator.report.views.html import Section, escape, html_table, render_html
from devicefit.simulator.report.views.junit import COUNTS, case, report_cases, xml_text
from devicefit.simulator.report.views.markdown import MARKS
from devicefit.simulator.report.views.messages import (
    decimal_budget,
    details,
    disagreement_messages,
    figures,
)
from devicefit.simulator.report.views.messages import problems as report_problems
from devicefit.simulator.types import BudgetName, Status

from .baseline import METRIC_KEYS, BaselineEntry, RegressionCheck
from .gate import CheckResult, Outcome, TargetStatus
from .junit_meta import testsuite_attributes
from .project import METRICS


def regression_message(r: RegressionCheck) -> str:
    change = _change(r)
    decimal = decimal_budget(r)

    def fmt(value: float, unit: str) -> str:
        return format_figure(value, unit, decimal)

    if r.ok:
        return (f"{r.name} {fmt(r.value, r.unit)} vs baseline {fmt(r.baseline, r.unit)} "
                f"({change}; allowed +{r.rule})")
    return (f"{r.name} grew from {fmt(r.baseline, r.unit)} to {fmt(r.value, r.unit)} "
            f"({change}), over the +{r.rule} allowed ({fmt(r.limit, r.unit)}) by "
            f"{fmt(-r.margin, r.unit)}")


def _change(r: RegressionCheck) -> str:
    if r.baseline == 0:
        return f"{'+' if r.value >= 0 else ''}{format_figure(r.value, r.unit)}"
    return format_percent((r.value - r.baseline) / r.baseline, digits=1, signed=True)


def _figures(r: RegressionCheck) -> dict[str, str]:
    return {**figures(r, ("baseline", "limit", "value", "margin")),
            "rule": f"may grow by {r.rule}"}


# --------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class MetricCell:
    """One metric of one target in parts, so that a narrow table can leave the error band
    out or put the budget under the figure."""

    #: The figure (``28.98 ms``), or ``-`` / ``not checked``.
    value: str
    #: The estimate's error band (``18.55 ms–34.49 ms``), "" without one.
    band: str = ""
    #: The budget (``30.00 ms``), "" without one.
    limit: str = ""
    #: The budget's verdict; None without a budget.
    status: Status | None = None

    def text(self, band: bool = True) -> str:
        """``value (likely band) / limit`` (``band``: with the error band)."""
        shown = f"{self.value} (likely {self.band})" if band and self.band else self.value
        return f"{shown} / {self.limit}" if self.limit else shown


def table_metrics(result: CheckResult) -> tuple[BudgetName, ...]:
    """The metric columns of check's tables: the training budget's only when a model of the
    project has a train signature (a column of "-" on every inference model says nothing)."""
    trains = any(o.report is not None and (o.report.training is not None
                                           or o.report.no_training is not None)
                 for o in result.outcomes)
    return (*METRICS, BudgetName.TRAIN_MEMORY) if trains else METRICS


def metric_parts(o: Outcome, metric: BudgetName) -> MetricCell:
    """The figure of ``metric``, its band, its budget and the budget's verdict."""
    if o.report is None:
        return MetricCell("-")
    budget = next((b for b in o.report.budgets if b.name == metric), None)
    if budget is not None:
        decimal = decimal_budget(budget)

        def fmt(value: float) -> str:
            return format_figure(value, budget.unit, decimal)

        return MetricCell(fmt(budget.value), format_band(budget.band, fmt) if budget.band else "",
                          fmt(budget.limit), budget.status)
    if metric in o.unchecked_budgets:
        return MetricCell("not checked")
    value = BaselineEntry.of(o.report).figure(metric)
    return MetricCell("-" if value is None else format_figure(value, METRIC_KEYS[metric][1]))


def metric_cell(o: Outcome, metric: BudgetName) -> tuple[str, bool | None]:
    """``value / limit`` of a metric (just the value without a budget) and its verdict."""
    cell = metric_parts(o, metric)
    risk = " at risk" if cell.status == Status.AT_RISK else ""
    return cell.text() + risk, None if cell.status is None else cell.status != Status.FAIL


def regression_parts(o: Outcome) -> tuple[list[str], bool | None]:
    """The failed rules, else the figures that moved, else ``unchanged``, one per item, and
    whether the rules held (None: not checked)."""
    if not o.regressions:
        return ["not checked" if o.rules else "-"], None
    failed = [r for r in o.regressions if not r.ok]
    shown = failed or [r for r in o.regressions if r.value != r.baseline]
    return [f"{r.name} {_change(r)}" for r in shown] or ["unchanged"], not failed


def regression_cell(o: Outcome) -> tuple[str, bool | None]:
    """:func:`regression_parts` on one line: kept compact."""
    parts, ok = regression_parts(o)
    return ", ".join(parts), ok


def shown_path(path: str) -> str:
    """A path as a reader finds it: relative to the working folder when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def baseline_text(result: CheckResult) -> str | None:
    """One sentence on the regression half of the gate: what was compared against which
    baseline, and how it went; None when no target has a regression rule."""
    c = result.comparison()
    if not c.targets:
        return None
    if c.written:
        return (f"baseline {shown_path(c.path or '')} written by this run ({c.targets} "
                f"target(s)); regressions are compared with it from the next run")
    if c.path is None:
        return "no baseline: the regression rules were not checked"
    new = c.targets - c.compared
    return (f"{c.compared} of {c.targets} target(s) compared with baseline "
            f"{shown_path(c.path)}"
            + (f" ({new} not in it yet)" if new else "") + ": "
            + (f"{c.regressions} regression(s)" if c.regressions else "no regressions"))


def notes(result: CheckResult) -> list[str]:
    """Why something was not checked, and where the runtime overruled the op table, each
    once."""
    found = [f"{name} budget not checked: {why}" for o in result.outcomes
             for name, why in o.unchecked_budgets.items()]
    found += [n for o in result.outcomes for n in o.regression_notes]
    found += [f"{o.model} on {o.profile}: {n}" for o in result.outcomes if o.report is not None
              for n in disagreement_messages(o.report)]
    return list(dict.fromkeys(found))


def gpu_lines(o: Outcome) -> list[str]:
    """A phone GPU target in two short lines: the predicted partition with its fallbacks
    counted, then whether ``--run`` asked LiteRT's GPU delegate and whether it agrees; []
    for any other target."""
    gpu = gpu_partition(o.report)
    if gpu is None:
        return []
    kinds = list(dict.fromkeys(f.op for f in gpu.fallbacks))
    shown = ", ".join(kinds[:3]) + (f" and {len(kinds) - 3} more" if len(kinds) > 3 else "")
    head = (f"GPU {gpu.gpu_ops}/{gpu.total_ops} ops, {gpu.partitions} "
            f"partition(s), {len(gpu.fallbacks)} CPU fallback(s)"
            + (f" ({shown})" if gpu.fallbacks else "") + " (predicted)")
    asked = gpu.asked
    if asked is None:
        said = "GPU delegate not asked (check --run asks it where a GPU adapter is present)"
    elif asked.not_asked:
        said = f"GPU delegate not asked: {asked.not_asked}"
    elif not asked.disagreements:
        said = "GPU delegate asked: agrees with the prediction"
    else:
        said = (f"GPU delegate asked: {len(asked.disagreements)} disagreement(s): "
                f"{'; '.join(asked.disagreements)}")
    return [head, said]


def problems(o: Outcome) -> list[str]:
    """One line per failed budget, unsupported op set or regression, or the error."""
    if o.report is None:
        return [o.error or "simulation failed"]
    return report_problems(o.report) + [f"regression: {regression_message(r)}"
                                        for r in o.regressions if not r.ok]


# --------------------------------------------------------------------------- JUnit
def junit_xml(result: CheckResult) -> str:
    root = ET.Element("testsuites", name="devicefit check")
    totals = dict.fromkeys(COUNTS, 0)
    ran = testsuite_attributes(result.seconds)
    for o in result.outcomes:
        suite = ET.SubElement(root, "testsuite", {"name": f"{o.model} @ {o.profile}", **ran})
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
    return xml_text(root)


def _suite_cases(suite: ET.Element, o: Outcome, classname: str,
                 fail_on_risk: bool = False) -> dict[str, int]:
    counts = dict.fromkeys(COUNTS, 0)
    if o.report is None:
        err = ET.SubElement(case(suite, counts, classname, "simulate"), "error",
                            type="DevicefitError", message=o.error or "simulation failed")
        err.text = o.error
        counts["errors"] += 1
        return counts
    report_cases(suite, o.report, classname, counts, fail_on_risk)
    checked = {r.name for r in o.regressions}
    for r in o.regressions:
        tc = case(suite, counts, classname, f"regression.{r.name}")
        if not r.ok:
            failure = ET.SubElement(tc, "failure", type="Regression",
                                    message=regression_message(r))
            failure.text = details(_figures(r))
            counts["failures"] += 1
    for name in o.rules:
        if name not in checked:
            ET.SubElement(case(suite, counts, classname, f"regression.{name}"), "skipped",
                          message="; ".join(o.regression_notes) or "not checked")
            counts["skipped"] += 1
    if counts["tests"] == 0:  # no budget and no rule: still say it simulated
        case(suite, counts, classname, "simulate")
    return counts


# --------------------------------------------------------------------------- Markdown
def _md_escape(text: str) -> str:
    return md_literal(text)


def markdown(result: CheckResult) -> str:
    """A summary for ``$GITHUB_STEP_SUMMARY`` or a merge-request comment."""
    counts = result.counts()
    total = len(result.outcomes)
    words = {TargetStatus.FAIL: "failed", TargetStatus.ERROR: "errors",
             TargetStatus.AT_RISK: "at risk"}
    headline = (", ".join(f"{counts[k]} {word}" for k, word in words.items() if counts[k])
                + f" of {total}" if any(counts[k] for k in words) else f"all {total} passed")
    mode = "static analysis + real inference" if result.run else "static analysis"
    lines = [f"## {MARKS[result.verdict]} devicefit check: {headline}", "",
             f"{md_code(Path(result.project).name)} · {mode} · {result.seconds:.1f} s", ""]
    if (compared := baseline_text(result)) is not None:
        lines += [f"**Regressions**: {_md_escape(compared)}", ""]
    metrics = table_metrics(result)
    lines += ["| | model | profile | " + " | ".join(metrics) + " | regression |",
              "|---|---|---|" + "---|" * len(metrics) + "---|"]
    for o in result.outcomes:
        cells = [_md_cell(*metric_cell(o, m)) for m in metrics] + [_md_cell(*regression_cell(o))]
        lines.append(f"| {MARKS[o.status]} | {_md_escape(o.model)} | {_md_escape(o.profile)} | "
                     + " | ".join(cells) + " |")
    failing = [o for o in result.outcomes if o.status != TargetStatus.PASS]
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
    return jsonout.dumps(result.to_dict(), indent=2) + "\n"


def html(result: CheckResult) -> str:
    """One page for the project: the gate's table, then a section per model × profile."""
    metrics = table_metrics(result)
    rows = [(o.model, o.profile, *(metric_cell(o, m)[0] for m in metrics),
             regression_cell(o)[0],
             "; ".join(problems(o)) if o.status != TargetStatus.PASS else "",
             o.status.upper() if o.status != TargetStatus.PASS else "pass")
            for o in result.outcomes]
    mode = "static analysis + real inference" if result.run else "static analysis"
    summarized = sum(1 for o in result.outcomes if not o.detailed)
    more = (f"<p>{summarized} passing target(s) are in the table only; their memory plans "
            f"and per-operator figures are left out of this page and the results (run with "
            f"--details all to keep them)</p>" if summarized else "")
    compared = baseline_text(result)
    intro = (f"<p>{escape(Path(result.project).name)} · {escape(mode)} · verdict "
             f"<b>{escape(result.verdict)}</b></p>"
             + (f"<p>Regressions: {escape(compared)}</p>" if compared else "")
             + html_table(("model", "profile", *metrics, "regression", "problems", "status"),
                          rows, [o.status for o in result.outcomes], last_cell_class="status")
             + more)
    sections = [Section(f"{o.model} on {o.profile}", o.report, o.status,
                        tuple(problems(o)) if o.status != TargetStatus.PASS else ())
                for o in result.outcomes if o.report is not None and o.detailed]
    return render_html(f"devicefit check: {Path(result.project).name}", sections, intro)
