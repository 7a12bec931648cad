"""Small real test models, built once with the real TF converter and cached on disk.

``model_path(name)`` returns the ``.tflite`` path, building it on first use. The cache key
includes this file's hash, so editing a builder rebuilds; a file lock makes it safe under
pytest-xdist. Every model has a fixed batch of 1 (static shapes) unless its name says
``dynamic``; weights and calibration data come from fixed seeds.

Models (int8 = full-integer, int8 I/O, per-channel weights):
- ``chain_int8``: conv → strided conv → depthwise → 1x1 conv → avg pool → dense → softmax.
- ``residual_int8``: two residual blocks with ADD skip connections.
- ``inception_int8``: four parallel branches (1x1, 3x3, 5x5, maxpool+1x1) → concat.
- ``unet_int8``: two down-sampling stages, up-sampling with skip concatenations.
- ``mlp_int8``: fully connected only.
- ``chain_float32``: ``chain`` without quantization.
- ``dynamic_float32``: an MLP whose batch dimension stays dynamic (-1 in shape_signature).
- ``large_params_int8``: > 8 MiB of int8 weights (two big dense layers).
- ``unet_tconv_int8``: a U-Net step TFLM can run: strided conv, TRANSPOSE_CONV up-sampling
  (a kernel with a scratch buffer), skip concatenation.
- ``two_heads_int8``: two graph outputs (REDUCE_MAX and MEAN heads, both with scratch buffers).
- ``gap_float32``: conv → float MEAN → dense.
- ``if_float32``: an IF whose branches are subgraphs (control flow), float, from a
  ``tf.function``.
- ``leaky_mid_int8``: conv → conv → LeakyReLU (not an Edge TPU op) → conv → mean → dense.
- ``grouped_conv_int8``: one grouped conv (CONV_2D v6, newer than Edge TPU compiler 16.0).
- ``dynamic_int8``: ``dynamic_float32``'s dynamic-batch MLP, full-integer quantized.
- ``edgetpu_limits_int8``: conv → stride-2 slice → 4-D softmax → mean over 6 channels → dense
  (each breaks an Edge TPU op constraint).
- ``branches_int8``: two wide branches that the converter of a SavedModel export
  interleaves (both wide tensors live at once in file order; running one branch to its end
  first lowers the peak).
- ``mobilenet_v1_96_int8`` / ``mobilenet_v2_96_int8``: MobileNet v1 (α 0.25, 96×96×1, the
  person-detection layout) and a MobileNetV2-style net (inverted residuals, 96×96×3).
- ``deep_mlp_int8``: 200 fully connected operators (a long graph for report sizes).
- ``chain_dynamic`` / ``chain_float16`` / ``chain_int16x8``: ``chain`` converted with
  dynamic-range quantization (int8 weights, float activations: "hybrid"), with float16
  weights (DEQUANTIZE ops feed the float kernels) and as int16 activations with int8 weights.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ZOO_ROOT = Path(__file__).parent / "artifacts" / "zoo"
_KEY = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def _keras():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    keras.utils.set_random_seed(0)
    return keras


def _chain():
    k = _keras()
    x = inp = k.Input((32, 32, 3), batch_size=1)
    x = k.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = k.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = k.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = k.layers.Conv2D(24, 1, activation="relu")(x)
    x = k.layers.AveragePooling2D(2)(x)
    x = k.layers.Flatten()(x)
    x = k.layers.Dense(10, activation="softmax")(x)
    return k.Model(inp, x)


def _residual():
    k = _keras()
    x = inp = k.Input((24, 24, 4), batch_size=1)
    x = k.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    for _ in range(2):
        y = k.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
        y = k.layers.Conv2D(16, 3, padding="same")(y)
        x = k.layers.Activation("relu")(k.layers.Add()([x, y]))
    x = k.layers.GlobalAveragePooling2D()(x)
    return k.Model(inp, k.layers.Dense(5)(x))


def _inception():
    k = _keras()
    x = inp = k.Input((20, 20, 8), batch_size=1)
    b1 = k.layers.Conv2D(8, 1, activation="relu")(x)
    b2 = k.layers.Conv2D(12, 3, padding="same", activation="relu")(
        k.layers.Conv2D(6, 1, activation="relu")(x))
    b3 = k.layers.Conv2D(4, 5, padding="same", activation="relu")(
        k.layers.Conv2D(4, 1, activation="relu")(x))
    b4 = k.layers.Conv2D(4, 1, activation="relu")(
        k.layers.MaxPooling2D(3, strides=1, padding="same")(x))
    x = k.layers.Concatenate()([b1, b2, b3, b4])
    x = k.layers.Conv2D(16, 1, activation="relu")(x)
    return k.Model(inp, k.layers.GlobalAveragePooling2D()(x))


def _unet():
    k = _keras()
    inp = k.Input((32, 32, 1), batch_size=1)
    d1 = k.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    d2 = k.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(d1)
    d3 = k.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(d2)
    u2 = k.layers.Concatenate()([k.layers.UpSampling2D()(d3), d2])
    u2 = k.layers.Conv2D(16, 3, padding="same", activation="relu")(u2)
    u1 = k.layers.Concatenate()([k.layers.UpSampling2D()(u2), d1])
    u1 = k.layers.Conv2D(8, 3, padding="same", activation="relu")(u1)
    return k.Model(inp, k.layers.Conv2D(1, 1, activation="sigmoid")(u1))


def _mlp(batch: int | None = 1):
    k = _keras()
    inp = k.Input((64,), batch_size=batch)
    x = k.layers.Dense(32, activation="relu")(inp)
    x = k.layers.Dense(16, activation="relu")(x)
    return k.Model(inp, k.layers.Dense(4)(x))


def _large_params():
    k = _keras()
    inp = k.Input((2048,), batch_size=1)
    x = k.layers.Dense(2304, activation="relu")(inp)
    x = k.layers.Dense(2048, activation="relu")(x)
    return k.Model(inp, k.layers.Dense(10)(x))


def _leaky_mid():
    k = _keras()
    x = inp = k.Input((16, 16, 3), batch_size=1)
    x = k.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = k.layers.Conv2D(8, 3, padding="same")(x)
    x = k.layers.LeakyReLU(0.1)(x)
    x = k.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = k.layers.GlobalAveragePooling2D()(x)
    return k.Model(inp, k.layers.Dense(4)(x))


def _grouped_conv():
    k = _keras()
    inp = k.Input((8, 8, 8), batch_size=1)
    return k.Model(inp, k.layers.Conv2D(8, 3, padding="same", groups=2)(inp))


def _unet_tconv():
    k = _keras()
    inp = k.Input((16, 16, 2), batch_size=1)
    d1 = k.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    d2 = k.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(d1)
    u1 = k.layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(d2)
    u1 = k.layers.Concatenate()([u1, d1])
    return k.Model(inp, k.layers.Conv2D(4, 1)(u1))


def _two_heads():
    k = _keras()
    inp = k.Input((12, 12, 3), batch_size=1)
    x = k.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    a = k.layers.GlobalMaxPooling2D()(x)
    b = k.layers.Conv2D(12, 3, strides=2)(x)
    b = k.layers.Dense(6)(k.layers.GlobalAveragePooling2D()(b))
    return k.Model(inp, [a, b])


def _gap():
    k = _keras()
    inp = k.Input((10, 10, 3), batch_size=1)
    x = k.layers.Conv2D(6, 3, activation="relu")(inp)
    x = k.layers.GlobalAveragePooling2D()(x)
    return k.Model(inp, k.layers.Dense(3)(x))


def _if_float32() -> bytes:
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32)])
    def branchy(x):
        y = tf.matmul(x, w)
        return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.nn.relu(tf.matmul(y, w)),
                       lambda: y * 2.0 + 1.0)

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [branchy.get_concrete_function()], branchy)
    return converter.convert()


def _edgetpu_limits():
    k = _keras()
    x = inp = k.Input((8, 8, 3), batch_size=1)
    x = k.layers.Conv2D(6, 3, padding="same", activation="relu")(x)
    x = k.layers.Softmax(axis=-1)(x[:, ::2, :, :])
    x = k.layers.Flatten()(k.ops.mean(x, axis=-1, keepdims=True))
    return k.Model(inp, k.layers.Dense(4)(x))


def _deep_mlp(layers: int = 200):
    """200 fully connected operators: the size test of the HTML report."""
    k = _keras()
    x = inp = k.Input((16,), batch_size=1)
    for i in range(layers):
        x = k.layers.Dense(16 + 8 * (i % 4), activation="relu")(x)
    return k.Model(inp, x)


def convert_keras(model, quantize: bool | str, samples: int = 32, export: bool = False) -> bytes:
    """Convert an in-memory Keras model with the real TFLite converter (test helper).

    ``quantize``: True (full integer int8), False (float32), or one of "dynamic" (int8
    weights, float activations), "float16" (float16 weights) and "int16x8". ``export``:
    through a SavedModel exported with an unnamed input signature even where the traced
    call would do (its file orders parallel branches differently)."""
    import tensorflow as tf

    from devicefit.sdk.convert import traced

    shape = [d if d is not None else 1 for d in model.inputs[0].shape]
    if not export and traced.traceable(model) and None not in model.inputs[0].shape:
        # The product's own fast path (a traced call, no SavedModel: 3-5x cheaper), which
        # writes from_keras_model's file for these layers
        # (tests/sdk/convert/test_convert_traced.py); the export below names the input
        # differently, so its files differ by a few bytes.
        converter, input_name = traced.converter(model)
        return traced.as_exported(_configure(converter, quantize, shape, samples).convert(),
                                  input_name)
    spec = tf.TensorSpec(model.inputs[0].shape, tf.float32)
    # Keras 3 → SavedModel → converter is the path that freezes variables (keras#19108).
    with tempfile.TemporaryDirectory() as saved:
        model.export(saved, format="tf_saved_model", input_signature=[spec], verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        return _configure(converter, quantize, shape, samples).convert()


def _configure(converter, quantize: bool | str, shape: list[int], samples: int):
    import tensorflow as tf

    if quantize == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize:
        rng = np.random.default_rng(0)

        def representative():
            for _ in range(samples):
                yield [rng.normal(0.0, 1.0, size=shape).astype(np.float32)]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        io = tf.int16 if quantize == "int16x8" else tf.int8
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
            if quantize == "int16x8" else tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = io
        converter.inference_output_type = io
    return converter


def _branches():
    k = _keras()
    x = inp = k.Input((16, 16, 4), batch_size=1)
    # Named: with Keras' counters in the names (conv2d_9, conv2d_10 ...) the export's order
    # of the branches changed with what the process had built before.
    a = k.layers.Conv2D(32, 3, padding="same", activation="relu", name="step1_a")(x)
    b = k.layers.Conv2D(32, 3, padding="same", activation="relu", name="step1_b")(x)
    a = k.layers.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="step2_a")(a)
    b = k.layers.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="step2_b")(b)
    y = k.layers.Concatenate()([a, b])
    return k.Model(inp, k.layers.GlobalAveragePooling2D()(y))


def _mobilenet(v2: bool):
    """MobileNet v1 (α 0.25, the person-detection layout) or v2-style inverted residuals
    (α 0.35) at 96×96. He init and a small positive bias keep random activations alive
    through ~30 layers: a dead tensor quantizes to a zero scale, which TFLM aborts on."""
    k = _keras()
    L = k.layers
    init = {"bias_initializer": k.initializers.Constant(0.1)}
    conv = {**init, "kernel_initializer": "he_normal"}
    dw = {**init, "depthwise_initializer": "he_normal", "padding": "same"}
    x = inp = k.Input((96, 96, 1 if not v2 else 3), batch_size=1)
    x = L.Conv2D(8 if not v2 else 16, 3, strides=2, padding="same", activation="relu6", **conv)(x)
    if not v2:
        for ch, stride in [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1),
                           (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)]:
            x = L.DepthwiseConv2D(3, strides=stride, activation="relu6", **dw)(x)
            x = L.Conv2D(ch, 1, activation="relu6", **conv)(x)
    else:
        for ch, stride, repeat in [(8, 1, 1), (8, 2, 2), (16, 2, 3), (24, 2, 4), (32, 1, 3),
                                   (56, 2, 3), (112, 1, 1)]:
            for r in range(repeat):
                y = L.Conv2D(x.shape[-1] * (6 if ch > 8 else 1), 1, activation="relu6", **conv)(x)
                y = L.DepthwiseConv2D(3, strides=stride if r == 0 else 1, activation="relu6",
                                      **dw)(y)
                y = L.Conv2D(ch, 1, **conv)(y)
                x = L.Add()([x, y]) if r > 0 and x.shape[-1] == ch else y
    x = L.GlobalAveragePooling2D()(x)
    return k.Model(inp, L.Dense(2, activation="softmax")(x))


BUILDERS: dict[str, Callable[[], bytes]] = {
    "chain_int8": lambda: convert_keras(_chain(), True),
    "residual_int8": lambda: convert_keras(_residual(), True),
    "inception_int8": lambda: convert_keras(_inception(), True),
    "unet_int8": lambda: convert_keras(_unet(), True),
    "mlp_int8": lambda: convert_keras(_mlp(), True),
    "chain_float32": lambda: convert_keras(_chain(), False),
    "dynamic_float32": lambda: convert_keras(_mlp(batch=None), False),
    "large_params_int8": lambda: convert_keras(_large_params(), True, samples=8),
    "leaky_mid_int8": lambda: convert_keras(_leaky_mid(), True),
    "grouped_conv_int8": lambda: convert_keras(_grouped_conv(), True),
    "dynamic_int8": lambda: convert_keras(_mlp(batch=None), True),
    "edgetpu_limits_int8": lambda: convert_keras(_edgetpu_limits(), True),
    "unet_tconv_int8": lambda: convert_keras(_unet_tconv(), True),
    "two_heads_int8": lambda: convert_keras(_two_heads(), True),
    "gap_float32": lambda: convert_keras(_gap(), False),
    "if_float32": _if_float32,
    # The SavedModel export interleaves the branches (from_keras_model and a traced call
    # run one branch to its end first, which is already the best order).
    "branches_int8": lambda: convert_keras(_branches(), True, export=True),
    "mobilenet_v1_96_int8": lambda: convert_keras(_mobilenet(False), True, samples=8),
    "mobilenet_v2_96_int8": lambda: convert_keras(_mobilenet(True), True, samples=8),
    "deep_mlp_int8": lambda: convert_keras(_deep_mlp(), True, samples=8),
    "chain_dynamic": lambda: convert_keras(_chain(), "dynamic"),
    "chain_float16": lambda: convert_keras(_chain(), "float16"),
    "chain_int16x8": lambda: convert_keras(_chain(), "int16x8", samples=8),
}


def model_path(name: str) -> Path:
    """Path of the cached ``.tflite`` for ``name``, built with the real converter if needed."""
    if name not in BUILDERS:
        raise KeyError(f"unknown zoo model {name!r}; known: {sorted(BUILDERS)}")
    folder = ZOO_ROOT / _KEY
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.tflite"
    if target.exists():
        return target
    with open(folder / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            data = BUILDERS[name]()
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
    return target


if __name__ == "__main__":
    import sys

    for n in sys.argv[1:] or sorted(BUILDERS):
        print(n, model_path(n), model_path(n).stat().st_size)
