"""A converter for a batch-1 Keras model from one traced function, without the SavedModel.

``TFLiteConverter.from_keras_model`` exports the model to a SavedModel in a temporary folder
(Keras' ``ExportArchive``: it traces the call again, tracks every variable, writes a
checkpoint) and loads it back twice before the MLIR conversion: on a small MobileNetV2 that
is about three quarters of the conversion (docs/benchmarks-log.md "Conversion without the
SavedModel export"). Tracing the same call once (``training=False``, the exporter's input
signature) and converting the concrete function freezes the same graph in memory; the
MLIR passes, calibration and quantization are the same, so the file is the same except
for what the SavedModel itself names: the input (``serving_default_<name>:0``), the output
(the signature's ``StatefulPartitionedCall_1:0``), the signature (``serving_default``,
outputs ``output_0``...) and the conversion metadata's model type. :func:`as_exported` puts
those back, so the bytes are those ``from_keras_model`` writes.

That is shown, not derived: the Python freeze and the SavedModel importer name some fused
tensors differently, so only models made of layers whose conversion was compared byte for
byte take this path (:data:`SAME_FILE_LAYERS`, checked by ``benchmarks/bench_conversion.py``
and tests/sdk/convert/test_convert_traced.py); the rest keep ``from_keras_model``:

- a layer of any other class (custom layers, Lambda, subclasses of the listed ones);
- ``ZeroPadding2D``: before a DepthwiseConv2D (MobileNet's stride-2 blocks) the exported
  file names the fused weights ``...depthwise;;...Pad`` (an empty name between), the
  traced one ``...depthwise;...Pad``;
- recurrent layers (unrolled, :func:`quantize._unrolled`): an unrolled Keras LSTM keeps
  one SPLIT in float32 between DEQUANTIZE/QUANTIZE that the exported model has in int8;
- more than one input or output: the exporter's signature orders its keys by name
  (``output_10`` before ``output_2``), the concrete function by position.

A traced conversion that fails is done again through the export (:func:`quantize.to_tflite`),
so a refused model gets the export's error, whose MLIR locations :mod:`sdk.convert.diagnose`
reads to name the layer.
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: The exporter's serving signature and output keys (Keras' ``ExportArchive``).
SIGNATURE_KEY = "serving_default"
OUTPUT_KEY = "output_0"
#: The exported output: the serving signature's call of the endpoint, output 0.
EXPORTED_OUTPUT = "StatefulPartitionedCall_1:0"


#: Keras layer classes (exact: not their subclasses) of the models whose traced conversion
#: was compared with ``from_keras_model``'s byte for byte; nested Functional and Sequential
#: models are looked into.
SAME_FILE_LAYERS = frozenset({
    "InputLayer", "Conv1D", "Conv2D", "Conv2DTranspose", "DepthwiseConv2D", "Dense",
    "BatchNormalization", "ReLU", "LeakyReLU", "Activation", "Softmax", "Dropout", "Add",
    "Concatenate", "MaxPooling1D", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling1D",
    "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten", "Reshape", "UpSampling2D",
    "Resizing",
})
_NESTED = ("Functional", "Sequential")


def traceable(model: Any) -> bool:
    """Whether ``model`` (the batch-1 Keras model) converts to the same file from a traced
    call: one input, one output, and only layers of :data:`SAME_FILE_LAYERS`."""
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return False
    return _known_layers(model)


def _known_layers(model: Any) -> bool:
    import keras

    for layer in model.layers:
        kind = type(layer)
        if kind.__name__ in _NESTED and isinstance(layer, keras.Model):
            if not _known_layers(layer):
                return False
        elif kind.__name__ not in SAME_FILE_LAYERS or not kind.__module__.startswith("keras."):
            return False
    return True


def converter(model: Any) -> tuple[Any, str]:
    """A ``TFLiteConverter`` of ``model``'s inference call traced for its batch-1 input, and
    the input's name. The call is traced as the exporter traces it (``training=False``, a
    ``TensorSpec`` named like the input), so the frozen graph's ops are named the same."""
    import tensorflow as tf
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as metadata

    (inp,) = model.inputs
    spec = tf.TensorSpec(inp.shape, dtype=inp.dtype, name=inp.name)
    fn = tf.function(functools.partial(model.__call__, training=False), input_signature=[spec])
    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], model)
    # With a trackable object the converter would save a SavedModel after all
    # (``_convert_concrete_functions_to_saved_model``); without one it warns (deprecated).
    conv.experimental_lower_to_saved_model = False
    # The conversion metadata records where the model came from: a Keras model, as with
    # ``from_keras_model`` (no public setter).
    conv._metadata.environment.modelType = metadata.ModelType.KERAS_MODEL
    return conv, inp.name


def as_exported(tflite: bytes, input_name: str) -> bytes:
    """``tflite`` with the input, output and signature named as ``from_keras_model`` names
    them (the SavedModel's), re-serialized the way the converter serializes its result."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(tflite)
    (graph,) = model.subgraphs
    (inp,), (out,) = graph.inputs, graph.outputs
    exported = {graph.tensors[inp].name.decode(): f"{SIGNATURE_KEY}_{input_name}:0",
                graph.tensors[out].name.decode(): EXPORTED_OUTPUT}
    # The quantizer names the tensors it adds at the I/O after them: ``input_int16``,
    # ``Identity1`` (float or uint8 I/O around an int8 model).
    derived = re.compile("(" + "|".join(map(re.escape, exported)) + r")(_u?int\d+|\d+)?")
    for tensor in graph.tensors:
        parts = tensor.name.decode().split(";")
        renamed = [exported[m[1]] + (m[2] or "") if (m := derived.fullmatch(part)) else part
                   for part in parts]
        tensor.name = ";".join(renamed).encode()
    signature = schema.SignatureDefT()
    signature.signatureKey = SIGNATURE_KEY.encode()
    signature.subgraphIndex = 0
    signature.inputs = [_tensor_map(input_name, inp)]
    signature.outputs = [_tensor_map(OUTPUT_KEY, out)]
    model.signatureDefs = [signature]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _tensor_map(name: str, index: int) -> Any:
    from tensorflow.lite.python import schema_py_generated as schema

    entry = schema.TensorMapT()
    entry.name = name.encode()
    entry.tensorIndex = int(index)
    return entry
