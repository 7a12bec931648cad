"""TFLM's look-up-table compression (issue 47): models compressed by TFLM's own tool (the
``tflite_micro`` wheel's ``compression.compress``), read, planned and run in the wheel.

The tool keeps each compressed filter as packed indices plus value tables and inserts a
``TFLM_DECODE`` custom operator before its consumer, which decodes the filter into the arena:
the flash is the file's bytes (tables included), the decoded filter is an arena tensor like
any other. Only a profile saying its build registers the DECODE kernel
(``runtime.compression: true``) runs it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.types import BuildRequest, MeasureOptions
from tests.int4_models import lut_twin
from tests.simulator.targets.tflm.test_target_build import real_checkout

BASE = "stm32l4r5-cortex-m4"
#: The STM32 profile on a build that registers the DECODE kernel.
LUT = f"extends: {BASE}\nruntime:\n  compression: true\n"


def _profile(tmp_path: Path, body: str, name: str = "m4-lut") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path


@pytest.fixture(scope="module")
def compressed(model_zoo, tmp_path_factory) -> tuple[Path, Path]:
    """(chain_int8 with its filters clustered to 16 values per channel, the same compressed
    with 4-bit look-up tables)."""
    folder = tmp_path_factory.mktemp("lut")
    paths = folder / "clustered.tflite", folder / "lut.tflite"
    for path, data in zip(paths, lut_twin(model_zoo("chain_int8").read_bytes()), strict=True):
        path.write_bytes(data)
    return paths


def test_the_compressed_model_is_smaller_and_decodes_each_filter(compressed):
    clustered, lut = (read_model(p).main for p in compressed)
    assert compressed[1].stat().st_size < compressed[0].stat().st_size
    decodes = [op for op in lut.operators if op.op_name == "CUSTOM:TFLM_DECODE"]
    # Every filter with more than a handful of values is decoded right before its consumer.
    assert decodes and all(lut.operators[op.index + 1].op_name != "CUSTOM:TFLM_DECODE"
                           for op in decodes)
    for op in decodes:
        encoded = lut.tensors[op.inputs[0]]
        decoded = lut.tensors[op.outputs[0]]
        assert encoded.has_data and not decoded.has_data
        # 4-bit indices: half the bytes of the int8 filter (rounded up), tables apart.
        assert encoded.nbytes == -(-decoded.num_elements // 2)
    assert len(lut.operators) == len(clustered.operators) + len(decodes)


def test_a_profile_without_the_decode_kernel_refuses_it_with_the_reason(compressed):
    report = simulate(compressed[1], BASE)
    refused = [u for u in report.compatibility.unsupported_ops
               if u.op == "CUSTOM:TFLM_DECODE"]
    assert refused and all("runtime.compression: true" in u.reason for u in refused)
    assert not report.compatibility.supported


def test_the_compressed_model_runs_in_the_wheel_with_the_arena_predicted(compressed, tmp_path):
    profile = load_profile(_profile(tmp_path, LUT))
    report = simulate(compressed[1], profile, run=MeasureOptions(runs=1))
    assert report.compatibility.supported
    m = report.measured
    assert m.failure is None
    # LiteRT cannot be the second opinion: one line says why.
    assert m.cross_check is not None and m.cross_check.bit_exact is None
    assert "no kernel for TFLM's DECODE" in m.cross_check.skipped
    # The decoded filters live in the arena: the head is the planner's to the byte.
    assert m.arena_head_bytes == report.memory.arena_head_bytes
    assert report.memory.flash_model_bytes == compressed[1].stat().st_size
    plain = simulate(compressed[0], BASE, run=MeasureOptions(runs=1, cross_check=False))
    assert m.arena_head_bytes > plain.measured.arena_head_bytes


def _outputs(path: Path, x: np.ndarray) -> np.ndarray:
    from tflite_micro.python.tflite_micro import runtime

    interpreter = runtime.Interpreter.from_bytes(path.read_bytes(), arena_size=1 << 20)
    interpreter.set_input(x, 0)
    interpreter.invoke()
    return np.array(interpreter.get_output(0))


def test_the_decoded_model_computes_what_the_clustered_one_does(compressed):
    shape = read_model(compressed[0]).main.tensors[read_model(compressed[0]).main.inputs[0]].shape
    x = np.random.default_rng(0).integers(-128, 128, size=shape, dtype=np.int8)
    np.testing.assert_array_equal(_outputs(compressed[1], x), _outputs(compressed[0], x))


def test_runtime_compression_is_a_boolean_of_the_tflm_target(tmp_path):
    assert load_profile(_profile(tmp_path, LUT)).target_settings.compression
    with pytest.raises(ProfileError, match="expected true or false"):
        load_profile(_profile(tmp_path, f"extends: {BASE}\nruntime:\n  compression: 4\n", "a"))
    with pytest.raises(ProfileError, match="setting of the tflm target"):
        load_profile(_profile(tmp_path, "extends: android-arm64-cpu\nruntime:\n"
                                        "  compression: true\n", "b"))


@pytest.mark.slow
def test_the_compressed_model_runs_on_the_cortex_m4_cmsis_nn_build(compressed, tmp_path):
    """TFLM built from the checkout for the profile's core (QEMU): no build flag needed, the
    DECODE kernel is in every build of a TFLM tree that has it; the measured head is the
    predicted one and the outputs are the host wheel's."""
    profile = load_profile(_profile(tmp_path, LUT))
    report = simulate(compressed[1], profile, run=MeasureOptions(
        runs=1, cross_check=False, target_build=BuildRequest(str(real_checkout()))))
    built = report.measured.target_build
    assert built is not None and built.status == "ok", built
    assert built.head == report.memory.arena_head_bytes
    assert built.outputs_agree is True
