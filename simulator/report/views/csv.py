"""The CSV view: one row per operator of every subgraph (:mod:`simulator.report.layers`) — shapes,
dtype, MACs, parameters, bytes live while it runs, estimated and measured times — for a
spreadsheet or pandas. Missing figures are empty cells."""

from __future__ import annotations

import csv
import io

from devicefit.simulator.report.layers import COLUMNS, cells
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View


def render(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(name for name, _ in COLUMNS)
    for row in report.layers:
        writer.writerow("" if v is None else f"{v:.6g}" if isinstance(v, float) else v
                        for v in cells(row))
    return out.getvalue()


VIEW = View("csv", ".csv", render)
