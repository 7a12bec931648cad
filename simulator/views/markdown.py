"""The Markdown view: a report's verdict, budgets and problems, for a merge-request comment
or ``$GITHUB_STEP_SUMMARY``. ``devicefit check`` writes its project table with the same
marks and wording (:mod:`sdk.check.views`)."""

from __future__ import annotations

from pathlib import Path

from devicefit.simulator.escape import markdown as md_literal
from devicefit.simulator.escape import markdown_code as md_code
from devicefit.simulator.report import Report, Status
from devicefit.simulator.units import format_figure as fmt
from devicefit.simulator.views.base import View
from devicefit.simulator.views.messages import problems

#: The mark of a status ("error": a target that could not be simulated).
MARKS = {"pass": "✅", "at-risk": "🟠", "fail": "❌", "error": "⚠️"}


def render(report: Report) -> str:
    status = report.status
    lines = [f"## {MARKS[status]} devicefit: {md_code(Path(report.model.path).name)} on "
             f"{md_code(report.profile.name)}: {status}", ""]
    if report.budgets:
        lines += ["| budget | value | limit | margin | basis | status |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {b.name} | {fmt(b.value, b.unit)} | {fmt(b.limit, b.unit)} | "
                  f"{fmt(b.margin, b.unit)} | {b.basis} | {MARKS[b.status]} |"
                  for b in report.budgets]
    found = problems(report) if status != Status.PASS else []
    if found:
        lines += ["", "### Problems", ""] + [f"- {md_literal(p)}" for p in found]
    if report.notes:
        lines += ["", "<details><summary>Notes</summary>", ""]
        lines += [f"- {md_literal(n)}" for n in report.notes] + ["", "</details>"]
    return "\n".join(lines) + "\n"


VIEW = View("markdown", ".md", render)
