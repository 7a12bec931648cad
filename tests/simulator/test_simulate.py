"""``simulate``: the driver, its report, the CLI's exit codes, text and JSON views."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.writer import add_metadata
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.simulate import CONVERSION_METADATA, simulate
from tests.zoo import model_path

REQUIRED = {
    "model": ["path", "sha256", "size_bytes", "operators", "op_types"],
    "profile": ["name"],
    "memory": ["arena_head_bytes", "arena_tail_bytes", "arena_bytes", "flash_bytes",
               "lower_bound_bytes", "timeline"],
    "compute": ["macs"],
}


def _cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["simulate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_report_has_the_required_keys(capsys: pytest.CaptureFixture[str]) -> None:
    path = model_path("residual_int8")
    code, report = _cli_json([str(path), "--profile", "stm32l4r5-cortex-m4"], capsys)
    assert code == 0 and report["verdict"] == "pass"
    for section, keys in REQUIRED.items():
        assert set(keys) <= set(report[section]), section
    assert report["model"]["operators"] == 9
    assert report["model"]["op_types"]["CONV_2D"] == 5
    assert report["memory"]["arena_bytes"] == (report["memory"]["arena_head_bytes"]
                                               + report["memory"]["arena_tail_bytes"])
    # flash = the model's bytes + TFLM's code: its core and the model's kernels, as linked
    # for the Cortex-M4 with CMSIS-NN (code_sizes.json), not the profile's fixed allowance
    mem = report["memory"]
    assert mem["flash_model_bytes"] == path.stat().st_size
    assert mem["flash_bytes"] == mem["flash_model_bytes"] + mem["flash_code_bytes"]
    assert 0 < mem["flash_code_bytes"] != 100 * 1024
    assert "as linked for cortex-m4-cmsis-nn" in mem["flash_code_basis"]
    assert "flash" in mem["estimated"] and "flash" not in mem["exact"]
    steps = report["memory"]["timeline"]
    assert [s["op_index"] for s in steps] == list(range(9))
    assert max(s["live_bytes"] for s in steps) == report["memory"]["lower_bound_bytes"]
    assert {"name", "limit", "value", "ok"} <= set(report["budgets"][0])
    assert {b["name"] for b in report["budgets"]} == {"flash", "arena", "latency"}
    assert report["compute"]["macs"] > 5_000_000


def test_prediction_for_the_wheel_matches_tflm_head_and_estimates_tail() -> None:
    profile = with_runtime(load_profile("stm32l4r5-cortex-m4"), kernels="reference",
                           pointer_bytes=8)
    for name in ("chain_int8", "residual_int8"):
        path = model_path(name)
        report = simulate(path, profile)
        real = run_model(path, "tflm")
        assert report.memory.arena_head_bytes == real.arena_head_bytes
        assert "arena_head" in report.memory.exact and "arena_tail" in report.memory.estimated
        # the tail is an estimate fitted to this wheel (see test_planner)
        assert abs(report.memory.arena_tail_bytes - real.arena_tail_bytes) <= 64


def test_budget_failure_exits_1_and_names_the_budget(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    tiny = tmp_path / "tiny-mcu.yaml"
    tiny.write_text("name: tiny-mcu\nextends: tflm-mcu-base\ndescription: too small\n"
                    "budgets:\n  flash: 200KiB\n  arena: 8KiB\n")
    path = model_path("chain_int8")
    code, report = _cli_json([str(path), "--profile", str(tiny)], capsys)
    assert code == 1 and report["verdict"] == "fail"
    checks = {b["name"]: b for b in report["budgets"]}
    assert checks["flash"]["ok"] and not checks["arena"]["ok"]
    assert checks["arena"]["margin"] == 8 * 1024 - report["memory"]["arena_bytes"]
    assert main(["simulate", str(path), "--profile", str(tiny)]) == 1
    text = capsys.readouterr().out
    assert "OVER" in text and "Verdict: FAIL" in text


def test_text_view_marks_exact_and_estimated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(model_path("inception_int8")), "--profile",
                 "nrf52840-cortex-m4", "--kernels", "reference", "--top", "3"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "arena head" in line)
    tail = next(line for line in out.splitlines() if "arena tail" in line)
    assert "22,400 B" in head and head.rstrip().endswith("exact")
    assert tail.rstrip().endswith("estimated")
    assert "top 3 of 10" in out and "CONCATENATION" in out


def test_litert_profile_uses_the_litert_planner(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _cli_json([str(model_path("chain_float32")), "--profile",
                              "android-arm64-cpu"], capsys)
    assert code == 0
    mem = report["memory"]
    assert mem["planner"] == "litert-arena" and mem["exact"] == ["flash"]
    assert mem["arena_head_bytes"] >= mem["lower_bound_bytes"] > 0


def test_conversion_metadata_is_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = {"scheme": "int8", "profile": "esp32-s3", "calibration_samples": 100}
    out = tmp_path / "converted.tflite"
    out.write_bytes(add_metadata(model_path("mlp_int8").read_bytes(), CONVERSION_METADATA,
                                 json.dumps(settings).encode()))
    code, report = _cli_json([str(out), "--profile", "esp32-s3"], capsys)
    assert code == 0 and report["model"]["conversion"] == settings
    main(["simulate", str(out), "--profile", "esp32-s3"])
    assert "converted by devicefit: scheme=int8" in capsys.readouterr().out


def test_static_path_needs_neither_tensorflow_nor_a_runtime() -> None:
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"  # importing TensorFlow now fails
        "from devicefit.simulator.simulate import simulate\n"
        f"r = simulate({str(model_path('chain_int8'))!r}, 'stm32l4r5-cortex-m4')\n"
        "assert r.memory.arena_head_bytes == 14336, r.memory.arena_head_bytes\n"
        "loaded = [m for m in sys.modules if m.startswith(('tflite_micro', 'keras'))]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("name", ["residual_int8", "leaky_mid_int8", "chain_float32"])
def test_the_static_half_keeps_its_invariants(name: str) -> None:
    """What simulate checks between its stages holds for real reports (every simulate of
    the suite checks it too): the head is no smaller than the bytes live at once, the
    timeline has one step per operator, the per-op MACs add up to the total."""
    from devicefit.simulator.judge.invariants import check_static
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.simulate import static_report

    model = read_model(model_path(name))
    report = static_report(model, load_profile("stm32l4r5-cortex-m4"))
    check_static(model, report)
    assert report.memory.arena_head_bytes >= report.memory.lower_bound_bytes > 0
    assert [s.op_index for s in report.memory.timeline] == list(range(len(model.main.operators)))


@pytest.mark.parametrize(("broken", "message"), [
    ("lower_bound", r"the arena head \(\d[\d,]* B, tflm-greedy\) is below the lower bound of the "
                    r"bytes live at once \(\d[\d,]* B\)"),
    ("timeline", r"the memory timeline does not cover each of the 9 operators once "
                 r"\(missing: \[4\], repeated or unknown: \[\]\)"),
    ("macs", r"the per-operator MACs add up to [\d,]+, the report says [\d,]+"),
])
def test_a_broken_invariant_is_a_devicefit_bug(broken: str, message: str) -> None:
    """A stage that hands on a report breaking an invariant stops the run with an
    assertion naming the model, the invariant and its figures: a bug, never a verdict."""
    import dataclasses

    from devicefit.simulator.judge.invariants import InvariantError, check_static
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.simulate import static_report

    model = read_model(model_path("residual_int8"))
    report = static_report(model, load_profile("stm32l4r5-cortex-m4"))
    memory, compute = report.memory, report.compute
    report = dataclasses.replace(report, **{
        "lower_bound": {"memory": dataclasses.replace(
            memory, lower_bound_bytes=memory.arena_head_bytes + 1)},
        "timeline": {"memory": dataclasses.replace(
            memory, timeline=[s for s in memory.timeline if s.op_index != 4])},
        "macs": {"compute": dataclasses.replace(compute, macs=compute.macs + 1)},
    }[broken])
    with pytest.raises(InvariantError, match=rf"{re.escape(model.path)}: {message} \(a bug in devicefit"):
        check_static(model, report)
    assert issubclass(InvariantError, AssertionError)
