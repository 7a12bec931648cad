"""The page's verdict badge says what the text says: a pass with a budget the report has no
figure for is no green PASS (the Mali GPU profile has no latency estimate)."""

from __future__ import annotations

import re

from devicefit.simulator.report.views import render
from devicefit.simulator.simulate import simulate
from tests.zoo import model_path


def test_a_pass_with_an_unchecked_budget_is_not_a_green_badge():
    report = simulate(model_path("chain_int8"), "android-gpu-mali")
    assert report.ok and "latency" in report.unchecked_budgets
    page = str(render("html", report))
    badge = re.search(r'<span class="verdict ([\w-]+)">(\w+)</span>'
                      r'<span class="causes">([^<]*)</span>', page)
    assert badge is not None
    assert badge.groups() == ("at-risk", "PASS",
                              "for the checked budgets; not checked: latency")
    assert "NOT CHECKED" in str(render("text", report))


def test_a_clean_pass_stays_green():
    page = str(render("html", simulate(model_path("chain_int8"), "stm32l4r5-cortex-m4")))
    assert '<span class="verdict pass">PASS</span></h2>' in page
