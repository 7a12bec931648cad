"""Accelerators (issue 16): the Edge TPU verdict follows the share of work left on the CPU,
and a model compiled for an accelerator (Vela's ``ethos-u``, ``edgetpu-custom-op``) is a
compatibility finding on a profile without that accelerator — never a crash or exit 2."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as fb

from devicefit.sdk.cli import main
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.plan.lifetimes import OFFLINE_METADATA
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.read.writer import add_metadata
from tests import zoo
from tests.tflite_builder import _buffer, _model, _opcode, _operator, _tensor, custom_model

I8, I32, U8 = fb.TensorType.INT8, fb.TensorType.INT32, fb.TensorType.UINT8


def _quantized(t: fb.TensorT, scale: float = 0.05) -> fb.TensorT:
    q = fb.QuantizationParametersT()
    q.scale, q.zeroPoint = [scale], [0]
    t.quantization = q
    return t


def reshape_then_cpu_model() -> bytes:
    """int8: RESHAPE (maps to the Edge TPU) → LEAKY_RELU (not an Edge TPU op) → a 64×64
    FULLY_CONNECTED: one cheap op on the TPU, every MAC on the CPU."""
    t = [_quantized(_tensor("x", (1, 64), I8, 0)), _tensor("shape", (2,), I32, 1),
         _quantized(_tensor("r", (1, 64), I8, 0)), _quantized(_tensor("l", (1, 64), I8, 0)),
         _quantized(_tensor("w", (64, 64), I8, 2)),
         _quantized(_tensor("b", (64,), I32, 3), 0.0025), _quantized(_tensor("y", (1, 64), I8, 0))]
    leaky = fb.LeakyReluOptionsT()
    leaky.alpha = 0.2
    return _model(
        [_opcode(fb.BuiltinOperator.RESHAPE), _opcode(fb.BuiltinOperator.LEAKY_RELU),
         _opcode(fb.BuiltinOperator.FULLY_CONNECTED)], t,
        [_buffer(np.array([1, 64], np.int32)), _buffer(np.ones((64, 64), np.int8)),
         _buffer(np.zeros(64, np.int32))],
        [_operator(0, [0, 1], [2]),
         _operator(1, [2], [3], fb.BuiltinOptions.LeakyReluOptions, leaky),
         _operator(2, [3, 4, 5], [6], fb.BuiltinOptions.FullyConnectedOptions,
                   fb.FullyConnectedOptionsT())],
        [0], [6])


def _lenient(tmp_path, share: float):
    path = tmp_path / "coral-lenient.yaml"
    path.write_text(f"name: coral-lenient\nextends: coral-edgetpu\nops:\n  max_cpu_share: {share}\n")
    return load_profile(path)


def test_one_mapped_reshape_and_compute_on_the_cpu_fails(tmp_path):
    model = parse_model(reshape_then_cpu_model(), "reshape_cpu.tflite")
    result = check_ops(model, load_profile("coral-edgetpu"))
    [u] = result.unsupported_ops
    assert (u.op, u.op_index) == ("LEAKY_RELU", 1)
    assert "100% of the model's MACs stay on the CPU" in u.reason and "max_cpu_share" in u.reason
    # Every op still runs somewhere: only the profile's share decides.
    assert check_ops(model, _lenient(tmp_path, 1.0)).supported


def test_cpu_share_of_a_converted_model(tmp_path):
    """leaky_mid_int8: a LeakyReLU cuts the TPU segment after two convs; 27 % of the MACs
    fall back. The default (10 %) fails it, a profile accepting half passes it."""
    model = read_model(zoo.model_path("leaky_mid_int8"))
    assert not check_ops(model, load_profile("coral-edgetpu")).supported
    assert check_ops(model, _lenient(tmp_path, 0.5)).supported
    assert check_ops(read_model(zoo.model_path("chain_int8")), load_profile("coral-edgetpu")).supported


def test_precompiled_edgetpu_model():
    model = parse_model(custom_model("edgetpu-custom-op"), "compiled_edgetpu.tflite")
    assert check_ops(model, load_profile("coral-edgetpu")).supported
    for other in ("android-arm64-cpu", "stm32l4r5-cortex-m4"):
        [u] = check_ops(model, load_profile(other)).unsupported_ops
        assert "compiled for the Coral Edge TPU" in u.reason


def vela_like_model() -> bytes:
    """One custom op over [command stream, scratch, input] with an offline plan that puts
    the input inside the scratch area, as Vela's plans do."""
    model = _model(
        [_opcode(fb.BuiltinOperator.CUSTOM, "ethos-u")],
        [_tensor("command_stream", (16,), U8, 1), _tensor("scratch", (256,), U8, 0),
         _quantized(_tensor("input", (1, 64), I8, 0)), _quantized(_tensor("out", (1, 16), I8, 0))],
        [_buffer(np.zeros(16, np.uint8))],
        [_operator(0, [0, 1, 2], [3])], [2], [3])
    plan = struct.pack("<7i", 1, 0, 4, -1, 0, 64, 256)
    return add_metadata(model, OFFLINE_METADATA, plan)


@pytest.mark.parametrize("profile", ["stm32l4r5-cortex-m4", "android-arm64-cpu", "coral-edgetpu"])
def test_vela_model_is_a_finding_not_an_error(tmp_path, capsys, profile):
    path = tmp_path / "model_vela.tflite"
    path.write_bytes(vela_like_model())
    code = main(["simulate", str(path), "--profile", profile, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"] == "fail"
    reasons = [u["reason"] for u in report["compatibility"]["unsupported_ops"]]
    assert any("compiled for the Arm Ethos-U NPU" in r for r in reasons)
