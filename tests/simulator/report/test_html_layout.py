"""Every page devicefit writes, laid out in a 1400 px window of headless Chromium (issue 46):
no chart label over another label, a bar, a mark or a line; no table cell that splits a
figure from its unit or breaks a profile name; the pictures and tables using the window's
width; a PASS's peak outline under its budget line; the diff page drawing what it says can
be hovered. One Chromium start per page: the check page holds a section for each target
(TFLM passing and failing a budget drawn on scale, LiteRT, the Edge TPU with a model it
partitions and one compiled for it, the Ethos-U)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from devicefit.sdk.check.gate import run_check
from devicefit.sdk.check.project import load_project
from devicefit.sdk.check.views import html as check_html
from devicefit.simulator.report.diff import Side, diff_reports
from devicefit.simulator.report.views.diffview import render_html as diff_html
from devicefit.simulator.simulate import simulate
from tests.browser import LAYOUT, WIDE, layout_problems, measure
from tests.edgetpu_models import compiled_model
from tests.zoo import model_path

PROJECT = """\
models:
  - name: fits
    path: mobilenet_v1.tflite
    profiles: [{name: nrf52840-cortex-m4, budgets: {arena: 96KiB}}]
  - name: over
    path: mobilenet_v1.tflite
    profiles: [{name: nrf52840-cortex-m4, budgets: {arena: 64KiB}}]
  - name: mobilenet-v2
    path: mobilenet_v2.tflite
    profiles: [android-arm64-cpu]
  - name: leaky
    path: leaky_mid.tflite
    profiles: [coral-edgetpu]
  - name: compiled
    path: compiled_edgetpu.tflite
    profiles: [coral-edgetpu]
  - name: residual
    path: residual.tflite
    profiles: [ethos-u55-128]
"""

#: Each timeline's peak outline and arena budget line (their tops), by section heading.
PEAKS = """Object.assign(LAYOUT, {peaks: Array.from(document.querySelectorAll('section[id]'))
  .filter(s => s.querySelector('svg.timeline line.arena-budget')).map(s => ({
    heading: s.querySelector('h2').textContent,
    verdict: s.querySelector('h2 .verdict').textContent,
    peak: s.querySelector('svg.timeline #peak-step').getBoundingClientRect().top,
    budget: s.querySelector('svg.timeline line.arena-budget').getBoundingClientRect().top}))})"""

#: How wide the page is against a narrow window (a table of no-wrap cells could push it).
NARROW = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"


@pytest.fixture(scope="module")
def check_page(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("check")
    for name, zoo in (("mobilenet_v1", "mobilenet_v1_96_int8"), ("mobilenet_v2",
                      "mobilenet_v2_96_int8"), ("leaky_mid", "leaky_mid_int8"),
                      ("residual", "residual_int8")):
        shutil.copy(model_path(zoo), folder / f"{name}.tflite")
    (folder / "compiled_edgetpu.tflite").write_bytes(compiled_model())
    (folder / "devicefit.yaml").write_text(PROJECT)
    result = run_check(load_project(folder / "devicefit.yaml"), probe=False)
    shown, geometry = measure(folder / "check.html", check_html(result),
                              PEAKS.replace("LAYOUT", LAYOUT), size=WIDE)
    assert shown.console == [], shown.console
    assert isinstance(geometry, dict)
    # The same page in a narrow window: the wide tables scroll in their own box.
    _, geometry["narrow"] = measure(folder / "narrow.html", check_html(result),
                                    NARROW, size="820,2400")
    return geometry


def test_the_check_page_and_every_targets_section_lay_out_cleanly(check_page):
    assert check_page["figures"] >= 6 * 3  # timeline, layout, per-op chart per target
    assert layout_problems(check_page) == []


def test_in_a_narrow_window_the_page_does_not_scroll_sideways(check_page):
    scroll, client = check_page["narrow"]
    assert scroll <= client


def test_a_pass_draws_its_peak_under_its_budget_line(check_page):
    """Both mobilenet sections draw the budget on scale; the passing one's dotted peak
    outline stays under the line, the failing one's rises over it."""
    peaks = {p["heading"].split(" on ")[0]: p for p in check_page["peaks"]}
    assert peaks["fits"]["verdict"] == "PASS" and peaks["over"]["verdict"] == "FAIL"
    assert peaks["fits"]["peak"] > peaks["fits"]["budget"]
    assert peaks["over"]["peak"] < peaks["over"]["budget"]


