"""The architecture search's report: what was screened and rejected (by which budget), what
was trained, what was chosen and why; as JSON (:func:`to_dict`), rows for the CLI and an
HTML page (:func:`render_search_html`, the Pareto front drawn with matplotlib).

The pieces fit's report has are fit's: :class:`~sdk.fit.report.FitBudgets`,
:class:`~sdk.fit.report.Miss`, the size/latency formatting, the HTML page machinery.
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

from devicefit.sdk.fit.report import (
    MISS_COLUMNS,
    FitBudgets,
    Miss,
    miss_row,
    trials_note,
    weights_html,
    written_as,
)
from devicefit.sdk.search.architectures import Searched
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.screen import Rejection, Screened
from devicefit.sdk.search.trials import ArchTrial, cost, pareto_front, ranked
from devicefit.sdk.study import shown_url
from devicefit.simulator.infra.units import format_bytes, format_estimate, format_percent
from devicefit.simulator.report.report import plain_fields
from devicefit.simulator.report.views.html import Section, escape, html_table, render_html
from devicefit.simulator.types import BudgetName, Unit

SCREEN_COLUMNS = ("candidate", "verdict", "flash", "arena", "latency (band)", "rejected by")
TRIAL_COLUMNS = ("#", "candidate", "accuracy (int8)", "float", "flash", "arena",
                 "est. latency", "verdict", "time", "note")


def rejected_by(found: Searched) -> dict[str, int]:
    """Rejection → how many screened candidates it rejected (one may have several)."""
    counts = Counter(r for s in found.screen.results for r in s.rejected_by)
    return {str(r): counts[r] for r in Rejection if counts[r]}


def closest_miss(found: Searched) -> tuple[Screened | None, list[Miss]]:
    """When no candidate survives the screen: the one whose worst budget overshoot is the
    smallest (judged on the screen's figures, which are those the budgets are judged on)."""
    b = found.profile.budgets
    limits = ((BudgetName.FLASH, b.flash_bytes, Unit.BYTES, "flash_bytes"),
              (BudgetName.ARENA, b.arena_bytes, Unit.BYTES, "arena_bytes"),
              (BudgetName.LATENCY, b.latency_ms, Unit.MS, "latency_ms"))
    best: tuple[float, Screened, list[Miss]] | None = None
    for s in found.screen.results:
        if not set(s.rejected_by) <= {Rejection.FLASH, Rejection.ARENA, Rejection.LATENCY}:
            continue  # no figure to be close with (an op, an error, no estimate)
        misses = [Miss(name, limit, value, unit, value - limit, (value - limit) / limit)
                  for name, limit, unit, attr in limits
                  if limit and (value := getattr(s, attr)) is not None and value > limit]
        worst = max((m.over_fraction for m in misses), default=0.0)
        if misses and (best is None or worst < best[0]):
            best = (worst, s, misses)
    return (None, []) if best is None else (best[1], best[2])


def reason(found: Searched) -> str:
    """Why the chosen trial: its rank, the runner-up, and what the screen did."""
    chosen = next((t for t in found.trials if t.number == found.chosen), None)
    if chosen is None:
        return ""
    fitting = ranked(found.trials)
    screened, survivors = len(found.screen.results), len(found.screen.fitting)
    why = (f"highest int8 accuracy of the {len(fitting)} trained candidates that pass every "
           "budget")
    if found.objective.cost is not None:
        why += f" (on the accuracy-{found.objective.cost} Pareto front)"
    runner = next((t for t in fitting if t.number != chosen.number), None)
    if runner is not None:
        why += (f"; next best: trial {runner.number} ({runner.candidate.label()}) at "
                f"{format_percent(runner.accuracy)}")
    if found.failed_in_runtime:
        why += f"; failed in the runtime: trial(s) {', '.join(map(str, found.failed_in_runtime))}"
    return (f"{why}; {screened} candidates screened, {screened - survivors} rejected without "
            f"training, {len(found.trials)} of the {survivors} that fit trained")


def to_dict(found: Searched) -> dict[str, Any]:
    """The JSON view: every figure the text and HTML views show."""
    closest, misses = closest_miss(found) if not found.screen.fitting else (None, [])
    s = found.settings
    return {
        "profile": found.profile.name, "runtime": found.profile.runtime.name,
        "budgets": plain_fields(FitBudgets.of(found.profile.budgets)),
        "objective": found.objective.value,
        "settings": {"max_trials": s.max_trials, "time_budget_s": s.time_budget_s,
                     "epochs": found.epochs, "jobs": s.jobs, "seed": s.seed,
                     "storage": shown_url(s.storage), "study": found.study_name},
        "found": found.found, "interrupted": found.interrupted,
        "stopped": plain_fields(found.stopped) if found.stopped else None,
        "screen": {"candidates": len(found.screen.results),
                   "fit": len(found.screen.fitting), "rejected_by": rejected_by(found),
                   "child_seconds": found.screen.child_seconds,
                   "convert_seconds": found.screen.convert_seconds,
                   "judge_seconds": found.screen.judge_seconds,
                   "results": [screened_dict(r) for r in found.screen.results]},
        "trials": [t.to_dict() for t in found.trials],
        "pareto_front": pareto_front(found.trials, found.objective),
        "chosen": found.chosen, "reason": reason(found), "output": found.output,
        "failed_in_runtime": list(found.failed_in_runtime),
        "unshown": [plain_fields(u) for u in found.unshown],
        "verification": found.verification.to_dict() if found.verification else None,
        "closest": None if closest is None else screened_dict(closest),
        "closest_misses": [plain_fields(m) for m in misses],
        "search_seconds": found.search_seconds, "train_samples": found.train_samples,
        "eval_samples": found.eval_samples,
    }


def screened_dict(r: Screened) -> dict[str, Any]:
    """One screened candidate as JSON (``devicefit search --screen --json`` prints these)."""
    return {"label": r.candidate.label(), "key": r.candidate.key, **r.candidate.to_dict(),
            "verdict": r.verdict, "status": r.status, "rejected_by": list(r.rejected_by),
            "flash_bytes": r.flash_bytes, "arena_bytes": r.arena_bytes,
            "offline_plan_saved_bytes": r.offline_plan_saved_bytes,
            "latency_ms": r.latency_ms, "latency_band_ms": r.latency_band_ms,
            "parameters": r.parameters, "note": r.note,
            "low_bit": plain_fields(r.low_bit) if r.low_bit is not None else None}


def screen_rows(results: tuple[Screened, ...]) -> list[tuple[Any, ...]]:
    return [(r.candidate.label(), r.status, _size(r.flash_bytes), _size(r.arena_bytes),
             _latency(r.latency_ms, r.latency_band_ms),
             ", ".join(r.rejected_by) + (f" ({r.note})" if r.note and r.rejected_by
                                         else r.note)) for r in results]


def trial_rows(found: Searched) -> list[tuple[Any, ...]]:
    front = set(pareto_front(found.trials, found.objective))
    return [(t.number, t.candidate.label(), _percent(t.accuracy),
             _percent(t.payload.float_accuracy), _size(t.flash_bytes), _size(t.arena_bytes),
             _latency(t.latency_ms, t.latency_band_ms),
             ("PASS" if t.fits else "fail") + (" ← chosen" if t.number == found.chosen else "")
             + (" (front)" if t.number in front and found.objective.cost else ""),
             f"{t.seconds:.1f}s", t.note) for t in found.trials]


def front_rows(found: Searched) -> list[tuple[Any, ...]]:
    """The Pareto front, cheapest first."""
    metric = found.objective if found.objective.cost else Objective.ARENA
    front = [t for t in found.trials if t.number in pareto_front(found.trials, found.objective)]
    return [(t.number, t.candidate.label(), _percent(t.accuracy), _cost(t, metric))
            for t in sorted(front, key=lambda t: (cost(t, metric) or 0.0, t.number))]


def _cost(t: ArchTrial, metric: Objective) -> str:
    if metric.cost == "latency":
        return _latency(t.latency_ms, t.latency_band_ms)
    return _size(t.arena_bytes)


def _percent(value: float | None) -> str:
    return "-" if value is None else format_percent(value)


def _size(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def _latency(ms: float | None, band: tuple[float, float] | None) -> str:
    """The estimate with its band, as fit's tables and every report view show one."""
    return "" if ms is None else format_estimate(ms, "ms", band)


def pareto_svg(found: Searched) -> str:
    """Accuracy against the objective's cost (arena for one objective) of every trained
    candidate, the front joined, the chosen one ringed, the budget as a line: an SVG drawn by
    matplotlib (deterministic: fixed hash salt, no date)."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return ('<p class="note">The picture needs matplotlib (pip install '
                '"devicefit[plot]"); the front is in the table above.</p>')
    metric = found.objective if found.objective.cost else Objective.ARENA
    latency = metric.cost == "latency"
    scale = 1.0 if latency else 1024.0
    # (trial, cost, accuracy) of every trained candidate with both figures.
    points = [(t, c / scale, a) for t in found.trials if (a := t.accuracy) is not None
              and (c := cost(t, metric)) is not None]
    if not points:
        return '<p class="note">No candidate was trained to an accuracy.</p>'
    on_front = set(pareto_front(found.trials, found.objective))
    front = sorted((p for p in points if p[0].number in on_front), key=lambda p: p[1])
    fig = Figure(figsize=(12.8, 4.0))
    ax = fig.add_subplot()
    for fits, colour, label in ((True, "#59a14f", "passes every budget"),
                                (False, "#e15759", "misses a budget")):
        these = [(x, y) for t, x, y in points if t.fits == fits]
        if these:
            ax.scatter([x for x, _ in these], [y for _, y in these], color=colour, label=label,
                       zorder=3)
    if front:
        ax.plot([x for _, x, _ in front], [y for _, _, y in front], "--", color="#4e79a7",
                label="Pareto front", zorder=2)
    budget = found.profile.budgets.latency_ms if latency else found.profile.budgets.arena_bytes
    line = budget / scale if budget else None
    xs = [x for _, x, _ in points] + ([line] if line is not None else [])
    near = 0.05 * (max(xs) - min(xs))
    for t, x, y in points:
        ring = t.number == found.chosen
        # Each number beside its mark (clear of the chosen one's ring), on the left where
        # the budget's line runs just right of the mark.
        left = line is not None and 0 <= line - x <= near
        gap = 9 if ring else 5
        ax.annotate(str(t.number), (x, y), textcoords="offset points",
                    xytext=(-gap if left else gap, 4), ha="right" if left else "left",
                    fontsize=8)
        if ring:
            ax.scatter([x], [y], s=160, facecolors="none", edgecolors="#333", label="chosen",
                       zorder=4, clip_on=False)
    if line is not None:
        ax.axvline(line, color="#c00", lw=1, label=f"{metric.cost} budget")
    ax.set_xlabel("estimated latency (ms)" if latency else "arena (KiB)")
    ax.set_ylabel("int8 accuracy")
    # Room round the marks (the chosen one's ring is not cut at an axis), and the legend
    # beside the plot, where it covers no mark nor the budget's line.
    ax.margins(0.08)
    # In the tables' unit (97.50%), not matplotlib's bare fraction (0.975).
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_percent(v)))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    out = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "devicefit", "svg.fonttype": "none"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg"):]


def render_search_html(found: Searched) -> str:
    """The search report as one self-contained HTML page."""
    chosen = next((t for t in found.trials if t.number == found.chosen), None)
    if chosen is not None:
        summary = (f"<p><b>Chosen:</b> trial {chosen.number}, {escape(chosen.candidate.label())}"
                   f", accuracy {escape(_percent(chosen.accuracy))} — {escape(reason(found))}."
                   "</p>")
    else:
        closest, misses = closest_miss(found)
        summary = ("<p><b>No candidate passes every budget.</b>"
                   + (f" Closest: {escape(closest.candidate.label())}</p>"
                      + html_table(MISS_COLUMNS, [miss_row(m) for m in misses])
                      if closest else "</p>"))
    rejected = ", ".join(f"{n} by {r}" for r, n in rejected_by(found).items()) or "none"
    facts = [("profile", found.profile.name), ("objective", found.objective.value),
             ("screened", f"{len(found.screen.results)} candidates in "
                          f"{found.screen.child_seconds + found.screen.judge_seconds:.1f} s "
                          f"({found.screen.convert_seconds:.1f} s of it converting)"),
             ("rejected", rejected), ("trained", f"{len(found.trials)} of "
                                                 f"{len(found.screen.fitting)} survivors, "
                                                 f"{found.epochs} epoch(s) each"),
             ("search time", f"{found.search_seconds:.1f} s"),
             ("interrupted", "yes" if found.interrupted else "no")]
    if note := trials_note(found.trials, found.unshown, found.settings.max_trials):
        facts.insert(-2, ("trial numbers", note))
    what = found.objective.cost or "arena"
    intro = (summary + html_table(("", ""), facts)
             + "<h2>Screened (random weights, int8, and int4 weights where int8 missed only "
               "flash; judged statically)</h2>"
             + html_table(SCREEN_COLUMNS, screen_rows(found.screen.results))
             + "<h2>Trained</h2>" + html_table(TRIAL_COLUMNS, trial_rows(found))
             + f"<h2>Accuracy vs {escape(what)}: the Pareto front</h2>"
             + html_table(("#", "candidate", "accuracy", what), front_rows(found))
             + pareto_svg(found))
    if chosen is not None and chosen.payload.low_bit is not None:
        intro += weights_html(chosen.payload.low_bit)
    written = written_as(found.verification, chosen)
    sections = [Section(f"Chosen candidate on {found.profile.name}, the file as written"
                        + (f": {written}" if written else "") + " (verified in the runtime)",
                        found.verification)] if found.verification is not None else []
    return render_html(f"devicefit search: {found.profile.name}", sections, intro=intro)
