"""An estimate of TFLM's arena tail: the persistent allocations made while a model loads.

The tail holds, allocated downward from the end of the arena: the allocator's own objects,
one ``TfLiteEvalTensor`` per tensor, one ``NodeAndRegistration`` per operator, a persistent
``TfLiteTensor`` (plus its quantization arrays) per graph input/output, variable tensors, the
kernels' OpData and per-channel quantization arrays, and the scratch-buffer handles. Struct
sizes follow the C layout for the pointer width; the rest (allocator objects, OpData and
builtin options per operator) is fitted to the pinned tflite-micro wheel (64-bit host,
reference kernels), where it lands within 48 bytes on the 20 test models. It is an
estimate: other kernel flavours keep other OpData, and 32-bit targets are scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.lifetimes import align_up, tflm_tensor_bytes
from simulator.model import Model, Operator, Subgraph

# Fitted (least squares) on 20 test models (MobileNet v1/v2, 200-layer MLP, control flow ...)
# against the pip wheel's RecordingMicroAllocator (64-bit host, reference kernels), after
# subtracting what the struct sizes below explain; the fit lands within 48 bytes on all 20:
#: allocator objects (MicroAllocator, arena allocators, planner, graph) ...
_BASE_64 = 514
#: ... the bookkeeping of each extra subgraph (control flow) ...
_PER_SUBGRAPH_64 = 89
#: ... kernel OpData and parsed builtin options, per operator ...
_PER_OP_64 = 77
#: ... and what the bigger OpData of the convolution-like kernels adds.
_EXTRA_OPDATA_64 = {"FULLY_CONNECTED": 35, "CONV_2D": 30, "DEPTHWISE_CONV_2D": 32}
#: Ops whose kernels keep per-channel multiplier and shift arrays (2 × int32 × channels),
#: by the filter dimension that holds the output channels. FULLY_CONNECTED keeps them only
#: when quantized; the convolutions always allocate them.
_PER_CHANNEL = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}


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


def _kernel_bytes(sg: Subgraph, op: Operator, scale: float) -> int:
    """What ``op``'s kernel keeps in the tail: OpData, builtin options, per-channel arrays."""
    n = round((_PER_OP_64 + _EXTRA_OPDATA_64.get(op.op_name, 0)) * scale)
    if op.op_name in _PER_CHANNEL and len(op.inputs) > 1 and op.inputs[1] >= 0:
        f = sg.tensors[op.inputs[1]]
        quantized = f.quantization is not None or op.op_name != "FULLY_CONNECTED"
        if quantized and len(f.shape) > _PER_CHANNEL[op.op_name]:
            n += 2 * 4 * f.shape[_PER_CHANNEL[op.op_name]]
    return n


def prepare_peak(model: Model, tail_bytes: int, *, pointer_bytes: int = 8,
                 n_scratch: int = 0) -> int:
    """Arena TFLM needs while kernels run ``Prepare`` (an estimate, tail included).

    Each kernel reads its tensors as temporary ``TfLiteTensor`` structs, each with a copy of
    its zero points (one int per channel), on the head side, while the tail already holds
    everything the earlier kernels kept. A big per-channel weight late in the graph (a wide
    dense layer) can need more than the final head + tail.
    """
    sizes = _struct_sizes(pointer_bytes)
    scale = _scale(pointer_bytes)
    ops = [(sg, op) for sg in model.subgraphs for op in sg.operators]  # Prepare order
    later = sum(_kernel_bytes(sg, op, scale) for sg, op in ops)
    requests = align_up((n_scratch + 12) * 2 * pointer_bytes)  # kMaxScratchBuffersPerOp
    peak = 0
    for sg, op in ops:
        later -= _kernel_bytes(sg, op, scale)
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


def estimate_tail(model: Model, *, pointer_bytes: int = 8, kernels: str = "reference"
                  ) -> TailEstimate:
    """Estimated tail bytes of ``model`` for this pointer width and kernel flavour."""
    sizes = _struct_sizes(pointer_bytes)
    scale = _scale(pointer_bytes)
    n_tensors = sum(len(sg.tensors) for sg in model.subgraphs)
    n_ops = sum(len(sg.operators) for sg in model.subgraphs)
    main = model.main
    io = [main.tensors[t] for t in (*main.inputs, *main.outputs) if t >= 0]
    quant = 0
    for t in io:
        q = t.quantization
        if q is not None and q.scale:
            quant += sizes["affine_quant"] + 4 + 4 * len(q.zero_point or q.scale)
    kernel = sum(_kernel_bytes(sg, op, scale) for sg in model.subgraphs for op in sg.operators)
    variables = sum(align_up(tflm_tensor_bytes(t)) for sg in model.subgraphs
                    for t in sg.tensors if t.is_variable)
    breakdown = {
        "allocator": round((_BASE_64 + _PER_SUBGRAPH_64 * (len(model.subgraphs) - 1)) * scale),
        "eval_tensors": sizes["eval_tensor"] * n_tensors,
        "nodes": sizes["node"] * n_ops,
        "io_tensors": sizes["tensor"] * len(io),
        "io_quantization": quant,
        "kernel_data": kernel,
        "variables": variables,
    }
    note = (f"tail: estimated for {pointer_bytes * 8}-bit pointers and '{kernels}' kernels "
            "from TFLM struct sizes and a fit to the reference kernels (within 48 B on a "
            "64-bit host); other targets can differ by a few hundred bytes")
    return TailEstimate(total=align_up(sum(breakdown.values())), breakdown=breakdown, note=note)
