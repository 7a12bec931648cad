"""``devicefit plan-batch``: exit codes, JSON, the table, bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.infra.units import format_size

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


def test_static_table_shows_the_activations_every_batch_keeps(model_file, capsys) -> None:
    """A small batch peaks in the optimizer update, after its activations are freed: the
    table shows what the step keeps at its most, never a 0 B beside a batch that trains."""
    assert main(["plan-batch", str(model_file), "--memory", "100MiB", "--target-batch", "64",
                 "--no-calibrate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("│") for line in lines if line.split("│")[0].strip().isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 4, 8, 16, 32, 64]
    assert "activations kept" in next(line for line in lines if line.startswith("batch"))
    assert all(r[1].strip() != "0 B" for r in rows), rows


def test_static_plan_says_where_it_promises_the_batch_that_tensorflow_is_not_counted(
        model_file, capsys) -> None:
    assert main(["plan-batch", str(model_file), "--memory", "100MiB", "--target-batch", "64",
                 "--no-calibrate"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "batch 64 x 1" in first and "TensorFlow's own memory not counted" in first


def test_parameters_over_the_limit_fail_before_tensorflow_starts(model_file) -> None:
    """The parameters are read from the file (h5py): no 10-30 s TensorFlow start for an
    answer the file alone gives."""
    import subprocess
    import sys

    code = ("import sys\nfrom devicefit.sdk.cli import main\n"
            f"code = main(['plan-batch', {str(model_file)!r}, '--memory', '100KiB'])\n"
            "assert not {'tensorflow', 'keras'} & set(sys.modules), 'TensorFlow started'\n"
            "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    # The figure Keras's own count gives (float32 variables).
    stored = format_size(4 * keras.saving.load_model(model_file).count_params())
    assert done.stderr.strip().endswith(f"smaller than the model's parameters alone ({stored})")


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
