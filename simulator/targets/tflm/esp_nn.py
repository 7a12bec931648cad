"""ESP-NN's scratch-size functions, transcribed, per chip.

TFLM's ESP-NN kernel wrappers (espressif/esp-tflite-micro 99f49e14,
``tensorflow/lite/micro/kernels/esp_nn/``) ask ESP-NN how much scratch an int8 layer needs
and request it only when the answer is positive: ``conv.cc:132-162``
(``esp_nn_get_conv_scratch_size``), ``depthwise_conv.cc:256-287``
(``esp_nn_get_depthwise_conv_scratch_size``) and ``softmax.cc:151-164``
(``esp_nn_get_softmax_scratch_size``, int8 in and out); ``fully_connected.cc``,
``pooling.cc``, ``add.cc`` and ``mul.cc`` request none of their own. ``esp_nn.h`` picks
the implementation at compile time: ``esp32s3`` (``esp_nn_esp32s3.h``), ``esp32p4``
(``esp_nn_esp32p4.h``) or, on other chips, the generic optimised C (``generic``,
``esp_nn_generic_opt.h``). Transcribed from espressif/esp-nn d45b843c; every function
names the C function and ``file:line`` it reproduces. Nothing here was measured on a build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Variant = Literal["esp32s3", "esp32p4", "generic"]
VARIANTS: tuple[Variant, ...] = ("esp32s3", "esp32p4", "generic")

#: src/convolution/esp_nn_conv_esp32p4.c:589: the P4 conv's L1 data-cache budget.
L1D_BUDGET = 32768


@dataclass(frozen=True)
class Dims:
    """``data_dims_t`` as the TFLM wrappers fill it (``extra`` is never read by the sizes)."""

    width: int
    height: int
    channels: int


@dataclass(frozen=True)
class ConvParams:
    """The parts of ``conv_params_t`` / ``dw_conv_params_t`` the sizes read: TFLM's own
    padding (``op_data.padding``); dilation is passed as 0 and never read."""

    stride_w: int = 1
    stride_h: int = 1
    pad_w: int = 0
    pad_h: int = 0
    ch_mult: int = 1


def _u16(v: int) -> int:
    """The sizes read every dimension into a ``uint16_t``."""
    return v & 0xFFFF


def _conv_s3(inp: Dims, filt: Dims, out: Dims, p: ConvParams) -> int:
    """``esp_nn_get_conv_scratch_size_esp32s3``, src/convolution/esp_nn_conv_esp32s3.c:315."""
    in_w, in_h, in_ch = _u16(inp.width), _u16(inp.height), _u16(inp.channels)
    f_w, f_h, out_ch = _u16(filt.width), _u16(filt.height), _u16(out.channels)
    pad_w, pad_h, s_w, s_h = _u16(p.pad_w), _u16(p.pad_h), _u16(p.stride_w), _u16(p.stride_h)
    align = 64  # alignment (16) + the assembly's pre/post access margin (48)
    if f_w == f_h == 1 and pad_w == pad_h == 0 and s_w == s_h == 1:  # :337
        new_ch = (in_ch + 7) & ~7
        transpose = 0 if in_w * in_h < 8 else 2 * (8 * new_ch)
        input_scratch = in_w * in_h * new_ch if in_ch % 8 else 0
        return input_scratch + new_ch * out_ch + transpose + align
    row, window = f_w * in_ch, f_w * f_h * in_ch
    if row < 16 and window >= 16:  # :355, the im2col path
        aligned = (window + 15) & ~15
        return out_ch * 4 + 16 + out_ch * aligned + 16 + aligned + align
    new_ch = (in_ch + 15) & ~15
    input_scratch = 0 if pad_w == pad_h == 0 else \
        (in_w + 2 * pad_w) * (in_h + 2 * pad_h) * in_ch
    filter_scratch = f_w * f_h * new_ch * out_ch
    filter_alignment = ((row + 15) // 16) * 16 * f_h * out_ch
    # :375 as written: out * stride + k - 1, not (out - 1) * stride + k.
    pad_right = max(0, (_u16(out.width) * s_w + f_w - 1) - in_w)
    pad_bottom = max(0, (_u16(out.height) * s_h + f_h - 1) - in_h)
    boundary = (in_w + pad_right) * (in_h + pad_bottom) * in_ch \
        if pad_right > 0 or pad_bottom > 0 else 0
    return input_scratch + filter_scratch + filter_alignment + boundary + align + out_ch * 4


def _conv_p4(inp: Dims, filt: Dims, out: Dims, p: ConvParams) -> int:
    """``esp_nn_get_conv_scratch_size_esp32p4``, src/convolution/esp_nn_conv_esp32p4.c:869."""
    in_w, in_h, in_ch = _u16(inp.width), _u16(inp.height), _u16(inp.channels)
    f_w, f_h, out_ch = _u16(filt.width), _u16(filt.height), _u16(out.channels)
    pad_w, pad_h, s_w, s_h = _u16(p.pad_w), _u16(p.pad_h), _u16(p.stride_w), _u16(p.stride_h)
    align = 32
    if f_w == f_h == 1 and pad_w == pad_h == 0 and s_w == s_h == 1:  # :891
        if in_ch < 16:  # :893, the channel-padding path
            return out_ch * 4 + 16 * out_ch + 32 + align
        new_ch = (in_ch + 7) & ~7
        transpose = 0 if in_w * in_h < 8 else 2 * (8 * new_ch)
        input_scratch = in_w * in_h * new_ch if in_ch % 8 else 0
        return input_scratch + new_ch * out_ch + transpose + align
    new_ch = (in_ch + 15) & ~15
    acc = out_ch * 4
    if pad_w == pad_h == 0 and f_w * in_ch >= 16:  # :915, direct no-pad path
        return f_w * f_h * new_ch * out_ch + align + acc
    if f_w * f_h * in_ch >= 16:  # :923, im2col: one window
        return acc + f_w * f_h * in_ch + align
    if pad_w == pad_h == 0:  # :930, tiny window, tiled
        eff_ch = ((16 + f_w - 1) // f_w + 15) & ~15
        return acc + f_w * f_h * eff_ch * out_ch + in_w * in_h * eff_ch + align
    padded_w = in_w + 2 * pad_w
    full_input = padded_w * (in_h + 2 * pad_h) * in_ch
    if full_input + acc <= L1D_BUDGET:  # :941 (else), monolithic padded path
        return full_input + f_w * f_h * new_ch * out_ch + align + acc
    eff_ch, filt_aligned = in_ch, 0
    if f_w * in_ch < 16:
        eff_ch = ((16 + f_w - 1) // f_w + 15) & ~15
        filt_aligned = f_w * f_h * eff_ch * out_ch
    tile_row = padded_w * eff_ch
    budget = L1D_BUDGET - acc - filt_aligned
    tile_t = 1
    if budget > 0 and f_h * tile_row <= budget:
        tile_t = min((budget - f_h * tile_row) // (s_h * tile_row) + 1, _u16(out.height))
    tile_rows = (tile_t - 1) * s_h + f_h + 2 * pad_h
    return tile_rows * tile_row + filt_aligned + align + acc


def conv_scratch(inp: Dims, filt: Dims, out: Dims, p: ConvParams, variant: Variant) -> int:
    """``esp_nn_get_conv_scratch_size`` of ``variant``; the generic optimised C
    (src/convolution/esp_nn_conv_opt.c:20) needs none."""
    if variant == "esp32s3":
        return _conv_s3(inp, filt, out, p)
    if variant == "esp32p4":
        return _conv_p4(inp, filt, out, p)
    return 0


def _depthwise_s3(inp: Dims, filt: Dims, out: Dims, p: ConvParams) -> int:
    """``esp_nn_get_depthwise_conv_scratch_size_esp32s3``,
    src/convolution/esp_nn_depthwise_conv_s8_esp32s3.c:348."""
    in_w, in_h, ch = _u16(inp.width), _u16(inp.height), _u16(inp.channels)
    f_w, f_h, mult = _u16(filt.width), _u16(filt.height), _u16(p.ch_mult)
    out_w, out_h = _u16(out.width), _u16(out.height)
    pad_w, pad_h, s_w, s_h = _u16(p.pad_w), _u16(p.pad_h), _u16(p.stride_w), _u16(p.stride_h)
    filter_size = f_w * f_h * ch * mult
    if mult == 1 and ch % 8 == 0:  # :369
        if f_w == f_h == 3:
            if ch % 16 == 0:  # :371
                if pad_w or pad_h:
                    pad_width, pad_height = pad_w * 2, pad_h * 2
                else:  # may be negative; the C tests it for non-zero all the same
                    pad_width = (out_w * s_w + f_w - 1) - in_w
                    pad_height = (out_h * s_h + f_h - 1) - in_h
                if not (pad_width or pad_height):
                    return filter_size + 16
                full_input = (in_w + pad_width) * (in_h + pad_height) * ch
                if full_input <= 40 * 1024:
                    return filter_size + full_input + 16
                return filter_size + (in_w + pad_width) * f_h * ch + 16  # :384, tiled
            if ch >= 12:  # :391, padded to 16 channels
                new_ch = (ch + 15) & ~15
                total_pad_w = pad_w * 2 + max(0, (out_w * s_w + 2) - in_w)
                total_pad_h = pad_h * 2 + max(0, (out_h * s_h + 2) - in_h)
                return (9 * new_ch + (in_w + total_pad_w) * (in_h + total_pad_h) * new_ch
                        + out_w * out_h * new_ch + 64)
            return 2 * (filter_size + in_w * in_h * ch) + 32  # :401, ch == 8
        total_s16 = 2 * (filter_size + in_w * in_h * ch)  # :407
        if total_s16 <= 48 * 1024:
            return total_s16 + 32
        return 2 * filter_size + 2 * in_w * f_h * ch + 32  # :411, tiled
    if mult == 1 and ch > 3:  # :417, channels padded to 8, 16-byte aligned sections
        padded = (ch + 7) & ~7
        input_start = (f_w * f_h * padded * 2 + 15) & ~15
        out_start = (input_start + in_w * in_h * padded * 2 + 15) & ~15
        bias_start = (out_start + out_w * out_h * padded + 15) & ~15
        return bias_start + 3 * padded * 4 + 16
    if mult % 4 == 0:  # :436
        return 2 * (filter_size + in_w * in_h * ch) + 32
    return 32  # :441


def depthwise_scratch(inp: Dims, filt: Dims, out: Dims, p: ConvParams,
                      variant: Variant) -> int:
    """``esp_nn_get_depthwise_conv_scratch_size`` of ``variant``: only the S3's asks for any
    (P4: src/convolution/esp_nn_depthwise_conv_esp32p4.c:25, generic:
    src/convolution/esp_nn_depthwise_conv_opt.c:18, both 0)."""
    return _depthwise_s3(inp, filt, out, p) if variant == "esp32s3" else 0


def softmax_scratch(width: int) -> int:
    """``esp_nn_get_softmax_scratch_size``: ``width * 4`` on all three variants
    (src/softmax/esp_nn_softmax_s8_esp32s3.c:16, esp_nn_softmax_s8_esp32p4.c:13,
    esp_nn_softmax_opt.c:29); ``width`` is what softmax.cc:153 passes, ``dims->data[1]``."""
    return width * 4
