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


def convert_keras(model, quantize: bool, samples: int = 32) -> bytes:
    """Convert an in-memory Keras model with the real TFLite converter (test helper)."""
    import tensorflow as tf

    shape = [d if d is not None else 1 for d in model.inputs[0].shape]
    spec = tf.TensorSpec(model.inputs[0].shape, tf.float32)
    # Keras 3 → SavedModel → converter is the path that freezes variables (keras#19108).
    with tempfile.TemporaryDirectory() as saved:
        model.export(saved, format="tf_saved_model", input_signature=[spec], verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        return _configure(converter, quantize, shape, samples).convert()


def _configure(converter, quantize: bool, shape: list[int], samples: int):
    import tensorflow as tf

    if quantize:
        rng = np.random.default_rng(0)

        def representative():
            for _ in range(samples):
                yield [rng.normal(0.0, 1.0, size=shape).astype(np.float32)]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter


BUILDERS: dict[str, Callable[[], bytes]] = {
    "chain_int8": lambda: convert_keras(_chain(), True),
    "residual_int8": lambda: convert_keras(_residual(), True),
    "inception_int8": lambda: convert_keras(_inception(), True),
    "unet_int8": lambda: convert_keras(_unet(), True),
    "mlp_int8": lambda: convert_keras(_mlp(), True),
    "chain_float32": lambda: convert_keras(_chain(), False),
    "dynamic_float32": lambda: convert_keras(_mlp(batch=None), False),
    "large_params_int8": lambda: convert_keras(_large_params(), True, samples=8),
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
