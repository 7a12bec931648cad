"""Scratch buffers TFLite-Micro kernels request in ``Prepare``, per kernel flavour.

A scratch buffer lives in the arena head for its operator's step only, but it can be the
largest buffer of that step (im2col for a convolution, int32 accumulators for a reduction),
so a head prediction is exact only if the kernels' requests are. One table of rules per
kernel flavour, op name → rule returning the requests in the order the kernel makes them:

- ``reference``: the kernels in ``tensorflow/lite/micro/kernels/*.cc``, which the pip
  ``tflite-micro`` wheel runs; checked against it byte for byte.
- ``cmsis-nn``: TFLM's ``kernels/cmsis_nn/`` for a Cortex-M with the DSP extension (M4, M7,
  M33) built with GCC, sized with CMSIS-NN's ``arm_*_get_buffer_size`` functions; ops it
  does not override use the reference rules. An estimate: MVE cores (M55, M85) and the Arm
  compiler size some buffers differently.

Other flavours (``esp-nn`` ...) are sized with the reference rules; :func:`is_exact` says
when that is not the real thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devicefit.simulator.model import DTYPE_BYTES, Operator, Subgraph, Tensor


@dataclass(frozen=True)
class ScratchRequest:
    size: int
    what: str


ScratchRule = Callable[[Subgraph, Operator, int], list[ScratchRequest]]


def _tensor(sg: Subgraph, op: Operator, i: int, outputs: bool = False) -> Tensor | None:
    refs = op.outputs if outputs else op.inputs
    if i >= len(refs) or refs[i] < 0:
        return None
    return sg.tensors[refs[i]]


def _int4_filter(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED unpack int4 filters into a scratch buffer."""
    f = _tensor(sg, op, 1)
    if f is not None and f.dtype == "int4":
        return [ScratchRequest(f.num_elements, "unpacked int4 filter")]
    return []


