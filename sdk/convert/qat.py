"""Quantization-aware training for Keras 3, matching the converter's int8 scheme.

tensorflow-model-optimization rejects Keras 3 models, and the TF 2.21 converter's own
fake-quant path is fragile: a ``fake_quant_with_min_max_vars_per_channel`` on a
fully-connected kernel fails to convert ("'tfl.transpose' op has mismatched quantized axes").
So QAT here trains *float* weights to survive the converter's post-training int8
quantization, and then converts them the ordinary way (with calibration data):

* **weights**: per-output-channel symmetric int8 (scale = max|w| / 127, values -127..127),
  as the converter does for Conv/Dense/DepthwiseConv. The model trains on the quantized
  kernel; a float shadow copy takes the updates (the straight-through estimator): after
  every optimizer step, ``shadow += kernel - last_quantized`` and the kernel is set to
  ``quantize(shadow)`` again. BatchNorm folding scales each output channel, which a
  per-channel symmetric scale absorbs exactly, so quantizing the unfolded kernel is the same.
  The final kernels are already on the int8 grid, so converting them changes nothing.
* **activations**: per-tensor asymmetric int8 on every tensor the converter quantizes (a
  layer's output, except Conv/Dense/BatchNorm outputs fused into a following BatchNorm or
  ReLU), with the converter's calibration rule: min/max of the float model's tensor over the
  calibration samples, widened to include 0. Ranges are re-measured before every epoch, so
  they follow the weights as the converter's calibration will.
* **4-bit layers** (``--weights int4``, issue 47): the layers the profile's runtime takes
  int4 weights on train on AI Edge Quantizer's int4 grid instead (symmetric, scale =
  max|w| / 7, values -7..7), per channel or per tensor as the runtime took that layer
  (:func:`int4_layers` reads it from :class:`~sdk.convert.lowbit.LowBitReport`). The
  quantizer then writes those kernels at 4 bits without moving them. Per tensor is exact
  only where no BatchNorm folds into the layer (folding scales each channel).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.finetune import QAT, FineTuneResult, fine_tune, loss_for
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError

if TYPE_CHECKING:
    from devicefit.sdk.convert.lowbit import LowBitReport

log = logging.getLogger(__name__)

WEIGHT_LAYERS = ("Conv1D", "Conv2D", "Conv3D", "Dense", "DepthwiseConv2D")
#: Layers whose output TFLite fuses into the op before them (no quantized tensor between).
FUSING_CONSUMERS = ("BatchNormalization", "ReLU")
FUSED_ACTIVATIONS = ("relu", "relu6")
#: Layers whose output keeps the input's quantization (no new rounding in TFLite).
SAME_SCALE = ("InputLayer", "Dropout", "Flatten", "Reshape", "MaxPooling1D", "MaxPooling2D",
              "GlobalMaxPooling1D", "GlobalMaxPooling2D", "SpatialDropout1D",
              "SpatialDropout2D", "GaussianNoise", "Identity", "ZeroPadding2D", "Cropping2D")


@dataclass
class QATResult:
    fine_tune: list[FineTuneResult] = field(default_factory=list)
    #: Layer names whose kernels trained on the int8 grid / whose outputs were fake-quantized.
    weight_layers: list[str] = field(default_factory=list)
    activation_layers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Grid:
    """The grid a kernel trains on: symmetric, ``bits`` wide, per output channel or one
    scale for the tensor."""

    bits: int = 8
    per_channel: bool = True


INT8 = Grid()


def quantize_weights(kernel: np.ndarray, grid: Grid = INT8) -> np.ndarray:
    """Symmetric rounding to ``grid`` (per output channel: the last axis), back in float."""
    qmax = 2 ** (grid.bits - 1) - 1
    flat = kernel.reshape(-1, kernel.shape[-1]) if kernel.ndim > 1 else kernel[:, None]
    scale = (np.abs(flat).max(axis=0) if grid.per_channel else np.abs(flat).max()) / qmax
    scale = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.round(flat / scale), -qmax, qmax) * scale
    return q.reshape(kernel.shape).astype(kernel.dtype)


def int4_layers(model: Any, report: LowBitReport) -> dict[str, bool]:
    """Keras layer name → per channel, for the layers ``report`` (``--weights int4`` of this
    model) wrote at 4 bits. The converter names a TFLite tensor after the Keras layers
    fused into it (``model_1/conv1_1/convolution;...``): a layer is matched by its name as
    a path segment, with the ``_N`` suffix the converter may add."""
    return int4_layer_names([layer.name for layer in model.layers
                             if type(layer).__name__ in WEIGHT_LAYERS], report)


def int4_layer_names(names: list[str], report: LowBitReport) -> dict[str, bool]:
    """:func:`int4_layers` for the Conv/Dense layer ``names`` of a model that is not loaded
    here (``convert --qat`` knows its model's layers from the TensorFlow process)."""
    out: dict[str, bool] = {}
    for written in report.layers:
        if written.bits != 4:
            continue
        found = [n for n in names if re.search(rf"(^|/){re.escape(n)}(_\d+)?/", written.layer)]
        if len(found) == 1:
            out[found[0]] = written.granularity == "per channel"
        else:  # trains on the int8 grid: PTQ at 4 bits as without QAT
            log.info("int4 layer %s matches Keras layers %s: not trained on the int4 grid",
                     written.layer, found or "none")
    return out


def _depthwise_view(layer: Any, kernel: np.ndarray) -> np.ndarray:
    # TFLite's depthwise output channel is (input channel, multiplier) flattened.
    return kernel.reshape(*kernel.shape[:-2], -1) if type(layer).__name__ == \
        "DepthwiseConv2D" else kernel


class WeightQuantizer:
    """Keeps Conv/Dense kernels on their grid (int8 unless ``grids`` names the layer) with
    float shadow weights (STE)."""

    def __init__(self, layers: list[Any], grids: Mapping[str, Grid] | None = None) -> None:
        self.layers = layers
        self.grids = [(grids or {}).get(layer.name, INT8) for layer in layers]
        self.shadow = [layer.kernel.numpy() for layer in layers]
        self.quantized = [self._quantize(layer, w, g) for layer, w, g in
                          zip(layers, self.shadow, self.grids, strict=True)]
        self._assign()

    @staticmethod
    def _quantize(layer: Any, kernel: np.ndarray, grid: Grid) -> np.ndarray:
        return quantize_weights(_depthwise_view(layer, kernel), grid).reshape(kernel.shape)

    def _assign(self) -> None:
        for layer, q in zip(self.layers, self.quantized, strict=True):
            layer.kernel.assign(q)

    def __call__(self, model: Any = None) -> None:
        for i, layer in enumerate(self.layers):
            self.shadow[i] = self.shadow[i] + (layer.kernel.numpy() - self.quantized[i])
            self.quantized[i] = self._quantize(layer, self.shadow[i], self.grids[i])
        self._assign()


def _consumers(model: Any) -> dict[str, list[Any]]:
    """Layer name → the layers that take its output, from the functional graph."""
    out: dict[str, list[Any]] = {layer.name: [] for layer in model.layers}
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for tensor in node.input_tensors:
                history = getattr(tensor, "_keras_history", None)
                if history is not None:
                    out.setdefault(history[0].name, []).append(layer)
    return out


def _fused_consumer(layer: Any) -> bool:
    kind = type(layer).__name__
    if kind in FUSING_CONSUMERS:
        return True
    return kind == "Activation" and getattr(layer.activation, "__name__", "") in FUSED_ACTIVATIONS


def activation_layers(model: Any) -> list[Any]:
    """Layers whose output the converter stores as its own int8 tensor."""
    consumers = _consumers(model)
    outputs = {t._keras_history[0].name for t in model.outputs}
    chosen = []
    for layer in model.layers:
        kind = type(layer).__name__
        if kind in SAME_SCALE:
            continue
        users = consumers.get(layer.name, [])
        own_activation = getattr(getattr(layer, "activation", None), "__name__", "linear")
        fusable = kind in (*WEIGHT_LAYERS, "BatchNormalization") and own_activation == "linear"
        if fusable and layer.name not in outputs and len(users) == 1 and \
                _fused_consumer(users[0]):
            continue
        chosen.append(layer)
    return chosen


def output_probe(model: Any, layers: list[Any]) -> Any:
    """A model returning the float outputs of ``layers`` (built before any layer is shared)."""
    import keras

    return keras.Model(model.inputs, [layer.output for layer in layers])


def calibrate(probe: Any, x: np.ndarray) -> list[tuple[float, float]]:
    """(min, max) of each probed float tensor over ``x``, widened to include 0 (TFLite)."""
    outs = probe.predict(x, batch_size=256, verbose=0)
    outs = outs if isinstance(outs, list) else [outs]
    return [(min(float(np.min(o)), 0.0), max(float(np.max(o)), 0.0)) for o in outs]


def _fake_quant_layer() -> type[Any]:
    import keras
    from keras import ops

    class FakeQuant(keras.layers.Layer):
        """Per-tensor asymmetric int8 rounding of the forward pass; identity gradient inside
        the range, zero outside (the straight-through estimator with clipping)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.lo = self.add_weight(shape=(), initializer="zeros", trainable=False, name="lo")
            self.hi = self.add_weight(shape=(), initializer="ones", trainable=False, name="hi")

        def call(self, x: Any) -> Any:
            scale = ops.maximum((self.hi - self.lo) / 255.0, 1e-12)
            zero_point = ops.round(-128.0 - self.lo / scale)
            clipped = ops.clip(x, (-128.0 - zero_point) * scale, (127.0 - zero_point) * scale)
            q = (ops.clip(ops.round(clipped / scale) + zero_point, -128.0, 127.0)
                 - zero_point) * scale
            return clipped + ops.stop_gradient(q - clipped)

    return FakeQuant


def build_qat_model(model: Any, layers: list[Any]) -> tuple[Any, list[Any]]:
    """A model that shares ``model``'s layers and fake-quantizes the outputs of ``layers``."""
    import keras

    fake_quant = _fake_quant_layer()
    chosen = {layer.name for layer in layers}
    quantizers: dict[str, Any] = {}

    def call(layer: Any, *args: Any, **kwargs: Any) -> Any:
        out = layer(*args, **kwargs)
        if layer.name not in chosen:
            return out
        quantizers[layer.name] = fake_quant(name=f"{layer.name}_fake_quant")
        return quantizers[layer.name](out)

    qat = keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call)
    return qat, [quantizers[layer.name] for layer in layers]


