"""``convert --weights int4|auto --qat [auto]`` (issue 47): the layers the first conversion
put at 4 bits train on AI Edge Quantizer's int4 grid, the trained model is quantized again
with int4 on exactly those layers, and the report sets PTQ int4 against QAT int4.

The end-to-end test converts the digits CNN for the STM32L4R5 through the pipeline's stages
(a TensorFlow child for the first conversion and one for the training) and reads the int4
codes back from the written file against the trained float32 model's kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.convert import pipeline
from devicefit.sdk.convert.pipeline import StageTimer
from devicefit.sdk.convert.spec import ConversionSpec
from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.model import WEIGHTS_INPUT
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import unpack
from examples.digits import cached_cnn, load_digits
from tests.paths import TESTS

MCU = "stm32l4r5-cortex-m4"
QAT = {"weights": "int4", "qat": "always", "train": "t.npz", "epochs": 1, "eval_data": "e.npz"}


@pytest.mark.parametrize(("change", "words"), [
    ({"weights": "int8"}, "--weights int4 or --weights auto"),
    ({"train": None, "epochs": 0}, "--train DATA"),
    ({"eval_data": None}, "--eval"),
    ({"distill": True}, "give one of them"),
    ({"qat": "sometimes"}, "--qat auto"),
])
def test_qat_refuses_what_it_cannot_do_in_one_line(change, words):
    with pytest.raises(UsageError, match=words):
        ConversionSpec.from_options(**{**QAT, **change})


def test_train_without_pruning_is_for_qat_only():
    with pytest.raises(UsageError, match="or --qat"):
        ConversionSpec.from_options(train="t.npz", epochs=1)
    assert ConversionSpec.from_options(**QAT).fine_tune is not None


def test_qat_round_trips_through_yaml(tmp_path):
    spec = ConversionSpec.from_options(**{**QAT, "qat": "auto", "weights": "auto"})
    assert spec.qat == "auto"
    assert ConversionSpec.from_mapping(spec.to_mapping()) == spec
    with pytest.raises(InputError, match="qat: 'yes' is not one of always, auto"):
        ConversionSpec.from_mapping({**spec.to_mapping(), "qat": "yes"})
    # Without qat, fine-tuning without sparsity is refused as before.
    bare = {k: v for k, v in spec.to_mapping().items() if k != "qat"}
    with pytest.raises(InputError, match="fine-tuning follows pruning"):
        ConversionSpec.from_mapping(bare)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-qat")
    return {"model": str(cached_cnn(TESTS / "artifacts" / "convert")),
            **{k: str(v) for k, v in load_digits().save_npz(folder).items()}}


def test_the_cli_refuses_qat_without_training_data_before_any_work(digits, tmp_path, capsys):
    out = tmp_path / "q.tflite"
    code = main(["convert", digits["model"], "--profile", MCU, "--calibration", digits["train"],
                 "--eval", digits["test"], "--weights", "int4", "--qat", "-o", str(out)])
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--qat trains the 4-bit layers" in err[0], err
    assert not out.exists()


def test_a_float_tflite_cannot_train(digits, tmp_path, capsys):
    from tests.zoo import model_path

    code = main(["convert", str(model_path("chain_float32")), "--profile", MCU,
                 "--calibration", "random", "--eval", digits["test"], "--train", digits["train"],
                 "--epochs", "1", "--weights", "int4", "--qat", "-o", str(tmp_path / "q.tflite")])
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--qat" in err[0] and "Traceback" not in err[0], err


def _weights(tflite: bytes) -> list[tuple[str, np.ndarray, object]]:
    """Each operator with weights in order: its op, its weights (int4 unpacked, low nibble
    first, else as stored) in TFLite's layout, and the tensor."""
    sg = parse_model(tflite, "m").main
    buffers = unpack(tflite).buffers
    out = []
    for op in sg.operators:
        k = WEIGHTS_INPUT.get(op.op_name)
        if k is None or len(op.inputs) <= k or not sg.tensors[op.inputs[k]].has_data:
            continue
        t = sg.tensors[op.inputs[k]]
        raw = np.asarray(buffers[t.buffer].data, dtype=np.uint8)
        if t.dtype == "int4":
            nibbles = np.stack([raw & 0xF, raw >> 4], axis=1).reshape(-1)[:t.num_elements]
            values = np.where(nibbles > 7, nibbles.astype(np.int16) - 16, nibbles)
        else:
            values = raw.view(np.dtype(t.dtype))
        out.append((op.op_name, values.reshape(t.shape), t))
    return out


