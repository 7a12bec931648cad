"""LiteRT load constraints and the custom ops XNNPACK takes (issue 16), each checked
against the installed ai-edge-litert wheel: the static answer and the real runtime agree."""

from __future__ import annotations

import struct
from importlib import metadata

import pytest
from ai_edge_litert import schema_py_generated as fb

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model
from devicefit.simulator.read.writer import pack
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.targets.litert.ops import support
from tests.op_probe import T, _conv, const, single_op

PHONE = "android-arm64-cpu"


def transpose_conv_bias_model() -> bytes:
    """MediaPipe's ``Convolution2DTransposeBias`` custom op (float, stride 2, SAME): its
    options are the raw ``TfLiteTransposeConvParams`` struct, as MediaPipe writes them."""
    data = single_op(fb.BuiltinOperator.CUSTOM,
                     [T((1, 4, 4, 2), "float32"), const((2, 3, 3, 2), "float32"),
                      const((2,), "float32", 1.0)], [T((1, 8, 8, 2), "float32")])
    m = fb.ModelT.InitFromPackedBuf(data, 0)
    m.operatorCodes[0].customCode = "Convolution2DTransposeBias"
    m.subgraphs[0].operators[0].customOptions = list(struct.pack("<3i", 1, 2, 2))
    return pack(m)


def per_channel_model(quantized_dimension: int, scales: int) -> bytes:
    """An int8 conv whose filter [2, 3, 3, 2] has ``scales`` scales along
    ``quantized_dimension``."""
    m = fb.ModelT.InitFromPackedBuf(single_op(fb.BuiltinOperator.CONV_2D,
                                              *_conv("int8", "int8")), 0)
    q = m.subgraphs[0].tensors[1].quantization
    q.scale, q.zeroPoint, q.quantizedDimension = [0.05] * scales, [0] * scales, quantized_dimension
    return pack(m)


def test_xnnpack_runs_mediapipe_transpose_conv_bias(tmp_path):
    path = tmp_path / "ctb.tflite"
    path.write_bytes(transpose_conv_bias_model())
    model = parse_model(path.read_bytes(), str(path))
    assert check_ops(model, load_profile(PHONE)).supported
    assert run_model(path, "litert", xnnpack=True).outputs[0].shape == (1, 8, 8, 2)
    # Without XNNPACK nobody implements it: LiteRT refuses, and so does the static check.
    no_xnnpack = tmp_path / "phone-no-xnnpack.yaml"
    no_xnnpack.write_text("name: phone-no-xnnpack\nextends: android-arm64-cpu\nruntime:\n"
                          "  delegates: []\n")
    [u] = check_ops(model, load_profile(no_xnnpack)).unsupported_ops
    assert "XNNPACK" in u.reason
    with pytest.raises(RuntimeFailure, match="unresolved custom op"):
        run_model(path, "litert", xnnpack=False)


@pytest.mark.parametrize(("dimension", "scales", "why"), [
    (3, 2, None),                                 # per-channel along the last axis: fine
    (4, 2, "quantized_dimension must be in range [0, 4)"),
    (7, 1, "quantized_dimension must be in range [0, 4)"),
    (0, 3, "3 scales"),
])
def test_quantization_the_loader_refuses(tmp_path, dimension, scales, why):
    path = tmp_path / "conv.tflite"
    path.write_bytes(per_channel_model(dimension, scales))
    result = check_ops(parse_model(path.read_bytes(), str(path)), load_profile(PHONE))
    if why is None:
        assert result.supported
        run_model(path, "litert", xnnpack=False)
    else:
        assert why in result.unsupported_ops[0].reason
        with pytest.raises(RuntimeFailure, match="invalid quantization parameters"):
            run_model(path, "litert", xnnpack=False)


def test_litert_table_was_probed_on_the_installed_wheel():
    assert support()["wheel"] == f"ai-edge-litert {metadata.version('ai-edge-litert')}", (
        "the ai-edge-litert wheel changed: regenerate with python -m tests.op_probe --write")


def test_a_type_combination_litert_refuses(tmp_path):
    """A float LSTM with float16 weights (no DEQUANTIZE): LiteRT's kernel refuses it at
    invoke, through XNNPACK too; the phone profile says so before anything runs."""
    import numpy as np

    from tests.op_probe import B, _lstm

    path = tmp_path / "lstm_f16.tflite"
    path.write_bytes(single_op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, *_lstm("float32", "float16")))
    [u] = check_ops(parse_model(path.read_bytes(), str(path)), load_profile(PHONE)).unsupported_ops
    assert "float32/float16/float32" in u.reason and "FLOAT16" in u.reason
    with pytest.raises(RuntimeFailure, match="FLOAT16"):
        run_model(path, "litert", inputs=[np.ones((1, 2, 3), np.float32)])


def test_asymmetric_int8_conv_weights(tmp_path):
    """int8 conv weights with zero point 5: TFLM takes them, LiteRT's conv refuses them at
    prepare (its builtin kernel and XNNPACK); both static answers follow the wheels."""
    m = fb.ModelT.InitFromPackedBuf(single_op(fb.BuiltinOperator.CONV_2D,
                                              *_conv("int8", "int8")), 0)
    m.subgraphs[0].tensors[1].quantization.zeroPoint = [5]
    path = tmp_path / "conv_zp.tflite"
    path.write_bytes(pack(m))
    model = parse_model(path.read_bytes(), str(path))
    [u] = check_ops(model, load_profile(PHONE)).unsupported_ops
    assert "zero point 5" in u.reason
    with pytest.raises(RuntimeFailure, match="zero_point"):
        run_model(path, "litert", xnnpack=False)
    assert check_ops(model, load_profile("stm32l4r5-cortex-m4")).supported
    run_model(path, "tflm")


def test_op_version_newer_than_litert(tmp_path):
    """A CONV_2D marked version 9 (LiteRT 2.3 registers up to 8): refused at load, and the
    static check says so; TFLM does not look at versions."""
    m = fb.ModelT.InitFromPackedBuf(single_op(fb.BuiltinOperator.CONV_2D,
                                              *_conv("float32", "float32")), 0)
    highest = support()["op_versions"]["CONV_2D"]
    m.operatorCodes[0].version = highest + 1
    path = tmp_path / "conv_v9.tflite"
    path.write_bytes(pack(m))
    model = parse_model(path.read_bytes(), str(path))
    [u] = check_ops(model, load_profile(PHONE)).unsupported_ops
    assert f"runs up to version {highest}" in u.reason
    with pytest.raises(RuntimeFailure, match="version"):
        run_model(path, "litert")
    m.operatorCodes[0].version = highest
    path.write_bytes(pack(m))
    assert check_ops(parse_model(path.read_bytes(), str(path)), load_profile(PHONE)).supported
    run_model(path, "litert")
