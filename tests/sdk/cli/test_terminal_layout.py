"""Terminal output at 80, 120 and 200 columns, through a pty (rich asks the terminal its
size) or with COLUMNS: no line wider than the terminal, no word or figure split, colour where
check has it (issue 32); check's table in the form that fits, its failing figures red and
those at risk yellow in each, and profiles list one line per profile (issue 46)."""

from __future__ import annotations

import json
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
    # The two-line form names the line under each figure (not a word of the wide table).
    assert_laid_out(narrow, wide + "\nbudget", columns)
    assert_laid_out(wide, wide, 200)
    assert "regression" in wide and "3 passed" in narrow  # the header was cut to "re"
    assert all(head in narrow for head in ("model", "profile", "flash", "arena", "latency"))


# --------------------------------------------------------------------------- check's gate
_SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def gate(tmp_path_factory, model_zoo):
    """A project of three targets, one of each status: ``chain`` at risk on the L4R5 (its
    latency budget inside the estimate's band), ``chain`` over its arena budget and grown
    past its flash rule on the nRF52840 (a baseline of a smaller model), ``mnv1`` passing."""
    from devicefit.simulator.simulate import simulate

    folder = tmp_path_factory.mktemp("gate")
    chain = model_zoo("chain_int8")
    latency = next(b for b in simulate(chain, MCU, probe=False).budgets if b.name == "latency")
    assert latency.band is not None and latency.band[1] > latency.value
    inside = (latency.value + latency.band[1]) / 2  # met by the estimate, not by its band
    (folder / "devicefit.yaml").write_text(
        "baseline: baseline.json\n"
        "defaults: {regression: {flash: 1%}}\n"
        "models:\n"
        f"  - {{name: chain, path: {chain}, profiles: [\n"
        f"      {{name: {MCU}, budgets: {{latency: {inside:.3f}ms}}}},\n"
        "      {name: nrf52840-cortex-m4, budgets: {arena: 4KiB}}]}\n"
        f"  - {{name: mnv1, path: {model_zoo('mobilenet_v1_96_int8')}, profiles: [esp32-s3]}}\n")
    assert main(["check", str(folder / "devicefit.yaml"), "--no-probe", "--update-baseline"]) == 1
    baseline = folder / "baseline.json"
    data = json.loads(baseline.read_text())
    grown = data["models"]["chain"]["nrf52840-cortex-m4"]
    grown["flash_bytes"] = int(grown["flash_bytes"] * 0.95)
    baseline.write_text(json.dumps(data))
    return folder


def _gate_at(gate, columns: int, **env: str) -> str:
    return in_a_terminal(["check", "--no-probe"], columns=columns, cwd=str(gate), **env)


def _rows(shown: str) -> list[str]:
    """The table's lines: from the header to the first problem line."""
    lines = plain(shown).splitlines()
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("chain @"))]


def test_check_at_80_columns_is_a_table_of_two_lines_per_target_in_colour(gate):
    shown = _gate_at(gate, 80)
    lines = plain(shown).splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = _rows(shown)
    # Two header lines, then each target on two lines: status, model, each figure, the
    # regression; its profile under the model and each budget under its figure.
    body = rows[2:]
    assert [line.split()[0] for line in body[::2]] == ["AT", "FAIL", "pass"]
    assert [line.split()[0] for line in body[1::2]] == [MCU, "nrf52840-cortex-m4", "esp32-s3"]
    assert all(re.fullmatch(r"\s+\S+(\s+/ [\d.,]+ [A-Za-z]+){3}", line) for line in body[1::2])
    assert "(likely" not in "\n".join(rows)
    # The failing figures red, the one at risk yellow, the statuses in bold colours.
    assert "\x1b[1;33mAT RISK\x1b[0m" in shown and "\x1b[1;31mFAIL\x1b[0m" in shown
    assert re.search(r"\x1b\[33m[\d.]+ ms\x1b\[0m", shown)  # the estimate at risk
    assert re.search(r"\x1b\[33m/ [\d.]+ ms\x1b\[0m", shown)  # and its budget
    assert re.search(r"\x1b\[31m[\d.,]+ (B|KiB)\x1b\[0m", shown)  # the arena over
    assert re.search(r"\x1b\[31mflash \+[\d.]+%\x1b\[0m", shown)  # the regression
    # The same table without any escape sequence under NO_COLOR.
    uncoloured = _gate_at(gate, 80, NO_COLOR="1")
    assert _SGR.search(uncoloured) is None
    assert _rows(uncoloured) == rows


