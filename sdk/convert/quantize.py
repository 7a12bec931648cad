"""Quantize and write TFLite bytes with the TensorFlow converter, as the profile allows.

Keras 3 models are rebuilt on a batch-1 input; their inference call traced once converts to
the file ``from_keras_model`` writes without its SavedModel export (:mod:`sdk.convert.traced`:
which models, and why the others still go through ``from_keras_model``). SavedModel folders
go through their serving signature traced for a batch of 1.
The batch is fixed at 1: TFLM and the Edge TPU need static shapes, and a device runs one
sample at a time.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from devicefit.sdk.convert import gpu, traced
from devicefit.sdk.convert.loading import LoadedModel
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.target import target_for

log = logging.getLogger(__name__)

#: Schemes that quantize activations and so need calibration data.
FULL_INTEGER = ("int8", "int16x8")
#: I/O types each scheme can have (the converter's own limits).
SCHEME_IO_TYPES: dict[str, tuple[str, ...]] = {
    "int8": ("int8", "uint8", "float32"),
    "int16x8": ("int16", "float32"),
    "float16": ("float32",),
    "dynamic": ("float32",),
    "float32": ("float32",),
}


@dataclass(frozen=True)
class QuantSettings:
    scheme: str
    io_type: str
    per_channel: bool

    @property
    def needs_calibration(self) -> bool:
        return self.scheme in FULL_INTEGER


def resolve(profile: Profile, scheme: str | None, io_type: str | None) -> QuantSettings:
    """The profile's default scheme and I/O type unless asked; refuse what it does not allow."""
    q = profile.quantization
    scheme = scheme or q.default
    # The profile loader keeps q.schemes within what the target executes
    # (``Target.quant_schemes``), so a scheme the profile allows runs on it.
    if scheme not in q.schemes:
        why = gpu.refused_scheme(profile, scheme)
        raise UsageError(f"profile {profile.name} does not allow --scheme {scheme} "
                         f"(its runtime takes: {', '.join(q.schemes)})"
                         + (f": {why}" if why else ""))
    possible = SCHEME_IO_TYPES[scheme]
    allowed = tuple(q.io_types)
    if scheme == "int16x8" and "int16" not in allowed and target_for(profile).int16_io \
            and any(t in allowed for t in ("int8", "uint8")):
        # int16 I/O is to int16x8 what int8 I/O is to int8: a profile taking integer I/O
        # takes the integer type of the scheme (TFLM and LiteRT have int16 kernels for the
        # I/O ops: ``Target.int16_io``); without it the model gets float I/O plus
        # QUANTIZE/DEQUANTIZE ops.
        allowed = ("int16", *allowed)
    if io_type is None:
        # The profile lists I/O types in order of preference (uint8 first for the Edge TPU).
        io_type = next((t for t in allowed if t in possible), "float32")
    elif io_type not in possible:
        raise UsageError(f"--io-type {io_type} is impossible with --scheme {scheme} "
                         f"(possible: {', '.join(possible)})")
    elif io_type not in allowed:
        raise UsageError(f"profile {profile.name} does not allow --io-type {io_type} "
                         f"(allowed: {', '.join(allowed)})")
    return QuantSettings(scheme=scheme, io_type=io_type, per_channel=q.per_channel)


def to_tflite(model: LoadedModel, settings: QuantSettings, calibration: np.ndarray | None,
              progress: Progress | None = None, *, export: bool = False) -> bytes:
    """Convert with the converter; ``calibration`` is required for full-integer schemes.

    ``export``: a Keras model goes through ``from_keras_model``'s SavedModel export even
    where the traced call writes the same file (the test and benchmark of that sameness).
    """
    import tensorflow as tf

    if settings.needs_calibration and calibration is None:
        raise UsageError(f"--scheme {settings.scheme} quantizes activations and needs calibration "
                         "data: --calibration FILE (or 'random', which ruins accuracy)")
    if not model.is_keras:
        return _converted(tf.lite.TFLiteConverter.from_concrete_functions(
            *_saved_model_batch_of_one(model)), settings, calibration, progress)
    keras_model = batch_of_one(model)
    if not export and traced.traceable(keras_model):
        try:
            converter, input_name = traced.converter(keras_model)
            return traced.as_exported(_converted(converter, settings, calibration, progress),
                                      input_name)
        except Exception:  # noqa: BLE001 - the export below fails (or not) on its own terms
            # A model the converter refuses is refused by the export too, but its error
            # names the ops by the exported locations, which diagnose reads to name the layer.
            log.debug("traced conversion failed; converting the SavedModel export", exc_info=True)
    return _converted(tf.lite.TFLiteConverter.from_keras_model(keras_model), settings,
                      calibration, progress)


