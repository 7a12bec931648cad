"""``devicefit plan-batch``: exit codes, JSON, the table, bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devicefit.sdk.cli import main

keras = pytest.importorskip("keras")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(10)])
    path = tmp_path_factory.mktemp("plan") / "cnn.keras"
    model.save(path)
    return path


def test_json_plan_with_accumulation(model_file, capsys) -> None:
    assert main(["plan-batch", str(model_file), "--memory", "24MiB", "--target-batch", "256",
                 "--optimizer", "momentum", "--json", "--no-calibrate"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["memory_limit_bytes"] == 24 * 1024**2 and plan["memory_source"] == "given"
    assert plan["basis"] == "static" and plan["backend"] is None
    assert 1 <= plan["batch_size"] < 256 and plan["accumulation_steps"] > 1
    assert plan["batch_size"] * plan["accumulation_steps"] >= 256
    assert plan["effective_batch"] == 256
    assert plan["estimated_peak_bytes"] <= plan["memory_limit_bytes"]
    fits = {row["batch_size"]: row["fits"] for row in plan["table"]}
    assert fits[1] and not fits[256]


def test_table_off_a_tty(model_file, capsys) -> None:
    assert main(["plan-batch", str(model_file), "--memory", "auto", "--target-batch", "64",
                 "--dtype", "mixed_float16", "--no-calibrate"]) == 0
    out = capsys.readouterr().out
    assert "Batch size vs training memory" in out and "accumulation step" in out
    assert "\x1b[" not in out  # plain text when not on a terminal
    assert "not measured on this machine" in out


@pytest.mark.slow
def test_calibrated_by_default_and_names_the_backend(model_file, capsys, measure_once) -> None:
    assert main(["plan-batch", str(model_file), "--memory", "8GiB", "--target-batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "backend: TensorFlow" in out and "oneDNN o" in out and "thread" in out
    assert "planned peak" in out and "calibrated peak" in out
    assert "batch 8 x 1 accumulation" in out and "verified step at batch 8" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--memory", "100KiB"], "smaller than the model's parameters alone"),
    # TensorFlow alone needs more: measured in a child, at the batches the calibrated test
    # above measures first (its target), so a worker running both starts that child once.
    pytest.param(["--memory", "64MiB", "--target-batch", "8"], "no batch fits in 64.0 MiB",
                 marks=pytest.mark.slow),
    (["--memory", "lots"], "--memory: expected a size"),
    (["--target-batch", "0"], "--target-batch must be at least 1"),
    (["--optimizer", "adamx"], "invalid choice: 'adamx'"),
], ids=["memory-below-params", "below-tensorflow", "bad-size", "zero-target",
      "unknown-optimizer"])
def test_bad_options_exit_2_with_one_line(model_file, capsys, measure_once, argv,
                                          message) -> None:
    try:
        code = main(["plan-batch", str(model_file), *argv])
    except SystemExit as exc:  # argparse rejects choices itself, also with exit 2
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("name", "content", "message"), [
    ("missing.keras", None, "model file not found"),
    ("notes.txt", "hello", "is not a Keras model file"),
    ("broken.keras", "not a zip", "cannot load"),
])
def test_bad_model_files_exit_2(tmp_path, capsys, name, content, message) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    assert main(["plan-batch", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
