"""Write the trainable ``.tflite`` (runs in a TensorFlow child: ``python -m`` this module).

The pattern is LiteRT's on-device training one: a ``tf.Module`` whose ``tf.function``
signatures ``train``, ``infer``, ``save`` and ``restore`` are converted together with
resource variables. Three choices make it run on a phone's LiteRT as shipped:

- **Only the trained tensors are variables.** The model runs through Keras'
  ``stateless_call`` with the frozen weights as constants, so the converter stores them as
  int8 (dynamic-range quantization) and the variables it must initialise are the few it
  trains. (Keras 3's own variables, saved through the model, came out of the converter with
  no initializer subgraph: LiteRT read garbage from them, NaN.)
- **Builtin operators only.** TensorFlow writes the gradients of ReLU, max pooling and a
  convolution's filter as ``ReluGrad``, ``MaxPoolGrad`` and ``Conv2DBackpropFilter``, which
  LiteRT has only through the Flex delegate (measured with TF 2.21: the converter asks for
  ``SELECT_TF_OPS``). :func:`builtin_gradients` writes the same gradients with builtin
  operators (a comparison and a multiply; a repeat; a convolution of the input by the
  output's gradient), for this process only. Whatever else needs Flex is refused with the
  operators named.
- **save/restore without files**: ``tf.raw_ops.Save``/``Restore`` are Flex ops, so ``save``
  returns the trained tensors and ``restore`` takes them; the app keeps them where it likes.

The optimizer is plain SGD (no state: Adam would add two float32 copies of every trained
tensor).
"""

from __future__ import annotations

import json
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.devtrain.spec import BuildRequest, Update
from devicefit.simulator.errors import InputError, UsageError

#: Batches of the adaptation data the sparse update's ranking reads.
RANK_BATCHES = 4
#: The builder's result, beside the ``model-<i>.tflite`` files in the work folder.
RESULT = "build.json"


@dataclass(frozen=True)
class Built:
    """What the builder reports about the model it wrote."""

    trained: tuple[str, ...]
    trained_parameters: int
    frozen_parameters: int
    #: The sparse update's score per weight tensor (|gradient| x |weight|), else empty.
    scores: tuple[tuple[str, float], ...]


def _relu_grad(op: Any, dy: Any) -> Any:
    import tensorflow as tf

    return dy * tf.cast(op.outputs[0] > 0, dy.dtype)


def _max_pool_grad(op: Any, dy: Any) -> Any:
    """Non-overlapping pooling only (window = stride, VALID): the gradient goes to every
    input equal to its window's maximum (TensorFlow's picks one of tied maxima)."""
    import tensorflow as tf

    size, strides = op.get_attr("ksize"), op.get_attr("strides")
    if list(size) != list(strides) or op.get_attr("padding") != b"VALID":
        raise UsageError(f"training through max pooling of window {size[1:3]} and stride "
                         f"{strides[1:3]} needs TensorFlow's MaxPoolGrad, a Flex op; "
                         "choose an update that stops above it")

    def up(t: Any) -> Any:
        return tf.repeat(tf.repeat(t, size[1], axis=1), size[2], axis=2)

    # Floor pooling drops the rows and columns past the last whole window: no gradient.
    x = op.inputs[0]
    height, width = tf.shape(x)[1], tf.shape(x)[2]
    window = up(op.outputs[0])
    kept_h, kept_w = tf.shape(window)[1], tf.shape(window)[2]
    mask = tf.cast(tf.equal(x[:, :kept_h, :kept_w, :], window), dy.dtype)
    return tf.pad(up(dy) * mask, [[0, 0], [0, height - kept_h], [0, width - kept_w], [0, 0]])


