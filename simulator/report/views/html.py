"""HTML view of reports: one self-contained page of inline SVG, no network; the only script
is the layer table's sort and filter (:mod:`simulator.report.views.layertable`).

Memory problems are spatial, so the page draws them: the memory timeline (the arena tail
and the live bytes per operator step, stacked by tensor, against the arena the verdict judges
and the budget), the arena layout (each planned buffer as a rectangle: x = its lifetime,
y = its offset; the tail above, the lower bound, the judged arena and the budget), per-op
latency and MACs, and the budgets. Hovering a shape shows its ``<title>`` (tensor name, shape, dtype,
bytes). The output is a pure function of the reports, so the same input gives the same bytes.
"""

from __future__ import annotations

import colorsys
import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.units import format_band, format_size, format_time_ms
from devicefit.simulator.report.benchmark import BenchComparison
from devicefit.simulator.report.display import Note, Part, SectionDisplay, Split, Table, TimeChart
from devicefit.simulator.report.layers import peak
from devicefit.simulator.report.report import MemoryReport, PlannedBuffer, Report, TargetSection
from devicefit.simulator.report.views import layertable
from devicefit.simulator.report.views.base import View, flash_basis, heading
from devicefit.simulator.report.views.messages import (
    budget_format,
    conversion_text,
    decimal_sizes,
    signature_line,
    training_heading,
    training_rows,
    verdict_causes,
)
from devicefit.simulator.types import BudgetName

#: A number → its text in an axis' unit; a value → its SVG y coordinate.
Format = Callable[[float], str]
#: Round ticks up to a top value: (value, its label).
Ticks = Callable[[float], list[tuple[float, str]]]
Scale = Callable[[float], float]

