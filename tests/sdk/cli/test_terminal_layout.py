"""Terminal output at 80 and 200 columns, through a pty (rich asks the terminal; COLUMNS
answers): no line wider than the terminal, no word or figure split, colour where check has
it (issue 32)."""

from __future__ import annotations

import re

import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.console import make_console
from devicefit.simulator.report.views.columns import columns, text_width
from tests.terminal import assert_laid_out, in_a_terminal, plain

MCU = "stm32l4r5-cortex-m4"


@pytest.fixture(scope="module")
def project(tmp_path_factory, model_zoo):
    folder = tmp_path_factory.mktemp("layout")
    (folder / "devicefit.yaml").write_text(
        "models:\n"
        f"  - path: {model_zoo('chain_int8')}\n"
        f"    profiles: [{MCU}, esp32-s3]\n"
        f"  - path: {model_zoo('mobilenet_v1_96_int8')}\n"
        "    profiles: [nrf52840-cortex-m4]\n")
    return folder


def _at(columns: int, argv: list[str], monkeypatch, capsys) -> str:
    """The CLI's stdout at ``COLUMNS=columns`` (what the console and the folding read, as
    on a terminal of that width: the pty test below shows the terminal agrees)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    main(argv)
    return capsys.readouterr().out


def test_simulate_on_a_colour_terminal_is_in_colour_and_fits_it(model_zoo):
    argv = ["simulate", str(model_zoo("chain_int8")), "--profile", MCU, "--no-probe"]
    shown = in_a_terminal(argv, columns=80)
    assert "\x1b[" in shown  # check's console: colour on a terminal...
    assert "\x1b[" not in in_a_terminal(["--no-color", *argv], columns=80)  # ...unless asked
    assert_laid_out(plain(shown), plain(shown), 80)
    assert "Verdict: PASS" in plain(shown)


def test_simulate_layers_fit_80_and_200_columns(model_zoo, monkeypatch, capsys):
    argv = ["simulate", str(model_zoo("mobilenet_v2_96_int8")), "--profile", MCU, "--layers",
            "--no-probe"]
    narrow, wide = (_at(c, argv, monkeypatch, capsys) for c in (80, 200))
    assert_laid_out(narrow, wide, 80)
    assert_laid_out(wide, wide, 200)
    # 65 operators, each on its own two lines at 80 columns (one at 200), never a block.
    assert narrow.count("DEPTHWISE_CONV_2D") == wide.count("DEPTHWISE_CONV_2D") >= 17
    assert "\n    type " not in narrow


@pytest.mark.parametrize("columns", [80, 120])
def test_check_table_fits_and_keeps_headers_and_figures_whole(project, columns, monkeypatch,
                                                              capsys):
    argv = ["check", str(project / "devicefit.yaml"), "--no-probe"]
    # The closing line's elapsed time is each run's own ("in 0.1 s" / "in 0.2 s").
    narrow, wide = (re.sub(r" in [0-9.]+ s\b", " in T s", _at(c, argv, monkeypatch, capsys))
                    for c in (columns, 200))
    assert_laid_out(narrow, wide, columns)
    assert_laid_out(wide, wide, 200)
    assert "regression" in narrow and "3 passed" in narrow  # the header was cut to "re"


def test_diff_fits_80_columns(model_zoo, monkeypatch, capsys):
    argv = ["diff", str(model_zoo("chain_int8")), str(model_zoo("chain_int16x8")),
            "--profile", MCU]
    narrow, wide = (_at(c, argv, monkeypatch, capsys) for c in (80, 200))
    assert_laid_out(narrow, wide, 80)
    # The per-layer rows: at 200 one line each; at 80 two at most, aligned (not folded).
    layers = wide.split("Layers (paired")[1].splitlines()[2:]
    assert len(layers) == 8 and all(row.startswith("  changed") for row in layers)
    narrow_rows = narrow.split("Layers (paired")[1].splitlines()[2:]
    assert sum(row.startswith("  changed") for row in narrow_rows) == 8
    assert len(narrow_rows) <= 2 * 8 + 2


def test_a_long_console_line_folds_between_figures(monkeypatch, capsys):
    """convert's verdict line and check's problem lines are one console.print each."""
    monkeypatch.setenv("COLUMNS", "60")
    line = ("simulated on esp32-s3: flash 122.4 KiB of 4.0 MiB, latency 4.89 ms (likely "
            "2.88 ms–6.74 ms) of 500.00 ms → [bold green]PASS[/bold green]")
    make_console().print(line)
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "simulated on esp32-s3: flash 122.4 KiB of 4.0 MiB, latency",
        "    4.89 ms (likely 2.88 ms–6.74 ms) of 500.00 ms → PASS"]


def test_a_table_too_wide_takes_two_lines_per_row_then_one_block_per_row():
    rows = [["op", "type", "MACs", "estimated"], ["0", "DEPTHWISE_CONV_2D", "995,328", "43.47 ms"]]
    assert columns(rows, header=True) == ["  op  type               MACs     estimated",
                                          "  0   DEPTHWISE_CONV_2D  995,328  43.47 ms"]
    with text_width(40):  # the later columns under the first ones, aligned
        assert columns(rows, header=True) == ["  op  type               MACs",
                                              "      estimated",
                                              "  0   DEPTHWISE_CONV_2D  995,328",
                                              "      43.47 ms"]
    with text_width(16):  # not even that fits: psql's expanded display
        assert columns(rows, header=True) == ["  0", "    type       DEPTHWISE_CONV_2D",
                                              "    MACs       995,328",
                                              "    estimated  43.47 ms"]
