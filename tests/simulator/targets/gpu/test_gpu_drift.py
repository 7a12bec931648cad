"""Why LiteRT's GPU path gave wrong outputs on MediaPipe's sparse models, and what the
report says on such a model: weights stored sparse in fp16 (DENSIFY → DEQUANTIZE) read by
an op XNNPACK does not run. LiteRT's XNNPACK skips the DENSIFY and leaves the DEQUANTIZE to
the builtin kernel, which reads a tensor never written (simulator/targets/gpu/live.py's
docstring; benchmarks/repro_xnnpack_densify.py). The first test needs no GPU: the bug is on
LiteRT's CPU side. The others run the GPU path on Chromium's SwiftShader, as ``simulate
--run`` does, and skip where it is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.repro_xnnpack_densify import CHILD
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.views import render
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from devicefit.simulator.targets.gpu.delegate import DelegateAnswer
from devicefit.simulator.targets.gpu.live import (
    WAYS,
    LiveRun,
    densified_fp16_weights,
    precision_check,
    ways_for,
)
from devicefit.simulator.types import MeasureOptions
from tests.paths import ROOT
from tests.simulator.targets.gpu.test_gpu_live import PROFILE, needs_swiftshader
from tests.tflite_builder import dense_chain_model, sparse_weights_model


def _cpu_case(tmp_path: Path, weights: str, kernels: str) -> dict[str, float]:
    """The reproduction's child on the CPU alone: max |diff| against the reference kernels."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, weights, "topk", "8", "cpu", kernels,
                           "", str(tmp_path / f"{weights}-{kernels}.tflite")],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_litert_xnnpack_leaves_a_dequantize_of_densified_weights_unfed(tmp_path):
    # TOPK_V2 is no XNNPACK op: it reads the DEQUANTIZE's output as a GPU op would. The
    # outputs are at most 2 (the weights): a garbage read is far off, or nan.
    wrong = _cpu_case(tmp_path, "fp16", "xnnpack")
    assert wrong["nan"] or wrong["max_abs_diff"] > 1.0
    assert _cpu_case(tmp_path, "fp16", "builtin")["max_abs_diff"] == 0.0
    # Without the DEQUANTIZE (fp32 weights) XNNPACK gives the DENSIFY back: right.
    assert _cpu_case(tmp_path, "fp32", "xnnpack")["max_abs_diff"] == 0.0


def test_the_chain_is_found_in_the_model(tmp_path):
    for name, data, found in (("f16", sparse_weights_model(), (1,)),
                              ("f32", sparse_weights_model(fp16=False), ()),
                              ("dense", dense_chain_model(layers=2, width=8), ())):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(data)
        model = read_model(path)
        assert densified_fp16_weights(model) == found
        assert ways_for(model)[-1] == ("gpu_builtin" if found else "gpu")


def _ways(live) -> dict[str, object]:
    """The check's ways by their key in ``WAYS`` (no label starts another)."""
    return {k: w for w in live.precision.ways for k, v in WAYS.items() if w.way.startswith(v)}


@needs_swiftshader
def test_the_report_puts_the_difference_down_to_litert_cpu_side_not_the_model(tmp_path):
    path = tmp_path / "sparse_conv.tflite"
    path.write_bytes(sparse_weights_model())
    report = simulate(path, PROFILE, run=MeasureOptions(runs=1), probe=False)
    live = report.compatibility.section.live
    assert live.gpu_ops == 1 and live.disagreements == ()
    ways = _ways(live)
    assert set(ways) == {"fp16", "gpu", "gpu_builtin"}
    # Outputs of a 1x1 convolution of 8 inputs in [-1, 1] by weights under 3: at most ~20.
    default, builtin = ways["gpu"], ways["gpu_builtin"]
    assert default.nonfinite or default.max_abs_diff > 1.0
    assert builtin.error == "" and builtin.max_abs_diff < 1e-4
    cause = live.precision.cause
    assert cause.startswith("not the model, not the GPU: the GPU path matches the CPU once")
    assert "1 DENSIFY → DEQUANTIZE weight chain(s)" in cause
    text = render("text", report)
    assert "  cause        not the model, not the GPU" in text
    assert "Same GPU path, the ops left on the CPU on LiteRT's builtin kernels: max" in text
    assert read_report(json.loads(render("json", report))).compatibility.section.live == live
    # check and convert print it under the section's summary too.
    assert any(line.startswith("GPU path's difference (measured): not the model, not the GPU")
               for line in report.compatibility.section.summary_lines())


@needs_swiftshader
def test_fp32_sparse_weights_are_right_through_the_gpu_and_not_asked_twice(tmp_path):
    path = tmp_path / "sparse_conv_f32.tflite"
    path.write_bytes(sparse_weights_model(fp16=False))
    report = simulate(path, PROFILE, run=MeasureOptions(runs=1), probe=False)
    live = report.compatibility.section.live
    ways = _ways(live)
    assert set(ways) == {"fp16", "gpu"} and live.precision.cause == ""
    assert ways["gpu"].max_abs_diff < 1e-4
    assert "cause" not in render("text", report)


def test_the_cause_is_said_only_when_the_builtin_kernels_make_the_difference(tmp_path):
    # The child's outputs as they come back, without running it: the judgement alone.
    path = tmp_path / "sparse_conv.tflite"
    path.write_bytes(sparse_weights_model())
    model = read_model(path)
    reference = {"0:y": np.linspace(-5, 5, 128, dtype=np.float32).reshape(1, 4, 4, 8)}
    near = {"0:y": reference["0:y"] + 1e-6}
    far = {"0:y": np.full((1, 4, 4, 8), np.nan, np.float32)}
    answer = DelegateAnswer(True, "", "SwiftShader Device (Subzero)", 1, frozenset())

    def check(gpu, builtin):
        run = LiveRun(answer, 1.0, {"fp32": reference, "fp16": near, "gpu": gpu,
                                    "gpu_builtin": builtin}, {}, {}, ways_for(model))
        return precision_check(run, model, "test", 1)

    blamed = check(far, near)
    assert blamed.cause.startswith("not the model, not the GPU")
    assert "equal where finite" in blamed.ways[1].line()  # all nan is not "identical"
    assert check(near, near).cause.startswith("not the CPU's kernels: with LiteRT's builtin")
    # Both wrong: the CPU's kernels are not the difference, and the model is not cleared.
    assert check(far, far).cause.startswith("not the CPU's kernels: with LiteRT's builtin")
