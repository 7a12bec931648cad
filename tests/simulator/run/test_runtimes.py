"""Real runs in TFLM and LiteRT, always in a child process: arena, cross-check, failures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.errors import InputError, RuntimeFailure, UsageError
from devicefit.simulator.infra.units import format_bytes
from devicefit.simulator.judge.verdict import judge
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile, with_runtime
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.views import render
from devicefit.simulator.run.runtimes import (
    RUNNERS,
    InputSpec,
    compare_outputs,
    input_specs,
    load_inputs,
    random_inputs,
    run_model,
    runner_name,
)
from devicefit.simulator.simulate import simulate
from devicefit.simulator.targets.tflm.runner import parse_allocations
from devicefit.simulator.types import MeasureOptions
from tests import zoo
from tests.tflite_builder import slice_model, topk_model

PROFILE = "stm32l4r5-cortex-m4"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Hand-built models: a TFLM crash, its healthy twin, an op TFLM lacks."""
    folder = tmp_path_factory.mktemp("built")
    paths = {}
    for name, data in {"slice_ok": slice_model(2), "slice_crash": slice_model(200_000_000),
                       "topk": topk_model()}.items():
        paths[name] = folder / f"{name}.tflite"
        paths[name].write_bytes(data)
    return paths


@pytest.mark.parametrize("name", sorted(zoo.BUILDERS))
def test_measured_head_equals_prediction(name):
    """The real TFLM arena head equals the static plan, byte for byte, for every zoo model;
    a model whose ops TFLM lacks is refused by the real interpreter naming the same op."""
    path = zoo.model_path(name)
    profile = load_profile(PROFILE)
    compat = check_ops(read_model(path), profile)
    if not compat.supported:
        with pytest.raises(RuntimeFailure, match=compat.unsupported_ops[0].op):
            run_model(path, "tflm")
        return
    # The wheel is a 64-bit host build with reference kernels: predict for that.
    report = simulate(path, with_runtime(profile, kernels="reference", pointer_bytes=8))
    measured = run_model(path, "tflm")
    assert measured.arena_head_bytes == report.memory.arena_head_bytes
    assert measured.arena_total_bytes == measured.arena_head_bytes + measured.arena_tail_bytes


def test_measure_fills_report_and_cross_checks_bit_exact():
    report = simulate(zoo.model_path("chain_int8"), PROFILE,
                      run=MeasureOptions(runs=3)).to_dict()
    m, lat = report["measured"], report["latency"]
    assert m["runtime"] == "tflm" and m["head_difference_bytes"] == 0
    assert m["outputs_agree"] is True and m["cross_check"]["max_abs_difference"] == 0.0
    assert lat["host_ms"]["runs"] == 3
    assert lat["host_ms"]["min"] <= lat["host_ms"]["median"] <= lat["host_ms"]["p90"]
    assert lat["estimated_device_ms"] == pytest.approx(sum(o["estimated_ms"]
                                                           for o in lat["per_op"]))
    compat = report["compatibility"]
    assert (compat["table"], compat["supported"], compat["unsupported_ops"]) == ("tflm", True, [])
    assert compat["disagreements"] == [] and compat["probe"]["runtime"].startswith("tflite-micro")
    assert {b["name"]: b["basis"] for b in report["budgets"]}["latency"] == "estimated"


def test_litert_profile_runs_with_its_threads():
    report = simulate(zoo.model_path("mlp_int8"), "android-arm64-cpu",
                      run=MeasureOptions(runs=2))
    assert report.measured.runtime == "litert"
    assert report.latency.host_ms.threads == 4
    assert report.measured.outputs_agree is True  # TFLM vs LiteRT reference kernels


def test_same_inputs_same_outputs_across_runtimes(built):
    x = [np.arange(8, dtype=np.float32).reshape(1, 8)]
    tflm = run_model(built["slice_ok"], "tflm", inputs=x)
    litert = run_model(built["slice_ok"], "litert", inputs=x, reference_kernels=True)
    np.testing.assert_array_equal(tflm.outputs[0], [[2, 3, 4, 5]])
    np.testing.assert_array_equal(litert.outputs[0], tflm.outputs[0])


