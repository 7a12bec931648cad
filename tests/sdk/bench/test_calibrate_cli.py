"""``devicefit calibrate`` end to end: logs in, a profile out that simulate/check use.

The board logs here are written for the test (there is no MCU or phone here) except where
a test says it reads a published one; ``bench``'s op profile comes through the stand-in
phone of test_bench.py (a fake adb whose benchmark_model runs the model in LiteRT and prints
the op-profile capture it is given)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from devicefit.sdk.cli import main
from devicefit.simulator.estimate.calibration.fit import prior_of
from devicefit.simulator.estimate.kernels import kernel_data
from devicefit.simulator.estimate.latency import estimate_band, profile_core
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from tests.paths import TESTS
from tests.sdk.bench.test_bench import FakePhones, elf
from tests.zoo import model_path

BASE = "stm32l4r5-cortex-m4"
CLOCK = 120e6


@pytest.fixture(scope="module")
def model() -> Path:
    return model_path("chain_int8")


def micro_log(model: Path, path: Path, factor: float, runs: int = 2) -> Path:
    """A MicroProfiler log of a board ``factor`` × slower than the tables, ticks = cycles."""
    prior = prior_of(read_model(model), load_profile(BASE))
    lines = ["InitializeRunner took 12345 ticks (0 ms)."]
    for _ in range(runs):
        for op, c in zip(read_model(model).main.operators, prior.cycles_ms, strict=True):
            ticks = round(factor * c * CLOCK / 1e3)
            lines.append(f"{op.op_name} took {ticks} ticks ({ticks // 120000} ms).")
    path.write_text("\n".join(lines) + "\n")
    return path


def latency_of(report: dict) -> tuple[float, str]:
    lat = report["latency"]
    return lat["estimated_device_ms"], lat["band_basis"]


def test_calibrated_profile_is_written_and_used_by_simulate_and_check(
        model, tmp_path, capsys) -> None:
    log = micro_log(model, tmp_path / "uart.txt", 1.5)
    out = tmp_path / "my-board.yaml"
    code = main(["calibrate", "--profile", BASE, "--model", str(model), "--board-log", str(log),
                 "--clock", "120MHz", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "extends stm32l4r5-cortex-m4" in text and "8 ops timed" in text
    assert "MicroProfiler log" in text and "estimate" in text and "->" in text
    written = yaml.safe_load(out.read_text())
    assert written["extends"] == BASE and set(written["cost_model"]) >= {
        "kernel_scale", "op_overhead", "error_band", "calibration"}

    assert main(["simulate", str(model), "--profile", BASE, "--json"]) == 0
    before, _ = latency_of(json.loads(capsys.readouterr().out))
    assert main(["simulate", str(model), "--profile", str(out), "--json"]) == 0
    after, basis = latency_of(json.loads(capsys.readouterr().out))
    measured = 1.5 * before  # the board of micro_log: 1.5x the tables' cycles, no overhead
    assert abs(after - measured) < 0.25 * abs(before - measured)
    assert basis.startswith("calibrated on the board (1 model")
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"models:\n  - path: {model}\n    profiles: [my-board]\n")
    assert main(["check", str(project), "--profiles-dir", str(tmp_path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert latency_of(result["report"]) == (after, basis)


def test_bench_op_profile_through_the_stand_in_phone_feeds_calibrate(
        model, tmp_path, monkeypatch, capsys) -> None:
    """The fake phone prints an op-profile capture for this model at 3x the phone
    profile's estimate per op; ``bench --json`` carries it to ``calibrate``."""
    phone = load_profile("android-arm64-cpu")
    sg = read_model(model).main
    prior = prior_of(read_model(model), phone)
    lines = ["", "=" * 30 + " Run Order " + "=" * 30,
             "\t[node type]\t[start]\t[first]\t[avg ms]\t[%]\t[cdf%]\t[mem KB]\t"
             "[times called]\t[Name]"]
    for op, c in zip(sg.operators, prior.cycles_ms, strict=True):
        ms = 3.0 * (c + prior.overhead_ms)
        lines.append(f"\t{op.op_name}\t0.000\t{ms:.6f}\t{ms:.6f}\t1.000%\t1.000%\t0.000\t1\t"
                     f"[{sg.tensors[op.outputs[0]].name}]:{op.index}")
    capture = tmp_path / "profile.txt"
    capture.write_text("\n".join(lines) + "\n\n")
    phones = FakePhones(tmp_path, monkeypatch)
    phones.add("FAKE01", op_profile_file=str(capture))
    binary = elf(tmp_path / "android_aarch64_benchmark_model", 183)
    assert main(["bench", str(model), "--profile", "android-arm64-cpu", "--benchmark-binary",
                 str(binary), "--adb", str(phones.adb), "--runs", "2", "--op-profiling",
                 "--json"]) == 0
    bench_json = tmp_path / "bench.json"
    bench_json.write_text(capsys.readouterr().out)
    out = tmp_path / "phone.yaml"
    assert main(["calibrate", "--profile", "android-arm64-cpu", "--model", str(model),
                 "--board-log", str(bench_json), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "devicefit bench op profile" in text and f"{len(sg.operators)} ops timed" in text
    before = sum(prior.cycles_ms) + prior.overhead_ms * len(sg.operators)
    assert main(["simulate", str(model), "--profile", str(out), "--json"]) == 0
    after, basis = latency_of(json.loads(capsys.readouterr().out))
    assert abs(after - 3 * before) < 0.25 * abs(before - 3 * before)
    assert "devicefit bench op profile" in basis


def test_published_benchmark_model_op_profile_of_another_model_is_refused(
        model, tmp_path, capsys) -> None:
    """The TF README's op-profiling sample (MobileNet v1 quant): not this model's log."""
    capture = TESTS / "fixtures" / "benchmark_model" / "tf_readme_op_profiling.txt"
    code = main(["calibrate", "--profile", BASE, "--model", str(model), "--board-log",
                 str(capture), "-o", str(tmp_path / "x.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "not the log of this model" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.yaml").exists()


def test_whole_model_latency_table(model, tmp_path, capsys) -> None:
    table = tmp_path / "board.csv"
    before = prior_of(read_model(model), load_profile(BASE)).total({}, 0.0)
    table.write_text(f"model,ms\n{model},{2 * before:.4f}\n")
    out = tmp_path / "b.yaml"
    assert main(["calibrate", "--profile", BASE, "--latencies", str(table), "-o", str(out)]) == 0
    assert "whole model" in capsys.readouterr().out
    assert load_profile(out).cost_model.calibration is not None


def test_two_whole_model_figures_say_how_little_the_band_rests_on(tmp_path, capsys) -> None:
    """Issue 46: two totals narrowed the band from the base's to ±3 % without a word. The
    band stays the base profile's (widened to hold the two held-out ratios), the output says
    why and what would make one, and so does the written profile's ``calibration``."""
    profile = load_profile(BASE)
    table = tmp_path / "board.csv"
    rows = [f"{m},{f * prior_of(read_model(m), profile).total({}, 0.0):.4f}"
            for m, f in ((model_path("chain_int8"), 1.3), (model_path("mlp_int8"), 1.25))]
    table.write_text("model,ms\n" + "\n".join(rows) + "\n")
    out = tmp_path / "two.yaml"
    assert main(["calibrate", "--profile", BASE, "--latencies", str(table), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "note: the band rests on 2 model(s), so it stays the base profile's: give 8" in text
    assert re.search(r"^  per-op overhead [+-](< )?[\d.,]+ (us|ms|s)$", text, re.M), text
    comment = " ".join(line[2:] for line in out.read_text().splitlines()
                       if line.startswith("# "))
    assert comment.startswith("Written by devicefit calibrate from 2 model(s) the board ran; "
                              "the band rests on 2 model(s), so it stays the base profile's")
    written = load_profile(out).cost_model
    base_low, base_high = profile.cost_model.error_band or estimate_band(
        profile, profile_core(profile), kernel_data(), read_model(model_path("chain_int8")))[0]
    assert written.error_band is not None
    assert written.error_band[0] <= base_low and written.error_band[1] >= base_high
    assert "2 held-out models are too few for a band of their own" in (written.calibration or "")
    assert main(["simulate", str(model_path("chain_int8")), "--profile", str(out)]) == 0
    assert "2 held-out models are too few" in capsys.readouterr().out  # the estimate's basis


@pytest.mark.parametrize("extra, message", [
    (["--board-log", "{missing}"], "cannot read the log"),
    (["--board-log", "{kw}"], "--ticks-per-second, or --clock"),
    (["--board-log", "{kw}", "--ticks-per-second", "1e6"], "not the log of this model"),
    (["--board-log", "{uart}", "--clock", "120MHz", "--sha256", "00"], "is not the 00"),
    (["--board-log", "{uart}", "--clock", "fast"], "--clock"),
    ([], "one --board-log per --model"),
    (["--board-log", "{uart}", "--clock", "120MHz", "--profile", "no-such-board"],
     "unknown profile"),
    (["--board-log", "{uart}", "--clock", "120MHz", "-o", "{uart}"], "uart.txt"),
    (["--board-log", "{empty}"], "no MicroProfiler lines"),
])
def test_bad_input_is_one_line_and_exit_2(model, tmp_path, capsys, extra, message) -> None:
    uart = micro_log(model, tmp_path / "uart.txt", 1.0)
    (tmp_path / "empty.txt").write_text("hello\n")
    names = {"missing": tmp_path / "none.txt", "uart": uart, "empty": tmp_path / "empty.txt",
             "kw": TESTS / "fixtures" / "tflm_profiler" / "keyword_fusion_f1_pr46864.txt"}
    args = ["calibrate", "--profile", BASE, "--model", str(model), "-o",
            str(tmp_path / "out.yaml"), *(a.format(**names) for a in extra)]
    before = uart.read_text()
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert uart.read_text() == before


def test_published_benchmark_model_op_profile_is_read() -> None:
    """The TF README's --enable_op_profiling sample (MobileNet v1 quant on Android): the
    Run Order rows in order, through sdk/bench's parser."""
    from devicefit.sdk.commands.calibrate import read_log

    form, ops = read_log(TESTS / "fixtures" / "benchmark_model" / "tf_readme_op_profiling.txt",
                         None)
    assert form == "benchmark_model op profiling" and len(ops) == 31
    assert ops[0].op == "CONV_2D" and ops[1].op == "DEPTHWISE_CONV_2D"
    assert all(o.ms > 0 for o in ops)
