"""Scratch buffers TFLite-Micro kernels request in ``Prepare``, per kernel flavour.

A scratch buffer lives in the arena head for its operator's step only, but it can be the
largest buffer of that step (im2col for a convolution, int32 accumulators for a reduction),
so a head prediction is exact only if the kernels' requests are. One table of rules per
kernel flavour, op name → rule returning the requests in the order the kernel makes them:

- ``reference``: the kernels in ``tensorflow/lite/micro/kernels/*.cc``, which the pip
  ``tflite-micro`` wheel runs; checked against it byte for byte.
- ``cmsis-nn:<feature>``: TFLM's ``kernels/cmsis_nn/`` built with GCC for a core without
  SIMD (``none``: M0+, M3), with the DSP extension (``dsp``: M4, M7, M33) or with MVE
  (``mve``: M55, M85), sized with CMSIS-NN's ``arm_*_get_buffer_size`` functions
  (:mod:`simulator.targets.tflm.cmsis_nn`); ops it does not override, and the float paths of those it
  does, use the reference rules.

- ``esp-nn:<variant>``: esp-tflite-micro's ``kernels/esp_nn/`` with ESP-NN built for the
  ESP32-S3 (``esp32s3``), the ESP32-P4 (``esp32p4``) or another chip (``generic``), sized
  with ESP-NN's ``esp_nn_get_*_scratch_size`` (:mod:`simulator.targets.tflm.esp_nn`); never measured on
  a build, so always an estimate.

Other flavours (``andes-nn`` ...) are sized with the reference rules. :func:`verified_against`
says what each flavour's figures were checked against: the 64-bit host wheel, a recorded
32-bit build, or nothing (an estimate).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from devicefit.simulator.plan.lifetimes import arena_buffers
from devicefit.simulator.read.model import DTYPE_BYTES, Model, Operator, Subgraph, Tensor
from devicefit.simulator.targets.tflm import cmsis_nn, esp_nn
from devicefit.simulator.targets.tflm.cmsis_nn import ConvParams, Dims, Feature
from devicefit.simulator.types import Buffer, ScratchRequest

ScratchRule = Callable[[Subgraph, Operator, int], list[ScratchRequest]]


def _tensor(sg: Subgraph, op: Operator, i: int, outputs: bool = False) -> Tensor | None:
    refs = op.outputs if outputs else op.inputs
    if i >= len(refs) or refs[i] < 0:
        return None
    return sg.tensors[refs[i]]


def _constant(t: Tensor) -> bool:
    """TFLM's ``IsConstantTensor``: data in the flatbuffer (TFLM ignores data stored after it)."""
    return t.has_data and not t.data_after_flatbuffer


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


