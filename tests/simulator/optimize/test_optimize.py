"""``devicefit optimize`` on real converted models, checked with the real TFLM and LiteRT."""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.optimize import optimize_model_bytes
from devicefit.simulator.plan.lifetimes import lower_bound, offline_offsets
from devicefit.simulator.plan.planners.base import check_plan
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.targets.tflm.scratch import tflm_buffers
from tests.zoo import model_path

PROFILE = "stm32l4r5-cortex-m4"

#: Model → what the optimizer must do with it (its file order and greedy plan as shipped).
CASES = {
    "chain_int8": "offline plan",  # a chain whose greedy head is above the bound
    "residual_int8": "offline plan",  # skip connections, MEAN scratch buffers
    "branches_int8": "reorder",  # interleaved branches: a better order lowers the bound
    "inception_int8": "already optimal",
    "unet_tconv_int8": "already optimal",  # a U-Net step TFLM can run
}


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE, [])


@pytest.fixture(scope="module")
def results(profile):
    """Each model optimized once (with the runtime checks) for all tests of this module."""
    out = {}
    for name in CASES:
        data = model_path(name).read_bytes()
        out[name] = (data, *optimize_model_bytes(data, profile, name=name))
    return out


@pytest.mark.parametrize("name", CASES)
def test_measured_head_never_grows_and_drops_where_it_was_above_the_bound(results, name):
    data, out, r = results[name]
    if CASES[name] == "already optimal":
        assert not r.changed and out == data
        assert r.head_before_bytes == r.bound_best_order_bytes
        return
    assert r.changed and out != data
    assert r.head_before_bytes > r.bound_best_order_bytes
    # Measured with the real interpreter, the head drops to the prediction: the bound.
    assert r.measured_head_after_bytes == r.head_after_bytes == r.bound_best_order_bytes
    assert r.measured_head_after_bytes < r.measured_head_before_bytes == r.head_before_bytes
    assert r.outputs_identical == {"tflm": True, "litert": True}
    assert r.order_changed == (CASES[name] == "reorder")
    assert r.offline_plan == (CASES[name] == "offline plan")


def test_reordering_lowers_the_bound_itself(results):
    _, out, r = results["branches_int8"]
    assert r.bound_best_order_bytes < r.bound_file_order_bytes
    model = parse_model(out)
    assert [op.index for op in model.main.operators] == list(range(r.operators))
    assert lower_bound(tflm_buffers(model)) == r.bound_best_order_bytes


def test_the_offline_plan_in_the_file_never_overlaps_live_tensors(results):
    for name, (_, out, r) in results.items():
        if not r.offline_plan:
            continue
        model = parse_model(out)
        offsets = offline_offsets(model)
        assert offsets is not None and len(offsets) == len(model.main.tensors)
        buffers = tflm_buffers(model)
        tensors = [b for b in buffers if b.kind == "tensor"]
        assert all(b.offline_offset is not None for b in tensors), name
        head = check_plan(tensors, [b.offline_offset for b in tensors], name)
        assert head <= r.head_after_bytes


def test_outputs_stay_bit_identical_on_other_inputs(results, tmp_path):
    import numpy as np

    from devicefit.simulator.run.runtimes import input_specs, random_inputs

    _, out, _ = results["branches_int8"]
    path = tmp_path / "opt.tflite"
    path.write_bytes(out)
    inputs = random_inputs(input_specs(read_model(path)), seed=7)
    for runtime in ("tflm", "litert"):
        a = run_model(model_path("branches_int8"), runtime, inputs=inputs, reference_kernels=True)
        b = run_model(path, runtime, inputs=inputs, reference_kernels=True)
        assert all(np.array_equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))