def test_crashing_model_is_a_runtime_failure_naming_runtime_and_stage(built):
    with pytest.raises(RuntimeFailure, match=r"tflm crashed during 'invoke' \(killed by SIG"):
        run_model(built["slice_crash"], "tflm")


def test_cli_survives_a_crashing_runtime(built, capsys):
    # The crash is the runtime's answer on this model: a failing verdict (1), not bad input.
    code = main(["simulate", str(built["slice_crash"]), "--profile", PROFILE, "--run"])
    assert code == 1
    captured = capsys.readouterr()
    assert "tflm crashed during 'invoke'" in captured.out and "Traceback" not in captured.err
    assert "at op 0 SLICE" in captured.out and "Verdict: FAIL" in captured.out


def test_op_tflm_lacks_fails_the_verdict_naming_it(built, capsys):
    with pytest.raises(RuntimeFailure, match="TOPK_V2"):  # the real interpreter agrees
        run_model(built["topk"], "tflm")
    code = main(["simulate", str(built["topk"]), "--profile", PROFILE, "--run"])
    out = capsys.readouterr().out
    assert code == 1
    assert "TOPK_V2" in out and "op 1" in out and "Verdict: FAIL" in out


def test_hang_or_slow_runtime_hits_the_timeout(built):
    with pytest.raises(RuntimeFailure, match=r"tflm: no answer after"):
        run_model(built["slice_ok"], "tflm", timeout_s=0.01)


def test_runner_registry():
    assert set(RUNNERS) == {"tflm", "litert"}
    assert runner_name("edgetpu") == "litert"
    with pytest.raises(UsageError):
        runner_name("tvm")


def test_random_inputs_cover_the_range_and_are_repeatable():
    specs = [InputSpec("a", (64, 64), "int8"), InputSpec("b", (4,), "float32")]
    a, b = random_inputs(specs)
    assert a.dtype == np.int8 and a.min() == -128 and a.max() == 127
    assert b.dtype == np.float32 and np.all(np.abs(b) <= 1)
    np.testing.assert_array_equal(random_inputs(specs)[0], a)


def test_user_inputs_npy_npz_and_mismatches(tmp_path):
    specs = input_specs(read_model(zoo.model_path("mlp_int8")))
    good = np.ones((1, 64), np.int8)
    np.save(tmp_path / "one.npy", good[0])  # batch dimension added
    assert load_inputs(tmp_path / "one.npy", specs)[0].shape == (1, 64)
    np.savez(tmp_path / "named.npz", **{specs[0].name: good})
    np.testing.assert_array_equal(load_inputs(tmp_path / "named.npz", specs)[0], good)
    np.save(tmp_path / "bad.npy", good.astype(np.float32))
    with pytest.raises(InputError, match="needs shape \\[1, 64\\] int8"):
        load_inputs(tmp_path / "bad.npy", specs)
    (tmp_path / "junk.npy").write_text("junk")
    with pytest.raises(InputError, match="cannot read input data"):
        load_inputs(tmp_path / "junk.npy", specs)


def test_cli_input_file_is_used(tmp_path, capsys):
    data = tmp_path / "x.npy"
    np.save(data, np.zeros((1, 64), np.int8))
    code = main(["simulate", str(zoo.model_path("mlp_int8")), "--profile", PROFILE, "--run",
                 "--runs", "2", "--input", str(data)])
    assert code == 0
    assert f"inputs       {data}" in capsys.readouterr().out


def test_parse_allocations():
    lines = ["[RecordingMicroAllocator] Arena allocation total 17376 bytes",
             "[RecordingMicroAllocator] Arena allocation head 14336 bytes",
             "[RecordingMicroAllocator] Arena allocation tail 3040 bytes",
             "[RecordingMicroAllocator] 'NodeAndRegistration struct' used 512 bytes with "
             "alignment overhead (requested 512 bytes for 8 NodeAndRegistration structs)"]
    totals, categories = parse_allocations(lines)
    assert totals == {"total": 17376, "head": 14336, "tail": 3040}
    assert categories == {"NodeAndRegistration struct": 512}