def _signal_rfft(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """TFLM's SignalRfft (signal/micro/kernels/rfft.cc:101): one work area of fft_length
    values of the input type."""
    inp, out = _tensor(sg, op, 0), _tensor(sg, op, 0, outputs=True)
    if inp is None or out is None or not out.shape:
        return []
    return [ScratchRequest(signal_fft_length(out) * DTYPE_BYTES.get(inp.dtype, 4),
                           "FFT work area")]


def signal_fft_length(out: Tensor) -> int:
    """SignalRfft's fft_length from its output: fft_length / 2 + 1 complex values, stored
    as pairs of the input type (rfft.cc:101); the flexbuffer options hold the same."""
    return (out.shape[-1] // 2 - 1) * 2


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
    "CUSTOM:SignalRfft": _signal_rfft,
}


# --------------------------------------------------------------------------- CMSIS-NN
def _same_padding(in_size: int, k: int, stride: int, dilation: int, out_size: int) -> int:
    """TFLM's ``ComputePaddingHeightWidth`` for SAME padding (the leading side)."""
    return max((out_size - 1) * stride + (k - 1) * dilation + 1 - in_size, 0) // 2


def _conv_dims(sg: Subgraph, op: Operator) -> tuple[Dims, Dims, Dims, ConvParams] | None:
    """CMSIS-NN's view of a 4-D CONV_2D / DEPTHWISE_CONV_2D, as TFLM's ``cmsis_nn/conv.cc``
    and ``depthwise_conv.cc`` fill it: filter dims {1, h, w, filter channels} (depthwise:
    {1, h, w, output depth}), padding from TFLM's own computation."""
    inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or f is None or out is None or not (len(inp.shape) == len(f.shape)
                                                      == len(out.shape) == 4):
        return None
    o = op.options
    pad_h, pad_w = _padding(inp, f, out, o)
    p = ConvParams(stride_h=int(o.get("stride_h", 1)), stride_w=int(o.get("stride_w", 1)),
                   pad_h=pad_h, pad_w=pad_w,
                   dilation_h=int(o.get("dilation_hfactor", 1)),
                   dilation_w=int(o.get("dilation_wfactor", 1)))
    return Dims(*inp.shape), Dims(1, f.shape[1], f.shape[2], f.shape[3]), Dims(*out.shape), p


def _padding(inp: Tensor, f: Tensor, out: Tensor, o: Mapping) -> tuple[int, int]:
    """TFLM's ``op_data.padding`` (height, width) of a 4-D CONV_2D / DEPTHWISE_CONV_2D."""
    if o.get("padding", "SAME") != "SAME":
        return 0, 0
    return (_same_padding(inp.shape[1], f.shape[1], int(o.get("stride_h", 1)),
                          int(o.get("dilation_hfactor", 1)), out.shape[1]),
            _same_padding(inp.shape[2], f.shape[2], int(o.get("stride_w", 1)),
                          int(o.get("dilation_wfactor", 1)), out.shape[2]))


def _cmsis_conv(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
        """``cmsis_nn/conv.cc`` Prepare: int8 → ``arm_convolve_wrapper_s8``; int16 with an
        int64 (or no) bias → ``arm_convolve_wrapper_s16``; float → the reference kernel."""
        dims, inp, bias = _conv_dims(sg, op), _tensor(sg, op, 0), _tensor(sg, op, 2)
        if dims is None or inp is None:
            return []
        i, f, o, p = dims
        size = 0
        if inp.dtype == "int8":
            size = cmsis_nn.convolve_wrapper_s8(p, i, f, o, feature)
        elif inp.dtype == "int16" and (bias is None or bias.dtype == "int64"):
            size = cmsis_nn.convolve_wrapper_s16(i, f, feature)
        return [ScratchRequest(size, "im2col (CMSIS-NN)")] if size > 0 else []
    return rule


def _cmsis_depthwise(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
        """``cmsis_nn/depthwise_conv.cc``: only int8 inputs ask CMSIS-NN for a buffer."""
        dims, inp = _conv_dims(sg, op), _tensor(sg, op, 0)
        if dims is None or inp is None or inp.dtype != "int8":
            return []
        i, f, o, p = dims
        size = cmsis_nn.depthwise_conv_wrapper_s8(p, i, Dims(1, f.h, f.w, o.c), o, feature)
        return [ScratchRequest(size, "im2col (CMSIS-NN)")] if size > 0 else []
    return rule


def fc_runs_as_conv_1x1(sg: Subgraph, op: Operator) -> bool:
    """``cmsis_nn/fully_connected.cc``: an int8 FC whose output has rank > 2 and whose
    accumulation depth is a multiple of 4 runs as a 1x1 convolution."""
    f, out = _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    return f is not None and out is not None and len(out.shape) > 2 and bool(f.shape) \
        and f.shape[-1] % 4 == 0


def cmsis_fc_kernel_sums(sg: Subgraph, op: Operator, feature: Feature) -> int:
    """Bytes of the int8 FC's kernel-sum buffer (``arm_fully_connected_s8_get_buffer_size``),
    0 when there is none. Kept persistent when filter and bias are constant
    (``KERNELS_OPTIMIZED_FOR_SPEED``, TFLM's default), else requested as scratch."""
    inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or f is None or out is None or inp.dtype != "int8" or f.dtype != "int8" \
            or not out.shape or fc_runs_as_conv_1x1(sg, op):
        return 0
    return cmsis_nn.fully_connected_s8(out.shape[-1], feature)


def fc_sums_persistent(sg: Subgraph, op: Operator) -> bool:
    f, bias = _tensor(sg, op, 1), _tensor(sg, op, 2)
    return f is not None and _constant(f) and (bias is None or _constant(bias))


def _cmsis_fully_connected(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
        inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
        if inp is None or f is None or out is None or inp.dtype != "int8" or f.dtype != "int8":
            return []
        per_channel = f.quantization is not None and f.quantization.per_channel
        if fc_runs_as_conv_1x1(sg, op):
            # Per-tensor quantization faked as per-channel for the 1x1 conv.
            return [] if per_channel else [
                ScratchRequest(out.shape[-1] * 4 * 2, "per-channel parameters (CMSIS-NN)")]
        sums = cmsis_fc_kernel_sums(sg, op, feature)
        if sums and not fc_sums_persistent(sg, op):
            return [ScratchRequest(sums, "kernel sums (CMSIS-NN)")]
        return []
    return rule


def _cmsis_average_pool(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
        """``cmsis_nn/pooling.cc`` AveragePrepare: ``arm_avgpool_s8/s16_get_buffer_size``."""
        inp = _tensor(sg, op, 0)
        if inp is None or inp.dtype not in ("int8", "int16") or len(inp.shape) != 4:
            return []
        size = cmsis_nn.avgpool(inp.shape[3], feature)
        return [ScratchRequest(size, "accumulators (CMSIS-NN)")] if size > 0 else []
    return rule


def cmsis_lstm_integer(sg: Subgraph, op: Operator) -> str | None:
    """'int8' / 'int16' when ``cmsis_nn/unidirectional_sequence_lstm.cc`` runs CMSIS-NN's
    LSTM (int8 or int16 activations, int16 cell state), else None (reference fallback)."""
    inp, cell = _tensor(sg, op, 0), _tensor(sg, op, 19)
    if inp is not None and cell is not None and cell.dtype == "int16" \
            and inp.dtype in ("int8", "int16"):
        return inp.dtype
    return None


def _cmsis_lstm(sg: Subgraph, op: Operator, ptr: int) -> list[ScratchRequest]:
    """CMSIS-NN's LSTM takes 3 gate buffers where the reference kernel takes 4."""
    reqs = _lstm(sg, op, ptr)
    return reqs[:3] if cmsis_lstm_integer(sg, op) else reqs


def _cmsis_transpose_conv(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, ptr: int) -> list[ScratchRequest]:
        """``cmsis_nn/transpose_conv.cc``: int8 asks for the CMSIS-NN buffer and the reversed
        filter's (both requested, even at 0 bytes); int16 as the reference kernel."""
        inp, f, out = _tensor(sg, op, 2), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
        if inp is None or f is None or out is None or inp.dtype != "int8" \
                or not (len(inp.shape) == len(f.shape) == len(out.shape) == 4):
            return _transpose_conv(sg, op, ptr)
        sh, sw = int(op.options.get("stride_h", 1)), int(op.options.get("stride_w", 1))
        i = Dims(*inp.shape)
        filt = Dims(f.shape[0], f.shape[1], f.shape[2], inp.shape[3])
        o = Dims(out.shape[0], out.shape[1], out.shape[2], f.shape[0])
        return [ScratchRequest(cmsis_nn.transpose_conv_s8(sh, sw, i, filt, o, feature),
                               "columns (CMSIS-NN)"),
                ScratchRequest(cmsis_nn.transpose_conv_s8_reverse(sh, sw, i, filt),
                               "reversed filter (CMSIS-NN)")]
    return rule


def _cmsis_batch_matmul(feature: Feature) -> ScratchRule:
    def rule(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
        """``cmsis_nn/batch_matmul.cc``: int8 → ``arm_fully_connected_s8_get_buffer_size``
        of the output's last dimension."""
        lhs, rhs, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
        if lhs is None or rhs is None or out is None or lhs.dtype != "int8" \
                or rhs.dtype == "float32" or not out.shape:
            return []
        size = cmsis_nn.fully_connected_s8(out.shape[-1], feature)
        return [ScratchRequest(size, "kernel sums (CMSIS-NN)")] if size > 0 else []
    return rule


def cmsis_nn_scratch(feature: Feature) -> dict[str, ScratchRule]:
    """Scratch rules of TFLM's ``kernels/cmsis_nn/`` on a core with ``feature``; ops it does
    not override (and float paths of those it does) are the reference kernels'."""
    return {
        **REFERENCE_SCRATCH,
        "CONV_2D": _cmsis_conv(feature),
        "DEPTHWISE_CONV_2D": _cmsis_depthwise(feature),
        "FULLY_CONNECTED": _cmsis_fully_connected(feature),
        "AVERAGE_POOL_2D": _cmsis_average_pool(feature),
        "UNIDIRECTIONAL_SEQUENCE_LSTM": _cmsis_lstm,
        "TRANSPOSE_CONV": _cmsis_transpose_conv(feature),
        "BATCH_MATMUL": _cmsis_batch_matmul(feature),
    }


# --------------------------------------------------------------------------- ESP-NN
def _esp_conv_args(sg: Subgraph, op: Operator) \
        -> tuple[esp_nn.Dims, esp_nn.Dims, esp_nn.Dims, esp_nn.ConvParams] | None:
    """What TFLM's ``esp_nn/conv.cc`` (:132) and ``depthwise_conv.cc`` (:256) pass ESP-NN
    for an int8 input: input, filter {w, h, dims[3]} and output dims, strides, TFLM's
    padding and the depth multiplier; None for other inputs (no request)."""
    inp, f, out = _tensor(sg, op, 0), _tensor(sg, op, 1), _tensor(sg, op, 0, outputs=True)
    if inp is None or f is None or out is None or inp.dtype != "int8" \
            or not (len(inp.shape) == len(f.shape) == len(out.shape) == 4):
        return None
    o = op.options
    pad_h, pad_w = _padding(inp, f, out, o)
    p = esp_nn.ConvParams(stride_w=int(o.get("stride_w", 1)), stride_h=int(o.get("stride_h", 1)),
                          pad_w=pad_w, pad_h=pad_h, ch_mult=int(o.get("depth_multiplier", 1)))
    return (esp_nn.Dims(inp.shape[2], inp.shape[1], inp.shape[3]),
            esp_nn.Dims(f.shape[2], f.shape[1], f.shape[3]),
            esp_nn.Dims(out.shape[2], out.shape[1], out.shape[3]), p)


def _esp_conv_like(size: Callable[..., int]) -> Callable[[esp_nn.Variant], ScratchRule]:
    def for_variant(variant: esp_nn.Variant) -> ScratchRule:
        def rule(sg: Subgraph, op: Operator, ptr: int) -> list[ScratchRequest]:
            """The int4 filter's buffer first (as the reference kernel), then ESP-NN's,
            requested only when positive."""
            reqs = _int4_filter(sg, op, ptr)
            args = _esp_conv_args(sg, op)
            n = size(*args, variant) if args is not None else 0
            return reqs + [ScratchRequest(n, "scratch (ESP-NN)")] if n > 0 else reqs
        return rule
    return for_variant


_esp_conv = _esp_conv_like(esp_nn.conv_scratch)
_esp_depthwise = _esp_conv_like(esp_nn.depthwise_scratch)


def _esp_softmax(sg: Subgraph, op: Operator, _ptr: int) -> list[ScratchRequest]:
    """``esp_nn/softmax.cc:151``: int8 in and out ask for ``input->dims->data[1]`` * 4
    (the C reads ``data[1]`` of any rank; a rank-1 input is left unsized here)."""
    inp, out = _tensor(sg, op, 0), _tensor(sg, op, 0, outputs=True)
    if inp is None or out is None or inp.dtype != "int8" or out.dtype != "int8" \
            or len(inp.shape) < 2:
        return []
    n = esp_nn.softmax_scratch(inp.shape[1])
    return [ScratchRequest(n, "scratch (ESP-NN)")] if n > 0 else []


def esp_nn_scratch(variant: esp_nn.Variant) -> dict[str, ScratchRule]:
    """Scratch rules of esp-tflite-micro's ``kernels/esp_nn/`` built for ``variant``; its
    FULLY_CONNECTED, pooling, ADD and MUL request nothing beyond the reference kernels'."""
    return {**REFERENCE_SCRATCH, "CONV_2D": _esp_conv(variant),
            "DEPTHWISE_CONV_2D": _esp_depthwise(variant), "SOFTMAX": _esp_softmax}


#: kernel flavour → its scratch rules. ``cmsis-nn:<feature>`` is CMSIS-NN built for a core
#: with that extension (:func:`flavour`); plain ``cmsis-nn`` means a DSP core (M4/M7/M33).
KERNEL_SCRATCH: dict[str, dict[str, ScratchRule]] = {
    "reference": REFERENCE_SCRATCH,
    **{f"cmsis-nn:{f}": cmsis_nn_scratch(f) for f in cmsis_nn.FEATURES},
    **{f"esp-nn:{v}": esp_nn_scratch(v) for v in esp_nn.VARIANTS},
}
#: Flavour names kept for callers that know only the library: a DSP core, an ESP32-S3
#: (ESP-NN's SIMD target and the one shipped profile using it).
KERNEL_ALIASES = {"cmsis-nn": "cmsis-nn:dsp", "esp-nn": "esp-nn:esp32s3"}
for _name, _flavour in KERNEL_ALIASES.items():
    KERNEL_SCRATCH[_name] = KERNEL_SCRATCH[_flavour]


def flavour(kernels: str, simd: str | None, core: str | None = None) -> str:
    """The scratch/tail flavour of ``kernels`` on a core whose SIMD path is ``simd`` and
    whose registered name is ``core`` (:class:`simulator.estimate.cores.Core`): CMSIS-NN's sizes
    depend on DSP / MVE, ESP-NN's on the chip (S3, P4, others: generic)."""
    if kernels == "esp-nn":
        return f"esp-nn:{_ESP_VARIANTS.get(core, 'generic')}" if core else KERNEL_ALIASES[kernels]
    if kernels != "cmsis-nn":
        return kernels
    return f"cmsis-nn:{simd if simd in ('dsp', 'mve') else 'none'}" if simd else "cmsis-nn:dsp"


#: cores.yaml's core name → the ESP-NN build esp_nn.h selects for it.
_ESP_VARIANTS: dict[str, esp_nn.Variant] = {"xtensa-lx7": "esp32s3",
                                            "esp32-p4-rv32imafc": "esp32p4"}


#: What each (flavour, pointer width)'s arena figures have been checked against: the pip
#: wheel's RecordingMicroAllocator on a 64-bit host, or recorded 32-bit TFLM builds
#: (``tests/data/tflm_builds/``, checked in ``tests/simulator/targets/tflm/test_tflm_32bit.py``).
#: Anything else is sized from the kernel sources but never compared with a run.
#: Where the sizes come from, per kernel library, for the notes of such an estimate.
SOURCES = {"cmsis-nn": "CMSIS-NN's get_buffer_size functions, GCC build",
           "esp-nn": "from ESP-NN sources, not measured on a build"}
HOST_MEASURED = "64-bit host measured"
BUILD_MEASURED = "32-bit build measured"
ESTIMATED = "estimated"
_VERIFIED: dict[tuple[str, int], str] = {
    ("reference", 8): HOST_MEASURED,
    ("reference", 4): BUILD_MEASURED,
    ("cmsis-nn:dsp", 4): BUILD_MEASURED,
}


def verified_against(flavour_: str, pointer_bytes: int) -> str:
    """:data:`HOST_MEASURED`, :data:`BUILD_MEASURED` or :data:`ESTIMATED`."""
    return _VERIFIED.get((KERNEL_ALIASES.get(flavour_, flavour_), pointer_bytes), ESTIMATED)


def is_exact(kernels: str, pointer_bytes: int = 8) -> bool:
    """Do the head's scratch requests of this flavour match a measured build?"""
    return verified_against(kernels, pointer_bytes) != ESTIMATED


def scratch_requests(sg: Subgraph, op: Operator, pointer_bytes: int = 8,
                     kernels: str = "reference") -> list[ScratchRequest]:
    """Scratch buffers the ``kernels`` kernel of ``op`` requests in ``Prepare``, in order
    (unknown flavours: the reference kernels' requests)."""
    rule = KERNEL_SCRATCH.get(kernels, REFERENCE_SCRATCH).get(op.op_name)
    return rule(sg, op, pointer_bytes) if rule else []


def tflm_buffers(model: Model, order: Sequence[int] | None = None, *,
                 pointer_bytes: int = 8, kernels: str = "reference") -> list[Buffer]:
    """Every buffer TFLM plans in the arena head (:func:`simulator.plan.lifetimes.arena_buffers`),
    with the scratch buffers the ``kernels`` flavour requests (some sizes depend on
    ``pointer_bytes``)."""
    return arena_buffers(model, order,
                         lambda sg, op: scratch_requests(sg, op, pointer_bytes, kernels))
