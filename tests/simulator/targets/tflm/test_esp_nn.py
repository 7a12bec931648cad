"""ESP-NN's scratch buffers: sizes worked by hand from the C sources (espressif/esp-nn
d45b843c), and a converted model planned on the ESP32-S3 profile.

The expected figures below are the C functions evaluated with pencil and paper, step by step
in the comments, not outputs of :mod:`simulator.targets.tflm.esp_nn`; nothing here was measured on an
ESP-NN build (none is available to CI), which is why the plan says "estimated".
"""

from __future__ import annotations

import dataclasses

from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.targets.tflm import esp_nn
from devicefit.simulator.targets.tflm.esp_nn import ConvParams, Dims
from devicefit.simulator.targets.tflm.planner import kernel_flavour, plan_tflm
from devicefit.simulator.targets.tflm.scratch import ESTIMATED, tflm_buffers, verified_against
from tests.zoo import model_path

SAME_3X3 = ConvParams(pad_w=1, pad_h=1)


def test_s3_conv_1x1_path() -> None:
    # esp_nn_conv_esp32s3.c:337: new_ch = 16, transpose 2 * 8 * 16 = 256 (64 pixels >= 8),
    # in_ch % 8 != 0 so input 8 * 8 * 16 = 1024, filter 16 * 16 = 256, + 64 alignment.
    assert esp_nn.conv_scratch(Dims(8, 8, 12), Dims(1, 1, 12), Dims(8, 8, 16), ConvParams(),
                               "esp32s3") == 1024 + 256 + 256 + 64
    # in_ch a multiple of 8: no input copy; fewer than 8 pixels: no transpose buffer.
    assert esp_nn.conv_scratch(Dims(8, 8, 16), Dims(1, 1, 16), Dims(8, 8, 16), ConvParams(),
                               "esp32s3") == 256 + 256 + 64
    assert esp_nn.conv_scratch(Dims(2, 2, 16), Dims(1, 1, 16), Dims(2, 2, 16), ConvParams(),
                               "esp32s3") == 256 + 64


def test_s3_conv_generic_path() -> None:
    # 10x10x8 input, 3x3 SAME (pad 1), 16 outputs: filter row 24 >= 16, not im2col.
    # input (10+2)*(10+2)*8 = 1152; filter 9*16*16 = 2304; alignment ceil(24/16)*16*3*16 =
    # 1536; pad_right = 10*1 + 3 - 1 - 10 = 2 (the C's formula), so boundary 12*12*8 = 1152;
    # + 64 alignment + 16*4 accumulators.
    assert esp_nn.conv_scratch(Dims(10, 10, 8), Dims(3, 3, 8), Dims(10, 10, 16), SAME_3X3,
                               "esp32s3") == 1152 + 2304 + 1536 + 1152 + 64 + 64


def test_s3_conv_im2col_path() -> None:
    # 3 input channels: row 9 < 16, window 27 >= 16, aligned to 32:
    # 8*4 + 16 + 8*32 + 16 + 32 + 64.
    assert esp_nn.conv_scratch(Dims(10, 10, 3), Dims(3, 3, 3), Dims(10, 10, 8), SAME_3X3,
                               "esp32s3") == 32 + 16 + 256 + 16 + 32 + 64


def test_p4_conv_differs_from_s3() -> None:
    # esp_nn_conv_esp32p4.c:893: 1x1, in_ch < 16: 16*4 + 16*16 + 32 + 32.
    assert esp_nn.conv_scratch(Dims(8, 8, 12), Dims(1, 1, 12), Dims(8, 8, 16), ConvParams(),
                               "esp32p4") == 64 + 256 + 32 + 32
    # :923: padded 3x3 over 8 channels: 16*4 accumulators + one 72-byte window + 32.
    assert esp_nn.conv_scratch(Dims(10, 10, 8), Dims(3, 3, 8), Dims(10, 10, 16), SAME_3X3,
                               "esp32p4") == 64 + 72 + 32
    # The generic optimised C (esp_nn_conv_opt.c:20) asks for nothing.
    assert esp_nn.conv_scratch(Dims(10, 10, 8), Dims(3, 3, 8), Dims(10, 10, 16), SAME_3X3,
                               "generic") == 0


