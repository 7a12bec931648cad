"""QAT for 4-bit layers (issue 47): the layers ``--weights int4`` writes at 4 bits for a
profile train on AI Edge Quantizer's int4 grid, per channel or per tensor as the runtime
took them, so that the quantizer then writes exactly the trained kernels.

The end-to-end test trains the digits CNN one QAT epoch for the STM32L4R5 (TFLM: int4 convs
per channel, fully connected per tensor) and reads the int4 codes back from the file."""

from __future__ import annotations

import numpy as np
import pytest

from devicefit.sdk.convert import loading, quantize
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.lowbit import LayerWeights, LowBitReport
from devicefit.sdk.convert.qat import Grid, int4_layers, quantize_weights
from devicefit.sdk.convert.stages import Stages, run
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.model import WEIGHTS_INPUT
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import unpack
from examples.digits import build_cnn, cached_cnn, load_digits
from tests.paths import TESTS

PROFILE = "stm32l4r5-cortex-m4"


def _codes(w: np.ndarray, per_channel: bool, qmax: int = 7) -> np.ndarray:
    """``w`` (output channel last) divided by its symmetric scale: integers on the grid."""
    flat = w.reshape(-1, w.shape[-1])
    scale = (np.abs(flat).max(axis=0) if per_channel else np.abs(flat).max()) / qmax
    return (flat / scale).reshape(w.shape)


@pytest.mark.parametrize("per_channel", [True, False])
def test_the_int4_grid_has_fifteen_levels_and_keeps_each_scale(per_channel):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3, 4, 8)).astype(np.float32) * np.arange(1, 9)
    q = quantize_weights(w, Grid(4, per_channel))
    codes = _codes(q, per_channel)
    assert np.allclose(codes, np.round(codes), atol=1e-4) and np.abs(codes).max() <= 7 + 1e-4
    flat, qflat = w.reshape(-1, 8), q.reshape(-1, 8)
    if per_channel:  # each channel's largest weight stays where it was: the scale holds
        assert np.allclose(np.abs(qflat).max(0), np.abs(flat).max(0))
        assert all(len(np.unique(qflat[:, c])) <= 15 for c in range(8))
    else:
        assert np.isclose(np.abs(q).max(), np.abs(w).max()) and len(np.unique(q)) <= 15
    # The int8 grid, the default, is much finer.
    assert len(np.unique(quantize_weights(w)[..., 7])) > 15


def _report(*names: tuple[str, int, str]) -> LowBitReport:
    return LowBitReport(tuple(LayerWeights(i, "CONV_2D", layer, bits, granularity, 0)
                              for i, (layer, bits, granularity) in enumerate(names)), "AEQ", 1)


def test_int4_layers_are_found_by_the_keras_names_the_converter_writes():
    import keras

    model = build_cnn()
    report = _report(("digits_cnn_1/relu1_1/Relu;digits_cnn_1/conv1_1/convolution;", 4,
                      "per channel"),
                     ("digits_cnn_1/conv3_1/Relu;digits_cnn_1/conv3_1/BiasAdd;", 8,
                      "per channel"),
                     ("digits_cnn_1/fc1_1/MatMul;digits_cnn_1/fc1_1/Relu;", 4, "per tensor"))
    assert int4_layers(model, report) == {"conv1": True, "fc1": False}
    # "conv1" and "conv1_1" both fit "m/conv1_1/...": neither is guessed.
    inp = keras.Input((4, 4, 1))
    out = keras.layers.Conv2D(2, 1, name="conv1_1")(keras.layers.Conv2D(2, 1, name="conv1")(inp))
    twins = keras.Model(inp, out)
    assert int4_layers(twins, _report(("m/conv1_1/convolution;", 4, "per channel"))) == {}


def test_a_layer_to_train_at_4_bits_that_is_not_there_is_refused():
    from devicefit.sdk.convert.qat import quantization_aware_fit

    digits = load_digits()
    with pytest.raises(UsageError, match="no Conv/Dense layer named nope"):
        quantization_aware_fit(build_cnn(), Dataset(digits.x_train[:8], digits.y_train[:8],
                                                    "digits"), 1, digits.x_train[:8],
                               int4={"nope": True})


def _int4_codes(tflite: bytes) -> dict[str, np.ndarray]:
    """Scope of each int4-weighted op → its weights' int4 values, as stored (low nibble
    first), in TFLite's layout."""
    sg = parse_model(tflite, "m").main
    buffers = unpack(tflite).buffers
    out = {}
    for op in sg.operators:
        t = sg.tensors[op.inputs[WEIGHTS_INPUT[op.op_name]]] if op.op_name in WEIGHTS_INPUT \
            else None
        if t is None or t.dtype != "int4":
            continue
        packed = np.asarray(buffers[t.buffer].data, dtype=np.uint8)
        nibbles = np.stack([packed & 0xF, packed >> 4], axis=1).reshape(-1)[:t.num_elements]
        values = np.where(nibbles > 7, nibbles.astype(np.int16) - 16, nibbles)
        out[sg.tensors[op.outputs[0]].name] = values.reshape(t.shape)
    return out


@pytest.mark.slow
def test_qat_puts_the_4_bit_layers_on_the_grid_and_the_quantizer_keeps_them():
    from devicefit.sdk.fit.int4 import int4_weights

    profile = load_profile(PROFILE)
    digits = load_digits()
    train = Dataset(digits.x_train[:256], digits.y_train[:256], "digits")
    loaded = loading.load(cached_cnn(TESTS / "artifacts" / "convert"))
    _, ptq = int4_weights(loaded, digits.x_train[:64], "digits", profile)
    grid = int4_layers(loaded.keras_model, ptq)
    # TFLM: convs at 4 bits per channel, fully connected per tensor.
    assert grid == {"conv1": True, "conv2": True, "conv3": True, "fc1": False,
                    "classes": False}
    done = run(loaded, Stages(epochs=1, int8_training="qat", int4=tuple(sorted(grid.items()))),
               quantize.resolve(profile, "int8", "int8"), digits.x_train[:64], train)
    kernels = {layer.name: layer.kernel.numpy() for layer in done.model.layers
               if layer.name in grid}
    for name, per_channel in grid.items():
        codes = _codes(kernels[name], per_channel)
        assert np.allclose(codes, np.round(codes), atol=1e-3), name
    tflite, qat = int4_weights(loading.load(done.model), digits.x_train[:64], "digits", profile)
    assert [(w.layer, w.bits, w.granularity) for w in qat.layers] == \
        [(w.layer, w.bits, w.granularity) for w in ptq.layers]
    written = _int4_codes(tflite)
    assert len(written) == 5
    for scope, values in written.items():
        (name,) = [n for n in grid if f"/{n}_1/" in scope]
        kernel = kernels[name]
        # Keras keeps (kh, kw, in, out) and (in, out); TFLite (out, kh, kw, in) and (out, in).
        ours = np.round(_codes(kernel, grid[name])).astype(np.int16)
        ours = np.moveaxis(ours, -1, 0)
        # BatchNorm folds into conv1/conv2 with a per-channel factor whose sign may flip a
        # channel: the codes agree up to that sign.
        assert np.array_equal(np.abs(values), np.abs(ours)), name
        if "bn" not in scope:
            assert np.array_equal(values, ours), name
