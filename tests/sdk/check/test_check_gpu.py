"""``devicefit check`` on a phone GPU profile: the text says, per GPU target, the predicted
partition with its fallbacks counted, and whether ``--run`` asked LiteRT's GPU delegate
(the WebGPU accelerator on Chromium's SwiftShader) and whether it agrees; the page shows the
partition with the layers and the fp16 table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.targets.gpu.delegate import ICDS
from tests.tflite_builder import topk_model
from tests.zoo import model_path

needs_swiftshader = pytest.mark.skipif(not Path(str(ICDS["swiftshader"])).is_file(),
                                       reason="Chromium's SwiftShader Vulkan driver is not "
                                              "installed")
LOOSE = "{flash: 100MB, arena: 100MB, latency: 100s}"


def _project(tmp_path: Path) -> Path:
    shutil.copy(model_path("if_float32"), tmp_path / "if_float32.tflite")
    (tmp_path / "topk.tflite").write_bytes(topk_model())
    f = tmp_path / "devicefit.yaml"
    f.write_text(f"""defaults:
  budgets: {LOOSE}
models:
  - path: if_float32.tflite
    profiles: [android-gpu-adreno, android-arm64-cpu]
  - path: topk.tflite
    profiles: [android-gpu-adreno]
""")
    return f


def _lines(out: str, target: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(target)]


def test_a_static_check_counts_the_fallbacks_and_says_the_delegate_was_not_asked(
        tmp_path, capsys) -> None:
    assert main(["check", str(_project(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert _lines(out, "if_float32 @ android-gpu-adreno: ") == [
        "GPU 3/4 ops, 1 partition(s), 1 CPU fallback(s) (IF) (predicted)",
        "GPU delegate not asked (check --run asks it where a GPU adapter is present)"]
    assert _lines(out, "topk @ android-gpu-adreno: ")[0] == (
        "GPU 1/2 ops, 1 partition(s), 1 CPU fallback(s) (TOPK_V2) (predicted)")
    assert _lines(out, "if_float32 @ android-arm64-cpu: ") == []  # not a GPU target


@needs_swiftshader
def test_check_run_says_whether_the_delegate_agrees(tmp_path, capsys) -> None:
    page = tmp_path / "check.html"
    assert main(["check", str(_project(tmp_path)), "--run", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert _lines(out, "if_float32 @ android-gpu-adreno: ")[1] == (
        "GPU delegate asked: agrees with the prediction")
    # TOPK_V2 has no parser in the TFLite delegate's rules; LiteRT's accelerator takes it.
    assert _lines(out, "topk @ android-gpu-adreno: ")[1] == (
        "GPU delegate asked: 2 disagreement(s): ops on the GPU: the delegate 2, predicted 1; "
        "TOPK_V2: predicted on the CPU (Operation is not supported.); the delegate takes it")
    html = page.read_text()
    # Each GPU target's section: its partition with the layers, the delegate, the fp16 table.
    assert html.count('<section class="gpu-partition">') == 2
    assert "<th>output tensor (your layer)</th>" in html and "<td>Identity</td>" in html
    assert "<li>disagrees    TOPK_V2: predicted on the CPU" in html
    assert html.count("<th>computed as</th>") == 2