def test_over_the_arena_budget_says_by_how_much(tmp_path):
    (tmp_path / "tiny.yaml").write_text("extends: stm32l4r5-cortex-m4\nbudgets:\n  arena: 8KiB\n")
    report = simulate(zoo.model_path("chain_float32"), load_profile(tmp_path / "tiny.yaml"),
                      run=MeasureOptions(runs=1))
    m = report.measured
    assert m.over_budget_bytes == m.arena_bytes - 8 * 1024 > 0
    assert f"needs {format_bytes(m.over_budget_bytes)} more arena" in " ".join(report.notes)
    arena = next(b for b in report.budgets if b.name == "arena")
    # The device's CMSIS-NN head and 32-bit tail are predictions even after a run.
    assert arena.basis == "estimated" and arena.value == m.arena_bytes
    assert not arena.ok and report.verdict == "fail"
    assert m.outputs_agree is None  # a float model is not cross-checked bit for bit
    # The printed sum adds up the terms it names (it once said "measured head + predicted
    # tail" over the CMSIS-NN head, which the wheel does not run).
    head, tail = report.memory.arena_head_bytes, report.memory.arena_tail_bytes
    assert m.device_head_bytes == head and head + tail == m.arena_bytes
    assert m.device_head_basis.startswith("predicted for cmsis-nn kernels")
    row = next(line for line in render("text", report).splitlines() if "device arena" in line)
    assert row.split() == ["device", "arena", *format_bytes(m.arena_bytes).split(), "=",
                           "predicted", "head", f"{head:,}", "B", "+", "predicted", "tail",
                           f"{tail:,}", "B"]


def test_a_host_like_profile_is_judged_on_the_measured_arena(tmp_path):
    (tmp_path / "host.yaml").write_text(
        "extends: stm32l4r5-cortex-m4\nruntime: {kernels: reference, pointer_size: 8}\n")
    report = simulate(zoo.model_path("chain_int8"), load_profile(tmp_path / "host.yaml"),
                      run=MeasureOptions(runs=1))
    m, start = report.measured, report.memory.arena_required_bytes
    assert m.arena_bytes == m.arena_total_bytes
    text = render("text", report)
    row = next(line for line in text.splitlines() if "device arena" in line)
    assert row.split() == ["device", "arena", *format_bytes(m.arena_bytes).split(), "=",
                           "measured", "head", f"{m.arena_head_bytes:,}", "B", "+", "measured",
                           "tail", f"{m.arena_tail_bytes:,}", "B"]
    # TFLM needs more room to start than the run's allocations: that prediction is what
    # is judged, and says so (the budget row said "measured" over it).
    assert start > m.arena_bytes
    arena = next(b for b in report.budgets if b.name == "arena")
    assert (arena.value, arena.basis) == (start, "estimated")
    row = next(line for line in text.splitlines() if "start arena" in line)
    assert row.split()[2:] == [*format_bytes(start).split(), *"TFLM's room while planning: the "
                               "budget judges this".split()]
    # Without that room, the measured arena is judged, as measured.
    roomless = dataclasses.replace(report.memory, arena_required_bytes=0)
    again = judge(dataclasses.replace(report, memory=roomless, budgets=[], unchecked_budgets={}),
                  load_profile(tmp_path / "host.yaml"))
    arena = next(b for b in again.budgets if b.name == "arena")
    assert (arena.value, arena.basis) == (m.arena_bytes, "measured")
    assert "start arena" not in render("text", again)


def test_compare_outputs():
    a = [np.array([1, 2, 3], np.int8)]
    assert compare_outputs(a, [a[0].copy()]) == (True, 0.0)
    assert compare_outputs(a, [np.array([1, 2, -3], np.int8)]) == (False, 6.0)
    assert compare_outputs(a, [np.array([1, 2], np.int8)]) == (False, None)


def test_tflm_arena_grows_until_the_model_fits():
    path = zoo.model_path("chain_int8")
    small = run_model(path, "tflm", arena_size=1024)
    roomy = run_model(path, "tflm")
    assert small.arena_size_used >= small.arena_total_bytes > 1024
    assert (small.arena_head_bytes, small.arena_tail_bytes) == \
        (roomy.arena_head_bytes, roomy.arena_tail_bytes)
