"""Work per operator: multiply-accumulates and bytes moved; parameters by dtype.

MACs count the multiply-accumulates of the convolution-like ops exactly from the shapes;
pooling, reductions and element-wise ops count one operation per output (or input)
element and window position, so the latency model sees their work too. Bytes moved are the
bytes of every input (weights included) and output an operator touches once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.model import Model, Operator, Subgraph, Tensor


@dataclass(frozen=True)
class OpWork:
    op_index: int
    op: str
    macs: int
    bytes_moved: int
    #: dtype the op computes in (its first input's), for the cost model.
    dtype: str = ""


def _t(sg: Subgraph, refs: tuple[int, ...], i: int) -> Tensor | None:
    return sg.tensors[refs[i]] if i < len(refs) and refs[i] >= 0 else None


def _dims(t: Tensor | None, *index: int) -> int:
    n = 1
    for i in index:
        if t is None or not -len(t.shape) <= i < len(t.shape):
            return 0
        n *= max(t.shape[i], 0)
    return n


def _conv(sg: Subgraph, op: Operator) -> int:
    # filter [out_channels, kh, kw, in_channels / groups]
    out, f = _t(sg, op.outputs, 0), _t(sg, op.inputs, 1)
    return (out.num_elements if out else 0) * _dims(f, 1, 2, 3)


def _depthwise(sg: Subgraph, op: Operator) -> int:
    # filter [1, kh, kw, channels × multiplier]: one kh × kw window per output element
    out, f = _t(sg, op.outputs, 0), _t(sg, op.inputs, 1)
    return (out.num_elements if out else 0) * _dims(f, 1, 2)


def _fully_connected(sg: Subgraph, op: Operator) -> int:
    # weights [units, inputs]
    out, w = _t(sg, op.outputs, 0), _t(sg, op.inputs, 1)
    return (out.num_elements if out else 0) * _dims(w, -1)


def _transpose_conv(sg: Subgraph, op: Operator) -> int:
    # inputs: output_shape, filter [out_channels, kh, kw, in_channels], input
    f, inp = _t(sg, op.inputs, 1), _t(sg, op.inputs, 2)
    return (inp.num_elements if inp else 0) * _dims(f, 0, 1, 2)


def _batch_matmul(sg: Subgraph, op: Operator) -> int:
    out, lhs = _t(sg, op.outputs, 0), _t(sg, op.inputs, 0)
    k = _dims(lhs, -2) if op.options.get("adj_x") else _dims(lhs, -1)
    return (out.num_elements if out else 0) * k


def _pool(sg: Subgraph, op: Operator) -> int:
    out = _t(sg, op.outputs, 0)
    window = int(op.options.get("filter_height", 1)) * int(op.options.get("filter_width", 1))
    return (out.num_elements if out else 0) * window


def _per_input(sg: Subgraph, op: Operator) -> int:
    inp = _t(sg, op.inputs, 0)
    return inp.num_elements if inp else 0


def _per_output(sg: Subgraph, op: Operator) -> int:
    return sum(sg.tensors[t].num_elements for t in op.outputs if t >= 0)


MacRule = Callable[[Subgraph, Operator], int]
#: op name → MAC count; ops not listed do no arithmetic worth counting (reshape, concat ...).
MAC_RULES: dict[str, MacRule] = {
    "CONV_2D": _conv, "CONV_3D": _conv, "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected, "TRANSPOSE_CONV": _transpose_conv,
    "BATCH_MATMUL": _batch_matmul,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "L2_POOL_2D": _pool,
    **{name: _per_input for name in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                                     "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")},
    **{name: _per_output for name in (
        "ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "ADD_N",
        "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "PRELU", "HARD_SWISH", "LOGISTIC",
        "TANH", "EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "QUANTIZE", "DEQUANTIZE",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "ELU", "GELU", "SQUARE", "POW")},
}


def op_work(model: Model) -> list[OpWork]:
    """MACs and bytes moved for every operator of the main subgraph, in file order."""
    sg = model.main
    work = []
    for op in sg.operators:
        rule = MAC_RULES.get(op.op_name)
        touched = {t for t in (*op.inputs, *op.outputs) if t >= 0}
        first = _t(sg, op.inputs, 0)
        work.append(OpWork(
            op_index=op.index, op=op.op_name, macs=rule(sg, op) if rule else 0,
            bytes_moved=sum(sg.tensors[t].nbytes for t in touched),
            dtype=first.dtype if first else ""))
    return work


def parameters_by_dtype(model: Model) -> dict[str, int]:
    """Constant (weight, bias ...) element counts by dtype, over every subgraph."""
    counts: dict[str, int] = {}
    seen: set[int] = set()
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.has_data and t.buffer not in seen:
                seen.add(t.buffer)  # tensors sharing a buffer store it once
                counts[t.dtype] = counts.get(t.dtype, 0) + t.num_elements
    return dict(sorted(counts.items()))
