"""CMSIS-NN's buffer-size functions, transcribed, per core feature.

TFLM's ``kernels/cmsis_nn/*.cc`` ask CMSIS-NN how much scratch (or persistent "kernel sum")
memory a layer needs through ``arm_*_get_buffer_size``; what those return depends on the
core's extension, chosen at compile time: ``none`` (Cortex-M0/M0+/M3: neither
``ARM_MATH_DSP`` nor ``ARM_MATH_MVEI``), ``dsp`` (M4, M7, M33: ``ARM_MATH_DSP``) or ``mve``
(M55, M85: ``ARM_MATH_MVEI``). Transcribed from CMSIS-NN 4ab83cc3 (the commit TFLM
90b983c2 pins), ``Source/*/arm_*_get_buffer_sizes_*.c``, for GCC (``__ARMCC_VERSION``
unset: the Arm compiler's 1x1 fast path and depthwise threshold differ). Each function
names the C function it reproduces; ``tests/simulator/targets/tflm/test_tflm_32bit.py`` checks them
against the C sources compiled on the host when a CMSIS-NN checkout is at hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Feature = Literal["none", "dsp", "mve"]
FEATURES: tuple[Feature, ...] = ("none", "dsp", "mve")

#: arm_nnsupportfunctions.h: channels per block of the MVE depthwise kernel.
CH_IN_BLOCK_MVE = 124
#: arm_nnsupportfunctions.h: above this many input channels transpose conv runs as a
#: reversed convolution.
REVERSE_TCOL_EFFICIENT_THRESHOLD = 16
#: arm_nnsupportfunctions.h, GCC: a depthwise conv with one input channel and more output
#: channels than this runs as a regular conv on MVE (8 with the Arm compiler).
DW_ONE_IN_CH_THRESHOLD = 1


@dataclass(frozen=True)
class Dims:
    """``cmsis_nn_dims``."""

    n: int
    h: int
    w: int
    c: int


@dataclass(frozen=True)
class ConvParams:
    """The parts of ``cmsis_nn_conv_params`` / ``cmsis_nn_dw_conv_params`` the sizes read."""

    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dilation_h: int = 1
    dilation_w: int = 1


def _c_div(a: int, b: int) -> int:
    """C's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


