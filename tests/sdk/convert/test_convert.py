"""The converter end to end on a real CNN trained on scikit-learn's digits (the acceptance).

The CNN is trained once and cached under tests/artifacts/convert (examples/digits.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from examples.digits import cached_cnn, load_digits
from tests.paths import TESTS

pytestmark = pytest.mark.slow

ARTIFACTS = TESTS / "artifacts" / "convert"
MCU, PHONE, TPU = "stm32l4r5-cortex-m4", "android-arm64-cpu", "coral-edgetpu"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits")
    paths = load_digits().save_npz(folder)
    return {"model": cached_cnn(ARTIFACTS), **paths}


@pytest.fixture(scope="module")
def int8_mcu(digits, tmp_path_factory):
    from devicefit.sdk.convert import convert

    out = tmp_path_factory.mktemp("int8") / "digits_int8.tflite"
    return convert(digits["model"], MCU, out, calibration=digits["train"],
                   eval_data=digits["test"], float_baseline=True)


def _in_memory(digits):
    """The CNN as a Keras model in this process: converting it runs the same TensorFlow
    stages (sdk.convert.transform) in this process instead of a child of its own, which saves
    the child's TensorFlow import (seconds) where a test's claim is about the scheme or
    the profile, not the file path (the tests above and below cover path inputs)."""
    import keras

    return keras.models.load_model(digits["model"])


def _flash_and_arena(report) -> tuple[int, int]:
    mem = report.simulation.memory
    return mem.flash_bytes, mem.arena_bytes


def test_int8_keeps_accuracy_within_one_point_and_shrinks_to_under_30_percent(int8_mcu):
    acc = int8_mcu.accuracy
    assert acc.samples == 360
    assert acc.float_accuracy > 0.9, "the test model itself is not trained"
    assert abs(acc.float_accuracy - acc.converted_accuracy) <= 0.01
    assert acc.top1_agreement >= 0.97
    assert acc.sqnr_db > 20
    assert int8_mcu.output_bytes <= 0.30 * int8_mcu.float_tflite_bytes
    assert Path(int8_mcu.output).stat().st_size == int8_mcu.output_bytes


def test_int8_model_is_full_integer_with_the_profile_io_type(int8_mcu):
    model = read_model(int8_mcu.output)
    sg = model.main
    assert [sg.tensors[i].dtype for i in (*sg.inputs, *sg.outputs)] == ["int8", "int8"]
    assert all(sg.tensors[i].shape[0] == 1 for i in sg.inputs), "a device model has batch 1"
    weights = [w for w in int8_mcu.weights if w.op in ("CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w.dtype == "int8" for w in weights)


def test_settings_are_stored_in_the_file_and_simulate_shows_them(int8_mcu):
    report = simulate(int8_mcu.output, MCU)
    conversion = report.model.conversion
    assert conversion["profile"] == MCU
    assert conversion["scheme"] == "int8" and conversion["io_type"] == "int8"
    assert conversion["calibration"]["samples"] == 300
    assert conversion["calibration"]["random"] is False
    assert int8_mcu.verdict == report.verdict == "pass"
    # The evaluation is recorded too, so diff can compare accuracy without the data.
    acc = conversion["accuracy"]
    assert acc["accuracy"] == pytest.approx(int8_mcu.accuracy.converted_accuracy, abs=1e-4)
    assert acc["reference_accuracy"] == pytest.approx(int8_mcu.accuracy.float_accuracy, abs=1e-4)
    assert acc["samples"] == 360 and acc["sqnr_db"] > 20


def test_diff_shows_the_accuracy_convert_recorded(int8_mcu, capsys):
    from devicefit.sdk.cli import main

    assert main(["diff", int8_mcu.output, int8_mcu.output, "--profile", MCU, "--json"]) == 0
    recorded = {f["name"]: f for f in json.loads(capsys.readouterr().out)["accuracy"]}
    assert {"accuracy", "float accuracy", "SQNR (dB)", "top-1 agreement"} <= set(recorded)
    assert recorded["accuracy"]["a"] == pytest.approx(int8_mcu.accuracy.converted_accuracy,
                                                      abs=1e-4)


def test_report_json_has_sizes_stages_and_verdict(int8_mcu):
    data = json.loads(json.dumps(int8_mcu.to_dict()))
    assert data["size_ratio"] == pytest.approx(int8_mcu.output_bytes / int8_mcu.float_tflite_bytes)
    assert {"load", "quantize", "write", "verify", "evaluate", "simulate"} <= set(data["stages"])
    assert data["accuracy"]["accuracy_drop_pp"] == pytest.approx(
        100 * (int8_mcu.accuracy.float_accuracy - int8_mcu.accuracy.converted_accuracy))
    assert data["simulation"]["verdict"] == "pass"


def _nm_groups_from_file(path: str, m: int) -> list[np.ndarray]:
    """Zeros per group of ``m`` along the input-channel axis of every CONV_2D/FC weight,
    read straight from the flatbuffer with LiteRT's schema (independent of sdk.convert)."""
    from ai_edge_litert import schema_py_generated as schema

    buf = Path(path).read_bytes()
    model = schema.ModelT.InitFromPackedBuf(bytearray(buf), 0)
    wanted = {schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.FULLY_CONNECTED}
    out = []
    sg = model.subgraphs[0]
    for op in sg.operators:
        if model.operatorCodes[op.opcodeIndex].builtinCode not in wanted:
            continue
        t = sg.tensors[op.inputs[1]]
        assert t.type == schema.TensorType.INT8
        w = np.frombuffer(model.buffers[t.buffer].data.tobytes(), np.int8).reshape(t.shape)
        if w.shape[-1] % m == 0:
            out.append((w.reshape(-1, m) == 0).sum(axis=1))
    return out