def _converted(converter: Any, settings: QuantSettings, calibration: np.ndarray | None,
               progress: Progress | None) -> bytes:
    configure(converter, settings, calibration, progress)
    # Keras' exporter prints the exported signature to stdout (library code must not print),
    # and the converter warns about input statistics that integer I/O never needs.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Statistics for quantized inputs")
        return bytes(converter.convert())


def batch_of_one(model: LoadedModel) -> Any:
    """The Keras model behind an input of batch 1, so the file has static shapes.

    A clone rebuilt on a batch-1 input (recurrent layers unrolled, see :func:`_unrolled`)
    keeps one name scope per layer; wrapping the model
    in a new one would prefix every tensor name twice (``cnn_1/cnn_1/conv/...``: 12 KB of
    flash on MobileNetV2). Models ``clone_model`` cannot rebuild (custom layers without a
    config) are wrapped. Either has a known input signature, which plain Keras 3 models
    sometimes lack (keras#19108: '_get_save_spec'), for the traced call
    (:mod:`sdk.convert.traced`) and for ``from_keras_model``'s export alike.
    """
    import keras

    inp = keras.Input(model.input_shape, batch_size=1, name="input")
    source = model.keras_model
    try:
        clone = keras.models.clone_model(source, input_tensors=inp, clone_function=_unrolled)
        clone.set_weights(source.get_weights())
        return clone
    except Exception:  # noqa: BLE001 - any rebuild failure: the wrapper always works
        return keras.Model(inp, source(inp), name=source.name)


def _unrolled(layer: Any) -> Any:
    """A fresh copy of ``layer``; recurrent layers unrolled. With a fixed batch and sequence
    length the loop needs no TensorList ops, whose int8 calibration segfaults in TF 2.21
    (a small Keras LSTM); the unrolled cell is plain FULLY_CONNECTED/ADD/MUL/LOGISTIC/TANH
    and computes the same values."""
    config = layer.get_config()
    if config.get("unroll") is False:
        config["unroll"] = True
    return type(layer).from_config(config)


def _saved_model_batch_of_one(model: LoadedModel) -> tuple[list, object]:
    """The SavedModel's serving signature traced for a batch of 1 (its own may be dynamic)."""
    import tensorflow as tf

    loaded = model.saved_model
    signature = loaded.signatures["serving_default"]
    name = next(iter(signature.structured_input_signature[1]))
    fn = tf.function(lambda x: signature(**{name: x}),
                     input_signature=[tf.TensorSpec((1, *model.input_shape), tf.float32)])
    return [fn.get_concrete_function()], loaded


def configure(converter: Any, settings: QuantSettings, calibration: np.ndarray | None,
              progress: Progress | None = None) -> None:
    """Set a ``TFLiteConverter`` up for ``settings`` (shared with the benchmark's bare run)."""
    import tensorflow as tf

    dtypes = {"int8": tf.int8, "uint8": tf.uint8, "int16": tf.int16, "float32": tf.float32}
    scheme = settings.scheme
    if scheme == "float32":
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if scheme == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif scheme in FULL_INTEGER:
        assert calibration is not None  # to_tflite refuses these schemes without it
        converter.representative_dataset = _representative(calibration, progress)
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if scheme == "int8" else
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        converter.inference_input_type = dtypes[settings.io_type]
        converter.inference_output_type = dtypes[settings.io_type]
    if not settings.per_channel:
        converter._experimental_disable_per_channel = True  # no public switch exists


def _representative(x: np.ndarray, progress: Progress | None) -> Callable[[], Iterator]:
    def gen() -> Iterator[list[np.ndarray]]:
        for i in range(len(x)):
            if progress is not None:
                progress("calibration", i + 1, len(x))
            yield [x[i:i + 1].astype(np.float32)]
    return gen
