"""HTML view of reports: one self-contained page of inline SVG, no network; the only script
is the layer table's sort and filter (:mod:`simulator.views.layertable`).

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

from devicefit.simulator.escape import clean
from devicefit.simulator.layers import peak
from devicefit.simulator.report import BudgetName, PlannedBuffer, Report, TimelineStep
from devicefit.simulator.units import format_band, format_size, format_time_ms
from devicefit.simulator.views import layertable
from devicefit.simulator.views.base import View, heading

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
.verdict.pass{background:#d8f0d8;color:#14591a}.verdict.fail,.verdict.error{background:#f8d7d7;color:#8a1010}
.verdict.at-risk{background:#fff1c2;color:#6b4e00}
svg{display:block;margin:4px 0 12px;background:#fff}svg text{font:11px system-ui,sans-serif;fill:#333}
.note{color:#666;font-size:12px}
ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
table.layers th{cursor:pointer;white-space:nowrap}table.layers th[aria-sort=ascending]::after{content:" ▲"}
table.layers th[aria-sort=descending]::after{content:" ▼"}table.layers td{font-size:12px}
"""


@dataclass(frozen=True)
class Section:
    heading: str
    report: Report
    #: The status to show when a caller judges more than the report (``check``'s regression
    #: rules): "pass", "fail", "at-risk", "error"; None: the report's verdict.
    status: str | None = None
    #: Why, when ``status`` differs from the report's verdict.
    problems: tuple[str, ...] = ()

    @property
    def shown_status(self) -> str:
        return self.status or self.report.verdict.value


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
        likely = format_band(b.band, fmt) if b.band else "-"
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
        likely = f", likely {format_band(lat.band_ms)}" if lat.band_ms else ""
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


def _live_by_step(report: Report) -> tuple[list[list[PlannedBuffer]], list[int]]:
    """The buffers live at each plan step (stacked by offset) and their total bytes."""
    steps = _steps(report)
    live_by_step: list[list[PlannedBuffer]] = [[] for _ in range(steps)]
    for b in sorted(report.memory.plan, key=lambda b: (b.offset, b.tensor, b.name)):
        for s in range(max(b.first_step, 0), min(b.last_step, steps - 1) + 1):
            live_by_step[s].append(b)
    return live_by_step, [sum(b.size_bytes for b in bufs) for bufs in live_by_step]


def timeline_top(report: Report, arena_budget: float | None) -> float:
    """The top of the timeline's y axis; pages of several reports may share the largest."""
    peak_value = max(report.memory.lower_bound_bytes, max(_live_by_step(report)[1], default=0), 1)
    show_budget = arena_budget is not None and arena_budget <= 1.5 * peak_value
    return max(peak_value, arena_budget if show_budget and arena_budget else 0) * 1.08


def _step_ops(report: Report) -> dict[int, str]:
    """Plan step → the operator running at it (``op 2``), as the CLI and the PNG number it."""
    names = {0: "inputs"}
    for t in report.memory.timeline:
        for s in range(max(t.first_step, 0), t.last_step + 1):
            names[s] = f"op {t.op_index}"
    return names


def _y_axis(y, top: float, label: str, fmt) -> list[str]:
    """Grid lines with tick labels in their unit, and the axis title."""
    parts = []
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        v = top * frac
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{_num(y(v))}" '
                     f'y2="{_num(y(v))}" stroke="#eee"/><text class="tick" x="{MARGIN_LEFT - 6}" '
                     f'y="{_num(y(v) + 4)}" text-anchor="end">{escape(fmt(v))}</text>')
    mid = _num(10 + PLOT_HEIGHT / 2)
    parts.append(f'<text class="axis-label" x="12" y="{mid}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {mid})">{escape(label)}</text>')
    return parts


