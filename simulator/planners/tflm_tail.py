"""An estimate of TFLM's arena tail: the persistent allocations made while a model loads.

The tail holds, allocated downward from the end of the arena: the allocator's own objects,
one ``TfLiteEvalTensor`` per tensor, one ``NodeAndRegistration`` per operator, a persistent
``TfLiteTensor`` (plus its quantization arrays) per graph input/output, the interpreter's
input/output pointer arrays, variable tensors, resource variables, the scratch-buffer
handles, each operator's parsed builtin options and what its kernel keeps: the OpData its
``Init`` allocates and the buffers its ``Prepare`` adds (per-channel multipliers and shifts,
the transposed constant operand of BATCH_MATMUL, int16 softmax tables, resource-variable
storage). Every kernel allocation is 16-byte aligned (``MicroArenaBufferAlignment``).

The sizes are the pinned ``tflite-micro`` wheel's (64-bit host, reference kernels), read from
``tensorflow/lite/micro/kernels/*`` and checked op by op against the wheel's
RecordingMicroAllocator on one-operator models cut from the public corpus
(``benchmarks/bench_corpus.py``). 32-bit targets and other kernel flavours are scaled
estimates. Ops not in the tables get a generous default, so the tail errs high, never low.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devicefit.simulator.lifetimes import align_up, tflm_tensor_bytes
from devicefit.simulator.model import Model, Operator, Subgraph, Tensor

#: Allocator objects (MicroAllocator, its arena allocators, the planner, the graph) for a
#: model with one subgraph, and what each further subgraph adds (64-bit, measured).
_BASE_64 = 488
_PER_SUBGRAPH_64 = 32
#: sizeof the OpData each reference kernel's Init allocates (64-bit); 0 = no Init data.
_OPDATA_64 = {
    "CONV_2D": 80, "DEPTHWISE_CONV_2D": 80, "TRANSPOSE_CONV": 88, "FULLY_CONNECTED": 72,
    "BATCH_MATMUL": 52, "ADD": 60, "SUB": 52, "MUL": 36, "DIV": 28, "SQUARED_DIFFERENCE": 60,
    "CONCATENATION": 80, "MEAN": 44, "SUM": 44, "REDUCE_MAX": 44, "REDUCE_MIN": 44,
    "REDUCE_PROD": 44, "SOFTMAX": 80, "LOG_SOFTMAX": 24, "STRIDED_SLICE": 84,
    "DEQUANTIZE": 32, "QUANTIZE": 32, "LOGISTIC": 16, "TANH": 16, "LEAKY_RELU": 24,
    "PRELU": 28, "RSQRT": 28, "ABS": 28, "RELU": 28, "RELU6": 8, "HARD_SWISH": 56,
    "MAX_POOL_2D": 32, "AVERAGE_POOL_2D": 32, "L2_POOL_2D": 32, "PAD": 56, "PADV2": 56,
    "MIRROR_PAD": 24, "GREATER": 32, "GREATER_EQUAL": 32, "LESS": 32, "LESS_EQUAL": 32,
    "EQUAL": 32, "NOT_EQUAL": 32, "SELECT_V2": 16, "SPACE_TO_BATCH_ND": 16, "ELU": 256,
    "L2_NORMALIZATION": 12, "VAR_HANDLE": 4, "ASSIGN_VARIABLE": 4, "CALL_ONCE": 8, "IF": 8,
    "WHILE": 8, "ADD_N": 8, "CUMSUM": 8, "SVDF": 36, "UNIDIRECTIONAL_SEQUENCE_LSTM": 688,
    "EMBEDDING_LOOKUP": 8, "DETECTION_POSTPROCESS": 256,
    **{name: 0 for name in (
        "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "SHAPE", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
        "TRANSPOSE", "MAXIMUM", "MINIMUM", "LOG", "EXP", "SQRT", "SIN", "COS", "NEG",
        "SQUARE", "FLOOR", "CEIL", "ROUND", "READ_VARIABLE", "GATHER", "GATHER_ND", "SLICE",
        "CAST", "FILL", "ZEROS_LIKE", "ARG_MAX", "ARG_MIN", "LOGICAL_AND", "LOGICAL_OR",
        "LOGICAL_NOT", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND", "BROADCAST_TO", "BROADCAST_ARGS", "FLOOR_DIV",
        "FLOOR_MOD", "REVERSE_V2")},
}
#: OpData of an op missing from the table: above most measured ones.
_OPDATA_DEFAULT_64 = 96
#: Parsed builtin options (``TfLite*Params``) the allocator keeps per operator (64-bit).
_PARAMS_64 = {
    "CONV_2D": 28, "DEPTHWISE_CONV_2D": 28, "TRANSPOSE_CONV": 20, "FULLY_CONNECTED": 32,
    "ADD": 8, "SUB": 8, "MUL": 4, "DIV": 4, "CONCATENATION": 8, "RESHAPE": 36, "SQUEEZE": 36,
    "MEAN": 1, "SUM": 1, "REDUCE_MAX": 1, "REDUCE_MIN": 1, "REDUCE_PROD": 1, "SOFTMAX": 4,
    "STRIDED_SLICE": 24, "SPLIT": 4, "SPLIT_V": 4, "SHAPE": 4, "PACK": 8, "UNPACK": 8,
    "VAR_HANDLE": 16, "MAX_POOL_2D": 40, "AVERAGE_POOL_2D": 40, "L2_POOL_2D": 40,
    "LEAKY_RELU": 4, "BATCH_MATMUL": 3, "GATHER": 8, "IF": 8, "WHILE": 8, "CALL_ONCE": 4,
    "CAST": 8, "L2_NORMALIZATION": 4, "RESIZE_BILINEAR": 2, "RESIZE_NEAREST_NEIGHBOR": 2,
    "DEPTH_TO_SPACE": 4, "SPACE_TO_DEPTH": 4, "SVDF": 8, "UNIDIRECTIONAL_SEQUENCE_LSTM": 16,
    "ARG_MAX": 4, "ARG_MIN": 4, "CUMSUM": 2, "MIRROR_PAD": 4,
}
#: Per-channel multiplier and shift arrays (2 × int32 × channels) that Prepare allocates,
#: by the filter dimension holding the output channels; FULLY_CONNECTED only when its
#: filter is quantized per channel (fully_connected_common.cc), the others always.
_PER_CHANNEL = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
_ALIGN = 16
#: ``MicroResourceVariables`` and one ``MicroResourceVariable`` entry (64-bit).
_RESOURCE_VARIABLES_64 = 16
_RESOURCE_ENTRY_64 = 40
#: int16 SOFTMAX keeps two 513-entry int16 lookup tables (softmax_common.cc).
_SOFTMAX_INT16_LUTS = 2 * 513 * 2


@dataclass(frozen=True)
class TailEstimate:
    total: int
    breakdown: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _struct_sizes(ptr: int) -> dict[str, int]:
    """sizeof the TFLM structs the tail holds, for a pointer width of ``ptr`` bytes."""
    return {
        # TfLiteEvalTensor: data pointer, dims pointer, type enum (padded to the pointer).
        "eval_tensor": 3 * ptr,
        # NodeAndRegistration: TfLiteNode (6 pointers + int) + registration pointer.
        "node": align_up(7 * ptr + 4, ptr),
        # TfLiteTensor under TF_LITE_STATIC_MEMORY: quantization {enum, pointer}, params
        # {float, int32}, data, dims, bytes, type, allocation type, is_variable.
        "tensor": align_up(2 * ptr + 8 + 3 * ptr + 9, ptr),
        # TfLiteAffineQuantization: two array pointers + quantized dimension.
        "affine_quant": align_up(2 * ptr + 4, ptr),
    }


def _scale(pointer_bytes: int) -> float:
    # Allocator objects and OpData mix pointers with ints: about 3/4 the size on 32-bit.
    return 1.0 if pointer_bytes >= 8 else 0.75


def _input(sg: Subgraph, op: Operator, i: int) -> Tensor | None:
    return sg.tensors[op.inputs[i]] if i < len(op.inputs) and op.inputs[i] >= 0 else None


def _transposed_operand(t: Tensor | None, ptr: int) -> list[int]:
    """BATCH_MATMUL's persistent transposed copy: eval tensor, dims array, data."""
    if t is None:
        return []
    return [3 * ptr, 4 + 4 * len(t.shape), tflm_tensor_bytes(t)]