def test_the_lower_bound_counts_scratch_buffers(profile):
    # TRANSPOSE_CONV's int32 accumulators (a scratch buffer) are live at the peak step.
    path = model_path("unet_tconv_int8")
    data = path.read_bytes()
    _, r = optimize_model_bytes(data, profile, name="unet_tconv_int8", verify=False)
    buffers = tflm_buffers(read_model(path))
    tensors_only = lower_bound([b for b in buffers if b.kind == "tensor"])
    assert r.bound_file_order_bytes > tensors_only
    measured = run_model(path, "tflm", reference_kernels=True).arena_head_bytes
    assert measured == r.bound_file_order_bytes == r.bound_best_order_bytes


def test_cli_writes_the_optimized_model_and_reports(tmp_path, capsys):
    out = tmp_path / "opt.tflite"
    src = model_path("chain_int8")
    assert main(["optimize", str(src), "--profile", PROFILE, "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] and report["output"] == str(out)
    assert report["measured_head_after_bytes"] < report["measured_head_before_bytes"]
    assert report["gap_bytes"] == 0
    assert report["verify_seconds"] > 0  # the runtimes' time, apart from the search's
    assert out.exists() and out.read_bytes() != src.read_bytes()
    # Optimizing the result again finds nothing left to gain, and says so.
    again = tmp_path / "again.tflite"
    assert main(["optimize", str(out), "--profile", PROFILE, "-o", str(again)]) == 0
    text = capsys.readouterr().out
    assert "already optimal" in text and "identical copy" in text
    assert again.read_bytes() == out.read_bytes()


def test_a_verification_over_its_timeout_writes_nothing_and_names_the_option(tmp_path, capsys):
    # No runtime answers within a millisecond: the run is killed, the file left unwritten.
    out = tmp_path / "opt.tflite"
    argv = ["optimize", str(model_path("chain_int8")), "--profile", PROFILE, "-o", str(out),
            "--timeout", "0.001"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "no answer after 0.001 s" in err and "--timeout" in err and "not written" in err
    assert "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--profile", "android-arm64-cpu"], "pick a tflm profile"),
    (["--profile", PROFILE, "-o", "SRC"], "would replace an input, the model"),
])
def test_cli_bad_usage_exits_2(tmp_path, capsys, argv, message):
    src = tmp_path / "m.tflite"
    src.write_bytes(model_path("mlp_int8").read_bytes())
    argv = [str(src) if a == "SRC" else a for a in argv]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "out.tflite")]
    assert main(["optimize", str(src), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_stale_offline_plan_is_replaced_when_operators_move(profile):
    from devicefit.simulator.read.writer import set_offline_plan
    from devicefit.simulator.targets.tflm.planner import greedy_plan

    # branches_int8 with TFLM's own greedy offsets written as its offline plan: valid for the
    # file order only. Reordering must write a plan for the new order.
    data = model_path("branches_int8").read_bytes()
    model = parse_model(data)
    buffers = tflm_buffers(model)
    offsets = [-1] * len(model.main.tensors)
    for b, off in zip(buffers, greedy_plan(buffers), strict=True):
        offsets[b.tensor] = off
    planned = set_offline_plan(data, offsets)
    out, r = optimize_model_bytes(planned, profile, name="planned")
    assert r.changed and r.order_changed and r.offline_plan
    assert r.measured_head_after_bytes == r.bound_best_order_bytes < r.measured_head_before_bytes
    assert r.outputs_identical == {"tflm": True, "litert": True}
    fresh = [b for b in tflm_buffers(parse_model(out)) if b.kind == "tensor"]
    check_plan(fresh, [b.offline_offset for b in fresh], "rewritten plan")


def test_control_flow_models_are_left_unchanged_and_say_why(profile):
    data = model_path("if_float32").read_bytes()
    out, r = optimize_model_bytes(data, profile, name="if_float32")
    assert out == data and not r.changed
    assert "control flow" in r.summary


@pytest.mark.parametrize("name", CASES)
def test_the_order_search_says_what_it_spent_of_its_budget(results, name):
    r = results[name][2]
    assert 0 < r.search_steps < r.search_step_budget
    assert not r.search_stopped and r.bound_exact
    assert not any("budget" in note for note in r.notes)
    assert json.loads(json.dumps(r.to_dict()))["search_steps"] == r.search_steps
