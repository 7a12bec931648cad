"""``devicefit convert`` on the command line: a real run, and bad input → exit 2, one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from devicefit.sdk.cli import main
from examples.digits import cached_cnn, load_digits
from tests.docs_models import REPORT, recorded_tour, tour_conversion
from tests.paths import TESTS

pytestmark = pytest.mark.slow

ARTIFACTS = TESTS / "artifacts" / "convert"
MCU = "stm32l4r5-cortex-m4"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-cli")
    return {"model": str(cached_cnn(ARTIFACTS)),
            **{k: str(v) for k, v in load_digits().save_npz(folder).items()}}


def _one_line_error(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("devicefit: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in "\n".join(err)
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def test_cli_converts_writes_report_and_prints_verdict():
    """The README tour's ``devicefit convert`` (the digits CNN, calibration and evaluation
    data), run once for this test and the docs check (tests/docs_models.py)."""
    folder, run = tour_conversion(), recorded_tour()
    text = "\n".join(run.lines)
    assert run.code == 0
    assert (folder / "digits.tflite").exists()
    report = json.loads((folder / REPORT).read_text())
    assert report["profile"] == MCU and report["verdict"] == "pass"
    assert "PASS" in text and "accuracy" in text and "x its weights as float32" in text
    assert "latency" in text and "likely" in text  # the estimate shows with its band


def test_cli_refuses_2_4_for_an_mcu_profile_and_says_why(digits, tmp_path, capsys):
    out = tmp_path / "m.tflite"
    code = main(["convert", digits["model"], "--profile", MCU, "--calibration", digits["train"],
                 "--sparsity", "2:4", "-o", str(out)])
    assert code == 2
    _one_line_error(capsys, "n:m", "TFLite-Micro")
    assert not out.exists()


@pytest.fixture(scope="module")
def lambda_model(tmp_path_factory) -> Path:
    """A .keras file with a Lambda layer (Python bytecode), built once: Keras' import alone
    takes seconds."""
    import keras

    path = tmp_path_factory.mktemp("lambda") / "lam.keras"
    inp = keras.Input((8, 8, 1))
    x = keras.layers.Lambda(lambda t: t * 2.0)(inp)
    x = keras.layers.Flatten()(x)
    keras.Model(inp, keras.layers.Dense(10)(x)).save(path)
    return path


def _bad_inputs(tmp: Path, digits: dict, lambda_model: Callable[[], Path]) -> dict:
    text = tmp / "notes.keras"
    text.write_text("not a model")
    (tmp / "notes.tflite").write_bytes(b"TFL3")
    np.save(tmp / "wrong.npy", np.zeros((20, 28, 28, 1), np.float32))
    (tmp / "sm").mkdir()
    (tmp / "sm" / "saved_model.pb").write_bytes(b"stand-in")  # not protobuf wire format
    return {
        "missing": (["/nonexistent/model.keras"], ["not found"]),
        "not-a-model": ([str(text)], ["not a Keras model", "zip"]),
        "not-a-savedmodel": ([str(tmp / "sm"), "--calibration", digits["train"]],
                             ["saved_model.pb is not a SavedModel protobuf", "wire format"]),
        "unknown-suffix": ([str(tmp / "wrong.npy")], ["unsupported model file"]),
        "tflite-input": ([str(tmp / "notes.keras").replace(".keras", ".tflite")],
                         ["already a .tflite", "simulate"]),
        "shape-mismatch": ([digits["model"], "--calibration", str(tmp / "wrong.npy")],
                           ["(28, 28, 1)", "(8, 8, 1)"]),
        "lambda-safe-mode": (lambda: [str(lambda_model()), "--calibration", digits["train"]],
                             ["Lambda", "--unsafe"]),
        "no-calibration": ([digits["model"]], ["calibration"]),
        "scheme-not-allowed": ([digits["model"], "--scheme", "float16"], ["float16"]),
        "train-without-pruning": ([digits["model"], "--calibration", digits["train"],
                                   "--train", digits["train"], "--epochs", "1"], ["pruning"]),
        "output-over-input": ([digits["model"], "--calibration", digits["train"], "-o",
                               digits["model"]], ["input"]),
        "int4-float-io": ([digits["model"], "--calibration", digits["train"], "--weights",
                           "int4", "--io-type", "float32"], ["--weights int4", "int8 inputs"]),
        "int4-pruned": ([digits["model"], "--calibration", digits["train"], "--weights", "int4",
                         "--prune-channels", "0.5"], ["--weights int4", "undo pruning"]),
    }


#: Mistakes the parent sees from the files alone: the user hears at once, before TensorFlow's
#: seconds of start-up (the Lambda needs Keras' own safe mode in the child for .h5 files).
REFUSED_BEFORE_TENSORFLOW = {"missing", "not-a-model", "not-a-savedmodel", "unknown-suffix",
                             "tflite-input", "shape-mismatch", "lambda-safe-mode",
                             "no-calibration", "int4-float-io", "int4-pruned"}


@pytest.mark.parametrize("case", [
    "missing", "not-a-model", "not-a-savedmodel", "unknown-suffix", "tflite-input",
    "shape-mismatch", "lambda-safe-mode", "no-calibration", "scheme-not-allowed",
    "train-without-pruning", "output-over-input", "int4-float-io", "int4-pruned"])
def test_bad_input_exits_2_with_one_line(digits, tmp_path, capsys, request, monkeypatch, case):
    argv, words = _bad_inputs(tmp_path, digits,
                              lambda: request.getfixturevalue("lambda_model"))[case]
    argv = argv() if callable(argv) else argv
    if case in REFUSED_BEFORE_TENSORFLOW:
        from devicefit.sdk.convert import tfprocess

        def started(*_args, **_kwargs):
            raise AssertionError(f"{case}: the TensorFlow process was started")

        monkeypatch.setattr(tfprocess, "run_in_child", started)
    if "-o" not in argv:
        argv = [*argv, "-o", str(tmp_path / "out.tflite")]
    code = main(["convert", argv[0], "--profile", MCU, *argv[1:]])
    assert code == 2
    _one_line_error(capsys, *words)
    assert not (tmp_path / "out.tflite").exists()


def test_int4_weights_halve_the_model_and_say_what_each_layer_got(digits, tmp_path, capsys):
    out, rep = tmp_path / "d4.tflite", tmp_path / "d4.json"
    code = main(["convert", digits["model"], "--profile", MCU, "--calibration", digits["train"],
                 "--eval", digits["test"], "--weights", "int4", "-o", str(out), "--report",
                 str(rep)])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(rep.read_text())
    assert report["settings"]["weights"] == "int4" and report["verdict"] == "pass"
    layers = report["low_bit"]["layers"]
    assert {w["bits"] for w in layers} == {4}  # the digits CNN has no depthwise layer
    fc = [w for w in layers if w["op"] == "FULLY_CONNECTED"]
    assert fc and all(w["granularity"] == "per tensor" and "tflite-micro" in w["why"]
                      for w in fc)
    # The tour's int8 model of the same CNN, data and profile is the size to beat.
    int8 = (tour_conversion() / "digits.tflite").stat().st_size
    assert out.stat().st_size < 0.65 * int8
    assert report["accuracy"]["accuracy_drop_pp"] <= 2.0
    assert "Weights: int4 on" in text and "why not int4" in text


def test_unsafe_loads_a_lambda_model(digits, lambda_model, tmp_path):
    from devicefit.sdk.convert import convert

    report = convert(lambda_model, MCU, tmp_path / "lam.tflite", calibration=digits["train"],
                     unsafe=True, float_baseline=False, simulate=False)
    assert report.output_bytes > 0


@pytest.fixture(scope="module")
def optimized(digits, tmp_path_factory) -> dict:
    """One ``convert --optimize-memory --html --report`` run for the tests of both options
    (a conversion is a TensorFlow process of its own: tens of seconds)."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("optimized")
    out, rep, page = folder / "m.tflite", folder / "r.json", folder / "c.html"
    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main(["convert", digits["model"], "--profile", MCU, "--calibration",
                     digits["train"], "--optimize-memory", "-o", str(out), "--report", str(rep),
                     "--html", str(page)])
    return {"code": code, "out": out, "report": rep, "page": page,
            "stdout": printed.getvalue(), "stderr": errors.getvalue()}


