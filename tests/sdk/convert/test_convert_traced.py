"""The Keras conversion from a traced call (sdk/convert/traced.py) writes the file that
``from_keras_model``'s SavedModel export writes, and models it was not shown for keep the
export. The wider comparison (the search families, the digits CNN, every scheme) is
benchmarks/bench_conversion.py; here one tiny model, converted both ways in this process."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")


def _keras():
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _tiny():
    k = _keras()
    inp = k.Input((6, 6, 1), name="image")
    x = k.layers.ReLU(name="relu")(k.layers.BatchNormalization(name="bn")(
        k.layers.Conv2D(4, 3, name="conv")(inp)))
    return k.Model(inp, k.layers.Dense(3, name="head")(k.layers.Flatten(name="flat")(x)),
                   name="tiny")


def test_the_traced_call_writes_the_bytes_the_savedmodel_export_writes():
    from devicefit.sdk.convert import loading, quantize, traced
    from devicefit.simulator.read.reader import parse_model

    loaded = loading.load(_tiny())
    assert traced.traceable(quantize.batch_of_one(loaded))
    # Float I/O around int8: the quantizer's QUANTIZE/DEQUANTIZE tensors are named after
    # the I/O tensors, which the exported file names after the SavedModel signature.
    settings = quantize.QuantSettings("int8", "float32", True)
    calibration = np.random.default_rng(0).random((4, 6, 6, 1), dtype=np.float32)
    exported = quantize.to_tflite(loaded, settings, calibration, export=True)
    assert quantize.to_tflite(loaded, settings, calibration) == exported
    graph = parse_model(exported).subgraphs[0]
    names = [graph.tensors[i].name for i in (*graph.inputs, *graph.outputs)]
    assert names == ["serving_default_input:0", "StatefulPartitionedCall_1:0"]


def test_models_the_trace_was_not_shown_for_keep_the_export():
    from devicefit.sdk.convert import traced

    k = _keras()
    seq = k.Input((10, 4))
    pad = k.Input((8, 8, 3))
    flat = k.Input((8,))

    class Scale(k.layers.Layer):  # a user's layer: nothing known about its conversion
        def call(self, x):
            return x * 2.0

    not_shown = {
        "recurrent": k.Model(seq, k.layers.Dense(2)(k.layers.LSTM(4, unroll=True)(seq))),
        "zero padding": k.Model(pad, k.layers.DepthwiseConv2D(3)(k.layers.ZeroPadding2D(1)(pad))),
        "two outputs": k.Model(flat, [k.layers.Dense(2)(flat), k.layers.Dense(3)(flat)]),
        "custom layer": k.Model(flat, Scale()(flat)),
    }
    for why, model in not_shown.items():
        assert not traced.traceable(model), why
    inner = k.Sequential([k.Input((8,)), k.layers.Dense(4, activation="relu")], name="inner")
    assert traced.traceable(k.Model(flat, k.layers.Dense(2)(inner(flat))))
    inner.add(Scale())
    assert not traced.traceable(k.Model(flat, k.layers.Dense(2)(inner(flat))))
