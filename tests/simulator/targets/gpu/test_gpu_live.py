"""``simulate --run`` on a phone GPU profile asks LiteRT's GPU delegate itself (the WebGPU
accelerator on Chromium's SwiftShader Vulkan, simulator/targets/gpu/runner.py): its
partition beside the predicted one, every difference named, and the outputs of the GPU
path and of fp16 tensors against the CPU's fp32 ones. Where no adapter is found, the
report says so. The figures are measured: the tests check that they are there and what
they must be whatever the machine (a model run whole agrees; fp16 overflows what fp32
holds), never a band of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from devicefit.simulator.report.views import render
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from devicefit.simulator.targets.gpu.delegate import ICDS, DelegateAnswer
from devicefit.simulator.targets.gpu.live import WAYS
from devicefit.simulator.targets.gpu.partition import partition
from devicefit.simulator.targets.gpu.runner import delegate_answer
from devicefit.simulator.types import MeasureOptions
from tests.paths import ROOT
from tests.tflite_builder import dense_chain_model, topk_model

PROFILE = ROOT / "device_profiles" / "android-gpu-adreno.yaml"
SWIFTSHADER = Path(str(ICDS["swiftshader"]))
needs_swiftshader = pytest.mark.skipif(not SWIFTSHADER.is_file(),
                                       reason="Chromium's SwiftShader Vulkan driver is not "
                                              "installed")


def _run(path: Path):
    report = simulate(path, PROFILE, run=MeasureOptions(runs=1), probe=False)
    section = report.compatibility.section
    return report, section, section.live


def _way(live, name: str):
    (found,) = [w for w in live.precision.ways if w.way.startswith(WAYS[name])]
    return found


@needs_swiftshader
def test_a_model_built_in_code_runs_whole_on_the_delegate_as_predicted(tmp_path):
    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=4, width=16))
    report, section, live = _run(path)
    assert live.not_asked == "" and "SwiftShader" in live.adapter
    # The delegate logs nothing when it takes the whole graph: every op on the GPU.
    assert live.gpu_ops is None and section.gpu_ops == section.total_ops == 4
    assert live.disagreements == () and live.refused == ()
    # The fp16 check ran both ways on the run's one input, and says what it measured.
    check = live.precision
    assert check.samples == 1 and "random" in check.inputs
    for name in ("fp16", "gpu"):
        way = _way(live, name)
        assert way.error == "" and way.max_abs_diff is not None and way.top1_agreement == 1.0
    text = render("text", report)
    assert "delegate     asked (measured" in text and "agrees with the prediction" in text
    assert "CPU fp16 tensors (XNNPACK FORCE_FP16): max |diff|" in text
    back = read_report(json.loads(render("json", report)))
    assert back.compatibility.section.live == live
    assert "delegate     asked (measured" in render("html", report)


@needs_swiftshader
def test_an_op_that_falls_back_is_where_the_delegate_puts_it(model_zoo):
    report, section, live = _run(Path(model_zoo("if_float32")))
    assert live.not_asked == ""
    assert (live.gpu_ops, section.gpu_ops) == (3, 3)
    assert [line.split(":")[0] for line in live.refused] == ["IF"]
    assert live.disagreements == ()
    assert "IF (op 3, layer 'Identity'): Operation is not supported." in render("text", report)


@needs_swiftshader
def test_a_difference_from_the_prediction_is_named(tmp_path):
    # TOPK_V2 has no parser in the TFLite GPU delegate's rules; ML Drift takes it.
    path = tmp_path / "topk.tflite"
    path.write_bytes(topk_model())
    report, section, live = _run(path)
    assert section.gpu_ops == 1 and live.gpu_ops is None
    assert live.disagreements == (
        "ops on the GPU: the delegate 2, predicted 1",
        "TOPK_V2: predicted on the CPU (Operation is not supported.); the delegate takes it")
    assert "disagrees    TOPK_V2: predicted on the CPU" in render("text", report)


@needs_swiftshader
def test_fp16_tensors_overflow_where_fp32_does_not(tmp_path):
    # Sixty-four wide layers of N(0, 1) weights reach ~1e6, past fp16's largest, 65504.
    path = tmp_path / "deep.tflite"
    path.write_bytes(dense_chain_model(layers=6, width=64))
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32))
    report = simulate(path, PROFILE, run=MeasureOptions(runs=1, input_path=data), probe=False)
    live = report.compatibility.section.live
    assert live.precision.inputs == str(data)
    assert _way(live, "fp16").nonfinite > 0
    assert _way(live, "gpu").nonfinite == 0  # SwiftShader's adapter computes in fp32
    assert "output values overflow" in render("text", report)


def test_without_an_adapter_the_report_says_it_was_not_asked(tmp_path, monkeypatch):
    # The Vulkan loader is pointed at a driver that does not exist: Dawn finds no adapter.
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "none.json"))
    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=2, width=8))
    report, section, live = _run(path)
    assert live.not_asked.startswith("no GPU adapter (") and live.gpu_ops is None
    assert _way(live, "gpu").error and _way(live, "fp16").error == ""
    text = render("text", report)
    assert "delegate     not asked: no GPU adapter" in text
    assert any(n.startswith("GPU delegate not asked: no GPU adapter") for n in report.notes)


def test_a_static_report_says_the_delegate_was_not_asked(tmp_path):
    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=2, width=8))
    text = render("text", simulate(path, PROFILE, probe=False))
    assert "delegate     not asked (predicted only)" in text
    assert "fp16 accuracy not checked: a --run that completes checks it" in text


def test_each_difference_is_named_from_the_delegates_answer(tmp_path):
    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=3, width=8))
    from devicefit.simulator.read.reader import read_model

    predicted = partition(read_model(path))
    answer = DelegateAnswer(True, "", "Some GPU", 2,
                            frozenset({"FULLY_CONNECTED: Max version supported: 9."}))
    live = delegate_answer(predicted, answer, 1.0)
    assert live.disagreements == (
        "ops on the GPU: the delegate 2, predicted 3",
        "FULLY_CONNECTED: the delegate refuses it (FULLY_CONNECTED: Max version supported: "
        "9.); predicted on the GPU")
    failed = delegate_answer(predicted, DelegateAnswer(False, "Node number 3 failed to "
                                                              "prepare", "", None,
                                                       frozenset()), 1.0)
    assert failed.not_asked.startswith("the delegate did not compile the model (Node number 3")


@needs_swiftshader
def test_convert_eval_data_gives_accuracy_three_ways(tmp_path):
    # What `convert --eval` asks on a GPU profile (Target.accelerator_eval): the labels are
    # the chain's classes computed here in float64, so the fp32 reference scores 100 %.
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.target import target_for

    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=3, width=8))
    x = np.random.default_rng(1).uniform(-1, 1, (20, 8)).astype(np.float32)
    rng = np.random.default_rng(0)  # dense_chain_model's weights, in its order
    logits = x.astype(np.float64)
    for _ in range(3):
        logits = logits @ rng.standard_normal((8, 8)).astype(np.float32).T
    profile = load_profile(PROFILE)
    section = target_for(profile).accelerator_eval(path, profile, x, logits.argmax(1))
    check = section.live.precision
    assert check.samples == 20 and check.reference_accuracy == 1.0
    assert all(w.error == "" and w.accuracy is not None for w in check.ways)
    lines = section.summary_lines()
    assert lines[1] == "GPU delegate asked: agrees with the prediction"
    assert lines[2].startswith("fp16 (measured): CPU fp16 tensors") and "accuracy" in lines[2]


@needs_swiftshader
def test_an_answer_asked_again_is_read_from_the_cache_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "chain.tflite"
    path.write_bytes(dense_chain_model(layers=5, width=8))
    _, _, first = _run(path)
    report, _, again = _run(path)
    assert not first.cached and again.cached
    assert dataclasses.replace(again, cached=False) == first
    assert "asked (cached answer of a run that took" in render("text", report)
    # Other inputs are another question: asked again.
    data = tmp_path / "x.npy"
    np.save(data, np.ones((1, 8), np.float32))
    other = simulate(path, PROFILE, run=MeasureOptions(runs=1, input_path=data), probe=False)
    assert not other.compatibility.section.live.cached
    # A damaged entry is never trusted: asked again, and rewritten.
    for entry in (tmp_path / "cache" / "gpu-delegate").glob("*.json"):
        entry.write_text('{"key": "' + entry.stem + '", "format": 1, "answer": []}')
    _, _, damaged = _run(path)
    assert not damaged.cached and _run(path)[2].cached
