"""devicefit's GPU partition against LiteRT's own GPU delegate, run here: the WebGPU
accelerator of ai-edge-litert on Chromium's SwiftShader Vulkan (a software adapter), asked
in a child process (simulator/targets/gpu/delegate.py). Models that fall back for different
reasons: control flow (IF), rank-5 tensors (the U-Net's upsampling), int16 activations, a
custom op; and one that runs whole (fp16 weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.targets.gpu.delegate import ICDS, ask_delegate
from devicefit.simulator.targets.gpu.partition import partition
from tests.tflite_builder import custom_model

SWIFTSHADER = ICDS["swiftshader"]
pytestmark = pytest.mark.skipif(not Path(str(SWIFTSHADER)).is_file(),
                                reason="Chromium's SwiftShader Vulkan driver is not installed")


def _both(path: Path):
    real = ask_delegate(path, SWIFTSHADER)
    assert real.ok, real.error
    assert "SwiftShader" in real.adapter
    ours = partition(parse_model(path.read_bytes(), str(path)))
    return real, ours


@pytest.mark.parametrize("name", ["if_float32", "unet_int8", "chain_float16"])
def test_the_delegate_puts_as_many_ops_on_the_gpu(model_zoo, name):
    real, ours = _both(Path(model_zoo(name)))
    assert (ours.total_ops if real.gpu_ops is None else real.gpu_ops) == ours.gpu_ops
    refused = {o.op for o in ours.ops if o.device == "cpu"
               and not o.reason.startswith("supported")}
    assert {line.split(":")[0] for line in real.unsupported} == refused


def test_the_delegate_refuses_a_custom_op_as_the_rules_do(tmp_path):
    path = tmp_path / "custom.tflite"
    path.write_bytes(custom_model("MyOp"))
    real = ask_delegate(path, SWIFTSHADER)
    # LiteRT cannot even prepare an op it has no kernel for: no partition to compare.
    assert not real.ok and "MyOp" in real.error
    assert partition(read_model(path)).gpu_ops == 0
