"""``simulate --run --target-build TFLM_DIR``: the TFLM target build and its measurement.

The parser tests read output the harness really printed (``tests/fixtures/tflm_target``);
the builder tests check the make command, the cache key and the checkout checks on folders
made here; the end-to-end test builds TFLM and runs a model under QEMU, and skips unless
``DEVICEFIT_TFLM_DIR`` names a checkout with its third-party trees and the Arm GNU
toolchain and qemu-arm are installed (CI has neither).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.targets.tflm import build as tb
from devicefit.simulator.targets.tflm.qemu import parse_probe, parse_report, search_min_arena
from tests.paths import TESTS
from tests.tflite_builder import slice_model

FIXTURES = TESTS / "fixtures" / "tflm_target"


# --------------------------------------------------------------------------- harness output
def test_report_parser_reads_a_real_run():
    run = parse_report((FIXTURES / "report_ok.txt").read_text())
    assert run.ok and run.failed_stage is None
    assert (run.head, run.tail, run.total) == (49152, 548, 49700)
    assert run.head + run.tail == run.total
    assert run.tail_breakdown["persistent_buffers"].used == 86
    assert run.tail_breakdown["persistent_buffers"].requested == 72
    assert sum(c.used for c in run.tail_breakdown.values()) <= run.tail
    assert [b.size for b in run.buffers] == [16384, 16384, 16384]
    assert run.planned_tensors == 3 and run.scratch == ()
    assert [(o.index, o.bytes, o.fnv1a) for o in run.outputs] == [(0, 16384, "4847ddc5")]


def test_report_parser_names_the_failed_stage():
    run = parse_report((FIXTURES / "report_fail.txt").read_text())
    assert not run.ok and run.failed_stage == "allocate" and run.head is None


def test_probe_parser():
    assert parse_probe((FIXTURES / "probe_fail.txt").read_text()) == "fail allocate"
    assert parse_probe("DF harness 1 build x pointer 4\nDF probe 49616 ok\n") == "ok"
    assert parse_probe("DF harness 1 build x pointer 4\n") is None  # died before answering


@pytest.mark.parametrize("threshold", [16, 48, 49616, 49712, 123_456 // 16 * 16])
@pytest.mark.parametrize("start", [1, 49700, 200_000])
def test_min_arena_search_finds_the_threshold(threshold, start):
    asked = []

    def works(n: int) -> bool:
        assert n % 16 == 0 and n > 0
        asked.append(n)
        return n >= threshold

    found, probes = search_min_arena(works, start)
    assert found == threshold and probes == len(asked)


def test_min_arena_search_is_short_near_the_start():
    _, probes = search_min_arena(lambda n: n >= 49616, 49700)
    assert probes <= 8


# --------------------------------------------------------------------------- the builder
def _checkout(root: Path, kernels: str = "cmsis-nn") -> Path:
    """A folder shaped like a TFLM checkout (Makefile and download folders, no sources)."""
    (root / tb.MAKEFILE).parent.mkdir(parents=True)
    (root / tb.MAKEFILE).write_text("# TFLM's Makefile would be here\n")
    for d in tb.THIRD_PARTY + tb.KERNEL_DIRS[kernels][1]:
        (root / tb.DOWNLOADS / d).mkdir(parents=True)
    return root


def test_make_command_builds_outside_the_checkout(tmp_path):
    spec = tb.BuildSpec(tmp_path / "tflm", "cortex-m4", "cmsis-nn")
    gendir = tmp_path / "cache" / "gen"
    cmd = tb.make_command(spec, gendir)
    assert cmd[:3] == ["make", "-f", tb.MAKEFILE]
    assert {"TARGET=cortex_m_qemu", "TARGET_ARCH=cortex-m4", "OPTIMIZED_KERNEL_DIR=cmsis_nn",
            f"BASE_GENDIR={gendir}"} <= set(cmd)
    ref = tb.make_command(tb.BuildSpec(spec.tflm_dir, "cortex-m0plus", "reference"), gendir)
    assert "TARGET_ARCH=cortex-m0plus" in ref
    assert not any(a.startswith("OPTIMIZED_KERNEL_DIR") for a in ref)


def test_cache_is_per_checkout_core_and_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path / "c"))
    a = tb.BuildSpec(tmp_path, "cortex-m4", "cmsis-nn")
    dirs = {tb.build_dir(a, "k1"), tb.build_dir(a, "k2"),
            tb.build_dir(tb.BuildSpec(tmp_path, "cortex-m7", "cmsis-nn"), "k1"),
            tb.build_dir(tb.BuildSpec(tmp_path, "cortex-m4", "reference"), "k1")}
    assert len(dirs) == 4
    assert all(d.parent == tmp_path / "c" / "tflm-builds" for d in dirs)


def test_tree_hash_follows_the_sources_not_the_build_output(tmp_path):
    root = _checkout(tmp_path / "tflm")
    first = tb.source_key(root)
    assert first.startswith("tree-")
    (root / "gen" / "obj").mkdir(parents=True)  # an in-tree build by the user
    (root / "gen" / "obj" / "x.o").write_bytes(b"\0")
    assert tb.source_key(root) == first
    (root / tb.MAKEFILE).write_text("# changed\n")
    assert tb.source_key(root) != first


def test_git_checkout_is_keyed_by_its_commit(tmp_path):
    root = _checkout(tmp_path / "tflm")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert tb.source_key(root) == head[:12]
    (root / tb.MAKEFILE).write_text("# a local change\n")
    assert tb.source_key(root).startswith("tree-")  # never the commit's objects


def test_resolver_methods_are_read_from_the_header():
    # The layout of micro_mutable_op_resolver.h's methods, written here (not TFLM's text).
    header = '''
  TfLiteStatus AddCustom(const char* name, const TFLMRegistration* registration) {}
  TfLiteStatus AddConv2D(
      const TFLMRegistration& registration = Register_CONV_2D()) {
    return AddBuiltin(BuiltinOperator_CONV_2D, registration, ParseConv2D);
  }
  TfLiteStatus AddEnergy() {
    // TODO(b/286250473): change back name to "Energy" and remove namespace
    return AddCustom("SignalEnergy", tflite::tflm_signal::Register_ENERGY());
  }
  TfLiteStatus AddRelu6() {
    return AddBuiltin(BuiltinOperator_RELU6, Register_RELU6(), ParseRelu6);
  }
'''
    found = tb.parse_resolver(header)
    assert found["CONV_2D"] == tb.OpBinding("CONV_2D", "AddConv2D", "Register_CONV_2D")
    assert found["SignalEnergy"] == tb.OpBinding("SignalEnergy", "AddEnergy", "Register_ENERGY")
    assert found["RELU6"].method == "AddRelu6"
    assert tb.op_key("CUSTOM:SignalEnergy") == "SignalEnergy" and tb.op_key("ADD") == "ADD"


def test_kernel_sources_follow_registrations_headers_and_companions():
    # Sources shaped like TFLM's kernels (written here): a CMSIS-NN conv with the reference
    # conv_common, a Signal kernel whose Prepare lives in a *_common file, an unrelated op.
    inc = '#include "tensorflow/lite/micro/kernels/{}.h"\n'
    texts = {
        "tensorflow/lite/micro/kernels/cmsis_nn/conv.cc":
            inc.format("conv") + inc.format("kernel_util")
            + "TFLMRegistration Register_CONV_2D() {\n  return {};\n}\n",
        "tensorflow/lite/micro/kernels/conv_common.cc": inc.format("conv"),
        "tensorflow/lite/micro/kernels/kernel_util.cc": inc.format("kernel_util"),
        "tensorflow/lite/micro/kernels/add.cc":
            inc.format("kernel_util") + "TFLMRegistration Register_ADD() {\n}\n",
        "signal/micro/kernels/fft_auto_scale_kernel.cc":
            '#include "signal/micro/kernels/fft_auto_scale_kernel.h"\n'
            "TFLMRegistration* Register_FFT_AUTO_SCALE() {\n}\n",
        "signal/micro/kernels/fft_auto_scale_common.cc":
            '#include "signal/micro/kernels/fft_auto_scale_kernel.h"\n',
    }
    picked, missing = tb.kernel_sources(texts, ["Register_CONV_2D", "Register_FFT_AUTO_SCALE",
                                                "Register_NOPE"])
    assert picked == set(texts) - {"tensorflow/lite/micro/kernels/add.cc"}
    assert missing == ["Register_NOPE"]


def test_checkout_problems_are_one_line_each(tmp_path, monkeypatch):
    with pytest.raises(tb.TargetBuildError, match="not a TFLite-Micro checkout"):
        tb.check_checkout(tb.BuildSpec(tmp_path, "cortex-m4", "cmsis-nn"))
    root = _checkout(tmp_path / "ref", kernels="reference")
    with pytest.raises(tb.TargetBuildError, match="lacks cmsis_nn, cmsis .*downloads nothing"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "cmsis-nn"))
    with pytest.raises(tb.TargetBuildError, match="kernels 'esp-nn'"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "esp-nn"))
    with pytest.raises(tb.TargetBuildError, match="cpu 'xtensa-lx7'"):
        tb.check_checkout(tb.BuildSpec(root, "xtensa-lx7", "reference"))
    # No Arm toolchain on PATH (shutil.which replaced: this machine may have one).
    monkeypatch.setattr(tb.shutil, "which", lambda name, path=None: None)
    with pytest.raises(tb.TargetBuildError, match="needs make, arm-none-eabi-gcc.*qemu-arm"):
        tb.check_checkout(tb.BuildSpec(root, "cortex-m4", "reference"))


# --------------------------------------------------------------------------- the CLI
@pytest.fixture
def small_model(tmp_path) -> Path:
    path = tmp_path / "slice.tflite"
    path.write_bytes(slice_model(1))
    return path


def test_cli_needs_run(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "stm32l4r5-cortex-m4",
                 "--target-build", str(tmp_path)])
    assert code == 2
    assert "add --run" in capsys.readouterr().err


def test_cli_missing_checkout_is_one_line_exit_2(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code == 2
    assert "not a TFLite-Micro checkout" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_refuses_a_profile_that_is_not_tflm(small_model, tmp_path, capsys):
    code = main(["simulate", str(small_model), "--profile", "android-arm64-cpu", "--run",
                 "--target-build", str(_checkout(tmp_path / "tflm"))])
    assert code == 2
    assert ("builds TensorFlow Lite Micro; profile 'android-arm64-cpu' runs"
            in capsys.readouterr().err)


# --------------------------------------------------------------------------- end to end
def _real_checkout() -> Path:
    where = os.environ.get("DEVICEFIT_TFLM_DIR")
    if not where:
        pytest.skip("set DEVICEFIT_TFLM_DIR to a TFLM checkout (third-party trees downloaded) "
                    "to build TFLM for Cortex-M and run under QEMU")
    if lacking := tb.missing_tools():
        pytest.skip(f"the target build needs {', '.join(lacking)} (Debian: gcc-arm-none-eabi "
                    "libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-user)")
    return Path(where)


def test_target_build_measures_the_model_end_to_end(small_model, tmp_path, capsys,
                                                     monkeypatch):
    tflm = _real_checkout()
    code = main(["simulate", str(small_model), "--profile", "stm32l4r5-cortex-m4", "--run",
                 "--target-build", str(tflm), "--json"])
    assert code in (0, 1)
    report = json.loads(capsys.readouterr().out)
    t = report["measured"]["target_build"]
    assert t["status"] == "ok" and "cortex-m4 cmsis-nn (qemu)" in t["build"]
    assert t["head"] + t["tail"] == t["total"]
    assert t["min_arena_bytes"] % 16 == 0 and t["min_arena_invokes"] is True
    # the planner's head is exact on the device build too, and the outputs are the wheel's
    assert t["head"] == report["memory"]["arena_head_bytes"]
    assert t["outputs_agree"] is True
    assert report["measured"]["arena_bytes"] == t["min_arena_bytes"]


# --------------------------------------------------------------------------- the report
def _measurement(**kw):
    from devicefit.simulator.report import PlannerBuffer, TailCategory, TargetMeasurement

    base = dict(build="TFLM abc cortex-m4 cmsis-nn (qemu)", core="cortex-m4", kernels="cmsis-nn",
                tflm="abc", status="ok", head=5488, tail=3780, total=9268, min_arena_bytes=9184,
                min_arena_invokes=True, probes=5,
                tail_breakdown={"op_data": TailCategory(700, 688, 1)},
                planner_buffers=(PlannerBuffer(1960, 0, 0), PlannerBuffer(128, 0, 0)),
                planned_tensors=1, output_hash="0" * 64, outputs_agree=False,
                max_abs_difference=145.0, compared_with="tflm on this host, same inputs")
    return TargetMeasurement(**(base | kw))


def test_target_measurement_survives_the_json_report(small_model):
    import dataclasses

    from devicefit.simulator.report import MeasuredReport, Report
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.views.json import read_report

    report = simulate(small_model, "stm32l4r5-cortex-m4")
    report = dataclasses.replace(report, measured=MeasuredReport(
        "tflm", "seed 0", target_build=_measurement()))
    back = read_report(json.loads(json.dumps(report.to_dict())))
    assert isinstance(back, Report)
    assert back.measured.target_build == report.measured.target_build
    assert back.measured.target_build.scratch_buffers[0].size == 128


def test_text_names_the_build_and_compares_with_the_prediction(small_model):
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.views.text import target_build_lines

    mem = simulate(small_model, "stm32l4r5-cortex-m4").memory
    text = "\n".join(target_build_lines(_measurement(), mem))
    assert "measured on TFLM abc cortex-m4 cmsis-nn (qemu): ok" in text
    assert "smallest arena  9,184 B" in text and "scratch buffers 1: 128 B" in text
    assert "differ (max difference 145)" in text
    lacking = "\n".join(target_build_lines(_measurement(
        status="unsupported", unsupported_ops=("ethos-u",), head=None), mem))
    assert "the build lacks ethos-u: a finding" in lacking and "smallest" not in lacking


@pytest.mark.parametrize(("status", "fails"), [("ok", False), ("unsupported", True),
                                               ("failed at allocate", True), ("error", False)])
def test_a_build_that_cannot_run_the_model_fails_the_verdict(small_model, status, fails):
    import dataclasses

    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.reader import read_model
    from devicefit.simulator.report import MeasuredReport
    from devicefit.simulator.simulate import static_report
    from devicefit.simulator.types import Status
    from devicefit.simulator.verdict import judge

    profile = load_profile("stm32l4r5-cortex-m4")
    report = static_report(read_model(small_model), profile)
    assert judge(report, profile).verdict == Status.PASS  # the static half alone passes
    report = dataclasses.replace(report, measured=MeasuredReport(
        "tflm", "seed 0", target_build=_measurement(status=status)))
    judged = judge(report, profile)
    assert (judged.verdict == Status.FAIL) == fails
    if status == "ok":  # the build's smallest arena is the measured figure judged
        arena = next(c for c in judged.budgets if c.name == "arena")
        assert arena.value == 9184 and arena.basis.value == "measured"
