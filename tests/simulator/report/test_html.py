"""The HTML report: looked at in a real headless Chromium, byte-stable, small enough."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from devicefit.simulator.report.views.html import Section, render_html
from devicefit.simulator.report.views.png import render as render_png
from devicefit.simulator.simulate import simulate
from tests.browser import render
from tests.paths import TESTS
from tests.zoo import model_path

ARTIFACTS = TESTS / "artifacts" / "html"
GOLDEN = TESTS / "golden" / "sine_stm32l4r5.html"


def _sine(tmp_path: Path) -> Path:
    import tflite_micro

    src = Path(tflite_micro.__file__).parent / "python" / "tflite_micro" / "sine_float.tflite"
    return Path(shutil.copy(src, tmp_path / "sine_float.tflite"))


def test_real_model_page_renders_with_every_planned_tensor(tmp_path):
    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    page = ARTIFACTS / "residual_int8.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_html("residual_int8 on stm32l4r5", [Section("residual", report)]))
    shot = ARTIFACTS / "residual_int8.png"
    shown = render(page, screenshot=shot)
    assert shown.console == [], shown.console
    assert shot.stat().st_size > 10_000  # a real picture, kept as a test artifact
    assert len(re.findall(r'<rect id="peak-step"', shown.dom)) == 1
    drawn = re.findall(r'<rect class="buffer" data-tensor="(-?\d+)"', shown.dom)
    assert sorted(map(int, drawn)) == sorted(b.tensor for b in report.memory.plan)
    for b in report.memory.plan:
        assert f"{b.size_bytes} bytes at offset {b.offset}" in shown.dom  # hover text


def test_report_is_byte_identical_for_the_same_input(tmp_path, monkeypatch):
    """Golden file; regenerate with DEVICEFIT_UPDATE_GOLDEN=1 after a deliberate change."""
    sine = _sine(tmp_path)
    monkeypatch.chdir(tmp_path)
    pages = [render_html("sine", [Section("sine on stm32l4r5",
                                          simulate(sine.name, "stm32l4r5-cortex-m4"))])
             for _ in range(2)]
    assert pages[0] == pages[1]
    if os.environ.get("DEVICEFIT_UPDATE_GOLDEN"):
        GOLDEN.write_text(pages[0])
    assert pages[0] == GOLDEN.read_text()


def test_200_op_model_page_stays_under_2_mb():
    report = simulate(model_path("deep_mlp_int8"), "android-arm64-cpu")
    assert report.model.operators >= 200
    page = render_html("deep", [Section("deep_mlp_int8", report)])
    assert len(page.encode()) < 2 * 1024 * 1024
    assert page.count('class="buffer"') == len(report.memory.plan)


def test_plot_writes_a_png(tmp_path):
    report = simulate(model_path("chain_int8"), "nrf52840-cortex-m4")
    assert render_png(report)[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_to_overwrite_its_input(tmp_path):
    from devicefit.simulator.errors import UsageError
    from devicefit.simulator.infra.fileio import write_atomic

    sine = _sine(tmp_path)
    report = simulate(sine, "stm32l4r5-cortex-m4")
    with pytest.raises(UsageError, match="refusing to overwrite"):
        write_atomic(sine, render_png(report), inputs=(str(sine),))


def test_simulate_cli_writes_html_and_png_but_never_over_its_input(tmp_path, capsys):
    from devicefit.sdk.cli import main

    sine = _sine(tmp_path)
    page, png = tmp_path / "r.html", tmp_path / "r.png"
    assert main(["simulate", str(sine), "--profile", "esp32-s3", "--html", str(page),
                 "--plot", str(png)]) == 0
    assert 'id="peak-step"' in page.read_text() and png.read_bytes()[:4] == b"\x89PNG"
    before = sine.read_bytes()
    assert main(["simulate", str(sine), "--profile", "esp32-s3", "--html", str(sine)]) == 2
    assert "would replace an input, the model" in capsys.readouterr().err
    assert sine.read_bytes() == before


def test_missing_chromium_fails_with_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="Chromium is missing.*apt-get install"):
        render(tmp_path / "page.html")


def test_layer_table_sorts_and_filters_in_chromium(tmp_path):
    """The inline script runs with no network: sorted by live bytes (``?sort=``) the first
    row is the op the CLI names as the costliest; a filter hides the other op types."""
    from devicefit.simulator.report.layers import costliest

    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    page = tmp_path / "layers.html"
    page.write_text(render_html("layers", [Section("residual", report)]))
    shown = render(page, query="sort=live_bytes&filter=conv_2d")
    assert shown.console == [], shown.console
    assert 'data-ready="1"' in shown.dom  # the script ran
    order = re.findall(r'<tr data-op="(\d+)"( hidden="")?', shown.dom)
    top = costliest(report.layers, "live_bytes")
    assert order[0] == (str(top.index), "")
    assert 'aria-sort="descending"' in shown.dom
    visible = {int(i) for i, hidden in order if not hidden}
    assert visible == {r.index for r in report.layers if r.op == "CONV_2D"}
    assert f"most live bytes: op {top.index} {top.op}" in shown.dom
    slow = costliest(report.layers, "estimated_ms")
    by_time = re.findall(r'<tr data-op="(\d+)"', render(page, query="sort=estimated_ms").dom)
    assert by_time[0] == str(slow.index)


def test_diff_page_shows_what_changed(tmp_path):
    """``devicefit diff --html`` in Chromium: the figures, the layer pairing and the changed
    layers are in the rendered page, with the same numbers as the JSON."""
    from devicefit.simulator.infra.units import format_size
    from devicefit.simulator.report.diff import Side, diff_reports
    from devicefit.simulator.report.views.diffview import render_html as render_diff

    a, b = (simulate(model_path(n), "stm32l4r5-cortex-m4") for n in ("chain_int8",
                                                                     "chain_float32"))
    diff = diff_reports(Side("int8", a), Side("float32", b), "models")
    page = tmp_path / "diff.html"
    page.write_text(render_diff(diff))
    shown = render(page)
    assert shown.console == [], shown.console
    text = re.sub(r"<[^>]+>", " ", shown.dom)
    assert "Layers (paired by index): 8 changed" in text
    assert re.search(rf"arena\s+{re.escape(format_size(a.memory.arena_bytes))}\s+"
                     rf"{re.escape(format_size(b.memory.arena_bytes))}", text)
    assert len(re.findall(r'<tr class="changed">', shown.dom)) == 8


def _png_height(data: bytes) -> int:
    return int.from_bytes(data[20:24], "big")  # IHDR: width at 16, height at 20


@pytest.mark.slow  # a real conversion of the digits CNN, as in test_convert_cli
def test_convert_pictures_agree_with_the_conversion(tmp_path, capsys):
    """``convert --html --plot``: the page leads with the size ratio, accuracy and SQNR the
    conversion measured (the same as ``--report``), names the float32 model without its
    deleted temp path, draws before and after on one y scale; the PNG has both."""
    import json

    from devicefit.sdk.cli import main
    from examples.digits import cached_cnn, load_digits
    from tests.paths import TESTS

    data = {k: str(v) for k, v in load_digits().save_npz(tmp_path).items()}
    out, page, plot, rep = (tmp_path / n for n in ("m.tflite", "c.html", "c.png", "r.json"))
    assert main(["convert", str(cached_cnn(TESTS / "artifacts" / "convert")), "--profile",
                 "stm32l4r5-cortex-m4", "--calibration", data["train"], "--eval", data["test"],
                 "-o", str(out), "--html", str(page), "--plot", str(plot),
                 "--report", str(rep)]) == 0
    capsys.readouterr()
    report = json.loads(rep.read_text())
    shown = render(page)
    assert shown.console == [], shown.console
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", shown.dom))
    acc = report["accuracy"]
    assert f"size ratio (after / before) {report['size_ratio']:.2f}x" in text
    assert f"accuracy after {100 * acc['converted_accuracy']:.2f}%" in text
    assert f"SQNR {acc['sqnr_db']:.1f} dB" in text
    assert "float32 .tflite of" in text and "/float32.tflite" not in shown.dom
    # One y scale: both timelines have the same tick labels.
    ticks = [re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg)
             for svg in re.findall(r"<svg[^>]*class=\"timeline\".*?</svg>", shown.dom, re.S)]
    assert len(ticks) == 2 and ticks[0] == ticks[1]
    # The PNG draws before and after: two stacked plots of the single plot's height.
    single = render_png(simulate(out, "stm32l4r5-cortex-m4"))
    assert _png_height(plot.read_bytes()) == 2 * _png_height(single)


def test_pictures_number_operators_as_the_cli_does(tmp_path):
    """The timeline's peak, its caption, the colour legend and the per-op chart's axes in
    Chromium name the same operator and units as ``devicefit simulate``'s text."""
    from devicefit.simulator.report.views.text import render_text

    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    cli_top = render_text(report).split("Operators with the most live bytes")[1] \
        .splitlines()[2].split()
    op, kind = cli_top[0], cli_top[1]
    page = tmp_path / "p.html"
    page.write_text(render_html("p", [Section("residual", report)]))
    shown = render(page)
    assert re.search(rf'<rect id="peak-step" data-op="{op}"', shown.dom)
    caption = re.search(r'<text id="timeline-caption"[^>]*>([^<]+)<', shown.dom).group(1)
    assert f"peak at op {op} {kind}" in caption
    biggest = sorted(report.memory.plan, key=lambda b: (-b.size_bytes, b.tensor, b.name))[:16]
    legend = re.findall(r'<li data-tensor="(-?\d+)" title="[^"]*"><span class="swatch" '
                        r'style="background:(#[0-9a-f]{6})"', shown.dom)
    assert [int(t) for t, _ in legend] == [b.tensor for b in biggest]
    for tensor, colour in legend:  # the legend's colour is the one drawn for the tensor
        assert re.search(rf'data-tensor="{tensor}" [^>]*fill="{colour}"', shown.dom)
    per_op = re.search(r'<svg[^>]*class="per-op".*?</svg>', shown.dom, re.S).group(0)
    assert "estimated device time" in per_op
    assert re.findall(r'<text class="op-label"[^>]*>(\d+)<', per_op) == \
        [str(r.index) for r in report.layers]
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)<', per_op)
    assert ticks[0] == "0 ms" and all(t.endswith(" ms") for t in ticks)  # one unit