def _transpose_conv(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    # TRANSPOSE_CONV inputs: output_shape, filter, input, [bias].
    inp, out, bias = _tensor(sg, op, 2), _tensor(sg, op, 0, outputs=True), _tensor(sg, op, 3)
    if inp is None or out is None:
        return []
    if inp.dtype == "int8":
        return [ScratchRequest(out.num_elements * 4, "int32 accumulators")]
    if inp.dtype == "int16":
        reqs = [ScratchRequest(out.num_elements * 8, "int64 accumulators")]
        if bias is not None and bias.dtype == "int16":
            reqs.append(ScratchRequest(bias.num_elements * 8, "int64 bias"))
        return reqs
    return []


def _mean_or_sum(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    inp, axis, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or axis is None or out is None:
        return []
    reqs = []
    if inp.dtype in ("int8", "int16"):
        reqs.append(ScratchRequest(out.num_elements * 4, "int32 accumulators"))
    reqs.append(ScratchRequest(4 * len(inp.shape), "input iterator"))
    reqs.append(ScratchRequest(4 * axis.num_elements, "resolved axes"))
    return reqs


def _reduce_min_max(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    inp, axis = _tensor(sg, op, 0), _tensor(sg, op, 1)
    if inp is None or axis is None:
        return []
    return [ScratchRequest(4 * len(inp.shape), "input iterator"),
            ScratchRequest(4 * axis.num_elements, "resolved axes")]


def _add_n(sg: Subgraph, op: Operator, ptr: int) -> list[ScratchRequest]:
    out = _tensor(sg, op, 0, outputs=True)
    if out is None or out.dtype not in ("float32", "int8"):
        return []
    return [ScratchRequest(ptr * len(op.inputs), "input pointers")]


def _mirror_pad(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    inp = _tensor(sg, op, 0)
    if inp is None:
        return []
    return [ScratchRequest(4 * len(inp.shape), "output dims"),
            ScratchRequest(4 * len(inp.shape), "input dims")]


def _svdf(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    # SVDF inputs: input [batch, in], weights_feature [filters, in], weights_time, bias, state.
    inp, wf = _tensor(sg, op, 0), _tensor(sg, op, 1)
    if inp is None or wf is None or not inp.shape or not wf.shape:
        return []
    batch, filters = inp.shape[0], wf.shape[0]
    if inp.dtype == "int8":
        rank = int(op.options.get("rank", 1)) or 1
        return [ScratchRequest(batch * filters * 4, "int32 filter state"),
                ScratchRequest(batch * (filters // rank) * 4, "int32 output")]
    return [ScratchRequest(batch * filters * 4, "float filter state")]


def _lstm(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    # UNIDIRECTIONAL_SEQUENCE_LSTM: input 0 [batch, time, in] (time-major: [time, batch, in]),
    # input 18 the output (hidden) state [batch, state], input 19 the cell state.
    inp, hidden, cell = _tensor(sg, op, 0), _tensor(sg, op, 18), _tensor(sg, op, 19)
    if inp is None or hidden is None or cell is None or len(inp.shape) < 2:
        return []
    batch = inp.shape[1] if op.options.get("time_major") else inp.shape[0]
    state = hidden.shape[-1] if hidden.shape else 0
    size = batch * state * DTYPE_BYTES.get(cell.dtype, 0)
    return [ScratchRequest(size, f"gate buffer {i}") for i in range(4)]


#: Scratch buffers of the reference kernels, by op; ops not listed request none.
REFERENCE_SCRATCH: dict[str, ScratchRule] = {
    "CONV_2D": _int4_filter,
    "DEPTHWISE_CONV_2D": _int4_filter,
    "FULLY_CONNECTED": _int4_filter,
    "TRANSPOSE_CONV": _transpose_conv,
    "MEAN": _mean_or_sum,
    "SUM": _mean_or_sum,
    "REDUCE_MAX": _reduce_min_max,
    "REDUCE_MIN": _reduce_min_max,
    "ADD_N": _add_n,
    "MIRROR_PAD": _mirror_pad,
    "SVDF": _svdf,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm,
}


# --------------------------------------------------------------------------- CMSIS-NN (DSP)
def _same_padding(in_size: int, k: int, stride: int, dilation: int, out_size: int) -> int:
    """TFLM's ``ComputePaddingHeightWidth`` for SAME padding (the leading side)."""
    return max((out_size - 1) * stride + (k - 1) * dilation + 1 - in_size, 0) // 2


@dataclass(frozen=True)
class _ConvGeometry:
    inp: Tensor
    filter: Tensor
    out: Tensor
    pad_h: int
    pad_w: int
    dilated: bool


def _conv_geometry(sg: Subgraph, op: Operator, dtype: str) -> _ConvGeometry | None:
    """Shapes and padding of a 4-D convolution whose input (conv) or filter (depthwise) is
    ``dtype``; None otherwise (CMSIS-NN then runs the reference kernel)."""
    inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or f is None or out is None or not (len(inp.shape) == len(f.shape)
                                                      == len(out.shape) == 4):
        return None
    if (inp if op.op_name == "CONV_2D" else f).dtype != dtype:
        return None
    o = op.options
    dilation_h, dilation_w = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
    pad_h = pad_w = 0
    if o.get("padding", "SAME") == "SAME":
        pad_h = _same_padding(inp.shape[1], f.shape[1], int(o.get("stride_h", 1)), dilation_h,
                              out.shape[1])
        pad_w = _same_padding(inp.shape[2], f.shape[2], int(o.get("stride_w", 1)), dilation_w,
                              out.shape[2])
    return _ConvGeometry(inp, f, out, pad_h, pad_w, dilated=(dilation_h, dilation_w) != (1, 1))


def _cmsis_conv(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """``arm_convolve_wrapper_s8_get_buffer_size`` (DSP): an int16 im2col of two columns."""
    g = _conv_geometry(sg, op, "int8")
    if g is None:
        return []
    channels, kh, kw = g.inp.shape[3], g.filter.shape[1], g.filter.shape[2]
    if g.pad_h == g.pad_w == 0 and kh == kw == 1 and not g.dilated and channels == g.filter.shape[3]:
        return []  # 1x1: no buffer with GCC (the Arm compiler's fast path takes 4 × channels)
    cols = kw * kh * channels
    cols += -cols % 4
    return [ScratchRequest(2 * cols * 2, "im2col (CMSIS-NN)")]


def _cmsis_depthwise(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """``arm_depthwise_conv_wrapper_s8_get_buffer_size`` (DSP)."""
    g = _conv_geometry(sg, op, "int8")
    if g is None or g.dilated or g.inp.shape[3] != g.out.shape[3] or g.inp.shape[0] != 1:
        return []
    kh, kw = g.filter.shape[1], g.filter.shape[2]
    if kh == kw == 3 and g.pad_h <= 1 and g.pad_w <= 1:
        return []  # the dedicated 3x3 kernel needs no buffer
    return [ScratchRequest(g.inp.shape[3] * kh * kw * 2, "im2col (CMSIS-NN)")]


def _cmsis_fully_connected(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """Per-tensor int8 FC run as a 1x1 conv needs per-channel parameters in a scratch buffer;
    ``arm_fully_connected_s8_get_buffer_size`` is 0 on DSP cores."""
    inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or f is None or out is None or inp.dtype != "int8" or f.dtype != "int8":
        return []
    per_channel = f.quantization is not None and f.quantization.per_channel
    if len(out.shape) > 2 and f.shape and f.shape[-1] % 4 == 0 and not per_channel:
        return [ScratchRequest(out.shape[-1] * 4 * 2, "per-channel parameters (CMSIS-NN)")]
    return []


def _cmsis_average_pool(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """``arm_avgpool_s8_get_buffer_size`` (DSP): one int32 accumulator per channel."""
    inp = _tensor(sg, op, 0)
    if inp is None or inp.dtype != "int8" or len(inp.shape) != 4:
        return []
    return [ScratchRequest(inp.shape[3] * 4, "accumulators (CMSIS-NN)")]


CMSIS_NN_SCRATCH: dict[str, ScratchRule] = {
    **REFERENCE_SCRATCH,
    "CONV_2D": _cmsis_conv,
    "DEPTHWISE_CONV_2D": _cmsis_depthwise,
    "FULLY_CONNECTED": _cmsis_fully_connected,
    "AVERAGE_POOL_2D": _cmsis_average_pool,
}

#: kernel flavour → its scratch rules.
KERNEL_SCRATCH: dict[str, dict[str, ScratchRule]] = {
    "reference": REFERENCE_SCRATCH,
    "cmsis-nn": CMSIS_NN_SCRATCH,
}
#: Flavours whose rules reproduce the runtime byte for byte (checked against it in tests).
EXACT_FLAVOURS = ("reference",)


def is_exact(kernels: str) -> bool:
    return kernels in EXACT_FLAVOURS


def scratch_requests(sg: Subgraph, op: Operator, pointer_bytes: int = 8,
                     kernels: str = "reference") -> list[ScratchRequest]:
    """Scratch buffers the ``kernels`` kernel of ``op`` requests in ``Prepare``, in order
    (unknown flavours: the reference kernels' requests)."""
    rule = KERNEL_SCRATCH.get(kernels, REFERENCE_SCRATCH).get(op.op_name)
    return rule(sg, op, pointer_bytes) if rule else []
