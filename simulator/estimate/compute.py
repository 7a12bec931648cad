"""Work per operator: multiply-accumulates and bytes moved; parameters by dtype.

MACs count the multiply-accumulates of the convolution-like ops exactly from the shapes;
pooling, reductions and element-wise ops count one operation per output (or input)
element and window position, so the latency model sees their work too. Bytes moved are the
bytes of every input (weights included) and output an operator touches once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor


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


def _conv3d(sg: Subgraph, op: Operator) -> int:
    # filter [kd, kh, kw, in_channels, out_channels]
    out, f = _t(sg, op.outputs, 0), _t(sg, op.inputs, 1)
    return (out.num_elements if out else 0) * _dims(f, 0, 1, 2, 3)


def _transpose_conv_bias(sg: Subgraph, op: Operator) -> int:
    # MediaPipe's Convolution2DTransposeBias: input, filter [out_channels, kh, kw, in], bias.
    inp, f = _t(sg, op.inputs, 0), _t(sg, op.inputs, 1)
    return (inp.num_elements if inp else 0) * _dims(f, 0, 1, 2)


def _sequence(sg: Subgraph, op: Operator) -> tuple[int, int]:
    """(time steps, batch) of a sequence op's input [batch, time, ...] or time-major."""
    inp = _t(sg, op.inputs, 0)
    if inp is None or len(inp.shape) < 2:
        return 1, _dims(inp, 0) or 1
    if len(inp.shape) == 2:  # a single step: [batch, features]
        return 1, max(inp.shape[0], 1)
    time_major = bool(op.options.get("time_major"))
    steps, batch = (inp.shape[0], inp.shape[1]) if time_major else (inp.shape[1], inp.shape[0])
    return max(steps, 1), max(batch, 1)


def _matrices(sg: Subgraph, op: Operator) -> int:
    """Elements of the op's constant weight matrices (rank 2), each used once per step."""
    total = 0
    for i in op.inputs:
        if i >= 0 and sg.tensors[i].has_data and len(sg.tensors[i].shape) == 2:
            total += sg.tensors[i].num_elements
    return total


def _recurrent(sg: Subgraph, op: Operator) -> int:
    """LSTM/RNN cells, uni- and bidirectional, sequence or single step: every gate's input
    and recurrent matrix (and projection, both directions) multiply once per step and batch
    row, plus the cell's element-wise products (LSTM: f·c, i·g, o·tanh(c) per unit)."""
    steps, batch = _sequence(sg, op)
    elementwise = 0
    if "LSTM" in op.op_name:
        cell = _t(sg, op.inputs, 19 if op.op_name != "BIDIRECTIONAL_SEQUENCE_LSTM" else 36)
        units = _dims(cell, -1)
        directions = 2 if op.op_name.startswith("BIDIRECTIONAL") else 1
        elementwise = 3 * units * directions
    return steps * batch * (_matrices(sg, op) + elementwise)


def _svdf(sg: Subgraph, op: Operator) -> int:
    # input [batch, in], weights_feature [filters, in], weights_time [filters, memory]
    inp, wf, wt = _t(sg, op.inputs, 0), _t(sg, op.inputs, 1), _t(sg, op.inputs, 2)
    return _dims(inp, 0) * (wf.num_elements if wf else 0) + _dims(inp, 0) * (
        wt.num_elements if wt else 0)


MacRule = Callable[[Subgraph, Operator], int]
#: op name → MAC count; ops not listed do no arithmetic worth counting (reshape, concat ...).
MAC_RULES: dict[str, MacRule] = {
    "CONV_2D": _conv, "CONV_3D": _conv3d, "CONV_3D_TRANSPOSE": _conv3d,
    "DEPTHWISE_CONV_2D": _depthwise, "FULLY_CONNECTED": _fully_connected,
    "TRANSPOSE_CONV": _transpose_conv, "CUSTOM:Convolution2DTransposeBias": _transpose_conv_bias,
    "BATCH_MATMUL": _batch_matmul, "SVDF": _svdf,
    **{name: _recurrent for name in (
        "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "RNN",
        "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN")},
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "L2_POOL_2D": _pool,
    **{name: _per_input for name in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                                     "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")},
    **{name: _per_output for name in (
        "ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "ADD_N",
        "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "PRELU", "HARD_SWISH", "LOGISTIC",
        "TANH", "EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "QUANTIZE", "DEQUANTIZE",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "ELU", "GELU", "SQUARE", "POW",
        "SIN", "COS", "SELECT", "SELECT_V2", "FLOOR_DIV", "FLOOR_MOD", "CUMSUM", "SIGN",
        "LOCAL_RESPONSE_NORMALIZATION", "CUSTOM:TransformTensorBilinear")},
}


def while_trips(model: Model, op: Operator) -> int:
    """Iterations of a WHILE loop, as far as the file tells: TensorFlow's RNN loops read one
    time step per iteration (GATHER of a loop-carried [time, ...] tensor by the counter), so
    the largest first dimension such a GATHER reads is the trip count; else 1 (the counts
    are then per iteration)."""
    body = op.options.get("body_subgraph_index")
    if not isinstance(body, int) or not 0 <= body < len(model.subgraphs):
        return 1
    sg = model.subgraphs[body]
    carried = set(sg.inputs)
    trips = 1
    for inner in sg.operators:
        src, index = _t(sg, inner.inputs, 0), _t(sg, inner.inputs, 1)
        if (inner.op_name == "GATHER" and inner.inputs[0] in carried and src is not None
                and src.shape and index is not None and index.num_elements == 1):
            trips = max(trips, src.shape[0])
    return trips


def _macs(model: Model, sg: Subgraph, op: Operator, seen: frozenset[int],
          totals: dict[int, int]) -> int:
    """MACs of one operator; control flow counts the subgraphs it runs (an IF its larger
    branch, a WHILE its condition and body per iteration; CALL_ONCE's initialisation runs
    once before the first inference and is not counted). ``totals`` keeps each subgraph's
    sum once computed: IFs whose branches share a subgraph, nested 64 deep, would otherwise
    walk 2^64 paths; ``seen`` cuts a subgraph that calls itself."""
    rule = MAC_RULES.get(op.op_name)
    if rule is not None:
        return rule(sg, op)

    def total(index: object) -> int:
        if not isinstance(index, int) or not 0 <= index < len(model.subgraphs) or index in seen:
            return 0
        if index not in totals:
            inner = model.subgraphs[index]
            totals[index] = sum(_macs(model, inner, o, seen | {index}, totals)
                                for o in inner.operators)
        return totals[index]

    if op.op_name == "IF":
        return max(total(op.options.get("then_subgraph_index")),
                   total(op.options.get("else_subgraph_index")))
    if op.op_name == "WHILE":
        return while_trips(model, op) * (total(op.options.get("body_subgraph_index"))
                                         + total(op.options.get("cond_subgraph_index")))
    return 0


def op_work(model: Model) -> list[OpWork]:
    """MACs and bytes moved for every operator of the main subgraph, in file order."""
    sg = model.main
    work = []
    totals: dict[int, int] = {}
    for op in sg.operators:
        touched = {t for t in (*op.inputs, *op.outputs) if t >= 0}
        first = _t(sg, op.inputs, 0)
        work.append(OpWork(
            op_index=op.index, op=op.op_name, macs=_macs(model, sg, op, frozenset({0}), totals),
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