def test_the_diff_page_draws_both_models_and_lays_out_cleanly(tmp_path):
    """A chart of both models' memory per operator step, with shapes to hover, so its
    hint is true; labels, cells and width as on every page."""
    profile = "stm32h743-cortex-m7"
    a = simulate(model_path("mobilenet_v1_96_int8"), profile, probe=False)
    b = simulate(model_path("mobilenet_v2_96_int8"), profile, probe=False)
    page = diff_html(diff_reports(Side("mobilenet_v1", a), Side("mobilenet_v2", b), "models"))
    assert 'class="diff-memory"' in page and page.count('class="side"') == 2
    assert "<title>step 0: A " in page and "Hover a shape" in page
    shown, geometry = measure(tmp_path / "diff.html", page, LAYOUT, size=WIDE)
    assert shown.console == [], shown.console
    assert layout_problems(geometry) == []


def test_a_page_without_shapes_does_not_say_hover(tmp_path: Path):
    from devicefit.simulator.report.views.html import render_page

    assert "Hover" not in render_page("t", "<p>no picture</p>")


def test_a_bands_name_moves_off_the_lines_crossing_it_or_is_left_out():
    """The tail's name sits in its band as near the middle as the lines crossing it (the
    budget, the judged arena) allow: an 11 px text covers its baseline - 11 to + 5 here."""
    from devicefit.simulator.report.views.html import band_label

    def baseline(drawn: list[str]) -> float:
        [text] = drawn
        return float(text.split(' y="')[1].split('"')[0])

    assert baseline(band_label("tail", 100, 160, [])) == 134  # the middle, + 4
    moved = baseline(band_label("tail", 100, 160, [130]))
    assert not moved - 11 <= 130 <= moved + 5 and 111 <= moved <= 156
    assert band_label("tail", 100, 120, [110]) == []


def test_the_gpu_section_after_a_run_shows_and_lays_out_cleanly(tmp_path):
    """simulate --run on a phone GPU profile: the latency split, the fp16 table (a row per
    way the outputs were computed), the delegate's answer and each disagreement, and the
    partition one row per operator with where it runs, why, and the layer it comes from."""
    from devicefit.simulator.report.views.html import render as page_of
    from devicefit.simulator.targets.gpu.delegate import ICDS
    from devicefit.simulator.types import MeasureOptions
    from tests.tflite_builder import topk_model

    if not Path(str(ICDS["swiftshader"])).is_file():
        pytest.skip("Chromium's SwiftShader Vulkan driver is not installed")
    model = tmp_path / "topk.tflite"
    model.write_bytes(topk_model())
    report = simulate(model, "android-gpu-adreno", run=MeasureOptions(runs=1), probe=False)
    page = page_of(report)
    gpu = page.split('<section class="gpu-partition">')[1].split("</section>")[0]
    assert "<h4>Latency split (estimated, per inference)</h4>" in gpu
    table = gpu.split("<th>computed as</th>")[1].split("</table>")[0]
    assert table.count("<tr ") == 2 and "CPU fp16 tensors (XNNPACK FORCE_FP16)" in table
    # Asked, or read from the cache another test's ask of the same model left.
    assert re.search(r"<li>delegate     asked \((measured,|cached answer of a run that took)",
                     gpu), gpu
    assert "<li>disagrees    TOPK_V2: predicted on the CPU" in gpu
    assert ('<tr class="cpu" style="background:#fbe3d6"><td>1</td><td>TOPK_V2</td><td>CPU</td>'
            "<td>-</td><td>Operation is not supported.</td>") in gpu
    assert "<td>values</td></tr>" in gpu  # TOPK_V2's first output: its layer
    shown, geometry = measure(tmp_path / "gpu.html", page, LAYOUT, size=WIDE)
    assert shown.console == [], shown.console
    assert layout_problems(geometry) == []