def prepare_allocations(sg: Subgraph, op: Operator, pointer_bytes: int = 8) -> list[int]:
    """Sizes of the persistent buffers ``op``'s kernel allocates in Prepare (not Init)."""
    name = op.op_name
    sizes: list[int] = []
    if name in _PER_CHANNEL:
        f = _input(sg, op, 1)
        per_channel = f is not None and f.quantization is not None and f.quantization.per_channel
        if f is not None and len(f.shape) > _PER_CHANNEL[name] and (
                name != "FULLY_CONNECTED" or per_channel):
            sizes += [4 * f.shape[_PER_CHANNEL[name]]] * 2
    elif name == "BATCH_MATMUL":
        lhs, rhs = _input(sg, op, 0), _input(sg, op, 1)
        if lhs is not None and lhs.dtype in ("int8", "int16"):
            sizes.append(32)  # OpDataBatchMatmul::quantization
        if op.options.get("adj_x"):
            sizes += _transposed_operand(lhs, pointer_bytes)
        if not op.options.get("adj_y"):
            sizes += _transposed_operand(rhs, pointer_bytes)
    elif name == "SOFTMAX":
        t = _input(sg, op, 0)
        if t is not None and t.dtype == "int16":
            sizes.append(_SOFTMAX_INT16_LUTS)
    return sizes


