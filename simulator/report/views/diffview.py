"""Views of a :class:`simulator.report.diff.ReportDiff` (``devicefit diff``): text, JSON, HTML.

They show the figures the diff holds; none computes one. Each view names how the layers
were paired (by index, or by op type and output shape) so a reader knows what "op 3" means
on each side.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from devicefit.simulator.infra import jsonout
from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.units import (
    format_band,
    format_figure,
    format_points,
    format_size,
)
from devicefit.simulator.report.diff import LAYER_FIGURES, Change, Figure, LayerChange, ReportDiff
from devicefit.simulator.report.layers import shape_text
from devicefit.simulator.report.report import LayerRow
from devicefit.simulator.report.views.columns import columns
from devicefit.simulator.report.views.html import (
    BUDGET_COLOUR,
    MARGIN_LEFT,
    PALETTE,
    PLOT_HEIGHT,
    PLOT_RIGHT,
    PLOT_SVG_HEIGHT,
    PLOT_WIDTH,
    LineLabel,
    budget_on_scale,
    escape,
    gutter_labels,
    html_table,
    judged_arena,
    render_page,
    size_ticks,
    step_bytes,
    svg_open,
    y_axis,
    y_scale,
)
from devicefit.simulator.report.views.messages import decimal_sizes
from devicefit.simulator.types import BudgetName

#: The diff's sizes → the budget that judges them: they print in its prefixes, as every
#: other view of the reports prints them, where both sides' budgets are written in kB/MB.
_JUDGED_BY = {"model size": BudgetName.FLASH, "flash": BudgetName.FLASH,
              "arena": BudgetName.ARENA, "arena head": BudgetName.ARENA,
              "lower bound": BudgetName.ARENA}


def _value(f: Figure, value: float | None, decimal: bool = False) -> str:
    if value is None:
        return "-"
    return format_figure(value, f.unit, decimal)


def _band(band: tuple[float, float] | None, f: Figure) -> str:
    return f" ({format_band(band, lambda v: _value(f, v))})" if band else ""


def _decimal(diff: ReportDiff, f: Figure) -> bool:
    budget = _JUDGED_BY.get(f.name)
    return budget is not None and all(decimal_sizes(side.report, budget)
                                      for side in (diff.a, diff.b))


def _change(f: Figure, decimal: bool = False) -> str:
    delta = f.delta
    if delta is None:
        return "-"
    if delta == 0:
        return "same"
    if f.unit in ("fraction", "pp"):  # a change of a percentage is in percentage points
        text = format_points(delta * 100 if f.unit == "fraction" else delta)
    else:
        text = ("+" if delta > 0 else "-") + _value(f, abs(delta), decimal)
    if f.ratio is not None:
        text += f" (×{f.ratio:.3g})"
    if f.bands_overlap:
        text += ", within the error bands"
    return text


def figure_rows(diff: ReportDiff) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, change) for every figure and recorded accuracy."""
    rows = []
    for f in (*diff.figures, *diff.accuracy):
        decimal = _decimal(diff, f)
        rows.append((f.name, _value(f, f.a, decimal) + _band(f.a_band, f),
                     _value(f, f.b, decimal) + _band(f.b_band, f), _change(f, decimal)))
    if not diff.accuracy:
        rows.append(("accuracy", "not recorded", "not recorded",
                     "(no accuracy in either model's conversion metadata)"))
    return rows


def _layer_name(r: LayerRow | None) -> str:
    return "-" if r is None else f"{r.key} {r.op} {shape_text(r.output_shapes)} {r.dtype}"


def _layer_delta(c: LayerChange, figure: str) -> str:
    d = c.delta(figure)
    if d is None or d == 0:
        return ""
    if figure == "estimated_ms":
        # Below a microsecond the estimate's own rounding, not a change worth a number.
        return "±<1 us" if abs(d) < 5e-4 else f"{'+' if d > 0 else '-'}{format_figure(abs(d), 'ms')}"
    return f"{d:+,}"