#: Tableau 10 without its grey, which is the arena tail's.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f")
TAIL_FILL, BUDGET_COLOUR, JUDGED_COLOUR = "#d4d4d4", "#c00", "#333"
#: The pictures' size in a 1400 px window (they scale down to a narrower one). The lines'
#: labels sit in a gutter right of the plot, where no bar is, so none is printed over one.
WIDTH, PLOT_HEIGHT, MARGIN_LEFT, MARGIN_BOTTOM, GUTTER = 1280, 240, 80, 28, 230

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1320px}
p,ul,pre{max-width:960px}ul.legend{max-width:none}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0;display:block;overflow-x:auto;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
td{white-space:nowrap}td.prose{white-space:normal;min-width:24ch;max-width:80ch}.fig{white-space:nowrap}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.pass td.status{background:#d8f0d8;color:#14591a}
tr.fail td.status,tr.error td.status{background:#f8d7d7;color:#8a1010}
tr.at-risk td.status{background:#fff1c2;color:#6b4e00}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:600}
.verdict.pass{background:#d8f0d8;color:#14591a}.verdict.fail,.verdict.error{background:#f8d7d7;color:#8a1010}
.verdict.at-risk{background:#fff1c2;color:#6b4e00}
.causes{font-size:.75em;font-weight:400;color:#444;margin-left:8px}
svg{display:block;margin:4px 0 12px;background:#fff;max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#333}
.note{color:#666;font-size:12px}
svg text.line-label,svg text.trial-label,svg text.budget-label{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
ul.legend li{max-width:100%;overflow-wrap:anywhere}
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

    @property
    def colour(self) -> str:
        """The badge's class: a pass with a budget at risk or not checked is no green pass
        (``Report.status``), as Markdown marks it 🟠 and the text says NOT CHECKED."""
        return self.status or self.report.status.value


def escape(value: object) -> str:
    """HTML-quoted, with control characters (invalid in HTML) shown as escapes."""
    return html.escape(clean(value), quote=True)


def _key(b: PlannedBuffer) -> tuple[str, int, str]:
    """What one colour stands for: a planned buffer (scratch buffers, tensor -1, by name;
    tensor indexes repeat across subgraphs, so the name is part of it too)."""
    return (b.kind, b.tensor, b.name)


def _hex(hue: float, light: float, sat: float) -> str:
    r, g, b = colorsys.hls_to_rgb(hue % 1.0, light, sat)
    return "#" + "".join(f"{round(255 * c):02x}" for c in (r, g, b))


def colours(plan: Sequence[PlannedBuffer]) -> dict[tuple[str, int, str], str]:
    """One colour per buffer, none shared: the qualitative palette in order of first use
    (neighbours in time differ most), then golden-angle hue steps over three lightnesses.
    A function of the plan alone, so the same input gives the same page."""
    found: dict[tuple[str, int, str], str] = {}
    used: set[str] = set()
    for b in sorted(plan, key=lambda b: (b.first_step, b.offset, b.tensor, b.name)):
        key = _key(b)
        if key in found:
            continue
        n = len(found)
        colour = PALETTE[n] if n < len(PALETTE) else ""
        while not colour or colour in used:
            colour = _hex(n * 0.381966, (0.42, 0.58, 0.72)[n % 3], 0.55 + 0.1 * (n % 2))
            n += 1
        found[key] = colour
        used.add(colour)
    return found


def _num(value: float) -> str:
    """Coordinates with two decimals: enough for a screen, stable across platforms."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _buffer_title(b: PlannedBuffer) -> str:
    shape = "x".join(str(d) for d in b.shape) if b.shape else "-"
    kind = "scratch buffer" if b.kind == "scratch" else f"tensor {b.tensor}"
    offline = ", offline-planned" if b.offline else ""
    return (f"{b.name} ({kind}{offline})\nshape {shape} {b.dtype}\n{b.size_bytes} bytes at "
            f"offset {b.offset}\nlive steps {b.first_step}..{b.last_step}")


#: A figure and its unit (``172.6 KiB``, ``1.00 s``, ``85.6 %``): never split over two lines.
FIGURE = re.compile(r"[-+~≈<>±]?\d[\d,.]*(?:\s?(?:[kMG]?B|[KMG]iB|[num]?s|us|%|x)(?!\w))?")
#: A cell longer than this is prose: it wraps (between figures); a shorter one is one line.
PROSE_CHARS = 60


def _cell(value: object) -> str:
    """One table cell: a number right-aligned, a short text (a figure, a profile name) on
    one line, a longer one wrapped between words but never inside a figure."""
    if isinstance(value, (int, float)):
        return f'<td class="num">{escape(value)}</td>'
    text = escape(value)
    if len(clean(value)) <= PROSE_CHARS:
        return f"<td>{text}</td>"
    return '<td class="prose">' + FIGURE.sub(
        lambda m: f'<span class="fig">{m.group(0)}</span>' if " " in m.group(0)
        else m.group(0), text) + "</td>"


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
               row_classes: Sequence[str] | None = None, last_cell_class: str = "") -> str:
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr>" if headers else ""
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes else ""
        cells = [_cell(c) for c in row]
        if last_cell_class:
            cells[-1] = f'<td class="{last_cell_class}">{escape(row[-1])}</td>'
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def _likely(band: tuple[float, float] | None, fmt: Format) -> str | None:
    """An error band as text, or None when it has no width to show (both ends print the
    same: an estimate with nothing uncertain left in it, e.g. all on an NPU)."""
    if not band or fmt(band[0]) == fmt(band[1]):
        return None
    return format_band(band, fmt)


def _budgets(report: Report) -> str:
    rows, classes = [], []
    for b in report.budgets:
        fmt = budget_format(b)  # a size in the prefixes its limit was written in, as text
        rows.append((b.name, fmt(b.limit), fmt(b.value), _likely(b.band, fmt) or "-",
                     fmt(b.margin), b.basis,
                     {"pass": "pass", "fail": "FAIL", "at-risk": "AT RISK"}[b.status]))
        classes.append(b.status)
    return html_table(("budget", "limit", "value", "likely", "margin", "basis", "status"), rows,
                      classes, last_cell_class="status")


def _model_rows(report: Report) -> list[tuple[str, object]]:
    """The model's rows; for a model a target compiled (Vela), the user's file and the
    compiled one each as what it is."""
    m = report.model
    ops = ", ".join(f"{k}×{v}" for k, v in m.op_types.items())
    src = m.source
    decimal = decimal_sizes(report, BudgetName.FLASH)  # the file is what flash judges
    if src is None:
        return [("file", m.path), ("sha256", m.sha256[:16] + "…"),
                ("size", format_size(m.size_bytes, decimal)), ("operators", m.operators),
                ("op types", ops), ("MACs", f"{report.compute.macs:,}")]
    return [("your model", m.path), ("its size", format_size(src.size_bytes, decimal)),
            ("its sha256", src.sha256[:16] + "…"), ("its operators", src.operators),
            (f"compiled for the {src.compiled_for}", "the figures on this page are the "
             "compiled model's"),
            ("compiled size", format_size(m.size_bytes, decimal)),
            ("compiled sha256", m.sha256[:16] + "…"),
            ("compiled operators", f"{m.operators}: {ops}"),
            ("MACs on the CPU", f"{report.compute.macs:,} (the accelerator's are inside its "
                                "compiled ops)")]


def _summaries(report: Report) -> str:
    m, p, mem = report.model, report.profile, report.memory
    model_rows = _model_rows(report)
    if m.conversion:
        model_rows.append(("converted with", conversion_text(m.conversion)))
    profile_rows = [("name", p.name), ("class", p.device_class), ("runtime", p.runtime),
                    ("kernels", p.kernels), ("description", p.description)]
    arena, flash = (decimal_sizes(report, b) for b in (BudgetName.ARENA, BudgetName.FLASH))
    memory_rows: list[tuple[str, object]] = [] if mem is None else [
        ("planner", mem.planner), ("arena head", format_size(mem.arena_head_bytes, arena)),
        ("arena tail", format_size(mem.arena_tail_bytes, arena)),
        ("arena total", format_size(mem.arena_bytes, arena)),
        ("lower bound (max live bytes)", format_size(mem.lower_bound_bytes, arena)),
        ("flash", f"{format_size(mem.flash_bytes, flash)} ({flash_basis(mem, flash)})")]
    measured = report.measured
    if measured is not None and measured.arena_head_bytes is not None:
        memory_rows.append((f"measured head ({measured.runtime})",
                            format_size(measured.arena_head_bytes, arena)))
    lat = report.latency
    if lat is not None and lat.estimated_device_ms is not None:
        band = _likely(lat.band_ms, format_time_ms)
        likely = f", likely {band}" if band else ""
        memory_rows.append(("device latency (estimated)",
                            format_time_ms(lat.estimated_device_ms) + likely))
    elif lat is not None and lat.no_estimate:
        memory_rows.append(("device latency", lat.no_estimate))
    return ("<h3>Model</h3>" + html_table((), model_rows)
            + "<h3>Profile</h3>" + html_table((), profile_rows)
            + ("<h3>Memory and latency</h3>" + html_table((), memory_rows) if memory_rows
               else ""))


PLOT_WIDTH = WIDTH - MARGIN_LEFT - GUTTER
#: The plot's right edge: the lines end here, their labels start past it.
PLOT_RIGHT = MARGIN_LEFT + PLOT_WIDTH
PLOT_SVG_HEIGHT = PLOT_HEIGHT + MARGIN_BOTTOM + 20
#: A budget this many times the drawn figures is named, not drawn: at scale the bars would
#: be a few pixels high.
OFF_SCALE = 1.5
COMPILED_WORK = ("Every operator's work is inside an accelerator's compiled op; the target's "
                 "section below shows what its compiler reports.")
#: Legend entries before "and K more".
LEGEND_MAX = 16


def svg_open(css_class: str, label: str, height: int = PLOT_SVG_HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-label="{escape(label)}">')


def y_scale(top: float) -> Scale:
    """Bytes → SVG y of the plot area (0 at the bottom, ``top`` at the top)."""
    return lambda v: 10 + PLOT_HEIGHT * (1 - v / top)


def planned(report: Report) -> MemoryReport:
    """The report's memory plan, for the pictures drawn from it (a report without one, of a
    model its compiler refused, shows :func:`_refusal` instead)."""
    if report.memory is None:
        raise ValueError(f"{heading(report)}: no memory plan to draw")
    return report.memory


def _steps(report: Report) -> int:
    mem = planned(report)
    last = max((b.last_step for b in mem.plan), default=-1)
    return max(len(mem.timeline), last + 1, 1)


@dataclass(frozen=True)
class _Block:
    """A buffer's part of one timeline bar: its bytes, or fewer where an offline plan put
    it over another live buffer."""

    buffer: PlannedBuffer
    shown_bytes: int


def _live_by_step(report: Report) -> list[list[_Block]]:
    """The buffers live at each plan step, by offset, with the bytes each adds there.

    Buffers an offline plan places add their union, as the report's timeline counts them
    (:func:`simulator.plan.lifetimes.live_bytes_per_step`): Vela puts an ``ethos-u`` op's input
    and output inside its scratch area, and stacking their sizes would draw more than the
    arena holds."""
    steps = _steps(report)
    live: list[list[PlannedBuffer]] = [[] for _ in range(steps)]
    for b in sorted(planned(report).plan, key=lambda b: (b.offset, b.tensor, b.name)):
        for s in range(max(b.first_step, 0), min(b.last_step, steps - 1) + 1):
            live[s].append(b)
    out = []
    for bufs in live:
        end, blocks = 0, []
        for b in bufs:
            if b.offline:
                blocks.append(_Block(b, max(b.offset + b.size_bytes - max(b.offset, end), 0)))
                end = max(end, b.offset + b.size_bytes)
            else:
                blocks.append(_Block(b, b.size_bytes))
        out.append(blocks)
    return out


@dataclass(frozen=True)
class JudgedArena:
    """What the verdict judges against the arena budget, as the pictures draw it."""

    tail: int
    judged: float
    #: What the judged figure is made of ("head 54.0 KiB + tail 26.3 KiB").
    judged_label: str
    budget: float | None


def judged_arena(report: Report) -> JudgedArena:
    mem = planned(report)
    check = next((b for b in report.budgets if b.name == BudgetName.ARENA), None)
    judged = check.value if check else max(mem.arena_bytes, mem.arena_required_bytes)
    parts = f"head {format_size(mem.arena_head_bytes)}" + (
        f" + tail {format_size(mem.arena_tail_bytes)}" if mem.arena_tail_bytes else "")
    if judged == mem.arena_bytes:
        what = f"judged arena {format_size(judged)} = {parts}"
    elif judged == mem.arena_required_bytes:
        what = (f"judged arena to start {format_size(judged)} = {parts} + "
                f"{format_size(judged - mem.arena_bytes)} the runtime needs while it plans")
    else:
        what = f"judged arena {format_size(judged)} ({check.basis if check else ''})"
    return JudgedArena(mem.arena_tail_bytes, judged, what, check.limit if check else None)


def _drawn_max(report: Report) -> float:
    """The most a memory picture draws without the budget: the highest bar (tail + live
    bytes), the judged arena, the planned arena."""
    arena = judged_arena(report)
    return max(max(step_bytes(report), default=0), arena.judged, planned(report).arena_bytes, 1)


def step_bytes(report: Report) -> list[int]:
    """The height of each timeline bar: the arena tail and the bytes live at the step."""
    tail = planned(report).arena_tail_bytes
    return [tail + sum(b.shown_bytes for b in blocks) for blocks in _live_by_step(report)]


def budget_on_scale(budget: float | None, drawn: float) -> bool:
    return budget is not None and budget <= OFF_SCALE * drawn


def timeline_top(report: Report) -> float:
    """The top of the memory pictures' y axes; pages of several reports may share the
    largest."""
    drawn = _drawn_max(report)
    budget = judged_arena(report).budget
    return max(drawn, budget if budget is not None and budget_on_scale(budget, drawn)
               else 0) * 1.08


def _step_ops(report: Report) -> dict[int, str]:
    """Plan step → the operator running at it (``op 2``), as the CLI and the PNG number it;
    a step before the first operator holds the inputs (``in``: TFLM's step 0), one after
    the last the outputs (``out``: LiteRT keeps them live past the last operator)."""
    mem = planned(report)
    names: dict[int, str] = {}
    for t in mem.timeline:
        for s in range(max(t.first_step, 0), t.last_step + 1):
            names[s] = f"op {t.op_index}"
    first, last = min(names, default=0), max(names, default=-1)
    steps = max((b.last_step for b in mem.plan), default=last) + 1
    names |= {s: "in" if s < first else "out" for s in range(steps)
              if s not in names and (s < first or s > last)}
    return names


def _steps_caption(names: dict[int, str]) -> str:
    """What the x axis of a chart by plan step shows, naming only the steps it has."""
    extra = [what for label, what in (("in", "in: the inputs"),
                                      ("out", "out: the outputs after the last"))
             if label in names.values()]
    return "operator (execution order" + "".join(f"; {e}" for e in extra) + ") →"


def y_axis(y: Scale, top: float, label: str, ticks: Ticks) -> list[str]:
    """Grid lines at round values up to ``top``, labelled in one unit, and the axis title."""
    parts = []
    for v, text in ticks(top):
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{PLOT_RIGHT}" y1="{_num(y(v))}" '
                     f'y2="{_num(y(v))}" stroke="#eee"/><text class="tick" x="{MARGIN_LEFT - 6}" '
                     f'y="{_num(y(v) + 4)}" text-anchor="end">{escape(text)}</text>')
    mid = _num(10 + PLOT_HEIGHT / 2)
    parts.append(f'<text class="axis-label" x="12" y="{mid}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {mid})">{escape(label)}</text>')
    return parts


def round_ticks(top: float, units: Sequence[tuple[str, float]]) -> list[tuple[float, str]]:
    """Ticks from 0 to at most ``top`` at a round step (1, 2, 2.5 or 5 × 10^k, 3 to 5 of
    them), all in the one unit of ``units`` (name, size; smallest first) that ``top`` reads
    best in — never a quarter of the peak (``1,696 / 3,392 B``), never two units on one
    axis."""
    name, size = units[0]
    for unit in units:
        if top >= unit[1]:
            name, size = unit
    span = top / size
    if span <= 0:
        return [(0.0, f"0 {name}".rstrip())]
    raw = span / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    decimals = next(d for d in range(8) if abs(round(step, d) - step) <= step * 1e-9)
    count = int(span / step + 1e-9)
    return [(k * step * size, f"{k * step:,.{decimals if k else 0}f} {name}".rstrip())
            for k in range(count + 1)]


#: The units of the pictures' axes, smallest first (sizes in bytes, times in ms).
SIZE_UNITS = (("B", 1.0), ("KiB", 1024.0), ("MiB", 1024.0 ** 2), ("GiB", 1024.0 ** 3))
TIME_UNITS = (("us", 1e-3), ("ms", 1.0), ("s", 1e3))
COUNT_UNITS = (("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9))


def size_ticks(top: float) -> list[tuple[float, str]]:
    return round_ticks(top, SIZE_UNITS)


def time_ticks(top_ms: float) -> list[tuple[float, str]]:
    return round_ticks(top_ms, TIME_UNITS)


def count_ticks(top: float) -> list[tuple[float, str]]:
    return round_ticks(top, COUNT_UNITS)


def _x_labels(names: Sequence[str], bar_w: float, y: float) -> list[str]:
    """An operator label under every k-th bar, k chosen so the labels do not overlap."""
    every = max(1, -(-len(names) * 34 // PLOT_WIDTH))
    return [f'<text class="op-label" x="{_num(MARGIN_LEFT + (i + 0.5) * bar_w)}" y="{_num(y)}" '
            f'text-anchor="middle">{escape(n)}</text>'
            for i, n in enumerate(names) if i % every == 0 and n]


@dataclass(frozen=True)
class LineLabel:
    """A horizontal line's name, printed in the gutter right of the plot at the line's
    height (or as near as the labels above it leave room for)."""

    y: float
    text: str
    css_class: str = "line-label"
    colour: str = JUDGED_COLOUR


#: Characters of an 11 px label per gutter line (about 6.2 px each, a little to spare).
GUTTER_CHARS = int((GUTTER - 12) / 6.4)
LINE_STEP = 13


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words."""
    lines: list[str] = []
    # A figure's space is no break: "99.0 KiB" stays on one line.
    for word in FIGURE.sub(lambda m: m.group(0).replace(" ", "\0"), text).split(" "):
        word = word.replace("\0", " ")
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def gutter_labels(labels: Sequence[LineLabel], bottom: float) -> list[str]:
    """The labels in the gutter, each wrapped to its width, top to bottom in the order of
    their lines, each moved down (up near ``bottom``) just enough to clear its neighbour."""
    blocks = [(label, _wrap(label.text, GUTTER_CHARS))
              for label in sorted(labels, key=lambda lb: lb.y)]
    end, placed = -math.inf, []
    for label, lines in blocks:
        first = max(label.y + 4, end + LINE_STEP, 14.0)
        placed.append(first)
        end = first + LINE_STEP * (len(lines) - 1)
    lift = min(max(end - bottom, 0.0), max(placed[0] - 14.0, 0.0)) if placed else 0.0
    out = []
    for (label, lines), first in zip(blocks, placed, strict=True):
        spans = "".join(f'<tspan x="{PLOT_RIGHT + 8}" dy="{0 if k == 0 else LINE_STEP}">'
                        f"{escape(line)}</tspan>" for k, line in enumerate(lines))
        out.append(f'<text class="{label.css_class}" x="{PLOT_RIGHT + 8}" '
                   f'y="{_num(first - lift)}" style="fill:{label.colour}">{spans}</text>')
    return out


def _arena_lines(arena: JudgedArena, y: Scale, top: float) -> tuple[list[str], list[LineLabel]]:
    """The judged arena (dashed) and the budget (red) across the plot, with their labels
    for the gutter; a budget off scale is only named, at the gutter's top."""
    jy = _num(y(arena.judged))
    parts = [f'<line class="arena-judged" data-bytes="{arena.judged:g}" x1="{MARGIN_LEFT}" '
             f'x2="{PLOT_RIGHT + 4}" y1="{jy}" y2="{jy}" stroke="{JUDGED_COLOUR}" '
             f'stroke-dasharray="6 3"/>']
    labels = [LineLabel(y(arena.judged), arena.judged_label)]
    budget = arena.budget
    if budget is None:
        return parts, labels
    if budget <= top:
        by = _num(y(budget))
        parts.append(f'<line class="arena-budget" data-bytes="{budget:g}" x1="{MARGIN_LEFT}" '
                     f'x2="{PLOT_RIGHT + 4}" y1="{by}" y2="{by}" stroke="{BUDGET_COLOUR}" '
                     f'stroke-width="1.5"/>')
        labels.append(LineLabel(y(budget), f"arena budget {format_size(budget)}",
                                colour=BUDGET_COLOUR))
    else:
        labels.append(LineLabel(-math.inf, f"arena budget {format_size(budget)} ↑ (off "
                                f"scale: {budget / arena.judged:,.0f}x the judged arena)",
                                "line-label arena-budget off-scale", BUDGET_COLOUR))
    return parts, labels


def _timeline_svg(report: Report, top: float | None, colour: dict) -> str:
    """Live bytes per plan step: the arena tail (allocated once, live throughout) at the
    bottom, the head's buffers stacked on it, so the highest bar is what the runtime holds
    at the peak; the judged arena and the budget as lines. Steps are labelled with the
    operator that runs at them (:func:`_step_ops`)."""
    mem = planned(report)
    arena = judged_arena(report)
    live = _live_by_step(report)
    steps = len(live)
    top = top or timeline_top(report)
    bar_w = PLOT_WIDTH / steps
    height = PLOT_SVG_HEIGHT + 14
    y = y_scale(top)
    parts = [svg_open("timeline", "memory timeline", height),
             *y_axis(y, top / 1.08, "bytes in the arena", size_ticks)]
    width = _num(max(bar_w - 1, 0.5))
    for s, blocks in enumerate(live):
        x0 = _num(MARGIN_LEFT + s * bar_w + 0.5)
        base = arena.tail
        if arena.tail:
            parts.append(f'<rect class="tail" data-step="{s}" x="{x0}" y="{_num(y(base))}" '
                         f'width="{width}" height="{_num(y(0) - y(base))}" fill="{TAIL_FILL}">'
                         f'<title>step {s}: arena tail {arena.tail} bytes (the runtime\'s '
                         f'persistent allocations, live throughout)</title></rect>')
        for blk in blocks:
            b = blk.buffer
            if not blk.shown_bytes:
                continue  # wholly inside another offline-placed buffer
            inside = (f"\n{b.size_bytes - blk.shown_bytes} of its bytes inside another "
                      "buffer (offline plan)") if blk.shown_bytes < b.size_bytes else ""
            parts.append(
                f'<rect class="live" data-step="{s}" data-tensor="{b.tensor}" '
                f'x="{x0}" y="{_num(y(base + blk.shown_bytes))}" width="{width}" '
                f'height="{_num(y(base) - y(base + blk.shown_bytes))}" fill="{colour[_key(b)]}">'
                f'<title>step {s}: {escape(_buffer_title(b) + inside)}</title></rect>')
            base += blk.shown_bytes
    names = _step_ops(report)
    parts += _x_labels([names.get(s, "").removeprefix("op ") for s in range(steps)], bar_w,
                       PLOT_HEIGHT + 24)
    top_op = peak(mem.timeline)
    if top_op is not None:
        first, last = max(top_op.first_step, 0), max(top_op.last_step, top_op.first_step, 0)
        highest = max(step_bytes(report)[first:last + 1])
        # Around the peak's bars, its stroke kept under the judged arena's line (on a PASS,
        # under the budget's): an outline over the line would read as the peak crossing it.
        outline = max(y(highest) - 3, y(arena.judged) + 1.5)
        parts.append(
            f'<rect id="peak-step" data-op="{top_op.op_index}" data-step="{first}" '
            f'x="{_num(MARGIN_LEFT + first * bar_w)}" y="{_num(outline)}" '
            f'width="{_num(bar_w * (last - first + 1))}" '
            f'height="{_num(10 + PLOT_HEIGHT - outline)}" fill="none" '
            f'stroke="#c00" stroke-width="2" stroke-dasharray="4 2"><title>peak: op '
            f'{top_op.op_index} {escape(top_op.op)}, {top_op.live_bytes} bytes live</title></rect>')
    lines, labels = _arena_lines(arena, y, top / 1.08)
    parts += lines + gutter_labels(labels, 10 + PLOT_HEIGHT)
    caption = (f" · peak at op {top_op.op_index} {top_op.op}, "
               f"{format_size(top_op.live_bytes)} live" if top_op is not None else "")
    tail = f" on the {format_size(arena.tail)} tail (grey)" if arena.tail else ""
    parts.append(f'<text id="timeline-caption" x="{MARGIN_LEFT}" y="{height - 6}">'
                 f'{escape(_steps_caption(names) + caption + tail)}</text></svg>')
    return "".join(parts)


def _legend(report: Report, colour: dict) -> str:
    """What each colour is: every drawn buffer, largest first, the first
    :data:`LEGEND_MAX` by name (every block also names its tensor when hovered)."""
    buffers = {_key(b): b for b in planned(report).plan}
    if not buffers:
        return ""
    shown = sorted(buffers.values(), key=lambda b: (-b.size_bytes, b.tensor, b.name))
    items = "".join(
        f'<li data-tensor="{b.tensor}" title="{escape(b.name)}"><span class="swatch" '
        f'style="background:{colour[_key(b)]}"></span>{escape(_short(b.name))} '
        f'({escape(format_size(b.size_bytes))})</li>' for b in shown[:LEGEND_MAX])
    more = len(shown) - LEGEND_MAX
    rest = (f'<li class="more">and {more} more (smaller; hover a block to name it)</li>'
            if more > 0 else "")
    return (f'<p class="note">Colours: one per buffer of the plan, {len(shown)} in all, '
            f'largest first.</p><ul class="legend">{items}{rest}</ul>')


def _short(name: str, limit: int = 72) -> str:
    """A converter's long tensor name (``a/b/Relu;a/b/BiasAdd;…``) cut in the middle; the
    legend entry's hover text has it whole."""
    if len(name) <= limit:
        return name
    return name[:limit // 2 - 1] + "…" + name[-(limit // 2 - 1):]


def _layout_svg(report: Report, top: float | None, colour: dict) -> str:
    """The arena plan: x = lifetime in steps, y = offset; one rectangle per buffer, the
    tail above the head, the lower bound (no planner can use less head), the judged arena
    and the budget."""
    mem = planned(report)
    arena = judged_arena(report)
    steps = _steps(report)
    head = max(mem.arena_head_bytes, max((b.offset + b.size_bytes for b in mem.plan), default=0))
    top = top or timeline_top(report)
    step_w = PLOT_WIDTH / steps
    height = PLOT_SVG_HEIGHT
    y = y_scale(top)
    parts = [svg_open("layout", "arena layout"),
             f'<rect x="{MARGIN_LEFT}" y="10" width="{_num(PLOT_WIDTH)}" height="{PLOT_HEIGHT}" '
             f'fill="#fafafa" stroke="#ccc"/>', *y_axis(y, top / 1.08, "offset in the arena",
                                                         size_ticks)]
    for b in sorted(mem.plan, key=lambda b: (b.first_step, b.offset, b.tensor, b.name)):
        x0 = MARGIN_LEFT + max(b.first_step, 0) * step_w
        w = (min(b.last_step, steps - 1) - max(b.first_step, 0) + 1) * step_w
        parts.append(
            f'<rect class="buffer" data-tensor="{b.tensor}" data-kind="{escape(b.kind)}" '
            f'x="{_num(x0 + 0.5)}" y="{_num(y(b.offset + b.size_bytes))}" '
            f'width="{_num(max(w - 1, 0.5))}" height="{_num(max(y(b.offset) - y(b.offset + b.size_bytes), 0.5))}" '
            f'fill="{colour[_key(b)]}" '
            f'stroke="#fff" stroke-width="0.5"><title>{escape(_buffer_title(b))}</title></rect>')
    if arena.tail:
        parts.append(f'<rect class="tail" x="{MARGIN_LEFT}" y="{_num(y(head + arena.tail))}" '
                     f'width="{_num(PLOT_WIDTH)}" height="{_num(y(head) - y(head + arena.tail))}" '
                     f'fill="{TAIL_FILL}"><title>arena tail {arena.tail} bytes at offsets '
                     f'{head}..{head + arena.tail} (allocated once, live throughout)</title></rect>')
    lb = y(mem.lower_bound_bytes)
    parts.append(f'<line class="lower-bound" x1="{MARGIN_LEFT}" x2="{PLOT_RIGHT + 4}" '
                 f'y1="{_num(lb)}" y2="{_num(lb)}" stroke="#555" stroke-dasharray="2 3"/>')
    lines, labels = _arena_lines(arena, y, top / 1.08)
    if arena.tail:
        parts += band_label(f"tail {format_size(arena.tail)}", y(head + arena.tail), y(head),
                            [lb, *(label.y for label in labels)])
    labels.append(LineLabel(lb, "lower bound of the head "
                            f"{format_size(mem.lower_bound_bytes)}", colour="#555"))
    parts += lines + gutter_labels(labels, 10 + PLOT_HEIGHT)
    names = _step_ops(report)
    parts += _x_labels([names.get(s, "").removeprefix("op ") for s in range(steps)], step_w,
                       PLOT_HEIGHT + 24)
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">{escape(_steps_caption(names))} '
                 f'; offset ↑ (head {escape(format_size(mem.arena_head_bytes))}'
                 + (f", then the tail {escape(format_size(arena.tail))}" if arena.tail else "")
                 + ")</text></svg>")
    return "".join(parts)


def band_label(text: str, top: float, bottom: float, lines: Sequence[float]) -> list[str]:
    """``text`` inside a band from ``top`` to ``bottom`` (SVG y), as near its middle as the
    lines crossing it allow; none where no place is clear (the caption names the band too).
    An 11 px text spans about its baseline - 9 to + 3: 2 px more either side keep a line
    off it."""
    middle = (top + bottom) / 2 + 4
    half_steps = range(-int(bottom - top), int(bottom - top))  # the band, in 0.5 px steps
    clear = [base for base in (middle + d / 2 for d in half_steps)
             if top + 11 <= base <= bottom - 4
             and not any(base - 11 <= line <= base + 5 for line in lines)]
    if not clear:
        return []
    base = min(clear, key=lambda b: abs(b - middle))
    return [f'<text class="inside-label" x="{MARGIN_LEFT + PLOT_WIDTH / 2}" '
            f'text-anchor="middle" y="{_num(base)}">{escape(text)}</text>']


def bar_chart(css_class: str, bars: Sequence[tuple[str, float, str]], axis: str,
              ticks: Ticks, caption: str) -> str:
    """Bars of (label under it, value, hover text) with a y axis of ``ticks``."""
    top = max((v for _, v, _ in bars), default=0) or 1
    bar_w = PLOT_WIDTH / max(len(bars), 1)
    height = PLOT_SVG_HEIGHT + 14
    y = y_scale(top)
    parts = [svg_open(css_class, axis, height), *y_axis(y, top, axis, ticks)]
    for k, (label, v, title) in enumerate(bars):
        parts.append(f'<rect class="op" data-op="{escape(label)}" '
                     f'x="{_num(MARGIN_LEFT + k * bar_w + 0.5)}" y="{_num(y(v))}" '
                     f'width="{_num(max(bar_w - 1, 0.5))}" '
                     f'height="{_num(max(y(0) - y(v), 0.5))}" fill="#4e79a7">'
                     f'<title>{escape(title)}</title></rect>')
    parts += _x_labels([label for label, _, _ in bars], bar_w, PLOT_HEIGHT + 24)
    parts.append(f'<text x="{MARGIN_LEFT}" y="{height - 6}">{escape(caption)}</text></svg>')
    return "".join(parts)


def split_bar(css_class: str, parts: Sequence[tuple[str, float]], caption: str) -> str:
    """An estimate's parts as one bar (each part as wide as its share) with a legend naming
    every part and its time, so a part of a few pixels (the Edge TPU's compute beside its
    invoke overhead) is still read."""
    total = sum(ms for _, ms in parts) or 1.0
    height, x = 40, float(MARGIN_LEFT)
    bar = [svg_open(css_class, caption, height)]
    items = []
    for k, (name, ms) in enumerate(parts):
        w = PLOT_WIDTH * ms / total
        bar.append(f'<rect class="part" data-part="{escape(name)}" data-ms="{ms:g}" '
                   f'x="{_num(x)}" y="8" width="{_num(max(w, 0))}" height="24" '
                   f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(name)} '
                   f'{escape(format_time_ms(ms))}</title></rect>')
        items.append(f'<li><span class="swatch" style="background:{PALETTE[k % len(PALETTE)]}">'
                     f'</span>{escape(name)} {escape(format_time_ms(ms))} '
                     f'({ms / total:.1%})</li>')
        x += w
    bar.append(f'<text x="{MARGIN_LEFT - 6}" y="25" text-anchor="end">'
               f'{escape(format_time_ms(total))}</text></svg>')
    return (f'{"".join(bar)}<ul class="legend">{"".join(items)}</ul>'
            f'<p class="note">{escape(caption)}</p>')


def _per_op_svg(report: Report) -> str:
    """Per-op estimated device time (MACs where the report has no estimate) in file order,
    with a y axis in its unit and the op index under the bars; MACs in the hover text.
    Where the estimate has parts that are no op's (the Edge TPU's invoke and link), a
    sentence says how much of it the bars are."""
    macs = {c.op_index: c.macs for c in report.compute.per_op}
    lat = report.latency
    rows = [(o.op_index, o.op, o.estimated_ms, o.device) for o in lat.per_op] if lat else []
    if any(ms for _, _, ms, _ in rows):
        bars = [(str(i), ms, f"op {i} {op}" + (f" on the {device.upper()}" if device else "")
                 + f"\nMACs {macs.get(i, 0):,}\nestimated {format_time_ms(ms)}")
                for i, op, ms, device in rows]
        chart = bar_chart("per-op", bars, "estimated device time", time_ticks,
                          "operator index (file order) →")
        total, per_op = lat.estimated_device_ms if lat else None, sum(r[2] for r in rows)
        if total and per_op < 0.95 * total:
            chart += (f'<p class="note per-op-share">The bars add up to '
                      f'{escape(format_time_ms(per_op))} of the {escape(format_time_ms(total))} '
                      f'estimate; the other {escape(format_time_ms(total - per_op))} is per '
                      f'inference, not per operator (the target\'s section below splits it).</p>')
        return chart
    if any(macs.values()):
        bars = [(str(c.op_index), float(c.macs), f"op {c.op_index} {c.op}\nMACs {c.macs:,}")
                for c in report.compute.per_op]
        compiled = any(c.op.startswith("CUSTOM:") and not c.macs for c in report.compute.per_op)
        return bar_chart("per-op", bars, "MACs", count_ticks,
                         "operator index (file order) →") + (
            f'<p class="note">{COMPILED_WORK} The bars are the MACs of the operators beside '
            "them.</p>" if compiled and _target_section(report) is not None else "")
    why = (f" {COMPILED_WORK}" if report.model.source or _target_section(report) is not None
           else "")
    return f'<p class="note">No per-op figures in this report.{why}</p>'


def _bench(report: Report) -> str:
    """Measured on a phone (``devicefit bench``) beside the simulator's estimate and its
    band; a GPU run with the delegate's partition beside the predicted one, and the run
    beside it (``bench --gpu``: the CPU) with its own estimate."""
    if report.bench is None:
        return ""
    bench, vs = report.bench.result, report.bench.vs_estimate
    results = bench.results
    on = _run_name(bench.settings.delegate)
    rows = [("device", f"{bench.serial} {bench.device_model or ''}".strip()),
            (f"inference avg on the {on} (measured)", format_time_ms(results.inference_avg_ms)),
            *_vs_rows(vs, "the profile's cost model"),
            ("init", format_time_ms(results.init_ms)),
            ("first inference", format_time_ms(results.first_inference_ms)),
            ("memory peak", format_size(results.memory_peak_bytes))]
    # The GPU's partition follows the GPU's run: the profile's own, or the one beside it.
    gpu_first = bench.settings.delegate == "gpu"
    partition, beside = _bench_partition(report), _bench_beside(report)
    return ("<h3>Measured on the device (benchmark_model)</h3>" + html_table((), rows)
            + (partition + beside if gpu_first else beside + partition))


def _run_name(delegate: str | None) -> str:
    return "GPU" if delegate == "gpu" else f"CPU ({delegate or 'no delegate'})"


def _vs_rows(vs: BenchComparison | None, by: str) -> list[tuple[str, str]]:
    """The estimate, its band and where the measured time falls, and the ratio; or why
    there is no estimate."""
    if vs is None:
        return []
    if vs.estimated_ms is None:
        return [(f"estimated by {by}", f"unavailable: {vs.estimate_unavailable or '-'}")]
    band = "-" if vs.band_ms is None else format_band(vs.band_ms)
    where = {True: "inside", False: "outside", None: "-"}[vs.in_band]
    return [(f"estimated by {by}", format_time_ms(vs.estimated_ms)),
            ("likely band of the estimate", band),
            ("measured against the band", where),
            ("measured / estimated", "-" if vs.ratio is None else f"{vs.ratio:.2f}x")]


def _bench_partition(report: Report) -> str:
    """The GPU delegate's partition on the phone (its log) beside devicefit's prediction."""
    assert report.bench is not None  # the caller checks
    bench = report.bench.result
    gpu, check = bench.gpu_log, bench.partition
    if gpu is None and check is None:
        return ""

    def count(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    rows = [("backend", (gpu.backend if gpu else None) or "-", "-")]
    if check is not None:
        rows += [("ops on the GPU", f"{count(check.measured_gpu_ops)} of {check.total_ops:,}",
                  f"{check.predicted_gpu_ops:,} of {check.total_ops:,}"),
                 ("partitions", count(check.measured_partitions),
                  f"{check.predicted_partitions:,}"),
                 ("refused op types", ", ".join(check.measured_refused) or "none",
                  ", ".join(check.predicted_refused) or "none")]
        agree = {True: "the phone's partition agrees with the prediction",
                 False: "the phone's partition differs from the prediction",
                 None: "not compared: the phone's log does not say how many ops and "
                       "partitions the GPU took"}[check.agree]
    else:
        rows += [("ops on the GPU", f"{count(gpu.ops_on_gpu if gpu else None)} of "
                                    f"{count(gpu.ops_total if gpu else None)}", "-")]
        agree = "not compared: the profile is not a GPU profile, so nothing is predicted"
    refused = "".join(f"<li>{escape(line)}</li>" for line in (gpu.refused if gpu else ()))
    return ('<section class="bench-gpu"><h3>The GPU delegate\'s partition on the phone</h3>'
            + html_table(("", "on the phone (measured: its log)", "predicted by devicefit"),
                         rows)
            + f"<p>{escape(agree)}</p>"
            + (f"<p>What the phone's delegate refused, in its words:</p><ul>{refused}</ul>"
               if refused else "") + "</section>")


def _bench_beside(report: Report) -> str:
    """The run beside the profile's own on the same phone (``bench --gpu``), its estimate."""
    assert report.bench is not None  # the caller checks
    bench = report.bench.result
    run = bench.beside
    if run is None:
        return ""
    measured, main = run.results.inference_avg_ms, bench.results.inference_avg_ms
    rows = [(f"inference avg on the {_run_name(run.settings.delegate)}, "
             f"{run.settings.threads} threads (measured)", format_time_ms(measured)),
            *_vs_rows(run.vs_estimate, f"simulate on {run.estimate_profile}"
                      if run.estimate_profile else "devicefit")]
    if main and measured:
        gpu, cpu = (main, measured) if bench.settings.delegate == "gpu" else (measured, main)
        rows.append(("GPU / CPU on this phone (measured, both runs)", f"{gpu / cpu:.2f}x"))
    return ('<section class="bench-beside"><h3>Beside it on the same phone</h3>'
            + html_table((), rows) + "</section>")


def _target_section(report: Report) -> TargetSection | None:
    return report.compatibility.section if report.compatibility else None


def _target_html(report: Report) -> str:
    """The target's own section (the Edge TPU's partition, the Ethos-U's NPU/CPU split)."""
    section = _target_section(report)
    return "" if section is None else display_html(section.display())


#: A partition row's background: run by the accelerator, or left on the host CPU.
ACCELERATOR_FILL, CPU_FILL = "#e3f2e1", "#fbe3d6"


def display_html(shown: SectionDisplay) -> str:
    """A target's section as its :class:`~simulator.report.display.SectionDisplay` gives it: the
    heading, the facts as a list, then each part (a split bar, a time chart, a partition
    table coloured by where each operator runs, a note)."""
    facts = "".join(f"<li>{escape(fact)}</li>" for fact in shown.facts)
    return (f'<section class="{escape(shown.name)}"><h3>{escape(shown.heading)}</h3>'
            f"<ul>{facts}</ul>{''.join(_part_html(part) for part in shown.parts)}</section>")


def _part_html(part: Part) -> str:
    if isinstance(part, Note):
        return f'<p class="note">{escape(part.text)}</p>'
    if isinstance(part, Split):
        return f"<h4>{escape(part.heading)}</h4>" + split_bar(part.name, part.parts,
                                                               part.caption)
    if isinstance(part, TimeChart):
        bars = [(b.label, b.value, b.title) for b in part.bars]
        return f"<h4>{escape(part.heading)}</h4>" + bar_chart(
            part.name, bars, part.axis, time_ticks, part.caption)
    return _table_html(part)


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = "".join(
        f'<tr class="{escape(row.unit)}" '
        f'style="background:{CPU_FILL if row.on_cpu else ACCELERATOR_FILL}">'
        + "".join(f'<td class="num">{escape(c)}</td>' if i in table.numeric
                  else f"<td>{escape(c)}</td>" for i, c in enumerate(row.cells))
        + "</tr>" for row in table.rows)
    heading = f"<h4>{escape(table.heading)}</h4>" if table.heading else ""
    return f"{heading}<table><tr>{head}</tr>{rows}</table>"


def _refusal(report: Report) -> str:
    """The target's compiler refused the model: the operator and its words, what to do,
    and that no figure of the compiled model exists."""
    r = report.compile_refusal
    if r is None:
        return ""
    said = r.operator()
    return (f"<h3>Not compiled: {escape(r.compiler)} could not compile the model</h3>"
            + (f'<p class="refusal">{escape(said)}</p>' if said else "")
            + f"<pre>{escape(r.message)}</pre>"
            + (f"<p>Next: {escape(r.advice)}</p>" if r.advice else "")
            + '<p class="note">The memory timeline, arena layout, op support and latency are '
              "the compiled model's: there is none to draw or check.</p>")


def _training(r: Report) -> str:
    """The model's signatures and its train signature's planned memory, by part."""
    signatures = signature_line(r)
    if signatures is None:
        return ""
    size = partial(format_size, decimal=decimal_sizes(r, BudgetName.TRAIN_MEMORY))
    heading = training_heading(r)
    rows: list[tuple[str, object]] = [("signatures", signatures)]
    if r.no_training is not None:
        rows.append(("training", r.no_training))
    table = html_table(("part", "bytes"), [(label, size(value)) for label, value
                                           in training_rows(r)]) if heading else ""
    # A model only for inference gets its signatures, not a "Training" heading over them.
    title = "Signatures" if r.training is None and r.no_training is None else "Training"
    return (f"<h3>{title}</h3>{html_table((), rows)}"
            + (f'<p class="note">{escape(heading)}</p>{table}' if heading else ""))


def _memory(r: Report, top: float | None) -> str:
    """The memory timeline and the arena layout, where the report has a plan."""
    if r.memory is None:
        return ""
    colour = colours(r.memory.plan)
    return (f"<h3>Memory timeline</h3>{_timeline_svg(r, top, colour)}{_legend(r, colour)}"
            f"<h3>Arena layout</h3>{_layout_svg(r, top, colour)}")


def _section(index: int, section: Section, top: float | None = None) -> str:
    r = section.report
    status = section.shown_status
    notes = "".join(f"<li>{escape(n)}</li>" for n in r.notes)
    problems = "".join(f"<li>{escape(p)}</li>" for p in section.problems)
    # A caller's own status (check's regression rules) says its causes in its problems.
    causes = verdict_causes(r) if section.status is None else ""
    if section.status is None and r.ok and r.unchecked_budgets:
        causes = "; ".join([c for c in (causes,) if c] + [
            "for the checked budgets; not checked: " + ", ".join(r.unchecked_budgets)])
    return (
        f'<section id="section-{index}"><h2>{escape(section.heading)} '
        f'<span class="verdict {escape(section.colour)}">{escape(status.upper())}</span>'
        + (f'<span class="causes">{escape(causes)}</span>' if causes else "") + "</h2>"
        + (f'<h3>Problems</h3><ul class="problems">{problems}</ul>' if problems else "")
        + f"{_refusal(r)}<h3>Budgets</h3>{_budgets(r)}{_bench(r)}{_memory(r, top)}"
        f"{_training(r)}"
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
            "<p class=\"note\">Generated by devicefit."
            + (" Hover a shape for details." if "<title>" in body else "") + "</p>"
            + (f"<script>{layertable.SCRIPT}</script>" if 'class="layers"' in body else "")
            + "</body></html>\n")


def render_html(title: str, sections: Sequence[Section], intro: str = "",
                shared_scale: bool = False) -> str:
    """The page of one or more reports; deterministic for the same reports.

    ``intro`` is extra HTML placed before the sections (e.g. a project summary table).
    ``shared_scale``: every memory timeline gets the same y axis (a before/after page).
    """
    top = max((timeline_top(s.report) for s in sections if s.report.memory is not None),
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