def _opdata(op: Operator, scale: float) -> int:
    return round(_OPDATA_64.get(op.op_name, _OPDATA_DEFAULT_64) * scale)


def _params(op: Operator, scale: float) -> int:
    # Builtin options are packed at their struct's alignment (4 for these int/float
    # structs); unknown options: 8 bytes per field is generous.
    return align_up(round(_PARAMS_64.get(op.op_name, 8 * len(op.options)) * scale), 4)


def _kernel_bytes(sg: Subgraph, op: Operator, pointer_bytes: int) -> tuple[int, int]:
    """(bytes Init keeps incl. builtin options, bytes Prepare adds) for ``op``, aligned."""
    scale = _scale(pointer_bytes)
    opdata = _opdata(op, scale)
    init = (align_up(opdata, _ALIGN) if opdata else 0) + _params(op, scale)
    prepare = sum(align_up(s, _ALIGN) for s in prepare_allocations(sg, op, pointer_bytes))
    return init, prepare


def _resource_variables(model: Model, pointer_bytes: int) -> int:
    """``MicroResourceVariables`` (one entry per distinct VAR_HANDLE name, as the wheel
    counts them) plus each variable's buffer, which the first ASSIGN_VARIABLE's Prepare
    allocates at the assigned value's size (micro_resource_variable.cc)."""
    names: set[tuple[object, object]] = set()
    buffers: dict[tuple[object, object], int] = {}
    for sg in model.subgraphs:
        handle: dict[int, tuple[object, object]] = {}
        for op in sg.operators:
            if op.op_name == "VAR_HANDLE" and op.outputs:
                name = (op.options.get("container"), op.options.get("shared_name"))
                names.add(name)
                handle[op.outputs[0]] = name
            elif op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) > 1:
                value = _input(sg, op, 1)
                name = handle.get(op.inputs[0], ("?", op.inputs[0]))
                if value is not None:
                    buffers.setdefault(name, tflm_tensor_bytes(value))
    if not names:
        return 0
    scale = _scale(pointer_bytes)
    return (align_up(round(_RESOURCE_VARIABLES_64 * scale), _ALIGN)
            + align_up(round(_RESOURCE_ENTRY_64 * scale) * len(names), _ALIGN)
            + sum(align_up(b, _ALIGN) for b in buffers.values()))


