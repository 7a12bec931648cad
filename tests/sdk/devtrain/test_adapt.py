"""``devicefit adapt``: the trainable model's signatures in LiteRT (its gradients against
TensorFlow's), a small adaptation end to end, and what is refused (exit 2); ``--update
auto``: every candidate planned, only those under the training-memory budget trained and
chosen from, the choice verified by its measured memory, and a budget no candidate meets a
FAIL (exit 1) naming the closest miss."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from devicefit.sdk.cli import main  # noqa: E402
from devicefit.sdk.devtrain.spec import Update  # noqa: E402
from devicefit.simulator.errors import UsageError  # noqa: E402
from devicefit.simulator.infra.units import format_size  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402

PHONE = "android-arm64-cpu"
BATCH = 4
LR = 0.05


def _images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two classes told apart by where a bright 3x3 patch is (top-left or bottom-right)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(0.0, 0.1, (n, 6, 6, 1)).astype(np.float32)
    for i, label in enumerate(y):
        corner = slice(0, 3) if label == 0 else slice(3, 6)
        x[i, corner, corner, 0] += 1.0
    return x, y


def _model(strides: int = 1) -> keras.Model:
    """A conv, ReLU, max pool and a softmax head: every gradient devicefit writes itself."""
    keras.utils.set_random_seed(3)
    L = keras.layers
    return keras.Sequential([
        keras.Input((6, 6, 1)), L.Conv2D(4, 3, strides=strides, padding="same", name="conv"),
        L.ReLU(), L.MaxPooling2D(), L.Flatten(), L.Dense(2, activation="softmax", name="head")])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("adapt")
    paths = {"model": folder / "base.keras", "data": folder / "user.npz",
             "eval": folder / "user_test.npz", "strided": folder / "strided.keras"}
    _model().save(paths["model"])
    _model(strides=2).save(paths["strided"])
    for name, seed, n in (("data", 1, 32), ("eval", 2, 40)):
        x, y = _images(n, seed)
        np.savez(paths[name], x=x, y=y)
    return paths


def _argv(files: dict[str, Path], out: Path, *extra: str, profile: str = PHONE) -> list[str]:
    return ["adapt", str(files["model"]), "--profile", profile, "--batch", str(BATCH),
            "--data", str(files["data"]), "--eval", str(files["eval"]), "-o", str(out), *extra]


def test_update_choices_parse() -> None:
    assert Update.parse("biases") == Update("biases")
    assert Update.parse("last:2") == Update("last", 2)
    assert Update.parse("sparse") == Update("sparse", 2)
    assert str(Update.parse("sparse:3")) == "sparse:3"
    for bad in ("last", "last:0", "biases:1", "all", "sparse:x"):
        with pytest.raises(UsageError):
            Update.parse(bad)


def test_what_each_update_trains() -> None:
    from devicefit.sdk.devtrain.build import _loss, _ranked, choose

    model = _model()
    # In memory the paths carry the model's name (sequential_N/...).
    paths = [v.path for v in model.trainable_variables]
    conv_kernel, conv_bias, dense_kernel, dense_bias = paths
    assert conv_kernel.endswith("conv/kernel") and dense_bias.endswith("head/bias")
    assert choose(model, Update("biases"), []) == [conv_bias, dense_bias]
    assert choose(model, Update("last", 1), []) == [dense_kernel, dense_bias]
    x, y = _images(16, 4)
    scores = _ranked(model, _loss(model), x, y, BATCH)
    assert sorted(path for path, _ in scores) == sorted(paths)
    assert [s for _, s in scores] == sorted((s for _, s in scores), reverse=True)
    # An untrained model's biases are zero: |weight| = 0 ranks them last, whatever the
    # gradient.
    assert dict(scores)[conv_kernel] > 0 and dict(scores)[dense_kernel] > 0
    assert dict(scores)[conv_bias] == dict(scores)[dense_bias] == 0
    top = [path for path, _ in scores[:2]]
    assert choose(model, Update("sparse", 2), scores) == [p for p in paths if p in top]
    with pytest.raises(UsageError, match="the model has 2 layers with weights"):
        choose(model, Update("last", 3), scores)


@pytest.mark.parametrize(("profile", "words"), [
    ("stm32l4r5-cortex-m4", "TFLM has no training"),
    ("coral-edgetpu", "edgetpu has no training"),
    ("ethos-u55-128", "has no training")])
def test_profiles_without_training_are_refused(files, tmp_path, capsys, profile, words) -> None:
    out = tmp_path / "t.tflite"
    assert main(_argv(files, out, "--update", "biases", profile=profile)) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("change", "words"), [
    (("--data", "missing.npz"), "not found"),
    (("--batch", "64"), "more than the 32 adaptation samples"),
    (("--lr", "nan"), "--lr must be a positive number"),
    (("--steps", "0"), "--steps must be at least 1, got 0"),
    (("-o", "DATA"), "would replace an input")])
def test_bad_input_is_one_line_and_exit_2(files, tmp_path, capsys, change, words) -> None:
    argv = _argv(files, tmp_path / "t.tflite", "--update", "biases")
    value = str(files["data"]) if change[1] == "DATA" else change[1]
    if change[0] == "--data":
        value = str(tmp_path / value)
    if change[0] in argv:
        argv[argv.index(change[0]) + 1] = value
    else:
        argv += [change[0], value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "t.tflite").exists()


def test_unlabelled_data_is_refused(files, tmp_path, capsys) -> None:
    bare = tmp_path / "bare.npz"
    np.savez(bare, x=_images(8, 5)[0])
    argv = _argv(files, tmp_path / "t.tflite", "--update", "biases")
    argv[argv.index("--data") + 1] = str(bare)
    assert main(argv) == 2
    assert "adapt needs labels in the adaptation data" in capsys.readouterr().err


def test_a_bad_update_is_a_usage_error(files, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(_argv(files, tmp_path / "t.tflite", "--update", "everything"))
    assert stop.value.code == 2
    assert "expected biases, last:K, sparse[:K] or auto" in capsys.readouterr().err


@pytest.fixture(scope="module")
def adapted(files, tmp_path_factory) -> tuple[int, str, Path]:
    """``last:2`` (the conv too) with float frozen weights, so the gradient check is exact:
    the exit code, what it printed and the model written."""
    out = tmp_path_factory.mktemp("adapted") / "trainable.tflite"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(_argv(files, out, "--update", "last:2", "--float-frozen", "--epochs", "4",
                          "--lr", str(LR), "--json"))
    return code, printed.getvalue(), out


@pytest.mark.slow
def test_the_adaptation_raises_held_out_accuracy(adapted) -> None:
    code, printed, _ = adapted
    assert code == 0
    result = json.loads(printed)
    # Deterministic: fixed seeds for the model, the data and the order, LiteRT on 1 thread.
    assert result["accuracy_after"] > result["accuracy_before"]
    assert result["last_loss"] < result["first_loss"]
    assert result["steps"] == 4 * (32 // BATCH)
    assert result["trained"] == ["conv/kernel", "conv/bias", "head/kernel", "head/bias"]
    # The allocator holds the arena whole (holes included) and more: never less than the
    # bytes the tensors occupy in it.
    assert result["train_heap_bytes"] >= result["train_tensor_bytes"] > 0
    assert result["train_peak_rise_bytes"] > 0


@pytest.mark.slow
def test_the_model_needs_no_flex_and_its_gradients_are_tensorflows(adapted, files) -> None:
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    _, _, out = adapted
    assert not [op.op_name for sg in read_model(out).subgraphs for op in sg.operators
                if op.is_custom]
    interpreter = Interpreter(model_path=str(out))
    assert set(interpreter.get_signature_list()) == {"train", "infer", "save", "restore"}
    x, y = _images(BATCH, 9)
    initial = interpreter.get_signature_runner("save")()
    interpreter.get_signature_runner("train")(x=x, y=y.astype(np.int32))
    stepped = interpreter.get_signature_runner("save")()

    model = keras.saving.load_model(files["model"])
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    for variable, grad in zip(model.trainable_variables, grads):
        name = variable.path.replace("/", "_")
        np.testing.assert_allclose(initial[name], variable.numpy())
        np.testing.assert_allclose(stepped[name], variable.numpy() - LR * grad.numpy(),
                                   rtol=1e-4, atol=1e-6)

    infer = interpreter.get_signature_runner("infer")
    interpreter.get_signature_runner("restore")(**initial)
    np.testing.assert_allclose(infer(x=x)["output"], model(x).numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_a_gradient_litert_has_only_through_flex_is_refused(files, tmp_path, capsys) -> None:
    out = tmp_path / "t.tflite"
    argv = _argv(files, out, "--update", "last:2")
    argv[1] = str(files["strided"])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Conv2DBackpropFilter, a Flex op" in err and "Traceback" not in err
    assert not out.exists()


# --update auto

def _auto(files: dict[str, Path], out: Path, *extra: str,
          profile: str = PHONE) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["adapt", str(files["model"]), "--profile", profile, "--update", "auto",
                     "--batch", str(BATCH), "--data", str(files["data"]), "--eval",
                     str(files["eval"]), "--epochs", "4", "--lr", str(LR), "-o", str(out),
                     *extra])
    return code, printed.getvalue()


def test_auto_weighs_biases_every_last_k_and_doubling_sparse() -> None:
    from devicefit.sdk.devtrain.build import candidates

    # Two layers with weights (conv, head), four weight tensors.
    assert candidates(_model()) == [Update("biases"), Update("last", 1), Update("last", 2),
                                    Update("sparse", 1), Update("sparse", 2)]
    assert str(Update.parse("auto")) == "auto"
    with pytest.raises(Exception, match="takes no count"):
        Update.parse("auto:2")


def test_train_memory_is_for_auto_only(files, tmp_path, capsys) -> None:
    out = tmp_path / "t.tflite"
    argv = ["adapt", str(files["model"]), "--profile", PHONE, "--update", "biases",
            "--batch", str(BATCH), "--data", str(files["data"]), "--eval", str(files["eval"]),
            "-o", str(out), "--train-memory", "1MiB"]
    assert main(argv) == 2
    assert "--train-memory is the budget --update auto chooses under" in capsys.readouterr().err
    assert not out.exists()


@pytest.fixture(scope="module")
def unbounded(files, tmp_path_factory) -> tuple[int, dict[str, Any], Path]:
    """Every candidate under a budget none reaches: their plans and validation accuracies."""
    out = tmp_path_factory.mktemp("auto") / "trainable.tflite"
    code, printed = _auto(files, out, "--train-memory", "1GiB", "--json")
    return code, json.loads(printed), out


def _best(candidates: list[dict[str, Any]]) -> dict[str, Any]:
    fitting = [c for c in candidates if c["fits"]]
    return max(fitting, key=lambda c: (c["validation_accuracy"], -c["planned_bytes"]))


@pytest.mark.slow
def test_auto_chooses_the_most_accurate_that_fits(unbounded) -> None:
    code, result, out = unbounded
    auto = result["auto"]
    assert code == 0 and result["status"] == "pass" and out.exists()
    assert auto["budget_from"] == "--train-memory" and auto["budget_bytes"] == 2 ** 30
    assert [c["update"] for c in auto["candidates"]] == ["biases", "last:1", "last:2",
                                                          "sparse:1", "sparse:2"]
    assert all(c["fits"] and c["planned_bytes"] > 0 for c in auto["candidates"])
    assert auto["chosen"] == _best(auto["candidates"])["update"] == result["update"]
    # The choice adapted on all of --data and measured: what the verification compares.
    assert auto["measured_fits"] and 0 < result["train_heap_bytes"] <= auto["budget_bytes"]
    assert result["planned_bytes"] == _best(auto["candidates"])["planned_bytes"]
    # Validation never reads --eval: held out of --data (7 of the 32 samples here).
    assert auto["validation_samples"] + auto["fit_samples"] == 32


@pytest.mark.slow
def test_a_budget_between_plans_never_picks_one_over_it(unbounded, files, tmp_path) -> None:
    plans = sorted({c["planned_bytes"] for c in unbounded[1]["auto"]["candidates"]})
    assert len(plans) >= 2
    budget = (plans[0] + plans[1]) // 2  # only the smallest plan fits
    out = tmp_path / "t.tflite"
    code, printed = _auto(files, out, "--train-memory", f"{budget}B", "--json")
    result = json.loads(printed)
    auto = result["auto"]
    for c in auto["candidates"]:
        assert c["fits"] == (c["planned_bytes"] <= budget)
        assert (c["validation_accuracy"] is None) == (not c["fits"])
    assert any(not c["fits"] for c in auto["candidates"])
    chosen = _best(auto["candidates"])
    assert auto["chosen"] == chosen["update"] and chosen["planned_bytes"] <= budget
    # The plan chose; LiteRT's measured heap verifies it: over the budget is a FAIL, and the
    # model is then not written.
    fits = result["train_heap_bytes"] <= budget
    assert auto["measured_fits"] == fits and code == (0 if fits else 1)
    assert result["status"] == ("pass" if fits else "fail") and out.exists() == fits


@pytest.mark.slow
def test_a_budget_no_choice_meets_fails_with_the_closest_miss(unbounded, files,
                                                               tmp_path) -> None:
    closest = min(unbounded[1]["auto"]["candidates"], key=lambda c: c["planned_bytes"])
    budget = closest["planned_bytes"] - 1
    # The profile's budget this time: a profile of the user's extending the phone's.
    profile = tmp_path / "tight.yaml"
    profile.write_text(f"name: tight\nextends: {PHONE}\nbudgets:\n  train_memory: {budget}B\n")
    out = tmp_path / "t.tflite"
    code, printed = _auto(files, out, profile=str(profile))
    assert code == 1 and not out.exists()
    assert "profile tight's budgets.train_memory" in printed
    last = printed.strip().splitlines()[-1]
    assert last == (f"FAIL: no choice of what to train fits the training-memory budget "
                    f"{format_size(budget)}; closest miss: {closest['update']}, planned "
                    f"{format_size(closest['planned_bytes'])} (estimated) against "
                    f"{format_size(budget)}; nothing written")


def test_auto_without_a_training_budget_is_refused(files, tmp_path, capsys) -> None:
    phone = Path(__file__).resolve().parents[3] / "device_profiles" / f"{PHONE}.yaml"
    lines = phone.read_text().splitlines()
    assert any(line.strip().startswith("train_memory:") for line in lines)
    unbudgeted = tmp_path / "no-train-budget.yaml"
    unbudgeted.write_text("\n".join(
        "name: no-train-budget" if line.startswith("name:") else line for line in lines
        if not line.strip().startswith("train_memory:")) + "\n")
    out = tmp_path / "t.tflite"
    code, _ = _auto(files, out, profile=str(unbudgeted))
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "profile no-train-budget sets no budgets.train_memory; give --train-memory" in err
    assert "Traceback" not in err