def _x_labels(names: Sequence[str], bar_w: float, y: float) -> list[str]:
    """An operator label under every k-th bar, k chosen so the labels do not overlap."""
    every = max(1, -(-len(names) * 34 // PLOT_WIDTH))
    return [f'<text class="op-label" x="{_num(MARGIN_LEFT + (i + 0.5) * bar_w)}" y="{_num(y)}" '
            f'text-anchor="middle">{escape(n)}</text>'
            for i, n in enumerate(names) if i % every == 0 and n]


def _timeline_svg(report: Report, arena_budget: float | None, top: float | None = None) -> str:
    """Live bytes per plan step, stacked by buffer; budget and lower bound as lines. Steps
    are labelled with the operator that runs at them (step 0: the inputs)."""
    mem = report.memory
    live_by_step, totals = _live_by_step(report)
    steps = len(live_by_step)
    top = top or timeline_top(report, arena_budget)
    show_budget = arena_budget is not None and arena_budget <= top / 1.08
    bar_w = PLOT_WIDTH / steps
    height = PLOT_SVG_HEIGHT + 14
    y = _y_scale(top)
    parts = [_svg_open("timeline", "memory timeline", height),
             *_y_axis(y, top / 1.08, "live bytes in the arena", format_size)]
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
    names = _step_ops(report)
    parts += _x_labels([names.get(s, "").removeprefix("op ") for s in range(steps)], bar_w,
                       PLOT_HEIGHT + 24)
    top_op = peak(mem.timeline)
    if top_op is not None:
        first, last = max(top_op.first_step, 0), max(top_op.last_step, top_op.first_step, 0)
        parts.append(
            f'<rect id="peak-step" data-op="{top_op.op_index}" data-step="{first}" '
            f'x="{_num(MARGIN_LEFT + first * bar_w)}" y="10" '
            f'width="{_num(bar_w * (last - first + 1))}" height="{PLOT_HEIGHT}" fill="none" '
            f'stroke="#c00" stroke-width="2" stroke-dasharray="4 2"><title>peak: op '
            f'{top_op.op_index} {escape(top_op.op)}, {top_op.live_bytes} bytes live</title></rect>')
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
    caption = (f" · peak at op {top_op.op_index} {top_op.op}, "
               f"{format_size(top_op.live_bytes)} live" if top_op is not None else "")
    parts.append(f'<text id="timeline-caption" x="{MARGIN_LEFT}" y="{height - 6}">operator '
                 f'(execution order; step 0: inputs) →{escape(caption)}</text></svg>')
    return "".join(parts) + _legend(live_by_step, top_op)


def _legend(live_by_step: list[list[PlannedBuffer]], top_op: TimelineStep | None) -> str:
    """What each colour is: the buffers live at the peak, largest first (every other block
    names its tensor when hovered)."""
    if top_op is None:
        return ""
    at_peak = {id(b): b for s in range(max(top_op.first_step, 0), top_op.last_step + 1)
               if s < len(live_by_step) for b in live_by_step[s]}
    shown = sorted(at_peak.values(), key=lambda b: (-b.size_bytes, b.tensor, b.name))
    items = "".join(
        f'<li data-tensor="{b.tensor}"><span class="swatch" style="background:{_color(b)}">'
        f'</span>{escape(b.name)} ({escape(format_size(b.size_bytes))})</li>'
        for b in shown[:12])
    more = f"<li>… {len(shown) - 12} more</li>" if len(shown) > 12 else ""
    return (f'<p class="note">Colours: one per tensor; live at the peak (op {top_op.op_index}):'
            f'</p><ul class="legend">{items}{more}</ul>')


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
    names = _step_ops(report)
    parts += _x_labels([names.get(s, "").removeprefix("op ") for s in range(steps)], step_w,
                       PLOT_HEIGHT + 24)
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">operator (execution order) → ; '
                 f'offset ↑ (head {escape(format_size(mem.arena_head_bytes))})</text></svg>')
    return "".join(parts)


def _per_op_svg(report: Report) -> str:
    """Per-op estimated device time (MACs where the report has no estimate) in file order,
    with a y axis in its unit and the op index under the bars; MACs in the hover text."""
    macs = {c.op_index: c.macs for c in report.compute.per_op}
    rows = [(o.op_index, o.op, o.estimated_ms) for o in report.latency.per_op] \
        if report.latency else []
    if not rows:
        if not macs:
            return '<p class="note">No per-op figures in this report.</p>'
        rows = [(c.op_index, c.op, 0.0) for c in report.compute.per_op]
    estimated = any(ms for _, _, ms in rows)
    values = [ms if estimated else float(macs.get(i, 0)) for i, _, ms in rows]
    top = max(values, default=0) or 1
    bar_w = PLOT_WIDTH / len(rows)
    height = PLOT_SVG_HEIGHT + 14
    y = _y_scale(top)
    label, fmt = (("estimated device time", format_time_ms) if estimated
                  else ("MACs", lambda v: f"{v:,.0f}"))
    parts = [_svg_open("per-op", "per-op cost", height), *_y_axis(y, top, label, fmt)]
    for k, ((op_index, op, ms), v) in enumerate(zip(rows, values, strict=True)):
        title = (f"op {op_index} {op}\nMACs {macs.get(op_index, 0):,}"
                 + (f"\nestimated {format_time_ms(ms)}" if estimated else ""))
        parts.append(f'<rect class="op" data-op="{op_index}" x="{_num(MARGIN_LEFT + k * bar_w + 0.5)}" '
                     f'y="{_num(y(v))}" width="{_num(max(bar_w - 1, 0.5))}" '
                     f'height="{_num(max(y(0) - y(v), 0.5))}" fill="#4e79a7">'
                     f'<title>{escape(title)}</title></rect>')
    parts += _x_labels([str(i) for i, _, _ in rows], bar_w, PLOT_HEIGHT + 24)
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">operator index (file order) →'
                 f'</text></svg>')
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


