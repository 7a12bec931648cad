"""int4 weights and TFLM's DECODE on the Cortex-M4 CMSIS-NN target build (issue 47): what the
s4 kernels and DECODE keep in the arena's tail, measured under QEMU against the prediction.

The int4 model is the zoo's chain_int8 with its conv filters stored as int4 (per channel, as
CMSIS-NN's arm_convolve_wrapper_s4 takes them), its int8 twin the zoo model itself; the
compressed one is chain_int8 clustered and compressed by TFLM's own tool. The recorded tail
is the harness's, whose RecordingMicroAllocator is larger than the plain allocator a
firmware uses: the tests hold the kernels' own allocations request by request, the recorded
tail byte for byte against TFLM's allocation order replayed with the recording allocator
(benchmarks/tflm_tail_replay.py), devicefit's estimate never under the firmware's tail that
order gives, and int4's change to the tail as predicted.
Skips without ``DEVICEFIT_TFLM_DIR`` (see test_target_build.py); a few minutes per model on
a cold cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.tflm_tail_replay import RECORDING, replay
from devicefit.sdk.cli import main
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.targets.tflm.tail import kernel_allocations
from tests.int4_models import CONV_2D, int4_twin, lut_twin
from tests.simulator.targets.tflm.test_target_build import real_checkout

pytestmark = pytest.mark.slow
M4 = "stm32l4r5-cortex-m4"


def measured_as_replayed(path: Path, profile: str, tflm: Path, capsys) -> dict:
    """``path`` run on the build for ``profile`` (a name or a file); its report, once the
    checks every model gets hold: head exact, outputs as the host's, every persistent
    buffer the kernels asked for as predicted byte for byte (plus the interpreter's two
    arrays of I/O tensor pointers, 4 B per tensor on this build), the recorded tail equal
    to TFLM's allocation order replayed with the recording allocator, and devicefit's
    estimate never under the firmware's tail that order gives."""
    code = main(["simulate", str(path), "--profile", profile, "--run", "--target-build",
                 str(tflm), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["notes"]
    t = report["measured"]["target_build"]
    assert t["status"] == "ok" and t["outputs_agree"] is True, t
    assert t["head"] == report["memory"]["arena_head_bytes"]
    sg = read_model(path).main
    asked = [n for op in sg.operators
             for opdata, prepare in [kernel_allocations(sg, op, 4, "cmsis-nn:dsp")]
             for n in ([opdata] if opdata else []) + prepare]
    io = 4 * (len(sg.inputs) + len(sg.outputs))
    buffers = t["tail_breakdown"]["persistent_buffers"]
    assert (buffers["requested"], buffers["count"]) == (sum(asked) + io, len(asked) + 2)
    loaded = load_profile(profile)
    assert replay(path, loaded, RECORDING) == t["tail"]
    firmware = replay(path, loaded)
    assert firmware is not None and report["memory"]["arena_tail_bytes"] >= firmware
    return report


def test_the_s4_kernels_keep_in_the_tail_what_is_predicted(model_zoo, tmp_path, capsys):
    tflm = real_checkout()
    int8 = model_zoo("chain_int8")
    int4 = tmp_path / "chain_int4.tflite"
    int4.write_bytes(int4_twin(int8.read_bytes(), ops=(CONV_2D,)))
    reports = {name: measured_as_replayed(path, M4, tflm, capsys)
               for name, path in (("int8", int8), ("int4", int4))}
    # int4 moves the tail by what the prediction says it moves it by (the s4 kernels keep
    # their per-channel arrays, as the s8 ones do, and nothing more)
    measured = {k: r["measured"]["target_build"]["tail"] for k, r in reports.items()}
    predicted = {k: r["memory"]["arena_tail_bytes"] for k, r in reports.items()}
    assert measured["int4"] - measured["int8"] == predicted["int4"] - predicted["int8"]


def test_decode_keeps_its_state_in_the_tail_as_predicted(model_zoo, tmp_path, capsys):
    """TFLM's DECODE (look-up-table compression) allocates, in Prepare, an array of state
    pointers and one DecodeStateLut per output: the same checks on a compressed model."""
    tflm = real_checkout()
    lut = tmp_path / "chain_lut.tflite"
    lut.write_bytes(lut_twin(model_zoo("chain_int8").read_bytes())[1])
    profile = tmp_path / "m4-lut.yaml"
    profile.write_text(f"extends: {M4}\nruntime: {{compression: true}}\n")
    report = measured_as_replayed(lut, str(profile), tflm, capsys)
    assert any(op == "CUSTOM:TFLM_DECODE" for op in read_model(lut).op_types)
    assert report["measured"]["target_build"]["arena_constant_starts"] is True