def layer_rows(diff: ReportDiff, changed_only: bool = True) -> list[list[str]]:
    """(change, A layer, B layer, Δ per :data:`LAYER_FIGURES`) of each (changed) pair."""
    pairs = diff.changed_layers if changed_only else list(diff.layers)
    return [[c.change.value, _layer_name(c.a), _layer_name(c.b),
             *(_layer_delta(c, f) for f in LAYER_FIGURES)] for c in pairs]


LAYER_HEADINGS = ("change", "A", "B", "Δ MACs", "Δ params", "Δ param bytes", "Δ live bytes",
                  "Δ estimated")


def _title(diff: ReportDiff) -> str:
    ra, rb = diff.a.report, diff.b.report
    if diff.kind == "profiles":
        return f"{ra.model.path}: {ra.profile.name} (A) vs {rb.profile.name} (B)"
    return f"{ra.model.path} (A) vs {rb.model.path} (B) on {ra.profile.name}"


def _layer_summary(diff: ReportDiff) -> str:
    counts = {ch: sum(c.change == ch for c in diff.layers) for ch in Change}
    return (f"Layers (paired by {diff.matching.value}): "
            + ", ".join(f"{n} {ch.value}" for ch, n in counts.items() if n))


def render_text(diff: ReportDiff, top: int = 20) -> str:
    lines = [_title(diff), f"  A verdict {diff.a.report.verdict.upper()}, "
                           f"B verdict {diff.b.report.verdict.upper()}", ""]
    lines += columns([("figure", "A", "B", "B − A"), *figure_rows(diff)], header=True)
    ops = [c for c in diff.op_counts if c.a != c.b]
    lines += ["", "Op counts" + ("" if ops else ": the same")]
    if ops:
        lines += columns([("op", "A", "B"), *((c.op, str(c.a), str(c.b)) for c in ops)],
                         header=True)
    lines += ["", _layer_summary(diff)]
    rows = layer_rows(diff)
    if rows:
        shown = rows[:top] if top else rows
        # A figure no listed layer changes is an empty column: left out, the rest fit.
        kept = [i for i, head in enumerate(LAYER_HEADINGS)
                if not head.startswith("Δ") or any(r[i] for r in shown)]
        lines += columns([[r[i] for i in kept] for r in [list(LAYER_HEADINGS), *shown]],
                         header=True)
        if len(shown) < len(rows):
            lines.append(f"  … {len(rows) - len(shown)} more (--top 0 lists all; --json has "
                         "every layer)")
    return clean("\n".join(lines)) + "\n"


def render_json(diff: ReportDiff) -> str:
    return jsonout.dumps(diff.to_dict(), indent=2) + "\n"


def _profiles(diff: ReportDiff, budget: float) -> str:
    """The profile(s) whose arena budget is ``budget``, each named once."""
    return ", ".join(dict.fromkeys(r.profile.name for r in (diff.a.report, diff.b.report)
                                   if judged_arena(r).budget == budget))


