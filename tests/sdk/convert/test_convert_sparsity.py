"""Structured sparsity on Keras 3 models: N:M masks and channel pruning that rewires layers.

The rewiring tests zero a known half of the channels first (filters, BatchNorm scale and
shift), so those are the ones pruning must remove, and the smaller model must then compute
exactly what the original computes.
"""

from __future__ import annotations

import numpy as np
import pytest

from devicefit.sdk.convert import sparsity
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profiles import load_profile

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def keras():
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _branchy(keras):
    """Residual add, concatenation, depthwise conv, BatchNorm, global pooling."""
    L = keras.layers
    inp = keras.Input((8, 8, 3))
    a = L.Conv2D(8, 3, padding="same", use_bias=False, name="a")(inp)
    a = L.ReLU()(L.BatchNormalization(name="bn_a")(a))
    b1 = L.Conv2D(8, 1, activation="relu", name="b1")(a)
    b2 = L.DepthwiseConv2D(3, padding="same", name="dw")(a)
    b2 = L.Conv2D(8, 1, activation="relu", name="b2")(b2)
    cat = L.Concatenate(name="cat")([b1, b2])
    c = L.Conv2D(16, 3, padding="same", activation="relu", name="c")(cat)
    d = L.Conv2D(16, 3, padding="same", activation="relu", name="d")(c)
    x = L.Add(name="res")([c, d])
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(12, activation="relu", name="fc")(x)
    return keras.Model(inp, L.Dense(4, name="out")(x))


def _sequential(keras):
    L = keras.layers
    return keras.Sequential([keras.Input((6, 6, 1)), L.Conv2D(8, 3, name="s1"),
                             L.BatchNormalization(name="sbn"), L.ReLU(),
                             L.Conv2D(8, 3, activation="relu", name="s2"), L.Flatten(),
                             L.Dense(6, activation="relu", name="sfc"), L.Dense(3, name="sout")])


def _zero_channels(model, groups: dict[tuple[str, ...], np.ndarray]) -> None:
    """Zero the given output channels of every producer in a group (and their BatchNorm)."""
    for layers, channels in groups.items():
        for name in layers:
            layer = model.get_layer(name)
            weights = layer.get_weights()
            if type(layer).__name__ == "BatchNormalization":
                weights[0][channels] = 0.0  # gamma
                weights[1][channels] = 0.0  # beta
            else:
                weights[0][..., channels] = 0.0
                if len(weights) > 1:
                    weights[1][channels] = 0.0
            layer.set_weights(weights)


@pytest.mark.parametrize("build, groups, expect", [
    pytest.param(_branchy, {("a", "bn_a"): [0, 2, 4, 6], ("b1",): [1, 3, 5, 7],
                            ("b2",): [0, 1, 2, 3], ("c", "d"): list(range(8, 16)),
                            ("fc",): list(range(6))},
                 {"a": (8, 4), "b1": (8, 4), "b2": (8, 4), "c": (16, 8), "d": (16, 8),
                  "fc": (12, 6)}, id="residual-concat-depthwise"),
    pytest.param(_sequential, {("s1", "sbn"): [1, 2, 5, 6], ("s2",): [0, 1, 2, 3],
                               ("sfc",): [3, 4, 5]},
                 {"s1": (8, 4), "s2": (8, 4), "sfc": (6, 3)}, id="sequential-flatten"),
])
def test_channel_pruning_removes_the_zeroed_channels_and_keeps_the_function(
        keras, build, groups, expect):
    model = build(keras)
    _zero_channels(model, {k: np.array(v) for k, v in groups.items()})
    result = sparsity.prune_channels(model, 0.5)
    assert {p.name: (p.before, p.after) for p in result.layers} == expect
    x = np.random.default_rng(0).normal(size=(5, *model.inputs[0].shape[1:])).astype(np.float32)
    np.testing.assert_allclose(result.model.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-5)
    assert result.model.count_params() < 0.5 * model.count_params()


def test_channel_pruning_keeps_output_units_and_unknown_layers_whole(keras):
    L = keras.layers
    inp = keras.Input((4, 4, 2))
    x = L.Conv2D(8, 1, name="before_reshape")(inp)
    x = L.Reshape((16, 8))(x)  # a layer the tracer does not know: its input keeps all channels
    x = L.Conv1D(6, 1, name="after")(x)
    model = keras.Model(inp, L.Dense(3, name="head")(L.Flatten()(x)))
    result = sparsity.prune_channels(model, 0.5)
    assert {p.name: p.after for p in result.layers} == {"after": 3}
    assert result.model.get_layer("head").units == 3


def test_channel_pruning_refuses_subclassed_and_nested_models(keras):
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    inp = keras.Input((4,))
    nested = keras.Model(inp, keras.layers.Dense(2)(inner(inp)))
    with pytest.raises(UsageError, match="nested model"):
        sparsity.prune_channels(nested, 0.5)

    class Custom(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(UsageError, match="subclassed"):
        sparsity.prune_channels(Custom(), 0.5)


def test_nm_mask_keeps_the_n_largest_of_every_m_input_channels():
    kernel = np.arange(1, 3 * 3 * 8 * 2 + 1, dtype=np.float32).reshape(3, 3, 8, 2)
    kernel[0, 0, :4, 0] = [5.0, -9.0, 1.0, 7.0]
    mask = sparsity.nm_mask(kernel, sparsity.NMPattern(2, 4))
    assert mask.shape == kernel.shape
    assert list(mask[0, 0, :4, 0]) == [0.0, 1.0, 0.0, 1.0]
    groups = np.moveaxis(mask, 2, -1).reshape(-1, 4)
    assert (groups.sum(axis=1) == 2).all()


def test_nm_masks_skip_layers_whose_input_channels_do_not_divide(keras):
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, name="d6"),
                              keras.layers.Dense(4, name="d8")])
    masks, skipped = sparsity.nm_masks(model, sparsity.NMPattern(2, 4))
    assert list(masks) == ["d8"]
    assert skipped == {"d6": "6 input channels is not a multiple of 4"}
    sparsity.apply_masks(model, masks)
    kernel = np.asarray(model.get_layer("d8").kernel)
    assert ((kernel.reshape(2, 4, 4) == 0).sum(axis=1) >= 2).all()


@pytest.mark.parametrize("profile, kind, pattern, ok", [
    ("android-arm64-cpu", "n:m", "2:4", True),
    ("android-arm64-cpu", "n:m", "1:4", True),
    ("android-arm64-cpu", "n:m", "2:8", False),
    ("android-arm64-cpu", "n:m", "3:4", False),
    ("stm32l4r5-cortex-m4", "n:m", "2:4", False),
    ("coral-edgetpu", "n:m", "2:4", False),
    ("stm32l4r5-cortex-m4", "channel", None, True),
    ("coral-edgetpu", "channel", None, True),
])
def test_profiles_decide_which_sparsity_is_allowed(profile, kind, pattern, ok):
    prof = load_profile(profile)
    nm = sparsity.parse_nm(pattern) if pattern else None
    if ok:
        sparsity.check_allowed(prof, kind, nm)
    else:
        with pytest.raises(UsageError, match="profile"):
            sparsity.check_allowed(prof, kind, nm)


@pytest.mark.parametrize("text", ["2", "4:2", "0:4", "a:b", "2:2"])
def test_bad_nm_patterns_are_usage_errors(text):
    with pytest.raises(UsageError):
        sparsity.parse_nm(text)
