"""Build the three models the example project (``devicefit.yaml`` beside this file) checks.

A real repository commits the ``.tflite`` files its training pipeline produced; this example
ships the script instead, so that the project runs as it is::

    pip install 'devicefit[convert]'        # TensorFlow, for this script only
    python build_models.py                  # writes models/*.tflite beside devicefit.yaml
    devicefit check devicefit.yaml          # the CI gate (needs no TensorFlow)

The models have the shapes of their real counterparts (a small DS-CNN keyword spotter on 49x10
MFCC frames, MobileNet v1 alpha 0.25 person detection on 96x96 grey images, a dense
autoencoder on 640 spectrogram features) and fixed-seed weights: what the gate judges (flash,
arena, latency, op support) depends on the architecture and the quantization, not on what the
weights learned. Each is converted to full-integer int8 by ``devicefit``'s converter with
calibration data drawn from a fixed seed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
#: The profile each model is converted for (its runtime decides the quantization).
CONVERT_FOR = "stm32l4r5-cortex-m4"


def _alive(keras) -> tuple[dict, dict]:
    """Initializers for untrained weights that keep activations alive through ~30 layers:
    He-normal kernels and a small positive bias. With Keras' defaults some ReLU channels are
    zero for every input, a zero range quantizes to a zero scale, and TFLite-Micro aborts on
    it while allocating (what a trained model never has)."""
    bias = {"bias_initializer": keras.initializers.Constant(0.1)}
    return ({**bias, "kernel_initializer": "he_normal"},
            {**bias, "depthwise_initializer": "he_normal", "padding": "same"})


def _kws(keras):
    """A DS-CNN (Zhang et al., "Hello Edge") narrowed to 32 channels so that it answers in
    100 ms on a 64 MHz Cortex-M4: 12 keywords from 49 MFCC frames x 10."""
    conv, dw = _alive(keras)
    x = inp = keras.Input((49, 10, 1), batch_size=1)
    x = keras.layers.Conv2D(32, (10, 4), strides=2, padding="same", activation="relu",
                            **conv)(x)
    for _ in range(3):
        x = keras.layers.DepthwiseConv2D(3, activation="relu", **dw)(x)
        x = keras.layers.Conv2D(32, 1, activation="relu", **conv)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(12, activation="softmax")(x), name="kws")


def _person_detect(keras):
    """MobileNet v1, alpha 0.25, 96x96x1: TFLite-Micro's person-detection layout."""
    conv, dw = _alive(keras)
    x = inp = keras.Input((96, 96, 1), batch_size=1)
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu6", **conv)(x)
    for channels, stride in [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1),
                             (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)]:
        x = keras.layers.DepthwiseConv2D(3, strides=stride, activation="relu6", **dw)(x)
        x = keras.layers.Conv2D(channels, 1, activation="relu6", **conv)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(2, activation="softmax")(x), name="person")


def _anomaly(keras):
    """Dense autoencoder on 640 features (the MLPerf Tiny anomaly-detection shape)."""
    conv, _ = _alive(keras)
    x = inp = keras.Input((640,), batch_size=1)
    for units in (128, 128, 8, 128, 128):
        x = keras.layers.Dense(units, activation="relu", **conv)(x)
    return keras.Model(inp, keras.layers.Dense(640)(x), name="anomaly")


MODELS: dict[str, Callable] = {
    "kws_int8.tflite": _kws,
    "person_detect_int8.tflite": _person_detect,
    "anomaly_int8.tflite": _anomaly,
}


def build(out: Path) -> list[Path]:
    """Convert every model into ``out``; returns the files written."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    from devicefit.sdk.convert import convert
    from devicefit.simulator.infra.units import format_size

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, (name, make) in enumerate(MODELS.items()):
        keras.utils.set_random_seed(i)
        model = make(keras)
        shape = (200, *model.input_shape[1:])
        samples = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        convert(model, CONVERT_FOR, out / name, calibration=lambda s=samples: s, simulate=False)
        print(f"{out / name}: {format_size((out / name).stat().st_size)}")
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "models",
                        help="folder for the .tflite files (default: models/ beside this file)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE.parents[1]))  # run from a checkout: `python build_models.py`
    from devicefit.sdk.console import native_log

    # TensorFlow's start-up and converter lines go to a log shown only if something fails.
    with native_log() as log:
        try:
            build(args.out)
        except BaseException:
            log.keep = True
            print(f"TensorFlow's log: {log.path}", file=sys.stderr)
            raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
