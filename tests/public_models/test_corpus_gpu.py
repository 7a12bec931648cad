"""The phone GPU partition on public models nobody here wrote (tests/corpus.py): MediaPipe's
pose detector, whose sparse weights the GPU accelerator refuses (DENSIFY) and whose fp16
weights' DEQUANTIZE ops stay on the CPU when the delegate takes part of the graph
(FP16GraphPartitionHelper); microWakeWord's streaming model, whose variable reads and writes
keep their order and so cut the graph; and the selfie segmenter, which it takes whole. The counts are
the rules' (simulator/targets/gpu/rules.py); LiteRT's own delegate, asked here on
SwiftShader (benchmarks/probe_gpu_paths.py --corpus), gave the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.targets.gpu.delegate import ICDS, ask_delegate
from devicefit.simulator.targets.gpu.partition import FP16_DEQUANTIZE_ON_CPU, partition
from devicefit.simulator.targets.gpu.rules import DENSIFY_DEQUANTIZE, NOT_SUPPORTED
from tests.corpus import corpus

GPU = "android-gpu-adreno"


@pytest.fixture(scope="module")
def models():
    return {m.name: m.path for m in corpus(names={"mp_pose_detection", "mww_alexa",
                                                  "mp_selfie_segmentation"})}


def test_sparse_and_fp16_weights_split_the_pose_detector(models):
    model = read_model(models["mp_pose_detection"])
    report = partition(model, load_profile(GPU))
    assert (report.gpu_ops, report.total_ops, len(report.partitions)) == (108, 291, 1)
    why = {(o.op, o.reason) for o in report.ops if o.device == "cpu"}
    assert {("DENSIFY", NOT_SUPPORTED), ("DEQUANTIZE", DENSIFY_DEQUANTIZE),
            ("DEQUANTIZE", FP16_DEQUANTIZE_ON_CPU)} <= why
    sg = model.main
    for o in report.ops:  # every op with no parser stays on the CPU
        if o.reason == NOT_SUPPORTED:
            assert sg.operators[o.index].op_name == "DENSIFY"
    (part,) = report.partitions
    # The densified weights cross from the CPU: most of what the partition reads.
    assert 0 < part.cpu_made_weight_bytes < part.in_bytes


def test_stateful_ops_keep_their_order_and_cut_the_wake_word_model(models):
    model = read_model(models["mww_alexa"])
    report = partition(model, load_profile(GPU))
    sg = model.main
    refused = {sg.operators[o.index].op_name for o in report.ops if o.reason == NOT_SUPPORTED}
    assert refused == {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"}
    # By data flow alone the 26 supported ops would be one subset; chained after each
    # variable access they are four, and the delegate keeps the largest.
    assert report.candidate_partitions == 4
    assert (report.gpu_ops, report.total_ops) == (14, 45)


def test_the_selfie_segmenter_runs_whole_on_the_gpu(models):
    report = partition(read_model(models["mp_selfie_segmentation"]), load_profile(GPU))
    assert (report.gpu_ops, report.cpu_ops) == (report.total_ops, 0)
    (part,) = report.partitions
    assert part.cpu_made_weight_bytes == 0


@pytest.mark.skipif(not Path(str(ICDS["swiftshader"])).is_file(),
                    reason="Chromium's SwiftShader Vulkan driver is not installed")
@pytest.mark.parametrize("name", ["mp_pose_detection", "mww_alexa"])
def test_the_delegate_itself_agrees(models, name):
    real = ask_delegate(models[name], ICDS["swiftshader"])
    assert real.ok, real.error
    assert real.gpu_ops == partition(read_model(models[name])).gpu_ops
