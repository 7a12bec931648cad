"""The JSON view: the report as data (``--json``), with its ``schema_version``; the way back
is :func:`simulator.target.read_report` (it names the targets' sections)."""

from __future__ import annotations

from devicefit.simulator.infra import jsonout
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View


def render(report: Report) -> str:
    return jsonout.dumps(report.to_dict(), indent=2) + "\n"


VIEW = View("json", ".json", render)
