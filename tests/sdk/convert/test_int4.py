"""``--weights int4``: int4 weights where the profile's runtime runs them, asked of it.

The model is a float32 ``.tflite`` of the zoo (conv, depthwise, fully connected), quantized by
AI Edge Quantizer; the runtimes and the Edge TPU's rules decide, not a table of devicefit's.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from devicefit.sdk.convert.accuracy import AccuracyReport, run_tflite
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.lowbit import (
    LowBitReport,
    check_request,
    costly,
    int4_under_budget,
    int4_weights,
)
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.simulate import simulate
from tests.zoo import model_path

pytestmark = pytest.mark.slow  # AI Edge Quantizer calibrates in LiteRT, once per round

PROFILES = ("stm32l4r5-cortex-m4", "android-arm64-cpu", "coral-edgetpu", "ethos-u55-128")


def _data(n: int, seed: int) -> Dataset:
    sg = parse_model(model_path("chain_float32").read_bytes()).main
    shape = sg.tensors[sg.inputs[0]].shape[1:]
    x = np.random.default_rng(seed).uniform(0, 1, (n, *shape)).astype(np.float32)
    return Dataset(x, None, "random")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> dict[str, tuple[bytes, LowBitReport]]:
    data = model_path("chain_float32").read_bytes()
    return {p: int4_weights(data, _data(16, 0), load_profile(p), "chain") for p in PROFILES}


def _by_op(report: LowBitReport) -> dict[str, list[tuple[int, str, str]]]:
    out: dict[str, list[tuple[int, str, str]]] = {}
    for w in report.layers:
        out.setdefault(w.op, []).append((w.bits, w.granularity, w.why))
    return out


def test_tflm_takes_int4_convs_per_channel_and_fully_connected_per_tensor(quantized, tmp_path):
    data, report = quantized["stm32l4r5-cortex-m4"]
    ops = _by_op(report)
    assert {(b, g) for b, g, _ in ops["CONV_2D"]} == {(4, "per channel")}
    # TFLM's reference FULLY_CONNECTED refuses per-channel int4 filters: the probe said so
    # and the layer stepped down to per tensor, keeping the runtime's words.
    [(bits, granularity, why)] = ops["FULLY_CONNECTED"]
    assert (bits, granularity) == (4, "per tensor")
    assert "tflite-micro" in why and "kTfLiteInt4" in why
    # The quantizer writes no int4 depthwise weights: int8, and the report says why.
    [(bits, _, why)] = ops["DEPTHWISE_CONV_2D"]
    assert bits == 8 and "AI Edge Quantizer" in why
    assert report.rounds == 2
    path = tmp_path / "int4.tflite"
    path.write_bytes(data)
    result = run_model(path, "tflm", reference_kernels=True)  # it runs, as judged
    assert result.arena_head_bytes is not None
    # The latency estimate says what it rests on for int4 layers.
    latency = simulate(path, "stm32l4r5-cortex-m4").latency
    assert latency is not None and "int4 weights: CMSIS-NN s4 kernels" in latency.band_basis


def test_litert_keeps_per_channel_int4_and_the_file_is_smaller(quantized):
    data, report = quantized["android-arm64-cpu"]
    ops = _by_op(report)
    assert {(b, g) for b, g, _ in ops["CONV_2D"] + ops["FULLY_CONNECTED"]} == \
        {(4, "per channel")}
    assert report.rounds == 1
    int4 = [w for w in report.layers if w.bits == 4]
    weights = parse_model(data).main.tensors
    for w in int4:  # packed two per byte in the file
        op = parse_model(data).main.operators[w.op_index]
        assert w.weight_bytes == (weights[op.inputs[1]].num_elements + 1) // 2
    assert len(data) < len(quantized["coral-edgetpu"][0])


def test_the_edge_tpu_steps_refused_convs_down_to_int8_with_the_reason(quantized):
    _, report = quantized["coral-edgetpu"]
    convs = _by_op(report)["CONV_2D"]
    assert all(bits == 8 for bits, _, _ in convs)
    assert all(why.startswith("int4 per tensor refused:") for _, _, why in convs)


def test_vela_killed_by_int4_weights_is_its_refusal_and_every_layer_stays_int8(quantized,
                                                                             tmp_path):
    _, report = quantized["ethos-u55-128"]
    assert {w.bits for w in report.layers} == {8}
    assert all("int4 weights" in w.why for w in report.layers if w.op != "DEPTHWISE_CONV_2D")
    # The same file simulated: Vela's crash on int4 weights is a refusal (verdict fail),
    # not a tool failure.
    path = tmp_path / "int4.tflite"
    path.write_bytes(quantized["android-arm64-cpu"][0])
    sim = simulate(path, "ethos-u55-128")
    assert sim.verdict == "fail" and sim.compile_refusal is not None
    assert sim.compile_refusal.reason == "int4 weights"
    assert "op 0 CONV_2D" in sim.compile_refusal.message


def _flash(data: bytes, tmp_path, profile) -> int:
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    return next(int(b.value) for b in simulate(path, profile).budgets if b.name == "flash")


def test_auto_spends_int4_where_the_flash_budget_needs_it_and_more_as_it_tightens(quantized,
                                                                                 tmp_path):
    mcu = load_profile("stm32l4r5-cortex-m4")
    float_tflite = model_path("chain_float32").read_bytes()
    evaluation = _data(24, 1)
    reference = run_tflite(model_path("chain_float32"), evaluation.x)
    all_int4 = _flash(quantized["stm32l4r5-cortex-m4"][0], tmp_path, mcu)

    def under(limit: int) -> tuple[bytes, LowBitReport]:
        tight = dataclasses.replace(mcu, budgets=dataclasses.replace(mcu.budgets,
                                                                     flash_bytes=limit))
        return int4_under_budget(float_tflite, _data(16, 0), evaluation, reference, tight,
                                 "chain")

    some_data, some = under(all_int4 + 4096)  # the FC's int4 alone saves ~7.5 KiB
    int8_flash = some.int8_flash_bytes
    assert int8_flash is not None and int8_flash > all_int4 + 4096
    assert _flash(some_data, tmp_path, mcu) <= all_int4 + 4096
    assert 0 < some.int4_layers < quantized["stm32l4r5-cortex-m4"][1].int4_layers
    # Every candidate was measured alone; the chosen ones are a cheapest-first prefix.
    assert len(some.sensitivity) == 4 and [s.chosen for s in some.sensitivity] == \
        sorted((s.chosen for s in some.sensitivity), reverse=True)
    assert all(w.why == "not needed for the flash budget" for w in some.layers
               if w.bits == 8 and w.op != "DEPTHWISE_CONV_2D")
    tight_data, tight = under(all_int4)
    assert tight.int4_layers > some.int4_layers and len(tight_data) < len(some_data)


@pytest.mark.parametrize("scheme, io_type, sparsity, words", [
    ("float16", "float32", False, "--scheme int8"),
    ("int8", "float32", False, "int8 inputs and outputs"),
    ("int8", "int8", True, "undo pruning"),
])
def test_what_int4_cannot_do_is_refused_before_any_work(scheme, io_type, sparsity, words):
    with pytest.raises(UsageError, match=words):
        check_request(scheme, io_type, sparsity)


@pytest.mark.parametrize("evaluation, flash, words", [
    (False, 1 << 20, "give --eval"), (True, None, "sets none"),
])
def test_auto_needs_evaluation_data_and_a_flash_budget(evaluation, flash, words):
    with pytest.raises(UsageError, match=words):
        check_request("int8", "int8", False, "auto", evaluation, flash)


def test_a_float_tflite_is_quantized_without_tensorflow(tmp_path, monkeypatch, capsys):
    """A float32 .tflite someone else made: AI Edge Quantizer quantizes it as it is, with the
    same per-layer asking; TensorFlow is never started."""
    from devicefit.sdk.cli import main
    from devicefit.sdk.convert import tfprocess

    def started(*_args, **_kwargs):
        raise AssertionError("the TensorFlow process was started")

    monkeypatch.setattr(tfprocess, "run_in_child", started)
    calibration, evaluation = tmp_path / "cal.npy", tmp_path / "eval.npy"
    np.save(calibration, _data(16, 0).x)
    np.save(evaluation, _data(12, 1).x)
    out, rep = tmp_path / "chain4.tflite", tmp_path / "chain4.json"
    code = main(["convert", str(model_path("chain_float32")), "--profile",
                 "stm32l4r5-cortex-m4", "--calibration", str(calibration), "--eval",
                 str(evaluation), "--weights", "int4", "-o", str(out), "--report", str(rep)])
    assert code == 0, capsys.readouterr()
    report = json.loads(rep.read_text())
    assert report["settings"]["source_format"] == "tflite"
    assert report["settings"]["converter"].startswith("AI Edge Quantizer")
    assert {w["bits"] for w in report["low_bit"]["layers"]} == {4, 8}
    assert report["accuracy"]["sqnr_db"] > 20  # against the float file, run in LiteRT
    assert out.stat().st_size < 0.25 * model_path("chain_float32").stat().st_size


@pytest.mark.parametrize("model, weights, words", [
    ("chain_float32", "int8", "quantize a float32 .tflite with --weights int4 or auto"),
    ("chain_int8", "int4", "quantized already (int8 weights)"),
    ("conv_time", "int4", "dynamic dimensions"),  # time varies, not only the batch
])
def test_a_tflite_that_cannot_be_quantized_is_one_line_before_any_work(model, weights, words,
                                                                       tmp_path, capsys):
    from devicefit.sdk.cli import main
    from tests.tflite_builder import conv_time_model

    calibration = tmp_path / "cal.npy"
    np.save(calibration, _data(4, 0).x)
    out = tmp_path / "out.tflite"
    path = model_path(model) if model != "conv_time" else tmp_path / "conv_time.tflite"
    if model == "conv_time":
        path.write_bytes(conv_time_model())
    code = main(["convert", str(path), "--profile", "stm32l4r5-cortex-m4",
                 "--calibration", str(calibration), "--weights", weights, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("measured, warns", [
    (AccuracyReport(360, 0.9778, 0.9694, 0.99, 20.1), False),  # the demo CNN: -0.83 pp
    (AccuracyReport(360, 0.9778, 0.9500, 0.96, 15.0), True),   # -2.78 pp
    (AccuracyReport(24, None, None, 0.95, 30.0), True),        # no labels: agreement
    (AccuracyReport(100, None, None, None, 1.0), True),        # a regression: SQNR 1 dB
    (AccuracyReport(100, None, None, None, 31.0), False),
])
def test_int4_that_costs_more_than_the_thresholds_says_so_and_names_auto(measured, warns):
    warning = costly(measured)
    assert (warning is not None) == warns
    assert warning is None or "--weights auto" in warning