def test_check_page_shows_a_regression_failure_as_a_failure(tmp_path, capsys):
    """A model within its budgets whose arena grew past the regression rule: the project
    table, the link list and the section's badge all say FAIL, and the section says why."""
    import json

    from devicefit.sdk.cli import main

    shutil.copy(model_path("chain_int8"), tmp_path / "chain_int8.tflite")
    project = tmp_path / "devicefit.yaml"
    project.write_text("baseline: baseline.json\ndefaults:\n  regression: {arena: 5%}\n"
                       "models:\n  - path: chain_int8.tflite\n    profiles: "
                       "[stm32l4r5-cortex-m4, nrf52840-cortex-m4]\n")
    assert main(["check", str(project), "--update-baseline"]) == 0
    baseline = tmp_path / "baseline.json"
    data = json.loads(baseline.read_text())
    entry = data["models"]["chain_int8"]["stm32l4r5-cortex-m4"]
    entry["arena_bytes"] = int(entry["arena_bytes"] * 0.8)
    baseline.write_text(json.dumps(data))
    page = tmp_path / "check.html"
    assert main(["check", str(project), "--html", str(page)]) == 1
    capsys.readouterr()
    shown = render(page)
    links = {name: status for status, name in re.findall(
        r'<li class="([a-z-]+)"><a href="#section-\d+">([^<]+)</a>', shown.dom)}
    assert links == {"chain_int8 on stm32l4r5-cortex-m4": "fail",
                     "chain_int8 on nrf52840-cortex-m4": "pass"}
    badges = re.findall(r'<h2>([^<]+) <span class="verdict ([a-z-]+)">([A-Z-]+)</span>',
                        shown.dom)
    assert ("chain_int8 on stm32l4r5-cortex-m4", "fail", "FAIL") in badges
    assert ("chain_int8 on nrf52840-cortex-m4", "pass", "PASS") in badges
    problems = re.search(r'<ul class="problems">(.*?)</ul>', shown.dom).group(1)
    assert "arena grew from" in problems


