"""Hostile but valid ``.tflite`` models (no TensorFlow): graphs built to be expensive to analyse.

Used by tests/sdk/cli/test_hostile_inputs.py and benchmarks/bench_fuzz.py. Each is a few KB to a few MB and
well-formed; only its shape is adversarial.
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.read.writer import pack
from tests.tflite_builder import F32, _buffer, _opcode, _operator, _tensor

BOOL = fb.TensorType.BOOL


def _pack(codes, subgraphs) -> bytes:
    m = fb.ModelT()
    m.version, m.operatorCodes, m.subgraphs = 3, codes, subgraphs
    m.buffers = [_buffer()]
    return pack(m)


def _subgraph(tensors, ops, inputs, outputs) -> fb.SubGraphT:
    sg = fb.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs = tensors, ops, inputs, outputs
    return sg


def nested_if(depth: int) -> bytes:
    """Subgraph k (k < depth) is one IF whose *both* branches call subgraph k + 1; the last
    is a RELU. Expanded naively, the main graph runs 2**depth RELUs."""
    codes = [_opcode(fb.BuiltinOperator.IF), _opcode(fb.BuiltinOperator.RELU)]
    subgraphs = []
    for k in range(depth + 1):
        tensors = [_tensor("cond", (1,), BOOL, 0), _tensor("x", (1, 8), F32, 0),
                   _tensor("y", (1, 8), F32, 0)]
        if k < depth:
            options = fb.IfOptionsT()
            options.thenSubgraphIndex = options.elseSubgraphIndex = k + 1
            ops = [_operator(0, [0, 1], [2], fb.BuiltinOptions.IfOptions, options)]
        else:
            ops = [_operator(1, [1], [2])]
        subgraphs.append(_subgraph(tensors, ops, [0, 1], [2]))
    return _pack(codes, subgraphs)


def relu_chain(operators: int) -> bytes:
    """x → RELU → RELU → ... (``operators`` of them), each tensor [1, 8] float."""
    tensors = [_tensor(f"t{i}", (1, 8), F32, 0) for i in range(operators + 1)]
    ops = [_operator(0, [i], [i + 1]) for i in range(operators)]
    return _pack([_opcode(fb.BuiltinOperator.RELU)],
                 [_subgraph(tensors, ops, [0], [operators])])


def unused_tensors(count: int) -> bytes:
    """One RELU and ``count`` activation tensors no operator touches (TFLM still plans them)."""
    tensors = [_tensor("x", (1, 8), F32, 0), _tensor("y", (1, 8), F32, 0)]
    tensors += [_tensor(f"u{i}", (1, 16), F32, 0) for i in range(count)]
    return _pack([_opcode(fb.BuiltinOperator.RELU)],
                 [_subgraph(tensors, [_operator(0, [0], [1])], [0], [1])])


def huge_input(elements: int, dtype: int = F32) -> bytes:
    """x[1, elements] → RELU: a tiny file whose input needs ``elements`` values of memory."""
    tensors = [_tensor("x", (1, elements), dtype, 0), _tensor("y", (1, elements), dtype, 0)]
    return _pack([_opcode(fb.BuiltinOperator.RELU)],
                 [_subgraph(tensors, [_operator(0, [0], [1])], [0], [1])])