def _conv_grad(op: Any, dy: Any) -> tuple[Any, Any]:
    """The input's gradient as TensorFlow writes it (a TRANSPOSE_CONV in LiteRT); the
    filter's as a convolution of the input, batch and channels swapped, by the output's
    gradient (stride and dilation 1; others are refused)."""
    import tensorflow as tf

    x, w = op.inputs
    strides, dilations = op.get_attr("strides"), op.get_attr("dilations")
    padding = op.get_attr("padding").decode()
    dx = tf.compat.v1.nn.conv2d_backprop_input(tf.shape(x), w, dy, strides, padding,
                                               dilations=dilations)
    if set(strides) | set(dilations) != {1} or padding not in ("SAME", "VALID"):
        raise UsageError("training a convolution's filter with stride or dilation above 1 "
                         "needs TensorFlow's Conv2DBackpropFilter, a Flex op; choose an "
                         "update that leaves it frozen (biases, the last layers)")
    kh, kw = int(w.shape[0]), int(w.shape[1])
    if padding == "SAME":
        x = tf.pad(x, [[0, 0], [(kh - 1) // 2, kh // 2], [(kw - 1) // 2, kw // 2], [0, 0]])
    dw = tf.nn.conv2d(tf.transpose(x, [3, 1, 2, 0]), tf.transpose(dy, [1, 2, 0, 3]),
                      strides=1, padding="VALID")
    return dx, tf.transpose(dw, [1, 2, 0, 3])


@contextmanager
def builtin_gradients() -> Iterator[None]:
    """TensorFlow's gradient registry with :func:`_relu_grad`, :func:`_max_pool_grad` and
    :func:`_conv_grad` in place of the Flex-only ones, restored afterwards. A private table
    (``ops._gradient_registry``): the gradient tape looks gradients up there by op type
    only, so no public override reaches it."""
    from tensorflow.python.framework import ops

    table = ops._gradient_registry._registry
    ours = {"Relu": _relu_grad, "MaxPool": _max_pool_grad, "Conv2D": _conv_grad}
    kept = {name: table[name]["type"] for name in ours}
    try:
        for name, fn in ours.items():
            table[name]["type"] = fn
        yield
    finally:
        for name, fn in kept.items():
            table[name]["type"] = fn


def _is_bias(path: str) -> bool:
    return path.endswith(("/bias", "/beta"))


def _layers_with_weights(model: Any) -> list[Any]:
    return [layer for layer in model.layers if layer.trainable_weights]


def _ranked(model: Any, loss: Any, x: np.ndarray, y: np.ndarray,
            batch: int) -> list[tuple[str, float]]:
    """Every weight tensor with |gradient| x |weight| on the first batches (a first-order
    estimate of the loss change its update can make), highest first."""
    import tensorflow as tf

    totals = np.zeros(len(model.trainable_variables))
    for start in range(0, min(len(x), RANK_BATCHES * batch), batch):
        with tf.GradientTape() as tape:
            value = loss(y[start:start + batch], model(x[start:start + batch], training=False))
        grads = tape.gradient(value, model.trainable_variables)
        totals += [0.0 if g is None else float(tf.norm(g)) for g in grads]
    scores = [(v.path, total * float(tf.norm(v))) for v, total in
              zip(model.trainable_variables, totals)]
    return sorted(scores, key=lambda item: -item[1])


def choose(model: Any, update: Update, scores: list[tuple[str, float]]) -> list[str]:
    """The variable paths ``update`` trains."""
    paths = [v.path for v in model.trainable_variables]
    if update.kind == "biases":
        chosen = [p for p in paths if _is_bias(p)]
        if not chosen:
            raise UsageError("--update biases: the model has no biases or BatchNorm shifts")
        return chosen
    if update.kind == "last":
        layers = _layers_with_weights(model)
        if update.count > len(layers):
            raise UsageError(f"--update last:{update.count}: the model has "
                             f"{len(layers)} layers with weights")
        return [v.path for layer in layers[-update.count:] for v in layer.trainable_weights]
    if update.count > len(scores):
        raise UsageError(f"--update sparse:{update.count}: the model has {len(scores)} "
                         "weight tensors")
    picked = {path for path, _ in scores[:update.count]}
    return [p for p in paths if p in picked]


def _loss(model: Any) -> Any:
    """Sparse categorical cross-entropy on the model's output, from probabilities when its
    last layer is a softmax, from logits otherwise."""
    import keras

    last = model.layers[-1]
    activation = getattr(last, "activation", None)
    probabilities = type(last).__name__ == "Softmax" or \
        getattr(activation, "__name__", "") == "softmax"

    def loss(y: Any, out: Any) -> Any:
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            y, out, from_logits=not probabilities))
    return loss


def _module(model: Any, trained: list[str], batch: int, learning_rate: float) -> Any:
    import tensorflow as tf

    paths = [v.path for v in model.trainable_variables]
    values = {v.path: v.numpy() for v in model.trainable_variables}
    fixed = [v.numpy() for v in model.non_trainable_variables]
    loss = _loss(model)
    x_spec = tf.TensorSpec((batch, *model.inputs[0].shape[1:]), tf.float32)
    y_spec = tf.TensorSpec((batch,), tf.int32)
    # Signature argument names: a variable's path with its slashes as underscores.
    names = {p: re.sub(r"\W", "_", p) for p in trained}

    class Trainable(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trained = [tf.Variable(values[p], name=names[p]) for p in trained]

        def forward(self, x: Any) -> Any:
            by_path = dict(zip(trained, self.trained))
            weights = [by_path[p] if p in by_path else tf.constant(values[p]) for p in paths]
            out, _ = model.stateless_call(weights, [tf.constant(a) for a in fixed], x,
                                          training=False)
            return out

        @tf.function(input_signature=[x_spec, y_spec])
        def train(self, x: Any, y: Any) -> dict[str, Any]:
            with tf.GradientTape() as tape:
                value = loss(y, self.forward(x))
            for variable, grad in zip(self.trained, tape.gradient(value, self.trained)):
                variable.assign_sub(learning_rate * grad)
            return {"loss": value}

        @tf.function(input_signature=[x_spec])
        def infer(self, x: Any) -> dict[str, Any]:
            return {"output": self.forward(x)}

        @tf.function(input_signature=[])
        def save(self) -> dict[str, Any]:
            return {names[p]: v.read_value() for p, v in zip(trained, self.trained)}

        @tf.function(input_signature=[tf.TensorSpec(values[p].shape, tf.float32, name=names[p])
                                      for p in trained])
        def restore(self, *tensors: Any) -> dict[str, Any]:
            for variable, value in zip(self.trained, tensors):
                variable.assign(value)
            return {names[p]: v.read_value() for p, v in zip(trained, self.trained)}

    return Trainable()


SIGNATURES = ("train", "infer", "save", "restore")


def _convert(module: Any, saved: Path, int8_frozen: bool, update: str) -> bytes:
    import tensorflow as tf

    tf.saved_model.save(module, str(saved), signatures={
        name: getattr(module, name).get_concrete_function() for name in SIGNATURES})
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved),
                                                         signature_keys=list(SIGNATURES))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.experimental_enable_resource_variables = True
    if int8_frozen:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return bytes(converter.convert())
    except Exception as exc:  # ConverterError; its text names the Flex ops
        flex = re.search(r"TF Select ops: ([^\n]+)", str(exc))
        if flex is None:
            raise
        raise UsageError(f"--update {update} needs TensorFlow ops LiteRT runs only through the "
                         f"Flex delegate ({flex.group(1).strip()}), which phones do not ship "
                         "by default; choose an update that leaves those layers frozen") from exc


