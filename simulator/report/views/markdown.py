"""The Markdown view: a report's verdict, budgets and problems, for a merge-request comment
or ``$GITHUB_STEP_SUMMARY``. ``devicefit check`` writes its project table with the same
marks and wording (:mod:`sdk.check.views`)."""

from __future__ import annotations

from pathlib import Path

from devicefit.simulator.infra.escape import markdown as md_literal
from devicefit.simulator.infra.escape import markdown_code as md_code
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View
from devicefit.simulator.report.views.messages import (
    budget_format,
    problems,
    verdict_causes,
)
from devicefit.simulator.types import Status

#: The mark of a status ("error": a target that could not be simulated).
MARKS = {"pass": "✅", "at-risk": "🟠", "fail": "❌", "error": "⚠️"}


def render(report: Report) -> str:
    status = report.status
    causes = verdict_causes(report)
    lines = [f"## {MARKS[status]} devicefit: {md_code(Path(report.model.path).name)} on "
             f"{md_code(report.profile.name)}: {status}"
             + (f" ({md_literal(causes)})" if causes else ""), ""]
    if report.budgets:
        lines += ["| budget | value | limit | margin | basis | status |",
                  "|---|---|---|---|---|---|"]
        for b in report.budgets:
            fmt = budget_format(b)
            lines.append(f"| {b.name} | {fmt(b.value)} | {fmt(b.limit)} | {fmt(b.margin)} | "
                         f"{b.basis} | {MARKS[b.status]} |")
    found = problems(report) if status != Status.PASS else []
    if found:
        lines += ["", "### Problems", ""] + [f"- {md_literal(p)}" for p in found]
    if report.notes:
        lines += ["", "<details><summary>Notes</summary>", ""]
        lines += [f"- {md_literal(n)}" for n in report.notes] + ["", "</details>"]
    return "\n".join(lines) + "\n"


VIEW = View("markdown", ".md", render)