def quantization_aware_fit(model: Any, data: Dataset, epochs: int, calibration: np.ndarray, *,
                           loss: Any = None, progress: Progress | None = None,
                           int4: Mapping[str, bool] | None = None) -> QATResult:
    """Fine-tune ``model`` in place so that its int8 conversion keeps its accuracy; the
    layers ``int4`` names (→ per channel) train on the int4 grid (:func:`int4_layers`)."""
    if data.y is None:
        raise UsageError(f"{data.source}: quantization-aware training needs labels")
    if epochs < 1:
        raise UsageError("quantization-aware training needs at least one epoch")
    act_layers = activation_layers(model)
    weight_layers = [layer for layer in model.layers if type(layer).__name__ in WEIGHT_LAYERS
                     and getattr(layer, "groups", 1) == 1]
    names = {layer.name for layer in weight_layers}
    unknown = sorted(set(int4 or {}) - names)
    if unknown:
        raise UsageError(f"no Conv/Dense layer named {', '.join(unknown)} to train at 4 bits")
    grids = {name: Grid(4, per_channel) for name, per_channel in (int4 or {}).items()}
    weights = WeightQuantizer(weight_layers, grids)
    probe = output_probe(model, act_layers)
    qat, quantizers = build_qat_model(model, act_layers)
    result = QATResult(weight_layers=[layer.name for layer in weight_layers],
                       activation_layers=[layer.name for layer in act_layers])
    for _ in range(epochs):
        for quantizer, (lo, hi) in zip(quantizers, calibrate(probe, calibration), strict=True):
            quantizer.lo.assign(lo)
            quantizer.hi.assign(hi)
        # One epoch at a time: the ranges are re-measured between epochs.
        result.fine_tune.append(fine_tune(qat, data, 1, loss=loss if loss is not None else
                                          loss_for(model, data.y), on_step_end=weights,
                                          progress=progress, purpose=QAT))
    return result
