"""The PNG view (``--plot out.png``): the memory timeline as a matplotlib figure, for
slides and issues. Several reports (convert's before/after) share one y axis."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from textwrap import fill
from typing import Any

from devicefit.simulator.infra.units import format_size
from devicefit.simulator.report.layers import peak
from devicefit.simulator.report.report import Report
from devicefit.simulator.report.views.base import View
from devicefit.simulator.report.views.html import (
    BUDGET_COLOUR,
    JUDGED_COLOUR,
    TAIL_FILL,
    budget_on_scale,
    judged_arena,
    planned,
)


def draw_timeline(ax: Any, report: Report, title: str) -> None:
    """Bytes in the arena per operator: the tail (allocated once) under the live bytes of
    the head, the peak, the arena the verdict judges and the budget (named when off
    scale), as the HTML timeline draws them; for a model its compiler refused, the refusal
    in words (there is no plan to draw)."""
    if report.compile_refusal is not None:
        ax.text(0.5, 0.5, fill(f"No memory plan: {report.compile_refusal.line()}", 70),
                ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_axis_off()
        ax.set_title(title, fontsize=10)
        return
    timeline = planned(report).timeline
    arena = judged_arena(report)
    steps = [t.op_index for t in timeline]
    live = [t.live_bytes / 1024 for t in timeline]
    tail = arena.tail / 1024
    if tail:
        ax.bar(steps, [tail] * len(steps), color=TAIL_FILL, width=0.85,
               label=f"arena tail {format_size(arena.tail)}")
    ax.bar(steps, live, bottom=tail, color="#4e79a7", width=0.85, label="live bytes (head)")
    top = peak(timeline)
    if top is not None:
        ax.bar([top.op_index], [top.live_bytes / 1024], bottom=tail, color="#e15759",
               width=0.85, label=f"peak: op {top.op_index} {top.op}")
    ax.axhline(arena.judged / 1024, color=JUDGED_COLOUR, ls="--", label=arena.judged_label)
    drawn = max(arena.judged, arena.tail + max((t.live_bytes for t in timeline), default=0))
    if arena.budget is not None and budget_on_scale(arena.budget, drawn):
        ax.axhline(arena.budget / 1024, color=BUDGET_COLOUR,
                   label=f"arena budget {format_size(arena.budget)}")
    elif arena.budget is not None:
        ax.plot([], [], " ", label=f"arena budget {format_size(arena.budget)} (off scale)")
    ax.set_xlabel("operator index")
    ax.set_ylabel("bytes in the arena (KiB)")
    ax.set_title(title, fontsize=10)
    # Under the axes: inside, it would cover the lines it names.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
              frameon=False)


def render_reports(reports: Sequence[tuple[str, Report]]) -> bytes:
    """One timeline per (title, report), stacked, on the same y scale, as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(reports), 1, figsize=(9, 4.6 * len(reports)), dpi=120,
                             sharey=True, squeeze=False)
    for ax, (title, report) in zip(axes[:, 0], reports, strict=True):
        draw_timeline(ax, report, title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def render(report: Report) -> bytes:
    return render_reports([(f"{Path(report.model.path).name} on {report.profile.name}",
                            report)])


VIEW = View("png", ".png", render, binary=True)