def test_s3_depthwise() -> None:
    # :371: 16 channels, 3x3, pad 1: padded input 12*12*16 = 2304 <= 40 KiB, + filter 144 + 16.
    assert esp_nn.depthwise_scratch(Dims(10, 10, 16), Dims(3, 3, 16), Dims(10, 10, 16),
                                    SAME_3X3, "esp32s3") == 144 + 2304 + 16
    # :417: 4 channels padded to 8, 3x3 VALID 6x6 -> 4x4: filter 9*8*2 = 144 at 0, input
    # 36*8*2 = 576 from 144, output 16*8 = 128 from 720, bias from 848, + 3*8*4 + 16.
    assert esp_nn.depthwise_scratch(Dims(6, 6, 4), Dims(3, 3, 4), Dims(4, 4, 4),
                                    ConvParams(), "esp32s3") == 848 + 96 + 16
    # :441: multiplier 2 on 3 channels falls through to the 32-byte default.
    assert esp_nn.depthwise_scratch(Dims(6, 6, 3), Dims(3, 3, 6), Dims(4, 4, 6),
                                    ConvParams(ch_mult=2), "esp32s3") == 32
    # The P4's depthwise asks for nothing (esp_nn_depthwise_conv_esp32p4.c:25).
    assert esp_nn.depthwise_scratch(Dims(10, 10, 16), Dims(3, 3, 16), Dims(10, 10, 16),
                                    SAME_3X3, "esp32p4") == 0


def _profile(cpu: str):
    profile = load_profile("esp32-s3")
    return dataclasses.replace(profile, device=dataclasses.replace(profile.device, cpu=cpu))


def test_the_chip_picks_the_esp_nn_variant() -> None:
    assert kernel_flavour(load_profile("esp32-s3")) == "esp-nn:esp32s3"
    assert kernel_flavour(_profile("esp32-p4")) == "esp-nn:esp32p4"
    assert kernel_flavour(_profile("xtensa-lx6")) == "esp-nn:generic"
    assert kernel_flavour(with_runtime(load_profile("esp32-s3"), kernels="reference")) \
        == "reference"
    assert all(verified_against(f"esp-nn:{v}", 4) == ESTIMATED for v in esp_nn.VARIANTS)


def test_chain_on_esp32_s3_carries_esp_nn_scratch() -> None:
    """tests/zoo.py's chain_int8 (32x32x3 → conv 8 3x3 SAME → conv 16 3x3 /2 SAME →
    depthwise 3x3 SAME → conv 24 1x1 → avg pool → dense 10 → softmax), worked by hand:

    - conv 0, 3 channels: im2col path, 8*4 + 16 + 8*32 + 16 + 32 + 64 = 416;
    - conv 1, 32x32x8 → 16x16x16, stride 2: TFLM's SAME padding is 0 here (total 1, leading
      0), so no input copy; filter 9*16*16 = 2304, alignment 32*3*16 = 1536,
      pad_right = 16*2 + 3 - 1 - 32 = 2 → boundary 34*34*8 = 9248, + 64 + 64 = 13,216;
    - depthwise, 16x16x16 pad 1: 144 + 18*18*16 + 16 = 5,344;
    - conv 1x1 16 → 24: 16*24 + 2*8*16 + 64 = 704;
    - softmax over 10: 40, 48 once aligned to 16.
    """
    model = read_model(model_path("chain_int8"))
    profile = load_profile("esp32-s3")
    flavour = kernel_flavour(profile)
    scratch = {model.main.operators[b.op].op_name + f"#{b.op}": b.size
               for b in tflm_buffers(model, None, pointer_bytes=4, kernels=flavour)
               if b.kind == "scratch"}
    assert scratch == {"CONV_2D#0": 416, "CONV_2D#1": 13216, "DEPTHWISE_CONV_2D#2": 5344,
                       "CONV_2D#3": 704, "SOFTMAX#7": 48}

    esp = plan_tflm(model, profile)
    ref = plan_tflm(model, with_runtime(profile, kernels="reference"))
    # Conv 1's step holds its 32x32x8 input, 16x16x16 output and the 13,216 B scratch.
    assert esp.head_bytes >= 32 * 32 * 8 + 16 * 16 * 16 + 13216 > ref.head_bytes
    assert "arena_head" in esp.estimated
    assert any("verified against: estimated (from ESP-NN sources, not measured on a build)"
               in n for n in esp.notes)