def _write(model: Any, update: Update, scores: list[tuple[str, float]],
           request: BuildRequest, out: Path) -> Built:
    """Write the trainable model for ``update`` to ``out``."""
    import keras

    trained = choose(model, update, scores)
    keras.utils.set_random_seed(0)
    with builtin_gradients():
        module = _module(model, trained, request.batch, request.learning_rate)
        out.write_bytes(_convert(module, out.with_suffix(""), request.int8_frozen, str(update)))
    sizes = {v.path: int(np.prod(v.shape)) for v in model.trainable_variables}
    frozen = sum(int(np.prod(v.shape)) for v in model.weights) - sum(sizes[p] for p in trained)
    return Built(tuple(trained), sum(sizes[p] for p in trained), frozen,
                 tuple(scores) if update.kind == "sparse" else ())


def candidates(model: Any) -> list[Update]:
    """What ``--update auto`` weighs: biases, the last K layers for every K (the last of
    them is full fine-tuning), and the sparse update of 1, 2, 4, ... weight tensors short
    of all of them (doubling: K's neighbours differ little in memory or accuracy)."""
    layers = len(_layers_with_weights(model))
    tensors = len(model.trainable_variables)
    sparse = [2 ** i for i in range(tensors.bit_length()) if 2 ** i < tensors]
    return [Update("biases"), *(Update("last", k) for k in range(1, layers + 1)),
            *(Update("sparse", k) for k in sparse)]


def build(request: BuildRequest, folder: Path) -> list[tuple[Update, Built | UsageError]]:
    """Write ``folder/model-<i>.tflite`` for each of ``request.updates`` (``auto``: each of
    :func:`candidates`): what each trains, or why it cannot be written (an update that needs
    a Flex op), in their order. One process for all: TensorFlow's import and the model's
    load are paid once."""
    from devicefit.sdk.convert.loading import load

    loaded = load(request.model)
    if not loaded.is_keras:
        raise InputError(f"{request.model}: adapt needs a Keras model (.keras or .h5)")
    model = loaded.keras_model
    updates = [Update.parse(text) for text in request.updates]
    if updates == [Update("auto")]:
        updates = candidates(model)
    scores: list[tuple[str, float]] = []
    if any(update.kind == "sparse" for update in updates):
        scores = _ranked(model, _loss(model), np.load(request.rank_x),
                         np.load(request.rank_y), request.batch)
    written: list[tuple[Update, Built | UsageError]] = []
    for index, update in enumerate(updates):
        try:
            written.append((update, _write(model, update, scores, request,
                                           folder / model_file(index))))
        except UsageError as exc:
            written.append((update, exc))
    return written


def model_file(index: int) -> str:
    """The file the builder writes the ``index``-th update's model to."""
    return f"model-{index}.tflite"


def main(folder: Path) -> int:
    """Child entry: ``request.json`` in, the models and :data:`RESULT` out: per update what
    it trains or ``{"update", "error": message}``; a model the child cannot read is
    ``{"error": {type, message}}`` for the whole request."""
    request = BuildRequest(**json.loads((folder / "request.json").read_text()))
    try:
        result: dict[str, Any] = {"built": [
            {"update": str(update), "error": str(one)} if isinstance(one, UsageError) else {
                "update": str(update), "trained": list(one.trained),
                "trained_parameters": one.trained_parameters,
                "frozen_parameters": one.frozen_parameters,
                "scores": [list(s) for s in one.scores]}
            for update, one in build(request, folder)]}
    except (UsageError, InputError) as exc:
        result = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    except Exception:
        traceback.print_exc()  # to the child's log, which the parent names
        return 1
    (folder / RESULT).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
