"""The TensorFlow half of ``convert``: load → data → float reference → the conversion stages
(:mod:`sdk.convert.stages`: sparsity, fine-tuning, quantize) → float baseline.

It runs in the conversion child process (:mod:`sdk.convert.tfprocess`) for models given as
paths, so a segfault or hang inside TensorFlow cannot take the CLI down; an in-memory Keras
model (TensorFlow already loaded by the caller) runs it in-process. Both get the same
:class:`TFRequest` and return the same :class:`TFResult`; data arrive through a callback
once the model's input shape is known, because the parent loads and checks data files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from devicefit.sdk.convert import diagnose, loading, quantize, sparsity, stages
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.distill import DistillSettings
from devicefit.sdk.convert.stages import Stages, StageStart
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import DevicefitError, UsageError

#: Samples per forward pass of the float reference. Small: activations of a batch dominate
#: memory (256 peaked at 3.3 GB RSS for a 0.6 MB model), and speed hardly changes past 32.
REFERENCE_BATCH = 32


@dataclass(frozen=True)
class TFRequest:
    """Everything the TensorFlow stages need, JSON-serializable (it crosses a process)."""

    model: str
    profile: str
    runtime: str
    scheme: str
    io_type: str
    per_channel: bool
    unsafe: bool = False
    #: Sparsity kinds to apply in order, each in its YAML form (``sparsity.from_mapping``).
    sparsity: list[dict[str, Any]] = field(default_factory=list)
    epochs: int = 0
    distill: bool = False
    #: Also convert the unpruned float32 model (the "before" of a report).
    baseline: bool = False
    #: ``--qat``: "qat" trains ``epochs`` on the int8 grid, the layers ``int4`` names (with
    #: whether per channel) on the int4 grid (:mod:`sdk.convert.qat`); the request's scheme is
    #: then float32, and AI Edge Quantizer quantizes the trained model.
    int8_training: str | None = None
    int4: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def quant(self) -> quantize.QuantSettings:
        return quantize.QuantSettings(self.scheme, self.io_type, self.per_channel)

    @property
    def stages(self) -> Stages:
        """The conversion stages this request asks for."""
        return Stages(tuple(sparsity.from_mapping(kind) for kind in self.sparsity),
                      self.epochs, DistillSettings() if self.distill else None,
                      "qat" if self.int8_training == "qat" else None,
                      tuple((name, bool(per_channel)) for name, per_channel in self.int4))


@dataclass
class DataBundle:
    calibration: Dataset | None = None
    evaluation: Dataset | None = None
    training: Dataset | None = None


@dataclass
class TFResult:
    tflite: bytes
    source: str
    kind: str
    input_shape: tuple[int, ...]
    converter: str
    #: Bytes the model's weights take as float32 (the "before" size without a baseline file).
    float_weight_bytes: int = 0
    baseline: bytes | None = None
    reference: np.ndarray | None = None
    #: Layer name → class, for messages naming layers.
    layers: dict[str, str] = field(default_factory=dict)
    #: What sparsity did: ``sparsity.SparsityOutcome.to_dict()`` (it crosses a process).
    sparsity: dict[str, Any] | None = None


def run(request: TFRequest, model: Any, supply: Callable[[tuple[int, ...]], DataBundle],
        stage: StageStart, progress: Progress | None = None,
        on_layers: Callable[[dict[str, str]], None] | None = None) -> TFResult:
    """The stages; ``model`` is an in-memory Keras model or ``request.model`` is a path.

    ``on_layers`` gets the model's layers (name → class) as soon as they are known, so a
    crash later can be blamed on the layers TensorFlow handles specially.
    """
    stage("load")  # importing TensorFlow is part of loading (seconds)
    import tensorflow as tf

    loaded = loading.load(request.model if model is None else model, unsafe=request.unsafe)
    if (request.sparsity or request.int8_training) and not loaded.is_keras:
        raise UsageError(f"{loaded.source}: {'pruning' if request.sparsity else '--qat'} needs "
                         "a Keras model (.keras or .h5); a SavedModel can only be quantized")
    layers = _layers(loaded)
    if on_layers is not None:
        on_layers(layers)
    stage("data")
    data = supply(loaded.input_shape)
    result = TFResult(tflite=b"", source=loaded.source, kind=loaded.kind,
                      input_shape=loaded.input_shape, converter=f"tensorflow {tf.__version__}",
                      float_weight_bytes=_float_weight_bytes(loaded), layers=layers)
    if data.evaluation is not None:
        stage("float reference")
        result.reference = loaded.predict(data.evaluation.x, batch_size=REFERENCE_BATCH)
    calib = None if data.calibration is None else data.calibration.x
    converted = _diagnosed(lambda: stages.run(loaded, request.stages, request.quant, calib,
                                              data.training, progress, stage), request, layers)
    result.tflite = converted.tflite
    result.sparsity = converted.sparsity.to_dict() if request.sparsity else None
    if request.baseline:
        stage("float baseline")
        float32 = quantize.QuantSettings("float32", "float32", request.per_channel)
        result.baseline = result.tflite if request.scheme == "float32" and not request.sparsity \
            else _diagnosed(lambda: quantize.to_tflite(loaded, float32, None), request, layers)
    return result


def _diagnosed(convert: Callable[[], Any], request: TFRequest, layers: dict[str, str]) -> Any:
    """``convert()``, a converter failure as one ConversionError line naming the layers."""
    try:
        return convert()
    except DevicefitError:
        raise
    except Exception as exc:
        if type(exc).__name__ != "ConverterError" and "MLIR" not in str(exc):
            raise
        raise diagnose.ConversionError(diagnose.converter_error(
            str(exc), layers, request.runtime, request.profile)) from exc


def _layers(loaded: loading.LoadedModel) -> dict[str, str]:
    if not loaded.is_keras:
        return {}
    out: dict[str, str] = {}

    def walk(model: Any) -> None:
        for layer in getattr(model, "layers", []):
            out[layer.name] = type(layer).__name__
            if hasattr(layer, "layers"):
                walk(layer)
    walk(loaded.keras_model)
    return out


def _float_weight_bytes(loaded: loading.LoadedModel) -> int:
    variables = loaded.keras_model.weights if loaded.is_keras else loaded.variables
    return 4 * int(sum(np.prod(v.shape) for v in variables))
