"""The plain-text view of a simulate report (what ``devicefit simulate`` prints).

Every figure says whether it reproduces the runtime ("exact"), was measured, or is an
estimate, so a user knows how much to trust it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.compat.edgetpu import text_lines as edgetpu_text_lines
from simulator.escape import clean
from simulator.report import Report
from simulator.units import format_size, format_time_ms

#: A budget's status as the text views print it.
STATUS_WORDS = {"pass": "ok", "fail": "OVER", "at-risk": "AT RISK"}


def _bytes(n: float) -> str:
    return f"{int(n):,} B" if abs(n) < 10 * 1024 else f"{int(n):,} B ({format_size(n)})"


def _columns(rows: Sequence[Sequence[Any]], indent: str = "  ") -> list[str]:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))] if cells else []
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in cells]


def _trust(key: str, exact: Sequence[str], estimated: Sequence[str]) -> str:
    if key in exact:
        return "exact"
    return "estimated" if key in estimated else ""


def render_text(report: Report, top: int = 8) -> str:
    """The report as readable text; ``top`` operators with the most live bytes are listed."""
    m, p, mem = report.model, report.profile, report.memory
    lines = []
    ops = ", ".join(f"{k}×{v}" for k, v in sorted(m.op_types.items(), key=lambda kv: -kv[1]))
    params = ", ".join(f"{k} {v:,}" for k, v in m.parameters.items()) or "none"
    lines += [f"Model    {Path(m.path).name}  {_bytes(m.size_bytes)}  sha256 {m.sha256[:12]}",
              f"         {m.operators} operators: {ops}",
              f"         parameters: {params}; {report.compute.macs:,} MACs"]
    if m.conversion:
        conv = ", ".join(f"{k}={v}" for k, v in m.conversion.items()
                         if isinstance(v, (str, int, float, bool)))
        lines.append(f"         converted by devicefit: {conv}")
    lines.append(f"Profile  {p.name}  ({p.device_class}, runtime {p.runtime}, "
                 f"{p.kernels} kernels)")
    lines += ["", f"Memory (planner {mem.planner})"]
    ex, est = mem.exact, mem.estimated
    rows = [["arena head", _bytes(mem.arena_head_bytes), _trust("arena_head", ex, est)],
            ["arena tail", _bytes(mem.arena_tail_bytes), _trust("arena_tail", ex, est)],
            ["arena total", _bytes(mem.arena_bytes),
             "exact" if {"arena_head", "arena_tail"} <= set(ex) else "estimated"],
            *([["arena to start", _bytes(mem.arena_required_bytes), "estimated (planning room)"]]
              if mem.arena_required_bytes > mem.arena_bytes else []),
            ["lower bound", _bytes(mem.lower_bound_bytes), _trust("lower_bound", ex, est)],
            ["flash", _bytes(mem.flash_bytes), _trust("flash", ex, est)]]
    lines += _columns(rows)
    if mem.timeline:
        peak = sorted(mem.timeline, key=lambda s: (-s.live_bytes, s.op_index))[:top]
        lines += ["", f"Operators with the most live bytes (top {len(peak)} of "
                      f"{len(mem.timeline)})"]
        lines += _columns([["op", "type", "live"]] +
                          [[s.op_index, s.op, _bytes(s.live_bytes)] for s in peak])
    from simulator.runtimes.text import run_sections  # it builds on this module's helpers

    lines += run_sections(report)
    edgetpu = (report.compatibility or {}).get("edgetpu")
    if edgetpu:
        lines += ["", *edgetpu_text_lines(edgetpu)]
    if report.budgets:
        lines += ["", "Budgets"]
        rows = []
        for b in report.budgets:
            fmt = _bytes if b.unit == "bytes" else format_time_ms
            value = fmt(b.value) + (f", likely {fmt(b.band[0])}–{fmt(b.band[1])}" if b.band
                                    else "")
            source = "" if b.limit_from == "budgets" else f" ({b.limit_from})"
            rows.append([b.name, value, "of", fmt(b.limit) + source, STATUS_WORDS[b.status],
                         f"margin {fmt(b.margin)}", b.basis])
        lines += _columns(rows)
    if report.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in report.notes]
    risk = f" (at risk: {', '.join(report.at_risk)})" if report.at_risk else ""
    lines += ["", f"Verdict: {report.verdict.upper()}{risk}"]
    # Names in the model and the profile reach the terminal only through here.
    return clean("\n".join(lines)) + "\n"
