"""The HTML report: looked at in a real headless Chromium, byte-stable, small enough."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from simulator.html import Section, render_html
from simulator.plot import plot_timeline
from simulator.simulate import simulate
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
    out = plot_timeline(report, tmp_path / "timeline.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_refuses_to_overwrite_its_input(tmp_path):
    from simulator.errors import UsageError

    sine = _sine(tmp_path)
    report = simulate(sine, "stm32l4r5-cortex-m4")
    with pytest.raises(UsageError, match="refusing to overwrite"):
        plot_timeline(report, sine, inputs=(str(sine),))


def test_simulate_cli_writes_html_and_png_but_never_over_its_input(tmp_path, capsys):
    from sdk.cli import main

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
