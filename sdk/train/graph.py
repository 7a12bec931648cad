"""Flatten a Keras 3 model into the ordered list of operations that training runs.

The memory estimator needs, for every operation, which tensors go in and out and how big
they are per sample. Keras keeps that in the functional graph (``Node`` objects with
symbolic ``KerasTensor`` inputs/outputs); nested models are expanded in place so that a
backbone inside a classifier is seen layer by layer, with its tensors shared with the
outer graph. Only Functional and built Sequential models have such a graph; a subclassed
model is refused with a clear message rather than guessed at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from devicefit.simulator.errors import InputError


@dataclass
class Buffer:
    """One activation tensor, by its per-sample element count (batch dimension excluded)."""

    index: int
    elements: int
    is_model_input: bool = False


@dataclass
class Op:
    """One leaf operation (a layer that is not itself a model) in execution order."""

    name: str
    kind: str  # the Keras class name, the key of the rule registry
    layer: Any = field(repr=False)
    inputs: list[int]  # buffer indices
    outputs: list[int]
    trainable_shapes: list[tuple[int, ...]]
    non_trainable_shapes: list[tuple[int, ...]]

    @property
    def trainable_params(self) -> int:
        return sum(math.prod(s) for s in self.trainable_shapes)

    @property
    def non_trainable_params(self) -> int:
        return sum(math.prod(s) for s in self.non_trainable_shapes)


@dataclass
class Graph:
    ops: list[Op]
    buffers: list[Buffer]
    model_outputs: list[int]


def _functional_of(model: Any) -> Any:
    """The Functional graph behind ``model``, or None for a subclassed model."""
    import keras

    if isinstance(model, keras.Sequential):
        # A Sequential built with an Input keeps its graph in ``_functional`` (Keras 3).
        return getattr(model, "_functional", None)
    return model if hasattr(model, "_nodes_by_depth") else None


def _elements(shape: tuple, where: str) -> int:
    dims = tuple(shape)[1:]
    if any(d is None for d in dims):
        raise InputError(
            f"{where} has an unknown dimension in shape {tuple(shape)}; the training-memory "
            "planner needs fixed input shapes (build the model with keras.Input(shape=...))")
    return math.prod(dims) if dims else 1


def trace_model(model: Any) -> Graph:
    """Return the model's leaf operations in a valid execution order with their buffers."""
    buffers: list[Buffer] = []
    ops: list[Op] = []
    seen_layers: set[int] = set()  # a layer called twice shares its weights: count them once

    def new_buffer(tensor: Any, where: str, is_input: bool = False) -> int:
        buffers.append(Buffer(len(buffers), _elements(tensor.shape, where), is_input))
        return len(buffers) - 1

    def expand(fn: Any, mapping: dict[int, int]) -> list[int]:
        for depth in sorted(fn._nodes_by_depth, reverse=True):
            for node in fn._nodes_by_depth[depth]:
                layer = node.operation
                if layer is None or node.is_input:
                    continue
                ins = [mapping[id(t)] for t in node.input_tensors if id(t) in mapping]
                inner = _functional_of(layer)
                if inner is not None:
                    inner_map = {id(t): b for t, b in zip(inner.inputs, ins, strict=True)}
                    outs = expand(inner, inner_map)
                else:
                    outs = [new_buffer(t, f"output of layer '{layer.name}'") for t in node.outputs]
                    owns = id(layer) not in seen_layers
                    seen_layers.add(id(layer))
                    ops.append(Op(
                        name=layer.name, kind=type(layer).__name__, layer=layer, inputs=ins,
                        outputs=outs,
                        trainable_shapes=[tuple(w.shape) for w in
                                          getattr(layer, "trainable_weights", [])] if owns else [],
                        non_trainable_shapes=[tuple(w.shape) for w in getattr(
                            layer, "non_trainable_weights", [])] if owns else []))
                for t, b in zip(node.outputs, outs, strict=True):
                    mapping[id(t)] = b
        return [mapping[id(t)] for t in fn.outputs]

    fn = _functional_of(model)
    if fn is None:
        raise InputError(
            f"model '{getattr(model, 'name', model)}' has no layer graph (a subclassed model or "
            "a Sequential without an Input); build it as a Functional or Sequential model with "
            "keras.Input(shape=...) to plan its training memory")
    mapping = {id(t): new_buffer(t, f"input '{t.name}'", is_input=True) for t in fn.inputs}
    outputs = expand(fn, mapping)
    return Graph(ops=ops, buffers=buffers, model_outputs=outputs)
