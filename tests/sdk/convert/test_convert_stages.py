"""The conversion stages convert and fit share (sdk.convert.stages), on a tiny Keras model in
this process: the kinds apply in order to a copy, trained sparsity is reused only because it
would train to the same weights again, and what a stage cannot do is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from devicefit.sdk.convert import loading, stages
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.quantize import QuantSettings
from devicefit.sdk.convert.sparsity import ChannelRatio, NMPattern
from devicefit.simulator.errors import UsageError
from devicefit.simulator.read.reader import parse_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded():
    import keras

    keras.utils.set_random_seed(0)
    L = keras.layers
    model = keras.Sequential([keras.Input((6, 6, 4)), L.Conv2D(8, 3, name="c1"), L.ReLU(),
                              L.Conv2D(8, 3, activation="relu", name="c2"), L.Flatten(),
                              L.Dense(3, name="out")])
    return loading.load(model)


def test_pruning_then_masks_on_a_copy_then_quantize(loaded):
    before = [w.copy() for w in loaded.keras_model.get_weights()]
    done = stages.run(loaded, stages.Stages((ChannelRatio(0.5), NMPattern(2, 4))),
                      QuantSettings("float32", "float32", True), None)
    # channel pruning first: c1 keeps 4 of 8 filters, so c2 reads 4 input channels, which
    # N:M 2:4 then masks (c1's 4 input channels too)
    assert done.model.get_layer("c1").kernel.shape[-1] == 4
    assert done.model.get_layer("c2").kernel.shape[-2] == 4
    groups = np.moveaxis(done.model.get_layer("c2").kernel.numpy(), -2, -1).reshape(-1, 4)
    assert ((groups != 0).sum(axis=1) <= 2).all()
    assert done.sparsity.masks == 3 and [p.name for p in done.sparsity.pruned_layers] == \
        ["c1", "c2"]
    assert done.fine_tune == []  # no training data: structure only
    assert all(np.array_equal(a, b) for a, b in zip(before, loaded.keras_model.get_weights()))
    assert parse_model(done.tflite).subgraphs[0].operators


def test_quantization_aware_training_needs_calibration(loaded):
    data = Dataset(np.zeros((4, 6, 6, 4), np.float32), np.zeros(4, np.int64), "zeros")
    with pytest.raises(UsageError, match="calibration"):
        stages.run(loaded, stages.Stages(epochs=1, int8_training="qat"),
                   QuantSettings("int8", "int8", True), None, data)


def test_trained_sparsity_is_reused_as_it_would_be_trained_again(loaded):
    rng = np.random.default_rng(0)
    data = Dataset(rng.normal(size=(16, 6, 6, 4)).astype(np.float32),
                   rng.integers(0, 3, 16), "random labels")
    float32 = QuantSettings("float32", "float32", True)
    pruned = stages.Stages((ChannelRatio(0.5),), epochs=1)
    reuse: dict = {}
    first = stages.run(loaded, pruned, float32, None, data, reuse=reuse)
    trained = [w.copy() for w in first.model.get_weights()]
    twin = stages.run(loaded, dataclasses.replace(pruned, int8_training="plain"), float32, None,
                      data, reuse=reuse)
    assert len(twin.fine_tune) == 2 and twin.fine_tune[0] is first.fine_tune[0]
    # the twin's extra epoch trained a copy, not the kept model
    assert all(np.array_equal(a, b) for a, b in zip(trained, first.model.get_weights()))
    # training is seeded: without reuse the sparsity trains to the very same weights
    again = stages.run(loaded, pruned, float32, None, data)
    assert all(np.array_equal(a, b) for a, b in zip(trained, again.model.get_weights()))