def test_optimize_memory_rewrites_the_arena_plan_and_keeps_the_settings(optimized):
    from devicefit.simulator.profiles import load_profile, with_runtime
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.simulate import simulate

    out, rep = optimized["out"], optimized["report"]
    assert optimized["code"] == 0, optimized["stderr"]
    assert "memory optimization:" in optimized["stdout"]
    opt = json.loads(rep.read_text())["memory_optimization"]
    assert opt["head_after_bytes"] <= opt["head_before_bytes"]
    assert opt["head_after_bytes"] >= opt["bound_best_order_bytes"]
    model = read_model(out)
    assert "devicefit.conversion" in model.metadata  # settings survive the rewrite
    assert json.loads(model.metadata["devicefit.conversion"])["optimize_memory"] is True
    assert ("OfflineMemoryAllocation" in model.metadata) == opt["offline_plan"]
    # The optimizer plans (and TFLM's wheel measures) with reference-kernel scratch buffers.
    reference = with_runtime(load_profile(MCU), kernels="reference")
    assert simulate(out, reference).memory.arena_head_bytes == opt["head_after_bytes"]
    if opt["changed"]:
        assert opt["measured_head_after_bytes"] == opt["head_after_bytes"]
    else:  # already at its bound: the converter's bytes are written unchanged
        assert opt["head_after_bytes"] == opt["head_before_bytes"]


def test_optimize_memory_needs_a_tflm_profile(digits, tmp_path, capsys):
    code = main(["convert", digits["model"], "--profile", "android-arm64-cpu", "--calibration",
                 digits["train"], "--optimize-memory", "-o", str(tmp_path / "m.tflite")])
    assert code == 2
    _one_line_error(capsys, "--optimize-memory", "litert")


def test_html_shows_the_model_before_and_after_conversion(optimized):
    assert optimized["code"] == 0, optimized["stderr"]
    html = optimized["page"].read_text()
    assert html.count('<rect id="peak-step"') == 2
    assert "before: float32 .tflite" in html and f"after: {optimized['out']} (int8)" in html


def test_the_input_shape_is_read_from_a_keras_config_without_tensorflow(digits, tmp_path):
    import zipfile

    from devicefit.sdk.convert.loading import keras_input_shape

    assert keras_input_shape(Path(digits["model"])) == (8, 8, 1)
    with zipfile.ZipFile(digits["model"]) as archive:
        config = json.loads(archive.read("config.json"))
    layers = config["config"]["layers"]
    [first] = [layer for layer in layers if layer["class_name"] == "InputLayer"]
    variants = {"dynamic": [None, None, 8, 1], "two inputs": None}
    for name, batch_shape in variants.items():
        changed = json.loads(json.dumps(config))
        if batch_shape is None:  # a second input: which one the data feeds is the child's call
            changed["config"]["layers"].append(json.loads(json.dumps(first)))
        else:
            for layer in changed["config"]["layers"]:
                if layer["class_name"] == "InputLayer":
                    layer["config"]["batch_shape"] = batch_shape
        path = tmp_path / f"{name.replace(' ', '_')}.keras"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("config.json", json.dumps(changed))
        assert keras_input_shape(path) is None, name
