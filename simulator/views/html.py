"""HTML view of reports: one self-contained page of inline SVG, no script, no network.

Memory problems are spatial, so the page draws them: the memory timeline (live bytes per
operator step, stacked by tensor, with the arena budget and the lower bound), the arena
layout (each planned buffer as a rectangle: x = its lifetime, y = its offset), per-op latency
and MACs, and the budgets. Hovering a shape shows its ``<title>`` (tensor name, shape, dtype,
bytes). The output is a pure function of the reports, so the same input gives the same bytes.
"""

from __future__ import annotations

import html
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.escape import clean
from simulator.report import BudgetName, PlannedBuffer, Report
from simulator.units import format_size, format_time_ms
from simulator.views.base import View, heading

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#8c564b")
WIDTH, PLOT_HEIGHT, MARGIN_LEFT, MARGIN_BOTTOM = 960, 240, 80, 28

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1040px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.pass td.status{background:#d8f0d8;color:#14591a}
tr.fail td.status,tr.error td.status{background:#f8d7d7;color:#8a1010}
tr.at-risk td.status{background:#fff1c2;color:#6b4e00}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:600}
.verdict.pass{background:#d8f0d8;color:#14591a}.verdict.fail{background:#f8d7d7;color:#8a1010}
svg{display:block;margin:4px 0 12px;background:#fff}svg text{font:11px system-ui,sans-serif;fill:#333}
.note{color:#666;font-size:12px}
"""


@dataclass(frozen=True)
class Section:
    heading: str
    report: Report


def escape(value: object) -> str:
    """HTML-quoted, with control characters (invalid in HTML) shown as escapes."""
    return html.escape(clean(value), quote=True)


def _color(b: PlannedBuffer) -> str:
    # crc32 rather than hash(): Python salts str hashes per process, which would break
    # byte-identical output. Scratch buffers (tensor -1) are told apart by name.
    key = str(b.tensor) if b.tensor >= 0 else b.name
    return PALETTE[zlib.crc32(key.encode()) % len(PALETTE)]


def _num(value: float) -> str:
    """Coordinates with two decimals: enough for a screen, stable across platforms."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _buffer_title(b: PlannedBuffer) -> str:
    shape = "x".join(str(d) for d in b.shape) if b.shape else "-"
    kind = "scratch buffer" if b.kind == "scratch" else f"tensor {b.tensor}"
    offline = ", offline-planned" if b.offline else ""
    return (f"{b.name} ({kind}{offline})\nshape {shape} {b.dtype}\n{b.size_bytes} bytes at "
            f"offset {b.offset}\nlive steps {b.first_step}..{b.last_step}")


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
           row_classes: Sequence[str] | None = None, last_cell_class: str = "") -> str:
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes else ""
        cells = [f'<td class="{"num" if isinstance(c, (int, float)) else ""}">{escape(c)}</td>'
                 for c in row]
        if last_cell_class:
            cells[-1] = f'<td class="{last_cell_class}">{escape(row[-1])}</td>'
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def _budgets(report: Report) -> str:
    rows, classes = [], []
    for b in report.budgets:
        fmt = format_time_ms if b.unit == "ms" else format_size
        likely = f"{fmt(b.band[0])}–{fmt(b.band[1])}" if b.band else "-"
        rows.append((b.name, fmt(b.limit), fmt(b.value), likely, fmt(b.margin), b.basis,
                     {"pass": "pass", "fail": "FAIL", "at-risk": "AT RISK"}[b.status]))
        classes.append(b.status)
    return html_table(("budget", "limit", "value", "likely", "margin", "basis", "status"), rows,
                      classes, last_cell_class="status")


def _summaries(report: Report) -> str:
    m, p, mem = report.model, report.profile, report.memory
    model_rows = [("file", m.path), ("sha256", m.sha256[:16] + "…"),
                  ("size", format_size(m.size_bytes)), ("operators", m.operators),
                  ("op types", ", ".join(f"{k}×{v}" for k, v in m.op_types.items())),
                  ("MACs", f"{report.compute.macs:,}")]
    if m.conversion:
        model_rows.append(("converted with", ", ".join(f"{k}={v}" for k, v in m.conversion.items())))
    profile_rows = [("name", p.name), ("class", p.device_class), ("runtime", p.runtime),
                    ("kernels", p.kernels), ("description", p.description)]
    memory_rows = [("planner", mem.planner), ("arena head", format_size(mem.arena_head_bytes)),
                   ("arena tail", format_size(mem.arena_tail_bytes)),
                   ("arena total", format_size(mem.arena_bytes)),
                   ("lower bound (max live bytes)", format_size(mem.lower_bound_bytes)),
                   ("flash", format_size(mem.flash_bytes))]
    measured = report.measured
    if measured is not None and measured.arena_head_bytes is not None:
        memory_rows.append((f"measured head ({measured.runtime})",
                            format_size(measured.arena_head_bytes)))
    lat = report.latency
    if lat is not None and lat.estimated_device_ms is not None:
        likely = (f", likely {format_time_ms(lat.band_ms[0])}–{format_time_ms(lat.band_ms[1])}"
                  if lat.band_ms else "")
        memory_rows.append(("device latency (estimated)",
                            format_time_ms(lat.estimated_device_ms) + likely))
    elif lat is not None and lat.no_estimate:
        memory_rows.append(("device latency", lat.no_estimate))
    return ("<h3>Model</h3>" + html_table((), model_rows)
            + "<h3>Profile</h3>" + html_table((), profile_rows)
            + "<h3>Memory and latency</h3>" + html_table((), memory_rows))


PLOT_WIDTH = WIDTH - MARGIN_LEFT - 10
PLOT_SVG_HEIGHT = PLOT_HEIGHT + MARGIN_BOTTOM + 20


def _svg_open(css_class: str, label: str, height: int = PLOT_SVG_HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-label="{escape(label)}">')


def _y_scale(top: float):
    """Bytes → SVG y of the plot area (0 at the bottom, ``top`` at the top)."""
    return lambda v: 10 + PLOT_HEIGHT * (1 - v / top)


def _steps(report: Report) -> int:
    last = max((b.last_step for b in report.memory.plan), default=-1)
    return max(len(report.memory.timeline), last + 1, 1)


def _timeline_svg(report: Report, arena_budget: float | None) -> str:
    """Live bytes per step, stacked by buffer; budget and lower bound as lines."""
    mem = report.memory
    steps = _steps(report)
    live_by_step: list[list[PlannedBuffer]] = [[] for _ in range(steps)]
    for b in sorted(mem.plan, key=lambda b: (b.offset, b.tensor, b.name)):
        for s in range(max(b.first_step, 0), min(b.last_step, steps - 1) + 1):
            live_by_step[s].append(b)
    totals = [sum(b.size_bytes for b in bufs) for bufs in live_by_step]
    peak_value = max(mem.lower_bound_bytes, max(totals, default=0), 1)
    show_budget = arena_budget is not None and arena_budget <= 1.5 * peak_value
    top = max(peak_value, arena_budget if show_budget else 0) * 1.08
    bar_w = PLOT_WIDTH / steps
    height = PLOT_SVG_HEIGHT
    y = _y_scale(top)
    parts = [_svg_open("timeline", "memory timeline")]
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        v = top / 1.08 * frac
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{_num(y(v))}" '
                     f'y2="{_num(y(v))}" stroke="#eee"/><text x="{MARGIN_LEFT - 6}" '
                     f'y="{_num(y(v) + 4)}" text-anchor="end">{escape(format_size(v))}</text>')
    peak_step = max(range(steps), key=lambda s: totals[s])
    for s, bufs in enumerate(live_by_step):
        x0, base = MARGIN_LEFT + s * bar_w, 0
        for b in bufs:
            parts.append(
                f'<rect class="live" data-step="{s}" data-tensor="{b.tensor}" '
                f'x="{_num(x0 + 0.5)}" y="{_num(y(base + b.size_bytes))}" '
                f'width="{_num(max(bar_w - 1, 0.5))}" height="{_num(y(base) - y(base + b.size_bytes))}" '
                f'fill="{_color(b)}">'
                f'<title>step {s}: {escape(_buffer_title(b))}</title></rect>')
            base += b.size_bytes
    parts.append(
        f'<rect id="peak-step" data-step="{peak_step}" x="{_num(MARGIN_LEFT + peak_step * bar_w)}" '
        f'y="10" width="{_num(bar_w)}" height="{PLOT_HEIGHT}" fill="none" stroke="#c00" '
        f'stroke-width="2" stroke-dasharray="4 2"><title>peak: step {peak_step}, '
        f'{totals[peak_step]} bytes live</title></rect>')
    lb = y(mem.lower_bound_bytes)
    parts.append(f'<line id="lower-bound" x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{_num(lb)}" '
                 f'y2="{_num(lb)}" stroke="#555" stroke-dasharray="6 3"/>'
                 f'<text x="{WIDTH - 12}" y="{_num(lb - 4)}" text-anchor="end">lower bound '
                 f'{escape(format_size(mem.lower_bound_bytes))}</text>')
    if arena_budget is not None:
        if show_budget:
            by = y(arena_budget)
            parts.append(f'<line id="arena-budget" x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" '
                         f'y1="{_num(by)}" y2="{_num(by)}" stroke="#c00"/>'
                         f'<text x="{MARGIN_LEFT + 4}" y="{_num(by - 4)}">arena budget '
                         f'{escape(format_size(arena_budget))}</text>')
        else:
            parts.append(f'<text id="arena-budget" x="{MARGIN_LEFT + 4}" y="22">arena budget '
                         f'{escape(format_size(arena_budget))} (off scale)</text>')
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">operator step →  '
                 f'(peak at step {peak_step})</text></svg>')
    return "".join(parts)


def _layout_svg(report: Report) -> str:
    """The arena plan: x = lifetime in steps, y = offset; one rectangle per buffer."""
    mem = report.memory
    steps = _steps(report)
    head = max(mem.arena_head_bytes, max((b.offset + b.size_bytes for b in mem.plan), default=0), 1)
    step_w = PLOT_WIDTH / steps
    height = PLOT_SVG_HEIGHT
    y = _y_scale(head)
    parts = [_svg_open("layout", "arena layout"),
             f'<rect x="{MARGIN_LEFT}" y="10" width="{_num(PLOT_WIDTH)}" height="{PLOT_HEIGHT}" '
             f'fill="#fafafa" stroke="#ccc"/>']
    for frac in (0, 0.5, 1.0):
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{_num(y(head * frac) + 4)}" '
                     f'text-anchor="end">{escape(format_size(head * frac))}</text>')
    for b in sorted(mem.plan, key=lambda b: (b.first_step, b.offset, b.tensor, b.name)):
        x0 = MARGIN_LEFT + max(b.first_step, 0) * step_w
        w = (min(b.last_step, steps - 1) - max(b.first_step, 0) + 1) * step_w
        parts.append(
            f'<rect class="buffer" data-tensor="{b.tensor}" data-kind="{escape(b.kind)}" '
            f'x="{_num(x0 + 0.5)}" y="{_num(y(b.offset + b.size_bytes))}" '
            f'width="{_num(max(w - 1, 0.5))}" height="{_num(max(y(b.offset) - y(b.offset + b.size_bytes), 0.5))}" '
            f'fill="{_color(b)}" '
            f'stroke="#fff" stroke-width="0.5"><title>{escape(_buffer_title(b))}</title></rect>')
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">operator step → ; offset ↑ '
                 f'(head {escape(format_size(mem.arena_head_bytes))})</text></svg>')
    return "".join(parts)


def _per_op_svg(report: Report) -> str:
    """Per-op estimated latency (MACs where the report has no estimate), MACs in the hover
    text."""
    macs = {c.op_index: c.macs for c in report.compute.per_op}
    rows = [(o.op_index, o.op, o.estimated_ms) for o in report.latency.per_op] \
        if report.latency else []
    if not rows:
        if not macs:
            return '<p class="note">No per-op figures in this report.</p>'
        rows = [(c.op_index, c.op, 0.0) for c in report.compute.per_op]
    estimated = any(ms for _, _, ms in rows)
    def metric(op_index: int, ms: float) -> float:
        return ms if estimated else float(macs.get(op_index, 0))
    top = max((metric(i, ms) for i, _, ms in rows), default=0) or 1
    bar_w = PLOT_WIDTH / len(rows)
    height = 160 + MARGIN_BOTTOM
    parts = [_svg_open("per-op", "per-op cost", height)]
    label = "estimated device ms" if estimated else "MACs"
    parts.append(f'<text x="4" y="14">{escape(label)} per op (hover for details)</text>')
    for i, (op_index, op, ms) in enumerate(rows):
        h = 130 * metric(op_index, ms) / top
        x0 = MARGIN_LEFT + i * bar_w
        title = (f"op {op_index} {op}\nMACs {macs.get(op_index, 0):,}"
                 + (f"\nestimated {format_time_ms(ms)}" if estimated else ""))
        parts.append(f'<rect class="op" data-op="{op_index}" x="{_num(x0 + 0.5)}" '
                     f'y="{_num(150 - h)}" width="{_num(max(bar_w * 0.45, 0.5))}" '
                     f'height="{_num(max(h, 0.5))}" fill="#4e79a7"><title>{escape(title)}</title></rect>')
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">operator →</text></svg>')
    return "".join(parts)


def _bench(report: Report) -> str:
    """Measured on a phone (``devicefit bench``) beside the simulator's estimate."""
    if report.bench is None:
        return ""
    bench, vs = report.bench.result, report.bench.vs_estimate
    results = bench.results
    rows = [("device", f"{bench.serial} {bench.device_model or ''}".strip()),
            ("inference avg (measured)", format_time_ms(results.inference_avg_ms)),
            ("estimated by the profile's cost model", format_time_ms(vs.estimated_ms)),
            ("measured / estimated", "-" if vs.ratio is None else f"{vs.ratio:.2f}x"),
            ("init", format_time_ms(results.init_ms)),
            ("first inference", format_time_ms(results.first_inference_ms)),
            ("memory peak", "-" if results.memory_peak_mb is None
             else f"{results.memory_peak_mb:.2f} MB")]
    return "<h3>Measured on the device (benchmark_model)</h3>" + html_table((), rows)


def _target_html(report: Report) -> str:
    """A target section that draws itself for HTML (the Ethos-U's NPU/CPU split)."""
    section = report.compatibility.section if report.compatibility else None
    draw = getattr(section, "html", None)
    return draw() if draw is not None else ""


def _section(index: int, section: Section) -> str:
    r = section.report
    arena_limit = next((b.limit for b in r.budgets if b.name == BudgetName.ARENA), None)
    verdict = r.verdict
    notes = "".join(f"<li>{escape(n)}</li>" for n in r.notes)
    return (
        f'<section id="section-{index}"><h2>{escape(section.heading)} '
        f'<span class="verdict {escape(verdict)}">{escape(verdict.upper())}</span></h2>'
        f"<h3>Budgets</h3>{_budgets(r)}{_bench(r)}"
        f"<h3>Memory timeline</h3>{_timeline_svg(r, arena_limit)}"
        f"<h3>Arena layout</h3>{_layout_svg(r)}"
        f"<h3>Per-op cost</h3>{_per_op_svg(r)}"
        f"{_summaries(r)}{_target_html(r)}"
        + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def render_page(title: str, body: str) -> str:
    """A complete self-contained page around ``body`` (already-escaped HTML)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1>{body}"
            "<p class=\"note\">Generated by devicefit. Hover a shape for details.</p>"
            "</body></html>\n")


def render_html(title: str, sections: Sequence[Section], intro: str = "") -> str:
    """The page of one or more reports; deterministic for the same reports.

    ``intro`` is extra HTML placed before the sections (e.g. a project summary table).
    """
    body = "".join(_section(i, s) for i, s in enumerate(sections))
    toc = "".join(f'<li><a href="#section-{i}">{escape(s.heading)}</a> — {escape(s.report.verdict)}</li>'
                  for i, s in enumerate(sections)) if len(sections) > 1 else ""
    return render_page(title, intro + (f"<ul>{toc}</ul>" if toc else "") + body)


def render(report: Report) -> str:
    """The page of one report (``devicefit simulate --html``)."""
    return render_html(heading(report), [Section(heading(report), report)])


VIEW = View("html", ".html", render)
