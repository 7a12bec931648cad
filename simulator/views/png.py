"""The PNG view (``--plot out.png``): the memory timeline as a matplotlib figure, for
slides and issues. Several reports (convert's before/after) share one y axis."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicefit.simulator.layers import peak
from devicefit.simulator.report import BudgetName, Report
from devicefit.simulator.views.base import View


def _draw(ax: Any, report: Report, title: str) -> None:
    """Live bytes per operator with the peak, the lower bound, the planned head and the
    arena budget (when it is on the scale)."""
    timeline = report.memory.timeline
    steps = [t.op_index for t in timeline]
    live = [t.live_bytes / 1024 for t in timeline]
    ax.bar(steps, live, color="#4e79a7", width=0.85, label="live bytes")
    top = peak(timeline)
    if top is not None:
        ax.bar([top.op_index], [top.live_bytes / 1024], color="#e15759", width=0.85,
               label=f"peak: op {top.op_index} {top.op}")
    ax.axhline(report.memory.lower_bound_bytes / 1024, color="#555", ls="--",
               label=f"lower bound {report.memory.lower_bound_bytes / 1024:.1f} KiB")
    ax.axhline(report.memory.arena_head_bytes / 1024, color="#f28e2b", ls="-.",
               label=f"planned head {report.memory.arena_head_bytes / 1024:.1f} KiB")
    budget = next((b.limit for b in report.budgets if b.name == BudgetName.ARENA), None)
    if budget is not None and live and budget <= 1.5 * max(max(live) * 1024, 1):
        ax.axhline(budget / 1024, color="#c00", label=f"arena budget {budget / 1024:.0f} KiB")
    ax.set_xlabel("operator index")
    ax.set_ylabel("live bytes (KiB)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper right")


def render_reports(reports: Sequence[tuple[str, Report]]) -> bytes:
    """One timeline per (title, report), stacked, on the same y scale, as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(reports), 1, figsize=(9, 3.6 * len(reports)), dpi=120,
                             sharey=True, squeeze=False)
    for ax, (title, report) in zip(axes[:, 0], reports, strict=True):
        _draw(ax, report, title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def render(report: Report) -> bytes:
    return render_reports([(f"{Path(report.model.path).name} on {report.profile.name}",
                            report)])


VIEW = View("png", ".png", render, binary=True)
