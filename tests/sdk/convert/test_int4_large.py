"""``--weights int4|auto`` on a model whose int8 weights pass 256 KiB: AI Edge Quantizer then
writes the constants after the flatbuffer, which ``convert`` must still write with its
metadata (found on the Japanese Vowels FCN, 269 KiB of int8 weights, for the Edge TPU and
``--weights auto`` under a loose budget)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from devicefit.simulator.read import writer
from devicefit.simulator.read.reader import read_model
from tests.zoo import convert_keras

pytestmark = pytest.mark.slow  # TensorFlow converts the float model; the quantizer calibrates

WIDTH = 600  # a 600x512 Dense: 307,200 int8 weights, past the quantizer's 256 KiB


def _wide_float_tflite() -> bytes:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((WIDTH,), batch_size=1)
    x = keras.layers.Dense(512, activation="relu")(inp)
    return convert_keras(keras.Model(inp, keras.layers.Dense(10)(x)), False)


def test_int8_weights_past_256_kib_are_written_inside_the_file(tmp_path, capsys):
    from devicefit.sdk.cli import main

    source = tmp_path / "wide_float.tflite"
    source.write_bytes(_wide_float_tflite())
    rng = np.random.default_rng(0)
    calibration, evaluation = tmp_path / "cal.npy", tmp_path / "eval.npy"
    np.save(calibration, rng.uniform(0, 1, (8, WIDTH)).astype(np.float32))
    np.save(evaluation, rng.uniform(0, 1, (8, WIDTH)).astype(np.float32))
    out, rep = tmp_path / "wide.tflite", tmp_path / "wide.json"
    # The M4's 1.5 MiB flash holds the all-int8 model: auto keeps every layer at int8.
    code = main(["convert", str(source), "--profile", "stm32l4r5-cortex-m4", "--calibration",
                 str(calibration), "--eval", str(evaluation), "--weights", "auto", "-o",
                 str(out), "--report", str(rep)])
    assert code == 0, capsys.readouterr().err
    assert {w["bits"] for w in json.loads(rep.read_text())["low_bit"]["layers"]} == {8}
    data = out.read_bytes()
    model = writer.unpack(data)  # refuses constants outside the flatbuffer
    assert not any(b.offset for b in model.buffers)
    assert "devicefit" in " ".join(writer.read_metadata(data))
    sg = read_model(out).main
    weights = [sg.tensors[op.inputs[1]] for op in sg.operators
               if op.op_name == "FULLY_CONNECTED"]
    assert sorted(t.nbytes for t in weights) == [5120, WIDTH * 512]
    assert all(t.dtype == "int8" and t.has_data for t in weights)