@pytest.mark.parametrize(("profile", "extra", "absent"),
                         [("stm32l4r5-cortex-m4", "in", "out"),
                          ("android-arm64-cpu", "out", "in")])
def test_every_step_of_the_timeline_is_labelled_and_the_caption_says_which(profile, extra,
                                                                          absent):
    """TFLM's step 0 holds the inputs; LiteRT keeps the outputs live a step past the last
    operator: each chart labels every bar (9 operators, 10 bars) and its caption names the
    step it has, never the one it lacks."""
    report = simulate(model_path("residual_int8"), profile)
    timeline = re.search(r'<svg[^>]*aria-label="memory timeline".*?</svg>',
                         render_html("r", [Section("r", report)]), re.S).group(0)
    steps = {int(s) for s in re.findall(r'<rect class="live" data-step="(\d+)"', timeline)}
    labels = re.findall(r'<text class="op-label"[^>]*>([^<]+)</text>', timeline)
    assert len(labels) == len(steps) == report.model.operators + 1
    assert labels.count(extra) == 1 and absent not in labels
    words = {"in": "in: the inputs", "out": "out: the outputs after the last"}
    caption = re.search(r'<text id="timeline-caption"[^>]*>([^<]+)<', timeline).group(1)
    assert words[extra] in caption and words[absent] not in caption


def test_axes_tick_at_round_values_in_one_unit():
    """Ticks at 0, 10, 20 KiB, not at quarters of the peak (1,696 / 3,392 B), and every tick
    of an axis in the same unit."""
    from devicefit.simulator.report.views.html import count_ticks, size_ticks, time_ticks

    assert [t for _, t in size_ticks(29_952)] == ["0 KiB", "10 KiB", "20 KiB"]
    assert [t for _, t in size_ticks(6_784)] == ["0 KiB", "2 KiB", "4 KiB", "6 KiB"]
    assert [t for _, t in time_ticks(0.00061)] == ["0 us", "0.2 us", "0.4 us", "0.6 us"]
    assert [t for _, t in time_ticks(209.3)] == ["0 ms", "100 ms", "200 ms"]
    assert [t for _, t in count_ticks(1_327_104)] == ["0 M", "0.5 M", "1.0 M"]
    page = render_html("r", [Section("r", simulate(model_path("residual_int8"),
                                                     "stm32l4r5-cortex-m4"))])
    for svg in re.findall(r"<svg.*?</svg>", page, re.S):
        ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg)
        assert len({t.split()[-1] for t in ticks if " " in t}) <= 1, ticks
