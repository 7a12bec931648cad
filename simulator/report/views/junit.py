"""The JUnit XML view: one testsuite per report, one testcase per budget and one for op
support, and a failed ``compile`` testcase for a model the target's compiler refused (the
compiler's whole message as its text). A budget the report could not judge is a skipped
case; an at-risk budget passes, its message in ``system-out`` (JUnit has no warning); with
``fail_on_risk`` both fail. Failures carry the limit, the value and the margin in both the
message and the text, since CI viewers show one or the other. ``devicefit check`` builds
its project-wide file from :func:`report_cases`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from devicefit.simulator.infra.escape import clean
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View, heading
from devicefit.simulator.report.views.messages import (
    budget_figures,
    budget_message,
    compatibility_message,
    details,
    disagreement_messages,
)
from devicefit.simulator.types import Status

#: The counters of a ``<testsuite>``.
COUNTS = ("tests", "failures", "errors", "skipped")


def case(suite: ET.Element, counts: dict[str, int], classname: str, name: str) -> ET.Element:
    counts["tests"] += 1
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")


def report_cases(suite: ET.Element, report: Report, classname: str, counts: dict[str, int],
                 fail_on_risk: bool = False) -> None:
    """The report's compile, budget, op-support and unchecked-budget testcases, added to
    ``suite``."""
    if (refusal := report.compile_refusal) is not None:
        failure = ET.SubElement(case(suite, counts, classname, "compile"), "failure",
                                type="CompilerRefused", message=refusal.line())
        failure.text = refusal.message
        counts["failures"] += 1
    for b in report.budgets:
        tc = case(suite, counts, classname, f"budget.{b.name}")
        if not b.ok or (fail_on_risk and b.status == Status.AT_RISK):
            failure = ET.SubElement(tc, "failure", type="BudgetExceeded" if not b.ok
                                    else "BudgetAtRisk", message=budget_message(b))
            failure.text = details(budget_figures(b))
            counts["failures"] += 1
        elif b.status == Status.AT_RISK:  # JUnit has no warning: CI viewers show system-out
            ET.SubElement(tc, "system-out").text = budget_message(b)
    if report.compatibility is not None:
        tc = case(suite, counts, classname, "compatibility")
        message = compatibility_message(report.compatibility)
        if message:
            failure = ET.SubElement(tc, "failure", type="UnsupportedOperator", message=message)
            failure.text = "\n".join(f"op {op.op_index} {op.op}: {op.reason}"
                                     for op in report.compatibility.unsupported_ops)
            counts["failures"] += 1
        if disagreements := disagreement_messages(report):
            ET.SubElement(tc, "system-out").text = "\n".join(disagreements)
    for name, why in report.unchecked_budgets.items():
        tc = case(suite, counts, classname, f"budget.{name}")
        message = f"{name} budget not checked: {why}"
        if fail_on_risk:  # an unknown figure is at risk, like a band crossing the budget
            ET.SubElement(tc, "failure", type="BudgetNotChecked", message=message)
            counts["failures"] += 1
        else:
            ET.SubElement(tc, "skipped", message=message)
            counts["skipped"] += 1


def xml_text(root: ET.Element) -> str:
    """The document, with control characters made visible: names and messages quote the
    models and the project, and ElementTree escapes ``<&"`` but writes control characters
    as they are, which no XML parser accepts."""
    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, clean(value))
        if element.text:
            element.text = clean(element.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render(report: Report, fail_on_risk: bool = False) -> str:
    root = ET.Element("testsuites", name="devicefit simulate")
    suite = ET.SubElement(root, "testsuite", name=heading(report))
    counts = dict.fromkeys(COUNTS, 0)
    report_cases(suite, report, f"devicefit.{report.profile.name}", counts, fail_on_risk)
    if counts["tests"] == 0:  # no budget: still say it simulated
        case(suite, counts, f"devicefit.{report.profile.name}", "simulate")
    for k, v in counts.items():
        suite.set(k, str(v))
        root.set(k, str(v))
    return xml_text(root)


VIEW = View("junit", ".xml", render)