def convolve_s8(inp: Dims, filt: Dims, feature: Feature) -> int:
    """``arm_convolve_s8_get_buffer_size`` (and its ``_mve`` variant)."""
    cols = filt.w * filt.h * inp.c
    if feature == "mve":
        return 4 * ((cols + 15) // 16) * 16
    return 2 * (cols + (-cols % 4)) * 2


def _convolve_1_x_n_s8_mve(p: ConvParams, inp: Dims, filt: Dims, out: Dims) -> int:
    """``arm_convolve_1_x_n_s8_get_buffer_size_mve``."""
    total_pad = (out.w - 1) * p.stride_w + filt.w - inp.w
    asym_pad = _c_mod(total_pad, 2)
    right = max(1, _c_div(p.pad_w + asym_pad + p.stride_w - 1, p.stride_w)) \
        if p.pad_w + asym_pad != 0 else 0
    left = max(1, _c_div(p.pad_w + p.stride_w - 1, p.stride_w)) if p.pad_w != 0 else 0
    no_pad = max(out.w - (right + left), 0)
    if right + no_pad + left != out.w:
        return convolve_s8(inp, filt, "mve")
    pad_left = p.pad_w * inp.c
    pad_right = right * inp.c if asym_pad else pad_left
    elem_left = filt.w * inp.c
    return max(elem_left + pad_left, elem_left - inp.c + pad_right)


def is_convolve_1x1(p: ConvParams, inp: Dims, filt: Dims) -> bool:
    """``arm_nn_is_convolve_1x1``."""
    return (p.pad_w == p.pad_h == 0 and filt.w == filt.h == 1
            and p.dilation_w == p.dilation_h == 1 and inp.c == filt.c)


def is_convolve_1_x_n(p: ConvParams, inp: Dims, filt: Dims) -> bool:
    """``arm_nn_is_convolve_1_x_n``."""
    return (inp.h == 1 and p.dilation_w == 1 and filt.h == 1
            and (p.stride_w * inp.c) % 4 == 0 and inp.c == filt.c)


def convolve_wrapper_s8(p: ConvParams, inp: Dims, filt: Dims, out: Dims,
                        feature: Feature) -> int:
    """``arm_convolve_wrapper_s8_get_buffer_size``: 1x1 kernels need none with GCC (the
    fast path's buffer is ``__ARMCC_VERSION``-only), 1xN ones the MVE 1xN size on MVE."""
    if is_convolve_1x1(p, inp, filt):
        return 0
    if is_convolve_1_x_n(p, inp, filt) and feature == "mve":
        return _convolve_1_x_n_s8_mve(p, inp, filt, out)
    return convolve_s8(inp, filt, feature)


def convolve_wrapper_s16(inp: Dims, filt: Dims, feature: Feature) -> int:
    """``arm_convolve_wrapper_s16_get_buffer_size`` (= ``arm_convolve_s16_get_buffer_size``)."""
    cols = inp.c * filt.w * filt.h
    if feature == "mve":
        return 4 * ((cols + 7) // 8) * 8 * 2
    return 2 * cols * 2


def depthwise_conv_wrapper_s8(p: ConvParams, inp: Dims, filt: Dims, out: Dims,
                              feature: Feature) -> int:
    """``arm_depthwise_conv_wrapper_s8_get_buffer_size``; ``filt.c`` is the output depth."""
    if feature == "mve" and inp.c == 1 and out.c > DW_ONE_IN_CH_THRESHOLD:
        # arm_deptwise_conv_s8_one_in_ch_get_buffer_size_mve: run as a conv whose filter
        # dims are {c, h, w, n}, plus a copy of the filter.
        as_conv = Dims(filt.c, filt.h, filt.w, filt.n)
        return (convolve_wrapper_s8(p, inp, as_conv, out, "mve")
                + filt.c * filt.h * filt.w * filt.n)
    if inp.c == out.c and inp.n == 1 and p.dilation_w == p.dilation_h == 1:
        if feature != "mve" and filt.w == filt.h == 3 and p.pad_h <= 1 and p.pad_w <= 1:
            return 0  # arm_depthwise_conv_3x3_s8
        # arm_depthwise_conv_s8_opt_get_buffer_size
        if feature == "mve":
            return 4 * CH_IN_BLOCK_MVE * filt.w * filt.h
        if feature == "dsp":
            return inp.c * filt.w * filt.h * 2
    return 0


def fully_connected_s8(out_depth: int, feature: Feature) -> int:
    """``arm_fully_connected_s8_get_buffer_size`` (``filter_dims.c`` = output depth): MVE
    keeps per-output kernel sums, the others nothing."""
    return out_depth * 4 if feature == "mve" else 0


def avgpool(channels: int, feature: Feature) -> int:
    """``arm_avgpool_s8_get_buffer_size`` = ``arm_avgpool_s16_get_buffer_size``."""
    return channels * 4 if feature == "dsp" else 0


def svdf_s8(num_filters: int, feature: Feature) -> int:
    """``arm_svdf_s8_get_buffer_size`` (``weights_feature_dims.n`` = filters)."""
    return num_filters * 4 if feature == "mve" else 0


def transpose_conv_s8(stride_h: int, stride_w: int, inp: Dims, filt: Dims, out: Dims,
                      feature: Feature) -> int:
    """``arm_transpose_conv_s8_get_buffer_size``."""
    if stride_w <= 2 and stride_h <= 2 and inp.c > REVERSE_TCOL_EFFICIENT_THRESHOLD:
        return convolve_s8(Dims(inp.n, inp.h * stride_h, inp.w * stride_w, inp.c), filt, feature)
    # CMSIS-NN compares the filter width with stride.h here; reproduced as written.
    buf_x = ((inp.w - 1) * stride_w + max(filt.w, stride_h)) * out.c
    return buf_x * max(filt.h, stride_h) * 4


def transpose_conv_s8_reverse(stride_h: int, stride_w: int, inp: Dims, filt: Dims) -> int:
    """``arm_transpose_conv_s8_get_reverse_conv_buffer_size``."""
    if stride_w <= 2 and stride_h <= 2 and inp.c > REVERSE_TCOL_EFFICIENT_THRESHOLD:
        return inp.c * filt.w * filt.h * filt.n
    return 0
