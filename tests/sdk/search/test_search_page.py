"""The search page's Pareto chart (matplotlib's SVG) in headless Chromium (issue 46): the
legend beside the plot, not over the budget's line, the chosen trial's ring uncut, the
trial numbers clear of the line. The trial records are written here, not trained for (a
real search trains for minutes: ``test_search_train.py``, slow); their latencies sit
about the profile's 1 s budget so a number and the legend's old corner both meet it."""

from __future__ import annotations

from devicefit.sdk.search.architectures import Searched
from devicefit.sdk.search.candidate import ArchCandidate
from devicefit.sdk.search.families import Params
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.report import render_search_html
from devicefit.sdk.search.screen import ScreenRun
from devicefit.sdk.search.trials import ArchPayload, ArchTrial
from devicefit.sdk.study import TrialStage
from devicefit.sdk.study.storage import SearchSettings
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.types import Status
from tests.browser import LAYOUT, WIDE, layout_problems, measure


def _trial(number: int, width: float, ms: float, accuracy: float) -> ArchTrial:
    return ArchTrial(number, ArchCandidate("mbv2", Params((32, 32, 1), width=width)),
                     TrialStage.TRAINED, Status.PASS if ms <= 1000 else Status.FAIL,
                     flash_bytes=100_000, arena_bytes=40_000, latency_ms=ms,
                     accuracy=accuracy, payload=ArchPayload())


#: Latency budget of stm32l4r5-cortex-m4: 1 s. Trial 2, chosen, runs just under it and
#: has the highest accuracy (the top of the plot, where a ring could be cut).
TRIALS = [_trial(0, 0.25, 420.0, 0.91), _trial(1, 0.5, 800.0, 0.95),
          _trial(2, 0.75, 980.0, 0.99), _trial(3, 1.0, 1350.0, 0.975),
          _trial(4, 1.25, 1700.0, 0.985)]

#: The chosen ring's box and the axes' (matplotlib clips a mark to the axes unless told).
RING = """Object.assign(LAYOUT, {ring: (() => {
  const svg = document.querySelector('svg'), b = e => e.getBoundingClientRect();
  const clipped = Array.from(svg.querySelectorAll('g#axes_1 > g[id^=PathCollection]'))
    .filter(g => g.querySelector('[clip-path]') || g.getAttribute('clip-path'));
  return {collections: svg.querySelectorAll('g#axes_1 > g[id^=PathCollection]').length,
          clipped: clipped.length};
})()})"""


def test_the_search_chart_keeps_its_legend_and_labels_off_the_plot_and_line(tmp_path):
    found = Searched(load_profile("stm32l4r5-cortex-m4"), Objective.LATENCY, SearchSettings(),
                     5, ScreenRun((), 0.0, 0.0), TRIALS, chosen=2)
    page = render_search_html(found)
    shown, geometry = measure(tmp_path / "search.html", page, RING.replace("LAYOUT", LAYOUT),
                              size=WIDE)
    assert shown.console == [], shown.console
    assert isinstance(geometry, dict)
    assert layout_problems(geometry) == []
    # Three collections (passing, missing, the ring): only the ring is drawn unclipped.
    assert geometry["ring"] == {"collections": 3, "clipped": 2}