def test_check_at_120_columns_is_one_line_per_target_in_colour(gate):
    shown = _gate_at(gate, 120)
    assert max(len(line) for line in plain(shown).splitlines()) <= 120
    rows = _rows(shown)
    assert rows[0].split() == ["model", "profile", "flash", "arena", "latency", "regression"]
    for row, status, profile in zip(rows[-3:], ("AT RISK", "FAIL", "pass"),
                                    (MCU, "nrf52840-cortex-m4", "esp32-s3"), strict=True):
        assert row.startswith(status) and profile in row and row.count(" / ") == 3, row
    assert re.search(r"\x1b\[33m[\d.]+ ms / [\d.]+ ms\x1b\[0m", shown)
    assert re.search(r"\x1b\[31m[\d.,]+ (B|KiB) / [\d.,]+ (B|KiB)\x1b\[0m", shown)
    assert re.search(r"\x1b\[31mflash \+[\d.]+%\x1b\[0m", shown)


def test_check_on_a_wide_terminal_keeps_every_band_and_says_at_risk(gate):
    shown = _gate_at(gate, 200)
    rows = _rows(shown)
    assert "┃" in rows[0] and len(rows) == 2 + 3  # header, rule, a line per target
    assert all("(likely" in row for row in rows[2:])
    assert re.search(r"\x1b\[33m[\d.]+ ms \(likely [^)]*\) / [\d.]+ ms AT RISK\x1b\[0m", shown)


# --------------------------------------------------------------------------- profiles list
def test_profiles_list_is_one_line_per_profile_at_80_columns():
    from devicefit.simulator.profiles import ProfileStore

    names = ProfileStore().names()
    narrow = plain(in_a_terminal(["profiles", "list"], columns=80)).strip().splitlines()
    assert max(len(line) for line in narrow) <= 80
    assert [line.split()[0] for line in narrow[3:]] == names  # title, header, rule
    assert "devicefit profiles show NAME" in narrow[0]  # where the descriptions are
    wide = plain(in_a_terminal(["profiles", "list"], columns=200)).strip().splitlines()
    assert len(wide) == len(narrow) and "description" in wide[1]
    assert "Mid-range Android phone" in wide[3]


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


def test_check_folds_a_long_name_after_a_hyphen_not_into_blocks(tmp_path, model_zoo):
    (tmp_path / "devicefit.yaml").write_text(
        "defaults: {regression: {flash: 1%}}\n"  # a regression column: 2 + 11 cells more
        "models:\n"
        "  - name: person-detection-mobilenet-v1-96\n"
        f"    path: {model_zoo('mobilenet_v1_96_int8')}\n"
        "    profiles: [nrf52840-cortex-m4, esp32-s3]\n")
    shown = plain(in_a_terminal(["check", "--no-probe"], columns=80, cwd=str(tmp_path)))
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 80
    # Each target: the name folded after "detection-", the profile under it, the figures
    # and budgets beside them; the table's header once, no block per target.
    assert [line.split()[:2] for line in lines if "mobilenet-v1-96" in line] == [
        ["mobilenet-v1-96", "/"]] * 2
    assert [line.split()[:2] for line in lines if line.startswith("pass")] == [
        ["pass", "person-detection-"]] * 2
    assert shown.count("model") == 1 and "esp32-s3" in lines[-4].split()