@pytest.mark.slow
def test_qat_writes_the_trained_kernels_as_int4_codes(digits, tmp_path):
    spec = ConversionSpec.from_options(calibration=digits["train"], eval_data=digits["test"],
                                       weights="int4", qat="always", train=digits["train"],
                                       epochs=1)
    job = pipeline.check(digits["model"], load_profile(MCU), tmp_path / "q.tflite", spec)
    timer = StageTimer()
    done = pipeline.transform(job, timer)
    ptq, low_bit = pipeline.int4_weights(job, done)
    made = pipeline.qat_int4(job, done, ptq, low_bit, timer)
    assert made.outcome.trained and made.outcome.why == "--qat"
    assert made.outcome.layers == ("classes", "conv1", "conv2", "conv3", "fc1")
    assert made.trained_float is not None and made.tflite != ptq
    # The same layers at the same granularity as the first pass, and the runtime's reasons.
    assert [(w.bits, w.granularity, w.why) for w in made.low_bit.layers] == \
        [(w.bits, w.granularity, w.why) for w in low_bit.layers]
    written, trained = _weights(made.tflite), _weights(made.trained_float)
    assert [op for op, _, _ in written] == [op for op, _, _ in trained]
    int4 = [(w, f, t) for (_, w, t), (_, f, _) in zip(written, trained, strict=True)
            if t.dtype == "int4"]
    assert len(int4) == 5
    for codes, kernel, tensor in int4:
        # The trained float kernel (output channel first in TFLite) divided by the scale the
        # quantizer stored is integral: QAT left it on the int4 grid, and those integers are
        # exactly the codes written.
        scale = np.asarray(tensor.quantization.scale, dtype=np.float64)
        shape = (-1,) + (1,) * (kernel.ndim - 1) if scale.size > 1 else ()
        on_grid = kernel.astype(np.float64) / scale.reshape(shape)
        assert np.allclose(on_grid, np.round(on_grid), atol=1e-3)
        assert np.array_equal(np.round(on_grid).astype(np.int16), codes)
    # PTQ of the untrained model is off that grid: its float kernels are not integral codes.
    first = [f for (_, f, _) in _weights(done.result.baseline)]
    scales = [np.abs(f).reshape(len(f), -1).max(1) / 7 for f in first]
    assert not all(np.allclose(f.reshape(len(f), -1) / s[:, None],
                               np.round(f.reshape(len(f), -1) / s[:, None]), atol=1e-3)
                   for f, s in zip(first, scales, strict=True))
    ptq_acc = made.outcome.ptq_accuracy
    assert ptq_acc.samples == 360 and ptq_acc.converted_accuracy is not None


@pytest.mark.slow
def test_qat_auto_says_when_ptq_was_enough(digits, tmp_path, capsys):
    out, rep = tmp_path / "a.tflite", tmp_path / "a.json"
    code = main(["convert", digits["model"], "--profile", MCU, "--calibration", digits["train"],
                 "--eval", digits["test"], "--weights", "int4", "--qat", "auto", "--train",
                 digits["train"], "--epochs", "1", "-o", str(out), "--report", str(rep)])
    text = capsys.readouterr().out
    assert code == 0, text
    qat = json.loads(rep.read_text())["qat"]
    drop = qat["ptq_accuracy"]["float_accuracy"] - qat["ptq_accuracy"]["converted_accuracy"]
    # Whichever way the measured loss falls, the report and the output say which, and why.
    assert qat["trained"] is (100 * drop > 1.0)
    assert ("QAT int4: not run" in text) is (not qat["trained"])
    assert "tolerance 1 pp" in qat["why"]
