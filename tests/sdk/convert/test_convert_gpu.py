"""``convert`` for a phone's GPU: float16 by default, int8 when asked, int16x8 refused, each
with the reason LiteRT's GPU delegate gives for it (:mod:`devicefit.sdk.convert.gpu`)."""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.convert.gpu import io_warning, refused_scheme, scheme_reason
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from examples.digits import cached_cnn, load_digits
from tests.paths import TESTS

GPU = "android-gpu-adreno"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-gpu")
    return {"model": str(cached_cnn(TESTS / "artifacts" / "convert")),
            **{k: str(v) for k, v in load_digits().save_npz(folder).items()}}


def _weight_types(path) -> set[str]:
    sg = read_model(path).main
    return {sg.tensors[op.inputs[1]].dtype for op in sg.operators
            if op.op_name in ("CONV_2D", "FULLY_CONNECTED") and len(op.inputs) > 1}


@pytest.mark.slow
def test_the_gpu_gets_float16_by_default_and_is_told_why(digits, tmp_path, capsys) -> None:
    out, report = tmp_path / "gpu.tflite", tmp_path / "report.json"
    assert main(["convert", digits["model"], "--profile", GPU, "-o", str(out),
                 "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(report.read_text())
    assert (data["settings"]["scheme"], data["settings"]["io_type"]) == ("float16", "float32")
    assert data["scheme_reason"].startswith(
        "float16 (android-gpu-adreno's quantization.default) for the phone's GPU: the GPU "
        "computes in fp16 by default")
    assert f"why: {data['scheme_reason'][:60]}" in printed
    assert not any("inputs and outputs" in w for w in data["warnings"])
    # The file holds what the reason says: float16 weights, read by the GPU in place.
    assert "float16" in {read_model(out).main.tensors[t].dtype
                         for t in range(len(read_model(out).main.tensors))}


@pytest.mark.slow
def test_int8_for_the_gpu_says_it_only_makes_the_file_smaller(digits, tmp_path,
                                                              capsys) -> None:
    out, report = tmp_path / "gpu8.tflite", tmp_path / "report.json"
    assert main(["convert", digits["model"], "--profile", GPU, "-o", str(out), "--scheme",
                 "int8", "--io-type", "int8", "--calibration", digits["train"],
                 "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["settings"]["scheme"] == "int8" and _weight_types(out) == {"int8"}
    assert data["scheme_reason"].startswith("int8 (--scheme) for the phone's GPU: the "
                                            "smallest file, but not faster on the GPU")
    [io] = [w for w in data["warnings"] if "inputs and outputs" in w]
    assert io.startswith("int8 inputs and outputs: the GPU delegate converts them to float on "
                         "the CPU every inference")
    assert f"warning: {io[:40]}" in capsys.readouterr().out


def test_int16x8_is_refused_with_the_delegates_reason(digits, tmp_path, capsys) -> None:
    """Before TensorFlow starts: one line, exit 2, nothing written."""
    out = tmp_path / "x.tflite"
    assert main(["convert", digits["model"], "--profile", GPU, "-o", str(out), "--scheme",
                 "int16x8", "--calibration", digits["train"]]) == 2
    err = capsys.readouterr().err
    assert err == (
        "devicefit: error: profile android-gpu-adreno does not allow --scheme int16x8 (its "
        "runtime takes: float16, float32, int8, dynamic): the GPU delegate takes no int16 "
        "tensor ('OP is supported, but tensor type/shape isn't compatible.', "
        "tflite/delegates/gpu/common/model_builder.cc (GetOpsToReplace: IsAllAllowedTensors))"
        ": every operator of an int16x8 model would run on the CPU; use float16 (its default) "
        "or int8, or a CPU profile such as android-arm64-cpu\n")
    assert not out.exists()


def test_only_a_gpu_profile_gets_the_gpus_reasons() -> None:
    cpu, gpu = load_profile("android-arm64-cpu"), load_profile(GPU)
    assert scheme_reason(cpu, "float16", False) is None
    assert io_warning(cpu, "int8") is None and refused_scheme(cpu, "int16x8") is None
    assert scheme_reason(gpu, "float32", True).startswith("float32 (--scheme) for the phone's GPU")
    assert io_warning(gpu, "float32") is None and refused_scheme(gpu, "int8") is None