def test_2_4_sparsity_with_fine_tuning_holds_in_the_written_file(digits, tmp_path):
    from devicefit.sdk.convert import convert

    out = tmp_path / "digits_24.tflite"
    report = convert(digits["model"], PHONE, out, calibration=digits["train"],
                     eval_data=digits["test"], sparsity_pattern="2:4", train=digits["train"],
                     epochs=1, float_baseline=False)
    groups = _nm_groups_from_file(str(out), 4)
    # conv1 has one input channel (skipped, reported); conv2, conv3, fc1, classes are pruned.
    assert len(groups) == 4
    assert all((g >= 2).all() for g in groups)
    assert report.nm_skipped == {"conv1": "1 input channels is not a multiple of 4"}
    assert [w.nm_violations for w in report.weights if w.nm_groups] == [0, 0, 0, 0]
    assert report.fine_tune[0].epochs == 1 and report.fine_tune[0].batch_size >= 1
    assert report.accuracy.converted_accuracy > 0.9
    assert read_model(str(out)).main.tensors  # a valid model
    assert not any(t.is_sparse for t in read_model(str(out)).main.tensors), \
        "the file must stay dense (no TFLite sparse encoding)"
    # Dense zeros save nothing on any target: the report says so rather than let the
    # pattern pass for a saving.
    assert any(w.startswith("N:M sparsity saves no bytes") for w in report.warnings)


def test_channel_pruning_with_fine_tuning_lowers_flash_and_arena(digits, int8_mcu, tmp_path):
    from devicefit.sdk.convert import convert

    report = convert(digits["model"], MCU, tmp_path / "pruned.tflite",
                     calibration=digits["train"], eval_data=digits["test"], prune_channels=0.5,
                     train=digits["train"], epochs=2, float_baseline=False)
    assert {(p.name, p.before, p.after) for p in report.pruned_layers} == {
        ("conv1", 16, 8), ("conv2", 32, 16), ("conv3", 32, 16), ("fc1", 96, 48)}
    flash, arena = _flash_and_arena(report)
    flash0, arena0 = _flash_and_arena(int8_mcu)
    assert flash < flash0 and arena < arena0
    assert report.output_bytes < 0.5 * int8_mcu.output_bytes
    assert report.accuracy.accuracy_drop_pp is not None
    assert report.accuracy.converted_accuracy > 0.85
    assert report.settings.prune_stages == [0.5]
    assert len(report.fine_tune) == 1


def test_edgetpu_gets_uint8_io_and_a_partition(digits, tmp_path):
    from devicefit.sdk.convert import convert

    out = tmp_path / "tpu.tflite"
    report = convert(_in_memory(digits), TPU, out, calibration=digits["train"],
                     float_baseline=False)
    sg = read_model(str(out)).main
    assert sg.tensors[sg.inputs[0]].dtype == "uint8"
    assert report.target_extra.total_ops == len(sg.operators)
    assert report.target_extra.mapped_ops == report.target_extra.total_ops
    assert report.to_dict()["edgetpu"]["mapped_ops"] == report.target_extra.mapped_ops


@pytest.mark.parametrize("scheme, weight_dtype", [("float16", "float16"), ("dynamic", "int8")])
def test_float16_and_dynamic_range_schemes(digits, tmp_path, scheme, weight_dtype):
    from devicefit.sdk.convert import convert

    report = convert(_in_memory(digits), PHONE, tmp_path / f"{scheme}.tflite", scheme=scheme,
                     eval_data=digits["test"], float_baseline=True)
    # Dynamic range leaves tensors under 1024 weights in float32; the big ones are quantized.
    biggest = max(report.weights, key=lambda w: np.prod(w.shape))
    assert biggest.dtype == weight_dtype
    assert report.settings.calibration is None
    assert report.accuracy.top1_agreement >= 0.98
    assert report.output_bytes < 0.6 * report.float_tflite_bytes


def test_random_calibration_is_allowed_only_by_name_and_reported(digits, tmp_path, caplog):
    from devicefit.sdk.convert import convert

    report = convert(_in_memory(digits), MCU, tmp_path / "r.tflite", calibration="random",
                     float_baseline=False, simulate=False)
    assert any("RANDOM" in w for w in report.warnings)
    assert any("RANDOM" in r.getMessage() for r in caplog.records)
    assert report.settings.calibration.random is True


def test_savedmodel_and_h5_inputs_convert(digits, tmp_path):
    import keras

    from devicefit.sdk.convert import convert

    model = keras.models.load_model(digits["model"])
    saved = tmp_path / "saved"
    model.export(str(saved), format="tf_saved_model", verbose=False)
    h5 = tmp_path / "digits.h5"
    model.save(h5)
    for source, kind in ((saved, "savedmodel"), (h5, "h5"), (model, "memory")):
        report = convert(source, MCU, tmp_path / f"{kind}.tflite", calibration=digits["train"],
                         eval_data=digits["test"], float_baseline=False, simulate=False)
        assert report.settings.source_format == kind
        assert report.accuracy.top1_agreement >= 0.97
        sg = read_model(report.output).main
        assert not sg.tensors[sg.inputs[0]].is_dynamic, "batch must be fixed at 1"


def test_in_memory_model_is_not_changed_by_nm_pruning(digits, tmp_path):
    import keras

    from devicefit.sdk.convert import convert

    model = keras.models.load_model(digits["model"])
    before = [w.copy() for w in model.get_weights()]
    convert(model, PHONE, tmp_path / "m.tflite", calibration=digits["train"],
            sparsity_pattern="2:4", float_baseline=False, simulate=False)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
