"""Architecture families the search builds candidates from, as data plus one Keras builder each.

A family is a name, the parameters it takes with their defaults, and a builder
``(Params) -> keras.Model``. The built-in ones are the shapes users deploy on
microcontrollers (MCUNet's and the MLPerf Tiny reference models' families):

- ``mbv2``: inverted-residual CNN for images (MobileNetV2 blocks: 1x1 expand, depthwise
  kxk, 1x1 project, residual where shapes allow);
- ``dscnn``: depthwise-separable CNN for audio features (Hello Edge's DS-CNN: a strided
  stem, then depthwise kxk + pointwise 1x1 blocks);
- ``cnn1d``: 1-D CNN for sensor windows (time x channels);
- ``mlp``: dense layers on a flattened window.

A user-written family is ``module:function``: the function takes :class:`Params` and
returns a Keras model; it is imported only in the TensorFlow child (the parent never imports
TensorFlow). Parameters are checked here, without TensorFlow, so that a bad one is one clear
error before any child starts.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devicefit.simulator.errors import UsageError

#: Channels of each stage at width 1.0 (a stage beyond these doubles the last).
_IMAGE_CHANNELS = (16, 24, 32, 64, 96, 160)
_AUDIO_CHANNELS = 64
_SENSOR_CHANNELS = 16
_MLP_UNITS = 64
#: BatchNorm's moving statistics follow the batches this fast (Keras' default 0.99 lags
#: far behind after the few hundred steps of the search's short training, and the int8 file
#: is calibrated and judged in inference mode, on those statistics).
BN_MOMENTUM = 0.9


@dataclass(frozen=True)
class Params:
    """One point of a family's space; a family uses a subset of the fields."""

    #: The input without the batch dimension: (H, W, C) for images and audio features,
    #: (T, C) for sensor windows. Its spatial part is the input resolution.
    input_shape: tuple[int, ...]
    classes: int = 10
    #: Multiplies every layer's channels (rounded to a multiple of 8, at least 8).
    width: float = 1.0
    #: Blocks per stage; each stage after the first halves the resolution.
    depth: tuple[int, ...] = (1, 1, 1)
    kernel: int = 3
    #: Channels of an inverted-residual block's expansion, as a multiple of its input's.
    expansion: int = 4

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _tuples(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON's lists as the tuples Params holds (frozen, hashable)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


Builder = Callable[[Params], Any]


@dataclass(frozen=True)
class Family:
    name: str
    #: What the input is, for messages ("image (H, W, C)").
    input_kind: str
    input_rank: int
    #: Parameters besides input_shape, classes, width and depth that this family uses.
    uses: frozenset[str]
    defaults: Params
    builder: Builder | None = None
    #: The stem and every stage after the first halve the resolution (the CNNs do).
    halving: bool = True

    def params(self, overrides: Mapping[str, Any]) -> Params:
        """The defaults with ``overrides``; a UsageError naming what is wrong."""
        known = {f.name for f in dataclasses.fields(Params)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise UsageError(f"family {self.name}: unknown parameter {', '.join(unknown)} "
                             f"(it takes {', '.join(sorted(self.takes))})")
        unused = sorted(k for k in overrides if k not in self.takes)
        if unused:
            raise UsageError(f"family {self.name} has no parameter {', '.join(unused)} "
                             f"(it takes {', '.join(sorted(self.takes))})")
        params = dataclasses.replace(self.defaults, **_tuples(overrides))
        self.check(params)
        return params

    @property
    def takes(self) -> frozenset[str]:
        return frozenset({"input_shape", "classes", "width", "depth"}) | self.uses

    def check(self, p: Params) -> None:
        where = f"family {self.name}"
        if not isinstance(p.input_shape, tuple) or len(p.input_shape) != self.input_rank or \
                not all(
                isinstance(d, int) and d > 0 for d in p.input_shape):
            raise UsageError(f"{where}: input_shape {_plain(p.input_shape)} is not an "
                             f"{self.input_kind} of positive sizes")
        if not isinstance(p.classes, int) or p.classes < 2:
            raise UsageError(f"{where}: classes {p.classes} (give at least 2)")
        if not isinstance(p.width, (int, float)) or not 0 < p.width <= 4:
            raise UsageError(f"{where}: width {p.width} (a multiplier in (0, 4])")
        if not isinstance(p.depth, tuple) or not p.depth or \
                not all(isinstance(d, int) and 0 < d <= 16 for d in p.depth):
            raise UsageError(f"{where}: depth {_plain(p.depth)} (a list of blocks per stage, "
                             "each 1-16)")
        if not isinstance(p.kernel, int) or p.kernel < 1 or p.kernel % 2 == 0:
            raise UsageError(f"{where}: kernel {p.kernel} (an odd size, 1 or more)")
        if not isinstance(p.expansion, int) or not 1 <= p.expansion <= 8:
            raise UsageError(f"{where}: expansion {p.expansion} (1-8)")
        # The strided stem and every stage after the first halve the resolution: the input
        # must stay at least one pixel/step wide to the end.
        if self.halving and min(p.input_shape[:-1]) < 2 ** len(p.depth):
            raise UsageError(f"{where}: input {list(p.input_shape)} is too small for "
                             f"{len(p.depth)} stages (each halves it)")

    def build(self, params: Params) -> Any:
        assert self.builder is not None  # user families build through their function
        return self.builder(params)


def channels(base: int, width: float) -> int:
    """``base`` x ``width`` rounded to a multiple of 8 (MobileNet's rule), at least 8."""
    return max(8, int(base * width + 4) // 8 * 8)


def _stage_channels(table: tuple[int, ...], stage: int) -> int:
    return table[stage] if stage < len(table) else table[-1] * 2 ** (stage - len(table) + 1)


def build_mbv2(p: Params) -> Any:
    import keras
    from keras import layers

    inp = keras.Input(p.input_shape)
    x = layers.Conv2D(channels(_IMAGE_CHANNELS[0], p.width), 3, strides=2, padding="same",
                      use_bias=False)(inp)
    x = layers.ReLU(6.0)(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
    for stage, blocks in enumerate(p.depth):
        out = channels(_stage_channels(_IMAGE_CHANNELS, stage), p.width)
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _inverted_residual(x, out, stride, p.kernel, p.expansion)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(p.classes)(x), name="mbv2")


def _inverted_residual(x: Any, out: int, stride: int, kernel: int, expansion: int) -> Any:
    from keras import layers

    start, inp = x, int(x.shape[-1])
    if expansion > 1:
        x = layers.Conv2D(inp * expansion, 1, use_bias=False)(x)
        x = layers.ReLU(6.0)(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
    x = layers.DepthwiseConv2D(kernel, strides=stride, padding="same", use_bias=False)(x)
    x = layers.ReLU(6.0)(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
    x = layers.Conv2D(out, 1, use_bias=False)(x)
    x = layers.BatchNormalization(momentum=BN_MOMENTUM)(x)
    return layers.Add()([start, x]) if stride == 1 and inp == out else x


def build_dscnn(p: Params) -> Any:
    import keras
    from keras import layers

    inp = keras.Input(p.input_shape)
    # Hello Edge's DS-CNN stem: a (10, 4) kernel over (frames, features), stride 2.
    stem = (min(10, p.input_shape[0]), min(4, p.input_shape[1]))
    x = layers.Conv2D(channels(_AUDIO_CHANNELS, p.width), stem, strides=2, padding="same",
                      use_bias=False)(inp)
    x = layers.ReLU()(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
    for stage, blocks in enumerate(p.depth):
        out = channels(_AUDIO_CHANNELS * 2 ** stage, p.width)
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = layers.DepthwiseConv2D(p.kernel, strides=stride, padding="same",
                                       use_bias=False)(x)
            x = layers.ReLU()(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
            x = layers.Conv2D(out, 1, use_bias=False)(x)
            x = layers.ReLU()(layers.BatchNormalization(momentum=BN_MOMENTUM)(x))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(p.classes)(x), name="dscnn")


def build_cnn1d(p: Params) -> Any:
    import keras
    from keras import layers

    inp = keras.Input(p.input_shape)
    x = layers.Conv1D(channels(_SENSOR_CHANNELS, p.width), p.kernel, strides=2,
                      padding="same", activation="relu")(inp)
    for stage, blocks in enumerate(p.depth):
        if stage > 0:
            x = layers.MaxPooling1D(2, padding="same")(x)
        for _ in range(blocks):
            x = layers.Conv1D(channels(_SENSOR_CHANNELS * 2 ** stage, p.width), p.kernel,
                              padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inp, layers.Dense(p.classes)(x), name="cnn1d")


def build_mlp(p: Params) -> Any:
    """``depth`` = hidden layers per stage; each stage halves the units of the one before."""
    import keras
    from keras import layers

    inp = keras.Input(p.input_shape)
    x = layers.Flatten()(inp)
    for stage, blocks in enumerate(p.depth):
        for _ in range(blocks):
            x = layers.Dense(max(8, channels(_MLP_UNITS, p.width) >> stage),
                             activation="relu")(x)
    return keras.Model(inp, layers.Dense(p.classes)(x), name="mlp")


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("mbv2", "image (H, W, C)", 3, frozenset({"kernel", "expansion"}),
           Params((32, 32, 1), depth=(1, 2, 2)), build_mbv2),
    Family("dscnn", "audio feature map (frames, features, 1)", 3, frozenset({"kernel"}),
           Params((49, 10, 1), classes=12, depth=(2, 2)), build_dscnn),
    Family("cnn1d", "sensor window (T, channels)", 2, frozenset({"kernel"}),
           Params((128, 3), classes=6, depth=(1, 1, 1), kernel=5), build_cnn1d),
    Family("mlp", "sensor window (T, channels)", 2, frozenset(),
           Params((128, 3), classes=6, depth=(1, 1)), build_mlp, halving=False),
)}

#: A user family takes every parameter; only the generic checks apply to it.
_USER_CHECKS = Family("user", "input of positive sizes", 0, frozenset({"kernel", "expansion"}),
                      Params((1,)), halving=False)


def family(name: str) -> Family:
    """A built-in family, or a user's ``module:function`` (checked for form only: importing
    it imports TensorFlow, which happens in the conversion child)."""
    if name in FAMILIES:
        return FAMILIES[name]
    module, sep, function = name.partition(":")
    if not sep or not module or not function.isidentifier():
        raise UsageError(f"unknown family '{name}': pick one of {', '.join(FAMILIES)} or "
                         "give a Python function as module:function")
    return dataclasses.replace(_USER_CHECKS, name=name)


def _for_shape(fam: Family, shape: tuple[int, ...]) -> Family:
    """A user family checks the rank the user gave (the built-ins have their own)."""
    if fam.builder is not None:
        return fam
    return dataclasses.replace(fam, input_rank=len(shape), defaults=Params(shape))


def user_params(name: str, overrides: Mapping[str, Any]) -> Params:
    """Parameters for a user family: input_shape is required (there is no default)."""
    if "input_shape" not in overrides:
        raise UsageError(f"family {name}: give input_shape (a user family has no default)")
    given = overrides["input_shape"]
    if not isinstance(given, (list, tuple)):
        raise UsageError(f"family {name}: input_shape {given} (a list of sizes)")
    return _for_shape(family(name), tuple(given)).params(overrides)


def params_from_dict(name: str, data: Mapping[str, Any]) -> Params:
    """The inverse of :meth:`Params.to_dict` (every field given), checked for ``name``."""
    params = Params(**_tuples(data))
    _for_shape(family(name), params.input_shape).check(params)
    return params


def params_for(name: str, overrides: Mapping[str, Any]) -> Params:
    fam = family(name)
    return fam.params(overrides) if fam.builder is not None else user_params(name, overrides)


def builder(name: str) -> Builder:
    """The function that builds ``name``'s models (imports a user's module; in the child)."""
    fam = family(name)
    if fam.builder is not None:
        return fam.builder
    module, _, function = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), function)
    except ImportError as exc:
        raise UsageError(f"family {name}: cannot import {module} ({exc})") from None
    except AttributeError:
        raise UsageError(f"family {name}: {module} has no function {function}") from None
    if not callable(found):
        raise UsageError(f"family {name}: {function} is not a function")
    return found


def built(build: Builder, name: str, params: Params, seed: int) -> Any:
    """``build(params)`` with seeded random weights (the screen and the training build the
    same model); what it returns must be Keras, with the input it was asked for."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build(params)
    if not isinstance(model, keras.Model):
        raise TypeError(f"family {name} returned a {type(model).__name__}, not a keras.Model")
    if tuple(model.input_shape[1:]) != params.input_shape:
        raise ValueError(f"family {name} built input {list(model.input_shape[1:])} "
                         f"for input_shape {list(params.input_shape)}")
    return model
