"""``devicefit bench`` on a phone's GPU, end to end through the FAKE phone (no Android device
here): ``tests/fakes/fake_benchmark_model.py`` prints the GPU delegate's lines in LiteRT's
wording for the partition this phone's delegate makes — devicefit's rules (``gpu: rules``),
or LiteRT's own GPU accelerator on this machine (``gpu: litert``: ML Drift on the
SwiftShader software Vulkan driver, a runtime that decides some operators otherwise) — and
times the model in LiteRT on this host's CPU. What is tested: the two runs and their flags,
the parsing, the partition compared with the prediction (agreeing and not), the CPU run
compared with the CPU profile's estimate, and a phone whose GPU cannot run the delegate.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from tests.paths import TESTS
from tests.sdk.bench.test_bench import arm64_binary, device_files, phones  # noqa: F401
from tests.zoo import model_path

GPU = "android-gpu-adreno"
FIXTURES = TESTS / "fixtures" / "benchmark_model"


def _argv(model: Path, profile: str, binary: Path, adb: Path, *extra: str) -> list[str]:
    return ["bench", str(model), "--profile", profile, "--benchmark-binary", str(binary),
            "--adb", str(adb), "--runs", "3", *extra]


def test_a_gpu_profile_runs_the_gpu_and_the_cpu_beside_it(phones, arm64_binary,  # noqa: F811
                                                          capsys) -> None:
    """if_float32: its IF is refused, the 3 other operators run on the GPU in one partition."""
    model = model_path("if_float32")
    storage = phones.add("FAKE01")
    assert main(_argv(model, GPU, arm64_binary, phones.adb, "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    b = report["bench"]
    words = b["command"].split()
    assert {"--use_gpu=true", "--max_delegated_partitions=1",
            "--gpu_precision_loss_allowed=true"} <= set(words)
    assert b["settings"]["delegate"] == "gpu"
    gpu = b["results"]["gpu"]
    assert (gpu["ops_on_gpu"], gpu["ops_total"], gpu["kernels"], gpu["backend"]) == (
        3, 4, 1, "OpenCL")
    assert gpu["refused"] == ["IF: Operation is not supported."]
    predicted = report["compatibility"]["gpu"]
    assert b["partition"] == {
        "measured_gpu_ops": 3, "predicted_gpu_ops": predicted["gpu_ops"],
        "measured_partitions": 1, "predicted_partitions": len(predicted["partitions"]),
        "total_ops": 4, "measured_refused": ["IF"], "predicted_refused": ["IF"]}
    # The GPU run is judged (the profile's own) and compared with the GPU estimate, its band.
    [latency] = [x for x in report["budgets"] if x["name"] == "latency"]
    assert latency["basis"] == "measured" and latency["value"] == b["results"]["inference_avg_ms"]
    vs = b["vs_estimate"]
    assert vs["estimated_ms"] == report["latency"]["estimated_device_ms"] > 0
    assert report["latency"]["split"] == "compatibility.gpu.latency"
    assert vs["band_ms"] == report["latency"]["band_ms"] and vs["estimate_unavailable"] is None
    assert vs["ratio"] == pytest.approx(b["results"]["inference_avg_ms"] / vs["estimated_ms"])
    # The CPU beside it: XNNPACK, compared with the CPU profile the GPU profile extends.
    beside = b["beside"]
    assert "--use_xnnpack=true" in beside["command"].split()
    assert not any("gpu" in w for w in beside["command"].split())
    assert beside["results"]["gpu"] is None and beside["results"]["inference"]["count"] == 3
    cpu = simulate(model, load_profile("android-arm64-cpu"))
    assert beside["estimate_profile"] == "android-arm64-cpu"
    assert beside["vs_estimate"]["estimated_ms"] == cpu.latency.estimated_device_ms > 0
    assert beside["vs_estimate"]["ratio"] == pytest.approx(
        beside["results"]["inference_avg_ms"] / cpu.latency.estimated_device_ms)
    assert device_files(storage) == []
    # The report reads back typed, the phone's partition and the CPU run with it.
    back = read_report(report).bench.result
    assert back.partition.agree is True and back.partition.measured_refused == ["IF"]
    assert back.beside.results.inference.count == 3
    assert back.beside.estimate_profile == "android-arm64-cpu"


def test_the_page_shows_the_phones_partition_and_the_cpu_run_beside_it(
        phones, arm64_binary, tmp_path, capsys) -> None:  # noqa: F811
    """``bench --html`` on a GPU profile: the GPU run against its estimate and band, the
    delegate's partition on the phone beside the prediction, the CPU run beside it with its
    own estimate, and the GPU section's partition naming each op's layer; laid out in
    Chromium as every page is (tests/browser.py)."""
    from tests.browser import LAYOUT, WIDE, layout_problems, measure

    phones.add("FAKE01")
    page = tmp_path / "bench.html"
    assert main(_argv(model_path("if_float32"), GPU, arm64_binary, phones.adb, "--html",
                      str(page))) == 0
    capsys.readouterr()
    text = page.read_text()
    assert "<td>inference avg on the GPU (measured)</td>" in text
    assert re.search(r"<td>likely band of the estimate</td><td>[\d.]+ [mu]s–[\d.]+ [mu]s</td>",
                     text)
    assert re.search(r"<td>measured against the band</td><td>(inside|outside)</td>", text)
    partition = text.split('<section class="bench-gpu">')[1].split("</section>")[0]
    assert ("<tr><td>ops on the GPU</td><td>3 of 4</td><td>3 of 4</td></tr>"
            "<tr><td>partitions</td><td>1</td><td>1</td></tr>"
            "<tr><td>refused op types</td><td>IF</td><td>IF</td></tr>") in partition
    assert "<p>the phone&#x27;s partition agrees with the prediction</p>" in partition
    assert "<li>IF: Operation is not supported.</li>" in partition
    beside = text.split('<section class="bench-beside">')[1].split("</section>")[0]
    assert "<td>inference avg on the CPU (xnnpack), 4 threads (measured)</td>" in beside
    assert "<td>estimated by simulate on android-arm64-cpu</td>" in beside
    assert "GPU / CPU on this phone (measured, both runs)" in beside
    assert "<th>output tensor (your layer)</th>" in text and "<td>Identity</td>" in text
    shown, geometry = measure(tmp_path / "shown.html", text, LAYOUT, size=WIDE)
    assert shown.console == [], shown.console
    assert layout_problems(geometry) == []


def test_a_gpu_profile_without_an_estimate_gives_its_own_reason(phones, arm64_binary,  # noqa: F811
                                                                tmp_path, capsys) -> None:
    """The Mali profile has no fitted GPU constants: the GPU run is measured and judged, and
    the comparison gives the report's reason, not a generic one; the CPU run beside it is
    still compared with the CPU profile's estimate and its band."""
    phones.add("FAKE01")
    model = model_path("if_float32")
    assert main(_argv(model, "android-gpu-mali", arm64_binary, phones.adb, "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    vs = report["bench"]["vs_estimate"]
    why = report["latency"]["no_estimate"]
    assert "sets no fitted GPU constants" in why
    assert (vs["estimated_ms"], vs["ratio"], vs["band_ms"]) == (None, None, None)
    assert vs["estimate_unavailable"] == why
    beside = report["bench"]["beside"]["vs_estimate"]
    cpu = simulate(model, load_profile("android-arm64-cpu")).latency
    assert beside["band_ms"] == list(cpu.band_ms) and beside["estimated_ms"] > 0
    assert main(_argv(model, "android-gpu-mali", arm64_binary, phones.adb)) == 0
    out = capsys.readouterr().out
    assert f"simulator estimate unavailable ({why})" in " ".join(out.split())
    page = tmp_path / "bench.html"
    assert main(_argv(model, "android-gpu-mali", arm64_binary, phones.adb, "--html",
                      str(page))) == 0
    # The page's cell says the same, tags and escapes aside.
    shown = html.unescape(re.sub(r"<[^>]+>", "|", page.read_text()))
    assert f"|estimated by the profile's cost model||unavailable: {why}|" in shown


def test_a_real_phones_whole_graph_counts_every_operator() -> None:
    """A capture of a real phone whose benchmark_model logs no count when the delegate takes
    the whole graph (tests/fixtures/benchmark_model, TF issue 43541): "completely executed
    by the delegate" means every operator of the model, in one partition."""
    from devicefit.sdk.bench import parse_benchmark_output
    from devicefit.sdk.bench.compare import partition_check
    from devicefit.sdk.types import gpu_partition

    out = parse_benchmark_output((FIXTURES / "tf43541_android_gpu.txt").read_text())
    assert out.gpu.ops_on_gpu is None and out.gpu.kernels == 1
    predicted = gpu_partition(simulate(model_path("chain_float32"), load_profile(GPU)))
    assert predicted is not None and predicted.gpu_ops == predicted.total_ops == 8
    whole = partition_check(out.gpu, predicted, whole_graph=True)
    assert (whole.measured_gpu_ops, whole.measured_partitions, whole.agree) == (8, 1, True)
    assert partition_check(out.gpu, predicted).agree is None  # nothing said: not compared


def test_the_text_says_what_was_measured_and_what_predicted(phones, arm64_binary,  # noqa: F811
                                                            capsys) -> None:
    phones.add("FAKE01")
    assert main(_argv(model_path("if_float32"), GPU, arm64_binary, phones.adb)) == 0
    out = capsys.readouterr().out
    assert ("GPU delegate on the phone (measured, OpenCL): 3 of 4 ops on the GPU in 1 "
            "partition(s)") in out
    assert "  refused: IF: Operation is not supported." in out
    assert ("GPU delegate predicted by devicefit: 3 of 4 ops on the GPU in 1 partition(s); "
            "refuses IF") in out
    assert "the phone's partition agrees with the prediction" in out
    assert re.search(r"measured [\d.]+ [mu]s vs simulator estimate [\d.]+ [mu]s \(likely "
                     r"[\d.]+ [mu]s–[\d.]+ [mu]s: measured (inside|outside)\): ratio", out)
    assert re.search(r"beside it on the CPU \(xnnpack\), 4 threads: inference avg [\d.]+ [mu]s "
                     r"\(measured\)\n  vs estimate [\d.]+ [mu]s \(likely [^)]*\) on "
                     r"android-arm64-cpu: ratio [\d.]+x", out)
    assert re.search(r"GPU / CPU on this phone: [\d.]+x \(measured, both runs\)", out)


def test_the_profiles_delegate_options_reach_the_phone(phones, arm64_binary,  # noqa: F811
                                                       tmp_path, capsys) -> None:
    """``gpu.max_partitions: 2`` and ``precision: fp32`` become the tool's flags, and the
    phone's delegate keeps its 2 largest partitions: the U-Net's upsampling (RESHAPE and
    TILE the delegate refuses) cuts it into 3 candidate partitions, of which the GPU runs 2."""
    profile = tmp_path / "two.yaml"
    profile.write_text(f"name: two\nextends: {GPU}\ngpu:\n  max_partitions: 2\n"
                       "  precision: fp32\n")
    phones.add("FAKE01")
    model = model_path("unet_int8")
    assert main(_argv(model, str(profile), arm64_binary, phones.adb, "--json")) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    assert {"--max_delegated_partitions=2", "--gpu_precision_loss_allowed=false"} <= set(
        b["command"].split())
    p = b["partition"]
    assert p["measured_partitions"] == p["predicted_partitions"] == 2
    assert p["measured_gpu_ops"] == p["predicted_gpu_ops"] < p["total_ops"]
    # TFLite's own line counts every subset of the cut, CPU ones too.
    [cut] = [c for c in b["results"]["delegate_coverage"] if c["delegate"] == "TfLiteGpuDelegateV2"]
    assert cut["partitions"] > 2


def test_fp16_weights_dequantize_is_listed_as_the_delegate_lists_it(
        phones, arm64_binary, tmp_path, capsys) -> None:  # noqa: F811
    """chain_float16 with its SOFTMAX made a LOG_SOFTMAX (no GPU parser): the delegate takes
    part of the graph, so its fp16 weights' DEQUANTIZE ops stay on the CPU and it lists them
    with no reason ("DEQUANTIZE: ", as a Mali G31's capture shows), and the prediction
    counts them among the refused types."""
    from ai_edge_litert import schema_py_generated as fb

    from devicefit.simulator.read.writer import pack

    m = fb.ModelT.InitFromPackedBuf(model_path("chain_float16").read_bytes(), 0)
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.LOG_SOFTMAX
    code.version = 1
    m.operatorCodes.append(code)
    last = m.subgraphs[0].operators[-1]
    last.opcodeIndex, last.builtinOptionsType, last.builtinOptions = len(
        m.operatorCodes) - 1, 0, None
    model = tmp_path / "chain_logsoftmax.tflite"
    model.write_bytes(pack(m))
    phones.add("FAKE01")
    assert main(_argv(model, GPU, arm64_binary, phones.adb, "--json")) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    assert sorted(b["results"]["gpu"]["refused"]) == [
        "DEQUANTIZE:", "LOG_SOFTMAX: Operation is not supported."]
    p = b["partition"]
    assert p["predicted_refused"] == p["measured_refused"] == ["DEQUANTIZE", "LOG_SOFTMAX"]
    assert p["measured_gpu_ops"] == p["predicted_gpu_ops"] == 7


def test_the_phone_disagreeing_with_the_prediction_is_said(phones, arm64_binary,  # noqa: F811
                                                          capsys) -> None:
    """The phone's delegate is LiteRT's GPU accelerator on this machine: on the int16x8
    chain it takes one operator the TFLite delegate's rules refuse (docs/accelerators.md,
    "Checked against the delegate itself"), and bench says the partitions differ."""
    phones.add("FAKE01", gpu="litert")
    model = model_path("chain_int16x8")
    assert main(_argv(model, GPU, arm64_binary, phones.adb, "--json")) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    p = b["partition"]
    assert (p["measured_gpu_ops"], p["predicted_gpu_ops"]) == (1, 0)
    assert "RESHAPE" in p["predicted_refused"] and "RESHAPE" not in p["measured_refused"]
    assert all("Tensor type(INT16) is not supported." in line
               for line in b["results"]["gpu"]["refused"])
    assert main(_argv(model, GPU, arm64_binary, phones.adb)) == 0
    out = capsys.readouterr().out
    assert ("the phone's partition differs from the prediction: ops on the GPU 1 on the "
            "phone, 0 predicted; partitions 1 on the phone, 0 predicted") in out


def test_a_phone_without_gpu_support_is_one_line(phones, arm64_binary,  # noqa: F811
                                                 capsys) -> None:
    """No OpenCL and no OpenGL ES 3.1: the delegate's own reasons, exit 1 (the model does not
    run on that GPU), nothing left on the phone."""
    storage = phones.add("FAKE01", gpu="none")
    assert main(_argv(model_path("if_float32"), GPU, arm64_binary, phones.adb)) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        'devicefit: error: the model does not run on the GPU of Fake Pixel: Can not open '
        'OpenCL library on this device - dlopen failed: library "libOpenCL.so" not found; '
        "OpenGL ES 3.1 or above is required to use OpenGL inference. (benchmark_model: Failed "
        "to apply GPU delegate.)\n")
    assert captured.out == ""
    assert device_files(storage) == []


def test_gpu_flag_on_a_cpu_profile(phones, arm64_binary, capsys) -> None:  # noqa: F811
    """The CPU profile's run is judged; the GPU beside it has no profile to be predicted
    or estimated with, and says so."""
    phones.add("FAKE01")
    model = model_path("if_float32")
    assert main(_argv(model, "android-arm64-cpu", arm64_binary, phones.adb, "--gpu",
                      "--json")) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    assert b["settings"]["delegate"] == "xnnpack" and b["partition"] is None
    assert b["beside"]["settings"]["delegate"] == "gpu"
    assert b["beside"]["results"]["gpu"]["ops_on_gpu"] == 3
    assert "is not a GPU profile" in b["beside"]["vs_estimate"]["estimate_unavailable"]
    assert main(_argv(model, "android-arm64-cpu", arm64_binary, phones.adb, "--gpu",
                      "--delegate", "nnapi")) == 2
    assert "--gpu runs the model on the GPU and on the CPU beside it: leave out --delegate " \
           "nnapi\n" in capsys.readouterr().err


def test_gpu_flag_on_a_cpu_profile_shows_the_gpu_runs_partition(
        phones, arm64_binary, tmp_path, capsys) -> None:  # noqa: F811
    """The GPU run beside the CPU profile's own: its delegate's partition (measured, its log)
    is shown after it, in the text and on the page, with nothing predicted to compare it
    with; laid out in Chromium as every page is."""
    from tests.browser import LAYOUT, WIDE, layout_problems, measure

    phones.add("FAKE01")
    page = tmp_path / "bench.html"
    assert main(_argv(model_path("if_float32"), "android-arm64-cpu", arm64_binary, phones.adb,
                      "--gpu", "--html", str(page))) == 0
    out = capsys.readouterr().out
    beside = out.index("beside it on the GPU, 4 threads: inference avg")
    shown = out.index("GPU delegate on the phone (measured, OpenCL): 3 of 4 ops on the GPU in 1 "
                      "partition(s)\n  refused: IF: Operation is not supported.\n"
                      "  predicted: none (the profile is not a GPU profile)\n")
    assert beside < shown
    text = page.read_text()
    assert text.index('<section class="bench-beside">') < text.index(
        '<section class="bench-gpu">')
    partition = text.split('<section class="bench-gpu">')[1].split("</section>")[0]
    assert ("<tr><td>backend</td><td>OpenCL</td><td>-</td></tr>"
            "<tr><td>ops on the GPU</td><td>3 of 4</td><td>-</td></tr>") in partition
    assert ("<p>not compared: the profile is not a GPU profile, so nothing is predicted</p>"
            in partition)
    assert "<li>IF: Operation is not supported.</li>" in partition
    rendered, geometry = measure(tmp_path / "shown.html", text, LAYOUT, size=WIDE)
    assert rendered.console == [], rendered.console
    assert layout_problems(geometry) == []


def test_an_explicit_delegate_runs_once(phones, arm64_binary, capsys) -> None:  # noqa: F811
    phones.add("FAKE01")
    assert main(_argv(model_path("if_float32"), GPU, arm64_binary, phones.adb, "--delegate",
                      "xnnpack", "--json")) == 0
    b = json.loads(capsys.readouterr().out)["bench"]
    assert b["beside"] is None and b["partition"] is None
    shells = [c for c in phones.calls() if "shell" in c and any("benchmark_model --" in w
                                                               for w in c)]
    assert len(shells) == 1
