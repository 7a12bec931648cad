"""Device profiles: every built-in loads, inheritance works, each kind of error is precise."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.errors import ProfileError
from devicefit.simulator.estimate.cores import find_core
from devicefit.simulator.profiles import ProfileStore, builtin_profiles_dir, load_profile
from tests.paths import ROOT

BUILTINS = sorted(p.stem for p in builtin_profiles_dir().glob("*.yaml"))


def test_the_builtin_set_is_the_documented_one():
    assert set(BUILTINS) >= {
        "android-arm64-cpu", "coral-edgetpu", "stm32l4r5-cortex-m4", "stm32h743-cortex-m7",
        "nrf52840-cortex-m4", "esp32-s3",
    }


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_profile_loads(name):
    profile = load_profile(name)
    assert profile.name == name
    assert profile.device.kind in ("mobile-cpu", "mobile-gpu", "edgetpu", "mcu")
    if not profile.abstract:
        assert profile.budgets.arena_bytes and profile.budgets.flash_bytes
        # A latency estimate needs a registered core or the profile's own table.
        assert profile.cost_model.cycles_per_mac or find_core(profile.device.cpu), name


def test_inheritance_merges_deeply_and_child_wins():
    p = load_profile("stm32l4r5-cortex-m4")
    assert p.extends == ("tflm-mcu-base",)
    assert p.runtime.name == "tflm" and p.runtime.kernels == "cmsis-nn"  # from the base
    assert p.runtime.pointer_bytes == 4
    assert p.device.clock_hz == 120e6 and p.device.sram_bytes == 640 * 1024  # own values
    assert p.budgets.arena_bytes == 512 * 1024
    esp = load_profile("esp32-s3")
    assert esp.runtime.kernels == "esp-nn" and esp.runtime.name == "tflm"  # override + inherit
    assert p.firmware.reserve_bytes == esp.firmware.reserve_bytes == 16 * 1024  # the base's
    assert load_profile("android-arm64-cpu").firmware.reserve_bytes is None


def test_abstract_profiles_are_hidden_from_the_list():
    store = ProfileStore()
    assert "tflm-mcu-base" not in store.names()
    assert "tflm-mcu-base" in store.names(include_abstract=True)


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def test_extends_chain_across_user_folders(tmp_path):
    _write(tmp_path, "board-a", "extends: stm32l4r5-cortex-m4\nbudgets:\n  arena: 100KiB\n")
    _write(tmp_path, "board-b", "extends: board-a\ndevice:\n  clock: 80MHz\n")
    p = load_profile("board-b", [tmp_path])
    assert p.extends == ("board-a", "stm32l4r5-cortex-m4", "tflm-mcu-base")
    assert p.budgets.arena_bytes == 100 * 1024 and p.device.clock_hz == 80e6
    assert p.budgets.flash_bytes == 1536 * 1024


def test_extends_loop_is_detected(tmp_path):
    _write(tmp_path, "loop-a", "extends: loop-b\ndevice: {class: mcu}\nruntime: {name: tflm}\n")
    _write(tmp_path, "loop-b", "extends: loop-a\n")
    with pytest.raises(ProfileError, match="loop: loop-a -> loop-b -> loop-a"):
        load_profile("loop-a", [tmp_path])


def test_env_folder_is_searched(tmp_path, monkeypatch):
    _write(tmp_path, "from-env", "extends: esp32-s3\n")
    monkeypatch.setenv("DEVICEFIT_PROFILES", str(tmp_path))
    assert load_profile("from-env").runtime.kernels == "esp-nn"


BAD_PROFILES = [
    # (id, yaml text, fragments the one-line message must contain)
    ("unknown-key", "extends: esp32-s3\nbudgets:\n  arenna: 1KiB\n",
     ["bad.yaml:3", "budgets.arenna", "did you mean 'arena'"]),
    ("bad-unit", "extends: esp32-s3\nbudgets:\n  flash: 12 parsecs\n",
     ["bad.yaml:3", "budgets.flash", "12 parsecs", "KiB"]),
    ("wrong-type", "extends: esp32-s3\nruntime:\n  threads: four\n",
     ["bad.yaml:3", "runtime.threads", "'four'", "integer"]),
    ("bad-enum", "extends: esp32-s3\nruntime:\n  name: tensorrt\n",
     ["bad.yaml:3", "runtime.name", "edgetpu, ethos-u, gpu, litert, tflm"]),
    ("yaml-syntax", "device:\n  class: mcu\n   cpu: [unclosed\n",
     ["bad.yaml:3", "YAML syntax error"]),
    ("missing-required", "device:\n  class: mcu\n",
     ["bad.yaml", "missing required key 'runtime.name'"]),
    ("unknown-parent", "extends: esp32s3\n",
     ["bad.yaml:1", "unknown profile 'esp32s3'", "did you mean 'esp32-s3'"]),
    ("not-a-mapping", "- just\n- a list\n", ["bad.yaml", "must be a mapping"]),
    # Read as 120 Hz, a bare clock made the estimate a million times too slow (18,270 s).
    ("clock-without-unit", "extends: esp32-s3\ndevice: {clock: 120}\n",
     ["bad.yaml:2", "device.clock", "needs its unit, such as 120MHz"]),
    ("clock-text-without-unit", "extends: esp32-s3\ndevice:\n  clock: '240'\n",
     ["bad.yaml:3", "device.clock", "240MHz"]),
    ("latency-without-unit", "extends: esp32-s3\nbudgets:\n  latency: 30\n",
     ["bad.yaml:3", "budgets.latency", "needs its unit, such as 30ms"]),
    ("target-time-without-unit", "extends: coral-edgetpu\ncost_model:\n  invoke_overhead: 2\n",
     ["bad.yaml:3", "cost_model.invoke_overhead", "2ms"]),
    ("firmware-reserve-not-a-size", "extends: esp32-s3\nfirmware:\n  reserve: plenty\n",
     ["bad.yaml:3", "firmware.reserve", "'plenty'", "KiB"]),
    ("firmware-unknown-key", "extends: esp32-s3\nfirmware:\n  stack: 4KiB\n",
     ["bad.yaml:3", "unknown key 'firmware.stack'", "allowed here: reserve"]),
    # A traceback (float(None)) in profiles validate and simulate (issue 50).
    ("error-band-null", "extends: esp32-s3\ncost_model:\n  error_band: [null, 2]\n",
     ["bad.yaml:3", "cost_model.error_band", "not a finite number"]),
    ("error-band-text", "extends: esp32-s3\ncost_model:\n  error_band: [half, 2]\n",
     ["bad.yaml:3", "cost_model.error_band", "not a finite number"]),
    ("error-band-reversed", "extends: esp32-s3\ncost_model:\n  error_band: [2, 0.5]\n",
     ["bad.yaml:3", "need 0 < low <= 1 <= high"]),
    # A misspelt group validated "ok" and scaled nothing (issue 50).
    ("kernel-scale-misspelt", "extends: esp32-s3\ncost_model:\n  kernel_scale: {conv.in8: 2}\n",
     ["bad.yaml:3", "'conv.in8' is not 'default' or <kind>.<dtype>",
      "did you mean 'conv.int8'?"]),
    ("kernel-scale-unknown-dtype", "extends: esp32-s3\ncost_model:\n"
     "  kernel_scale: {depthwise.int9: 2}\n", ["bad.yaml:3", "'depthwise.int9'"]),
    ("kernel-scale-zero", "extends: esp32-s3\ncost_model:\n  kernel_scale: {default: 0}\n",
     ["bad.yaml:3", "a scale must be between 0.001 and 1000"]),
]


@pytest.mark.parametrize("text,fragments", [c[1:] for c in BAD_PROFILES],
                         ids=[c[0] for c in BAD_PROFILES])
def test_profile_errors_exit_2_with_one_precise_line(tmp_path, capsys, text, fragments):
    path = _write(tmp_path, "bad", text)
    assert main(["profiles", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_sizes_without_a_unit_or_ram_in_decimal_units_warn_with_file_key_and_line(
        tmp_path, capsys):
    """512 means 512 B and 512KB 512,000 B (SI): valid, but each is said once, where it is
    written, with the byte count and the spelling of what was probably meant."""
    path = _write(tmp_path, "board", "extends: esp32-s3\nbudgets:\n  arena: 512\n"
                  "  flash: 2MB\ndevice:\n  sram: 512 KB\n  psram: 8MiB\n")
    profile = load_profile(path)
    assert profile.budgets.arena_bytes == 512
    assert profile.device.sram_bytes == 512_000 and profile.budgets.flash_bytes == 2_000_000
    assert main(["profiles", "validate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: ok"
    assert out[1] == (f"{path}:3: warning: budgets.arena: 512 has no unit, so it is 512 B; "
                      f"write 512B to say so")
    assert out[2].startswith(f"{path}:6: warning: device.sram: '512 KB' is 512,000 B "
                             f"(1 kB = 1,000 B)")
    assert out[2].endswith("if you mean 512KiB (524,288 B), write 512KiB")
    # Flash and storage sizes are often decimal (an app store's 50MB): no warning for them.
    assert len(out) == 3


def test_a_profile_warning_reaches_the_report_notes(tmp_path, model_zoo):
    from devicefit.simulator.simulate import simulate

    path = _write(tmp_path, "board", "extends: stm32l4r5-cortex-m4\nbudgets:\n  arena: 65536\n")
    report = simulate(model_zoo("mlp_int8"), load_profile(path), probe=False)
    assert [n for n in report.notes if "warning" in n] == [
        f"{path}:3: warning: budgets.arena: 65536 has no unit, so it is 65,536 B; write "
        f"65536B or 64KiB to say so"]


def test_check_says_a_profile_warning_once_for_all_its_targets(tmp_path, model_zoo, capsys):
    path = _write(tmp_path, "board", "extends: stm32l4r5-cortex-m4\nbudgets:\n  arena: 65536\n")
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"defaults:\n  profiles: [{path}]\nmodels:\n"
                       f"  - path: {model_zoo('mlp_int8')}\n  - path: {model_zoo('chain_int8')}\n")
    assert main(["check", str(project), "--no-probe"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: budgets.arena: 65536 has no unit") == 1


@pytest.mark.parametrize("name", BUILTINS)
def test_every_shipped_profile_validates_without_a_warning(name, capsys):
    assert main(["profiles", "validate", str(builtin_profiles_dir() / f"{name}.yaml")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{builtin_profiles_dir() / name}.yaml: ok"]


def test_missing_profile_file_exits_2(tmp_path, capsys):
    assert main(["profiles", "validate", str(tmp_path / "nope.yaml")]) == 2
    assert "profile file not found" in capsys.readouterr().err


def test_show_prints_resolved_yaml_in_user_units(capsys):
    assert main(["profiles", "show", "nrf52840-cortex-m4"]) == 0
    out = capsys.readouterr().out
    assert "inheritance: nrf52840-cortex-m4 <- tflm-mcu-base" in out
    assert "arena: 160KiB" in out and "kernels: cmsis-nn" in out


def test_list_json(capsys):
    import json

    assert main(["profiles", "list", "--json"]) == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)]
    assert "coral-edgetpu" in names and "tflm-mcu-base" not in names


def test_non_editable_install_finds_every_profile(tmp_path):
    """Build the wheel as `pip install .` would and import devicefit from it alone."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("devicefit-*.whl"))
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
        # One import root: devicefit.sdk and devicefit.simulator, no generic top-level names.
        tops = {n.split("/")[0] for n in z.namelist()}
        assert {t for t in tops if not t.endswith(".dist-info")} == {"devicefit"}
    code = (
        "import devicefit.simulator.profiles as p, sys;"
        "assert p.__file__.startswith(sys.argv[1]), p.__file__;"
        "s = p.ProfileStore(); names = s.names(include_abstract=True);"
        "[s.load(n) for n in names]; print(' '.join(names));"
        # The core registry and kernel tables ship as package data.
        "import devicefit.simulator.estimate.kernels as k; "
        "assert k.kernel_data().libraries['cmsis-nn'].calibrated"
    )
    out = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         check=True, capture_output=True, text=True).stdout.split()
    assert sorted(out) == BUILTINS


def test_the_docs_example_profile_loads(tmp_path):
    """The example in docs/profiles.md is real: docs cannot drift from the loader."""
    readme = (ROOT / "docs" / "profiles.md").read_text()
    block = readme.split("```yaml\n# my_board.yaml", 1)[1].split("```", 1)[0]
    path = _write(tmp_path, "my_board", "# my_board.yaml" + block)
    p = load_profile(path)
    assert p.budgets.arena_bytes == 440 * 1024 and p.budgets.latency_ms == 250
    assert p.extends == ("stm32l4r5-cortex-m4", "tflm-mcu-base")


def test_simulate_with_a_band_of_null_exits_2_with_one_line(tmp_path, capsys, model_zoo):
    """``simulate`` loaded the profile into a traceback (exit 1) before issue 50."""
    path = _write(tmp_path, "bad", "extends: esp32-s3\ncost_model:\n  error_band: [null, 2]\n")
    assert main(["simulate", str(model_zoo("chain_int8")), "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cost_model.error_band" in err and "Traceback" not in err
