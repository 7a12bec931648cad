"""The CSV view: one row per operator of the main graph — its MACs, the bytes it moves, the
bytes live while it runs and its estimated device time — for a spreadsheet or pandas."""

from __future__ import annotations

import csv
import io

from simulator.report import Report
from simulator.views.base import View

COLUMNS = ("op_index", "op", "macs", "bytes_moved", "live_bytes", "estimated_ms")


def render(report: Report) -> str:
    live = {s.op_index: s.live_bytes for s in report.memory.timeline}
    estimated = {o.op_index: o.estimated_ms for o in report.latency.per_op} \
        if report.latency else {}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for c in report.compute.per_op:
        ms = estimated.get(c.op_index)
        writer.writerow((c.op_index, c.op, c.macs, c.bytes_moved, live.get(c.op_index, ""),
                         "" if ms is None else f"{ms:.6g}"))
    return out.getvalue()


VIEW = View("csv", ".csv", render)