def _arena_limit(report: Report) -> float | None:
    return next((b.limit for b in report.budgets if b.name == BudgetName.ARENA), None)


def _target_html(report: Report) -> str:
    """A target section that draws itself for HTML (the Ethos-U's NPU/CPU split)."""
    section = report.compatibility.section if report.compatibility else None
    draw = getattr(section, "html", None)
    return draw() if draw is not None else ""


def _section(index: int, section: Section, top: float | None = None) -> str:
    r = section.report
    status = section.shown_status
    notes = "".join(f"<li>{escape(n)}</li>" for n in r.notes)
    problems = "".join(f"<li>{escape(p)}</li>" for p in section.problems)
    return (
        f'<section id="section-{index}"><h2>{escape(section.heading)} '
        f'<span class="verdict {escape(status)}">{escape(status.upper())}</span></h2>'
        + (f'<h3>Problems</h3><ul class="problems">{problems}</ul>' if problems else "")
        + f"<h3>Budgets</h3>{_budgets(r)}{_bench(r)}"
        f"<h3>Memory timeline</h3>{_timeline_svg(r, _arena_limit(r), top)}"
        f"<h3>Arena layout</h3>{_layout_svg(r)}"
        f"<h3>Per-op cost</h3>{_per_op_svg(r)}"
        f"<h3>Layers</h3>{layertable.html_table(r.layers, f'layers-{index}')}"
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
            + (f"<script>{layertable.SCRIPT}</script>" if 'class="layers"' in body else "")
            + "</body></html>\n")


def render_html(title: str, sections: Sequence[Section], intro: str = "",
                shared_scale: bool = False) -> str:
    """The page of one or more reports; deterministic for the same reports.

    ``intro`` is extra HTML placed before the sections (e.g. a project summary table).
    ``shared_scale``: every memory timeline gets the same y axis (a before/after page).
    """
    top = max((timeline_top(s.report, _arena_limit(s.report)) for s in sections),
              default=None) if shared_scale else None
    body = "".join(_section(i, s, top) for i, s in enumerate(sections))
    toc = "".join(f'<li class="{escape(s.shown_status)}"><a href="#section-{i}">'
                  f'{escape(s.heading)}</a> — {escape(s.shown_status)}</li>'
                  for i, s in enumerate(sections)) if len(sections) > 1 else ""
    return render_page(title, intro + (f"<ul>{toc}</ul>" if toc else "") + body)


def render(report: Report) -> str:
    """The page of one report (``devicefit simulate --html``)."""
    return render_html(heading(report), [Section(heading(report), report)])


VIEW = View("html", ".html", render)
