"""The fit page's accuracy-vs-size plots in headless Chromium: rejected trials in a strip
of their own, no text over other text.

The trial records are written here, not searched for: a real search trains for minutes
(``test_fit.py`` runs one, slow). Their sizes and accuracies are those of a real
``devicefit fit`` of the digits CNN on a tight STM32L4R5 profile (``tight_fit`` there),
plus one trained trial that misses a budget beside the chosen one, so that two labels
compete for the same place.
"""

from __future__ import annotations

from functools import partial

from devicefit.sdk.fit.record import FitPayload, FitTrial
from devicefit.sdk.fit.report import pareto_svg
from devicefit.sdk.fit.space import Candidate
from devicefit.sdk.study import TrialStage
from devicefit.simulator.report.views.html import render_page
from devicefit.simulator.types import Status
from tests.browser import measure

FLASH_BUDGET = 132 * 1024

STATIC, TRAINED = TrialStage.STATIC, TrialStage.TRAINED
PASS, FAIL = Status.PASS, Status.FAIL
Trial = partial(FitTrial, payload=FitPayload())
TRIALS = [
    Trial(0, Candidate("int8"), STATIC, FAIL, flash_bytes=176224, arena_bytes=6784,
                note="misses flash, arena"),
    Trial(1, Candidate("int8", prune=0.5), TRAINED, PASS, flash_bytes=125976,
                arena_bytes=4256, accuracy=0.9639),
    Trial(2, Candidate("int8", prune=0.25), STATIC, FAIL, flash_bytes=147168,
                arena_bytes=5520, note="misses flash, arena"),
    Trial(3, Candidate("int8", prune=0.375), STATIC, FAIL, flash_bytes=135592,
                arena_bytes=4912, note="misses flash, arena"),
    Trial(4, Candidate("int8", prune=0.5, qat=True), TRAINED, PASS,
                flash_bytes=125976, arena_bytes=4256, accuracy=0.9639),
    Trial(5, Candidate("int8", prune=0.45), TRAINED, FAIL, flash_bytes=127000,
                arena_bytes=4600, accuracy=0.9641, note="misses arena"),
]

GEOMETRY = """(() => {
const out = [];
for (const svg of document.querySelectorAll('svg.pareto')) {
  const box = e => { const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
            cls: e.getAttribute('class'), text: e.textContent, trial: e.dataset.trial}; };
  out.push({svg: box(svg), plot: box(svg.querySelector('rect')),
            texts: Array.from(svg.querySelectorAll('text')).map(box),
            rejected: Array.from(svg.querySelectorAll('rect.rejected')).map(box),
            trials: Array.from(svg.querySelectorAll('circle.trial')).map(box)});
}
return out;
})()"""


def _overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and \
        a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_rejected_trials_sit_in_their_strip_and_no_labels_overlap(tmp_path):
    body = (pareto_svg(TRIALS, FLASH_BUDGET, 1, "flash")
            + pareto_svg(TRIALS, 4500, 1, "arena"))
    page = tmp_path / "fit.html"
    shown, plots = measure(page, render_page("fit", body), GEOMETRY, size="900,1400")
    assert shown.console == [], shown.console
    rejected = sorted((t for t in TRIALS if t.accuracy is None), key=lambda t: t.flash_bytes)
    for plot in plots:
        area = plot["plot"]
        # Under the plot area, not on its bottom edge, in the order of their sizes.
        assert [int(r["trial"]) for r in sorted(plot["rejected"], key=lambda r: r["left"])] \
            == [t.number for t in rejected]
        assert all(r["top"] > area["bottom"] for r in plot["rejected"])
        texts = plot["texts"]
        for i, a in enumerate(texts):
            assert plot["svg"]["left"] <= a["left"] and a["right"] <= plot["svg"]["right"], a
            for b in texts[i + 1:]:
                assert not _overlap(a, b), (a["text"], b["text"])
        labels = [t["text"] for t in texts if t["cls"] == "trial-label"]
        assert "trial 1, 4" in labels and "trial 5" in labels  # 1 and 4 share one spot


def test_the_fit_page_lays_out_cleanly_in_a_wide_window(tmp_path):
    """The whole page (issue 46): no trial label over the budget line, a mark or another
    label; the chosen trial's mark inside its plot; no table cell splitting a figure from
    its unit; the plots and tables using the window's width."""
    from devicefit.sdk.convert.distill import DistillSettings
    from devicefit.sdk.fit.report import FitBudgets, FitReport, FitSettings, render_fit_html
    from devicefit.sdk.fit.space import space_for
    from devicefit.simulator.profiles import load_profile
    from tests.browser import LAYOUT, WIDE, layout_problems

    space = space_for(load_profile("stm32l4r5-cortex-m4"), can_train=True, can_prune=True)
    report = FitReport("digits_cnn.keras", "stm32l4r5-tight", "tflm",
                       FitBudgets(FLASH_BUDGET, 4500, None), space,
                       FitSettings(20, None, 1, None, 3, DistillSettings(), None, 0, None, 4096),
                       0.97, 10, TRIALS, chosen=1)
    script = (f"Object.assign({LAYOUT}, {{chosen: Array.from(document.querySelectorAll("
              "'svg.pareto')).map(svg => { const c = svg.querySelector('circle[r=\"7\"]')"
              ".getBoundingClientRect(), p = svg.querySelector('rect')"
              ".getBoundingClientRect(); return c.left >= p.left && c.right <= p.right && "
              "c.top >= p.top && c.bottom <= p.bottom; })})")
    shown, geometry = measure(tmp_path / "fit.html", render_fit_html(report), script, size=WIDE)
    assert shown.console == [], shown.console
    assert isinstance(geometry, dict)
    assert layout_problems(geometry) == []
    assert geometry["chosen"] == [True, True]


def test_the_accuracy_axis_speaks_the_tables_unit():
    """The y ticks read as the trials table's accuracy column does (``96.39%``), not in
    another rounding or as a bare fraction."""
    import re

    from devicefit.sdk.fit.report import LEFT
    from devicefit.simulator.infra.units import format_percent

    svg = pareto_svg(TRIALS, FLASH_BUDGET, 1, "flash")
    # The y axis's ticks: right-aligned left of the plot.
    ticks = re.findall(rf'<text class="tick" x="{LEFT - 6}" y="[\d.]+" '
                       r'text-anchor="end">([^<]*)<', svg)
    assert len(ticks) == 3
    assert all(re.fullmatch(r"\d+\.\d\d%", t) for t in ticks), ticks
    assert format_percent(0.9639) == "96.39%"  # the table's figure for trial 1