def memory_svg(diff: ReportDiff) -> str:
    """The bytes in each model's arena at each operator step (the timeline's bar heights,
    tail included) as two step lines on one scale, each side's arena budget as a line;
    hovering a step names both figures. Empty when a side has no memory plan (its
    compiler refused the model)."""
    ra, rb = diff.a.report, diff.b.report
    if ra.memory is None or rb.memory is None:
        return ""
    series = [("A", step_bytes(ra), PALETTE[0]), ("B", step_bytes(rb), PALETTE[1])]
    steps = max(len(bytes_) for _, bytes_, _ in series)
    drawn = max([*(max(bytes_, default=0) for _, bytes_, _ in series), 1])
    budgets = {b for r in (ra, rb) if (b := judged_arena(r).budget) is not None}
    # A budget far over both lines is named, not drawn (the lines would be a few px high).
    far = {b for b in budgets if not budget_on_scale(b, drawn)}
    budgets -= far
    top = max([drawn, *budgets]) * 1.08
    y, step_w = y_scale(top), PLOT_WIDTH / max(steps, 1)
    parts = [svg_open("diff-memory", "bytes in the arena per operator step, A and B"),
             *y_axis(y, top / 1.08, "bytes in the arena", size_ticks)]
    labels = []
    for name, bytes_, colour in series:
        points = " ".join(f"{MARGIN_LEFT + (s + k) * step_w:.2f},{y(v):.2f}"
                          for s, v in enumerate(bytes_) for k in (0, 1))
        parts.append(f'<polyline class="side" data-side="{name}" points="{points}" '
                     f'fill="none" stroke="{colour}" stroke-width="2"/>')
        labels.append(LineLabel(y(max(bytes_, default=0)), f"{name} peak "
                                f"{format_size(max(bytes_, default=0))}", colour=colour))
    for budget in sorted(budgets):
        parts.append(f'<line class="arena-budget" x1="{MARGIN_LEFT}" x2="{PLOT_RIGHT + 4}" '
                     f'y1="{y(budget):.2f}" y2="{y(budget):.2f}" stroke="{BUDGET_COLOUR}" '
                     'stroke-width="1.5"/>')
        labels.append(LineLabel(y(budget), f"arena budget {format_size(budget)} "
                                f"({_profiles(diff, budget)})", colour=BUDGET_COLOUR))
    labels += [LineLabel(-math.inf, f"arena budget {format_size(budget)} "
                         f"({_profiles(diff, budget)}) ↑ off scale", colour=BUDGET_COLOUR)
               for budget in sorted(far)]
    for s in range(steps):
        shown = ", ".join(f"{name} {format_size(b[s])}" if s < len(b) else f"{name} -"
                          for name, b, _ in series)
        parts.append(f'<rect class="step" x="{MARGIN_LEFT + s * step_w:.2f}" y="10" '
                     f'width="{step_w:.2f}" height="{PLOT_HEIGHT}" fill="transparent">'
                     f"<title>step {s}: {escape(shown)}</title></rect>")
    parts += gutter_labels(labels, 10 + PLOT_HEIGHT)
    parts.append(f'<text x="{MARGIN_LEFT}" y="{PLOT_SVG_HEIGHT - 6}">operator step (execution '
                 f"order; A {len(series[0][1])} steps, B {len(series[1][1])}) →</text></svg>")
    legend = "".join(f'<li><span class="swatch" style="background:{colour}"></span>{name}: '
                     f"{escape(side.label)}</li>"
                     for (name, _, colour), side in zip(series, (diff.a, diff.b), strict=True))
    return "".join(parts) + f'<ul class="legend">{legend}</ul>'


def render_html(diff: ReportDiff) -> str:
    ra, rb = diff.a.report, diff.b.report
    sides = html_table(("", "A", "B"), [("label", diff.a.label, diff.b.label),
                                        ("model", ra.model.path, rb.model.path),
                                        ("profile", ra.profile.name, rb.profile.name),
                                        ("verdict", ra.verdict.upper(), rb.verdict.upper())])
    ops = html_table(("op", "A", "B"), [(c.op, c.a, c.b) for c in diff.op_counts],
                     ["changed" if c.a != c.b else "same" for c in diff.op_counts])
    rows = layer_rows(diff, changed_only=False)
    layers = html_table(LAYER_HEADINGS, rows, [c.change.value for c in diff.layers])
    chart = memory_svg(diff)
    body = (f'<section id="diff"><h2>Compared</h2>{sides}'
            f'<h2>Figures</h2>{html_table(("figure", "A", "B", "B − A"), figure_rows(diff))}'
            + (f"<h2>Memory over the operators</h2>{chart}" if chart else "")
            + f"<h2>Op counts</h2>{ops}"
            f'<h2 id="layers">{escape(_layer_summary(diff))}</h2>{layers}</section>')
    return render_page(_title(diff), body)


#: Format name → renderer, for ``devicefit diff``.
RENDERERS: dict[str, Callable[[ReportDiff], str]] = {
    "text": render_text, "json": render_json, "html": render_html}
