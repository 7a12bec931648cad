"""Fused-LSTM test models, written directly as TFLite flatbuffers (no TensorFlow, milliseconds).

No wheel on PyPI ships a fused UNIDIRECTIONAL_SEQUENCE_LSTM ``.tflite`` (the public corpus
has a GRU unrolled as a WHILE loop, ``precise_vad``), and TF 2.21's converter no longer fuses
Keras 3 LSTMs (it fails on TensorList ops). So the LSTM arena and MAC tests use these: the
layout TFLM's micro_speech-sized keyword models have (49 frames × 40 features), 24 LSTM inputs
as the schema orders them, the states as variable tensors, weights from a fixed seed.

- :func:`lstm_model` ``("int8")``: int8 input/weights/hidden state, int16 cell state with a
  power-of-two scale, int32 biases, as TFLM's integer LSTM kernel requires.
- :func:`lstm_model` ``("float32")``: the same in float.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.read.writer import pack

STEPS, FEATURES, UNITS = 49, 40, 64


def _quant(scale: float, zero_point: int = 0) -> fb.QuantizationParametersT:
    q = fb.QuantizationParametersT()
    q.scale, q.zeroPoint = [scale], [zero_point]
    return q


def lstm_model(dtype: str = "int8", steps: int = STEPS, features: int = FEATURES,
               units: int = UNITS) -> bytes:
    """x[1, steps, features] → UNIDIRECTIONAL_SEQUENCE_LSTM(units) → y[1, steps, units]."""
    rng = np.random.default_rng(0)
    integer = dtype == "int8"
    s_in, s_w, s_h = 1 / 32, 1 / 128, 1 / 128
    tensors: list[fb.TensorT] = []
    buffers: list[fb.BufferT] = [fb.BufferT()]

    def tensor(name: str, shape: tuple[int, ...], kind: str, data: np.ndarray | None = None,
               scale: float | None = None, variable: bool = False) -> int:
        t = fb.TensorT()
        t.name, t.shape, t.isVariable = name, list(shape), variable
        t.type = {"int8": fb.TensorType.INT8, "int16": fb.TensorType.INT16,
                  "int32": fb.TensorType.INT32, "float32": fb.TensorType.FLOAT32}[kind]
        if integer and scale is not None:
            t.quantization = _quant(scale)
        t.buffer = 0
        if data is not None:
            b = fb.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
            buffers.append(b)
            t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def weights(name: str, shape: tuple[int, int]) -> int:
        w = rng.standard_normal(shape) * 0.3
        if integer:
            return tensor(name, shape, "int8", np.clip(np.round(w / s_w), -127, 127)
                          .astype(np.int8), s_w)
        return tensor(name, shape, "float32", w.astype(np.float32))

    def bias(name: str) -> int:
        if integer:
            return tensor(name, (units,), "int32", np.zeros(units, np.int32), s_in * s_w)
        return tensor(name, (units,), "float32", np.zeros(units, np.float32))

    act = "int8" if integer else "float32"
    x = tensor("input", (1, steps, features), act, scale=s_in)
    gates = ("input", "forget", "cell", "output")
    i2g = [weights(f"input_to_{g}", (units, features)) for g in gates]
    r2g = [weights(f"recurrent_to_{g}", (units, units)) for g in gates]
    biases = [bias(f"{g}_bias") for g in gates]
    hidden = tensor("output_state", (1, units), act, scale=s_h, variable=True)
    cell = tensor("cell_state", (1, units), "int16" if integer else "float32",
                  scale=2.0 ** -11, variable=True)
    y = tensor("output", (1, steps, units), act, scale=s_h)
    op = fb.OperatorT()
    op.opcodeIndex = 0
    op.inputs = [x, *i2g, *r2g, -1, -1, -1, *biases, -1, -1, hidden, cell, -1, -1, -1, -1]
    op.outputs = [y]
    options = fb.UnidirectionalSequenceLSTMOptionsT()
    options.fusedActivationFunction = fb.ActivationFunctionType.TANH
    op.builtinOptionsType = fb.BuiltinOptions.UnidirectionalSequenceLSTMOptions
    op.builtinOptions = options
    code = fb.OperatorCodeT()
    code.builtinCode = fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    code.deprecatedBuiltinCode, code.version = code.builtinCode, 1
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, [op], [x], [y]
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, [code], [sg], buffers
    return pack(m)