def prepare_peak(model: Model, tail_bytes: int, *, pointer_bytes: int = 8,
                 n_scratch: int = 0) -> int:
    """Arena TFLM needs while kernels run ``Prepare`` (an estimate, tail included).

    Each kernel reads its tensors as temporary ``TfLiteTensor`` structs, each with a copy of
    its zero points (one int per channel), on the head side, while the tail already holds
    everything Init kept and the earlier kernels' Prepare buffers. A big per-channel weight
    late in the graph (a wide dense layer) can need more than the final head + tail.
    """
    sizes = _struct_sizes(pointer_bytes)
    ops = [(sg, op) for sg in model.subgraphs for op in sg.operators]  # Prepare order
    later = sum(_kernel_bytes(sg, op, pointer_bytes)[1] for sg, op in ops)
    requests = align_up((n_scratch + 12) * 2 * pointer_bytes)  # kMaxScratchBuffersPerOp
    peak = 0
    for sg, op in ops:
        later -= _kernel_bytes(sg, op, pointer_bytes)[1]
        temp = requests
        for t in (*op.inputs, *op.outputs):
            if t < 0:
                continue
            temp += sizes["tensor"]
            q = sg.tensors[t].quantization
            if q is not None and q.scale:
                temp += sizes["affine_quant"] + align_up(4 + 4 * len(q.scale), pointer_bytes)
        peak = max(peak, tail_bytes - later + temp)
    return peak


def estimate_tail(model: Model, *, pointer_bytes: int = 8, kernels: str = "reference",
                  n_scratch: int = 0) -> TailEstimate:
    """Estimated tail bytes of ``model`` for this pointer width and kernel flavour;
    ``n_scratch`` scratch-buffer requests each keep a handle (one pointer) in the tail."""
    sizes = _struct_sizes(pointer_bytes)
    scale = _scale(pointer_bytes)
    main = model.main
    io = [main.tensors[t] for t in (*main.inputs, *main.outputs) if t >= 0]
    quant = 0
    for t in io:
        q = t.quantization
        if q is not None and q.scale:
            quant += sizes["affine_quant"] + 4 + 4 * len(q.zero_point or q.scale)
    kernel = sum(sum(_kernel_bytes(sg, op, pointer_bytes)) for sg in model.subgraphs
                 for op in sg.operators)
    variables = sum(align_up(tflm_tensor_bytes(t)) for sg in model.subgraphs
                    for t in sg.tensors if t.is_variable)
    breakdown = {
        "allocator": round((_BASE_64 + _PER_SUBGRAPH_64 * (len(model.subgraphs) - 1)) * scale),
        "eval_tensors": sum(align_up(sizes["eval_tensor"] * len(sg.tensors), _ALIGN)
                            for sg in model.subgraphs),
        "nodes": sum(align_up(sizes["node"] * len(sg.operators), _ALIGN)
                     for sg in model.subgraphs),
        "io_tensors": sizes["tensor"] * len(io),
        # The interpreter's arrays of input and output tensor pointers.
        "io_pointers": (align_up(pointer_bytes * len(main.inputs), _ALIGN)
                        + align_up(pointer_bytes * len(main.outputs), _ALIGN)),
        "io_quantization": quant,
        "kernel_data": kernel,
        "scratch_handles": align_up(pointer_bytes * n_scratch, 8),
        # The packed options end where 16-byte aligned allocations resume.
        "alignment": _ALIGN,
        "variables": variables,
        "resource_variables": _resource_variables(model, pointer_bytes),
    }
    note = (f"tail: estimated for {pointer_bytes * 8}-bit pointers and '{kernels}' kernels "
            "from TFLM's struct and OpData sizes (checked against the reference kernels on "
            "a 64-bit host); other targets can differ by a few hundred bytes")
    return TailEstimate(total=align_up(sum(breakdown.values())), breakdown=breakdown, note=note)
