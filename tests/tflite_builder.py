"""Tiny hand-built ``.tflite`` models for runtime tests (no TensorFlow, built in milliseconds).

The converter never writes these on purpose: an op TFLM lacks (TOPK_V2), a SLICE whose
constant ``begin`` points far outside its input (parseable, but TFLM's kernel reads out of
bounds and segfaults), and one-op probe models (``tests/op_probe.py`` asks the TFLM wheel
with them which ops and type combinations it accepts).
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as fb
from devicefit.simulator.writer import pack

F32, I32 = fb.TensorType.FLOAT32, fb.TensorType.INT32


def _tensor(name: str, shape: tuple[int, ...], dtype: int, buffer: int) -> fb.TensorT:
    t = fb.TensorT()
    t.name, t.shape, t.type, t.buffer = name, list(shape), dtype, buffer
    return t


def _buffer(data: np.ndarray | None = None) -> fb.BufferT:
    b = fb.BufferT()
    if data is not None:
        b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
    return b


def _opcode(code: int, custom: str | None = None) -> fb.OperatorCodeT:
    oc = fb.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
    oc.customCode = custom
    return oc


def _operator(opcode: int, inputs: list[int], outputs: list[int], options_type: int = 0,
              options=None) -> fb.OperatorT:
    op = fb.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, inputs, outputs
    op.builtinOptionsType, op.builtinOptions = options_type, options
    return op


def _model(codes, tensors, buffers, ops, inputs, outputs) -> bytes:
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, ops, inputs, outputs
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs = 3, codes, [sg]
    m.buffers = [_buffer(), *buffers]  # buffer 0 is the empty sentinel
    return pack(m)


def slice_model(begin: int) -> bytes:
    """x[1, 8] float → SLICE(begin=[0, begin], size=[1, 4]); begin > 4 reads out of bounds."""
    return _model(
        [_opcode(fb.BuiltinOperator.SLICE)],
        [_tensor("x", (1, 8), F32, 0), _tensor("begin", (2,), I32, 1),
         _tensor("size", (2,), I32, 2), _tensor("y", (1, 4), F32, 0)],
        [_buffer(np.array([0, begin], np.int32)), _buffer(np.array([1, 4], np.int32))],
        [_operator(0, [0, 1, 2], [3], fb.BuiltinOptions.SliceOptions, fb.SliceOptionsT())],
        [0], [3])


def topk_model(k: int = 2) -> bytes:
    """x[1, 8] float → RELU → TOPK_V2(k): values and indices. TFLM has no TOPK_V2 kernel."""
    return _model(
        [_opcode(fb.BuiltinOperator.RELU), _opcode(fb.BuiltinOperator.TOPK_V2)],
        [_tensor("x", (1, 8), F32, 0), _tensor("r", (1, 8), F32, 0),
         _tensor("k", (1,), I32, 1), _tensor("values", (1, k), F32, 0),
         _tensor("indices", (1, k), I32, 0)],
        [_buffer(np.array([k], np.int32))],
        [_operator(0, [0], [1]),
         _operator(1, [1, 2], [3, 4], fb.BuiltinOptions.TopKV2Options, fb.TopKV2OptionsT())],
        [0], [3, 4])


def custom_model(custom_code: str) -> bytes:
    """x[1, 8] float → a custom op ``custom_code`` (e.g. a TensorFlow "Flex" op)."""
    return _model(
        [_opcode(fb.BuiltinOperator.CUSTOM, custom_code)],
        [_tensor("x", (1, 8), F32, 0), _tensor("y", (1, 8), F32, 0)], [],
        [_operator(0, [0], [1])], [0], [1])


def probe_model(code: int) -> bytes:
    """One op of builtin ``code`` followed by a custom op no resolver has.

    TFLM looks every op's registration up before it initialises any kernel, so the error
    names the probe op when it is missing, else the custom op: no kernel ever runs.
    """
    return _model(
        [_opcode(code), _opcode(fb.BuiltinOperator.CUSTOM, "devicefit_missing")],
        [_tensor("t", (1,), F32, 0)], [],
        [_operator(0, [], []), _operator(1, [], [])], [0], [0])
