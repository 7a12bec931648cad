"""The PNG view (``--plot out.png``): the memory timeline as a matplotlib figure, for
slides and issues."""

from __future__ import annotations

import io
from pathlib import Path

from simulator.report import BudgetName, Report
from simulator.views.base import View


def render(report: Report) -> bytes:
    """Live bytes per operator step with the lower bound and the arena budget, as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display here or in CI
    import matplotlib.pyplot as plt

    timeline = report.memory.timeline
    steps = [t.op_index for t in timeline]
    live = [t.live_bytes / 1024 for t in timeline]
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=120)
    ax.bar(steps, live, color="#4e79a7", width=0.85, label="live bytes")
    if live:
        peak = max(range(len(live)), key=live.__getitem__)
        ax.bar([steps[peak]], [live[peak]], color="#e15759", width=0.85,
               label=f"peak: op {steps[peak]} {timeline[peak].op}")
    ax.axhline(report.memory.lower_bound_bytes / 1024, color="#555", ls="--",
               label=f"lower bound {report.memory.lower_bound_bytes / 1024:.1f} KiB")
    ax.axhline(report.memory.arena_head_bytes / 1024, color="#f28e2b", ls="-.",
               label=f"planned head {report.memory.arena_head_bytes / 1024:.1f} KiB")
    budget = next((b.limit for b in report.budgets if b.name == BudgetName.ARENA), None)
    if budget is not None and live and budget <= 1.5 * max(max(live) * 1024, 1):
        ax.axhline(budget / 1024, color="#c00", label=f"arena budget {budget / 1024:.0f} KiB")
    ax.set_xlabel("operator index")
    ax.set_ylabel("KiB")
    ax.set_title(f"{Path(report.model.path).name} on {report.profile.name}")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


VIEW = View("png", ".png", render, binary=True)
