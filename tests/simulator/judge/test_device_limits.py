"""The device's own memory bounds the verdict, whatever the budgets say (issue 16)."""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.simulate import simulate
from tests.paths import ROOT
from tests.zoo import model_path


def _profile(tmp_path, body: str):
    path = tmp_path / "small-board.yaml"
    path.write_text("name: small-board\nextends: stm32l4r5-cortex-m4\n" + body)
    return load_profile(path)


def test_sram_smaller_than_the_budget_fails_the_arena(tmp_path):
    """A board with less SRAM than its parent's arena budget: the SRAM is the limit."""
    path = model_path("chain_int8")
    base = simulate(path, load_profile("stm32l4r5-cortex-m4"))
    arena = next(b for b in base.budgets if b.name == "arena")
    assert arena.ok and arena.limit_from == "budgets"
    sram = int(arena.value) - 16
    report = simulate(path, _profile(tmp_path, f"device:\n  sram: {sram}\n"))
    arena = next(b for b in report.budgets if b.name == "arena")
    assert (arena.ok, arena.limit, arena.limit_from) == (False, sram, "device.sram")
    assert report.verdict == "fail"
    assert any("budgets.arena" in n and "device.sram" in n for n in report.notes)


def test_flash_smaller_than_the_model_fails(tmp_path, capsys):
    path = model_path("chain_int8")
    flash = path.stat().st_size + 100 * 1024 - 1  # model + the runtime's code, one byte short
    _profile(tmp_path, f"device:\n  flash: {flash}\n")
    code = main(["simulate", str(path), "--profile", str(tmp_path / "small-board.yaml"),
                 "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"] == "fail"
    [flash_check] = [b for b in report["budgets"] if b["name"] == "flash"]
    assert flash_check["limit_from"] == "device.flash" and not flash_check["ok"]


def test_no_budget_still_judged_against_the_device(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text("name: bare\ndevice:\n  class: mcu\n  sram: 1KiB\nruntime:\n  name: tflm\n")
    report = simulate(model_path("chain_int8"), load_profile(path))
    [arena] = [b for b in report.budgets if b.name == "arena"]
    assert (arena.limit, arena.limit_from, arena.ok) == (1024, "device.sram", False)


@pytest.mark.parametrize("psram", [None, "8MiB"])
def test_psram_can_hold_the_arena(tmp_path, psram):
    body = "device:\n  sram: 1KiB\n" + (f"  psram: {psram}\n" if psram else "")
    report = simulate(model_path("chain_int8"), _profile(tmp_path, body))
    [arena] = [b for b in report.budgets if b.name == "arena"]
    # With PSRAM the budget (512 KiB) is the tighter limit again.
    assert arena.ok is bool(psram)
    assert arena.limit_from == ("budgets" if psram else "device.sram")


def test_validate_warns_about_a_budget_above_the_device(tmp_path, capsys):
    _profile(tmp_path, "device:\n  sram: 256KiB\n  flash: 1MiB\n")
    assert main(["profiles", "validate", str(tmp_path / "small-board.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning: profile 'small-board': budgets.arena (524,288 B) is larger than device.sram" in out
    assert "budgets.flash (1,572,864 B) is larger than device.flash" in out
    builtin = ROOT / "device_profiles" / "stm32l4r5-cortex-m4.yaml"
    assert main(["profiles", "validate", str(builtin)]) == 0
    assert "warning" not in capsys.readouterr().out
