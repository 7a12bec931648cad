"""``optimize --patches``: the first stage run patch by patch, on real converted models.

Every rewrite is run in the real TFLM and LiteRT interpreters against the original: the
outputs must be bit-identical and TFLM's measured head must be the predicted one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.optimize import optimize_model_bytes
from devicefit.simulator.optimize.patches import (
    PatchRefused,
    patch_model,
    plan_for,
    split_points,
    stage_mac_ratio,
)
from devicefit.simulator.plan.lifetimes import lower_bound
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.run.runtimes import input_specs, random_inputs, run_model
from devicefit.simulator.targets.tflm.scratch import tflm_buffers
from tests.paths import TESTS
from tests.zoo import convert_keras, model_path

PROFILE = "stm32l4r5-cortex-m4"
DIGITS_ARTIFACTS = TESTS / "artifacts" / "convert"
NEW_OPS = {"SLICE", "PAD", "CONCATENATION"}


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE, [])


@pytest.fixture(scope="module")
def v1_head(profile):
    """MobileNetV1-0.25 at 96×96, the search minimising the head (MCUNetV2's figure)."""
    data = model_path("mobilenet_v1_96_int8").read_bytes()
    out, report = optimize_model_bytes(data, profile, name="mobilenet_v1", patches="auto",
                                       patch_objective="head")
    return data, out, report


def _macs(data: bytes) -> int:
    return sum(w.macs for w in op_work(parse_model(data)))


def test_mobilenet_v1_head_drops_to_under_0_6_of_the_whole_tensor_bound(v1_head):
    data, out, r = v1_head
    p = r.patches
    assert p.grid is not None and p.refused is None and r.changed
    bound = lower_bound(tflm_buffers(parse_model(data)))
    assert p.bound_whole_tensor_bytes == bound == r.measured_head_before_bytes
    assert r.measured_head_after_bytes == r.head_after_bytes <= 0.6 * bound
    assert r.outputs_identical == {"tflm": True, "litert": True}
    # The overhead is counted on the written file, within the default +20 % limit.
    assert p.macs_before == _macs(data) and p.macs_after == _macs(out)
    assert 0 < p.mac_overhead_pct <= 20
    chosen = next(c for c in p.candidates if (c.split, c.grid) == (p.split, p.grid))
    assert chosen.mac_overhead_pct == pytest.approx(p.mac_overhead_pct, abs=0.01)
    # Ranked by their bound; the best few are planned for real and the best head is kept.
    ranked = sorted((c for c in p.candidates if c.within_limit),
                    key=lambda c: (c.bound_bytes, c.mac_overhead_pct))
    assert chosen in ranked[:3] and r.head_after_bytes >= chosen.bound_bytes
    # Only stock builtin ops were added; the latency estimate counts them.
    before, after = parse_model(data).op_types, parse_model(out).op_types
    assert set(after) - set(before) == NEW_OPS
    assert p.estimated_ms_after > p.estimated_ms_before
    assert (p.model_bytes_before, p.model_bytes_after) == (len(data), len(out))


def test_patched_outputs_match_on_other_inputs_and_with_optimized_kernels(v1_head, tmp_path):
    data, out, _ = v1_head
    paths = [tmp_path / "original.tflite", tmp_path / "patched.tflite"]
    for path, blob in zip(paths, (data, out), strict=True):
        path.write_bytes(blob)
    inputs = random_inputs(input_specs(read_model(paths[0])), seed=11)
    for runtime, reference in (("tflm", True), ("litert", True), ("litert", False)):
        a, b = (run_model(p, runtime, inputs=inputs, reference_kernels=reference)
                for p in paths)
        assert all(np.array_equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True)), \
            (runtime, reference)


def test_resnet_style_head_goes_below_the_whole_tensor_bound(profile):
    data = model_path("residual_int8").read_bytes()
    out, r = optimize_model_bytes(data, profile, name="residual", patches="auto",
                                  patch_objective="head")
    p = r.patches
    assert p.grid is not None and "ADD" in parse_model(out).op_types
    assert r.measured_head_after_bytes < p.bound_whole_tensor_bytes
    assert r.outputs_identical == {"tflm": True, "litert": True}
    assert p.mac_overhead_pct <= 20


def test_the_arena_objective_shrinks_the_arena_tflm_measures(profile, tmp_path):
    # Each cloned operator keeps OpData in the tail: the default objective weighs it, so
    # the whole arena (head + tail, measured) shrinks, not just the head.
    # (A fixed grid keeps the search short: auto picks this grid too.)
    data = model_path("mobilenet_v1_96_int8").read_bytes()
    out, r = optimize_model_bytes(data, profile, name="mobilenet_v1", patches="2x2")
    p = r.patches
    assert p.objective == "arena" and p.grid == "2x2"
    assert p.patched_arena.start_bytes < p.plain_arena.start_bytes
    # Weighed against the plain offline plan (no patches), not only the input file.
    plain, _ = optimize_model_bytes(data, profile, name="mobilenet_v1", verify=False)
    paths = [tmp_path / "a.tflite", tmp_path / "b.tflite", tmp_path / "plain.tflite"]
    for path, blob in zip(paths, (data, out, plain), strict=True):
        path.write_bytes(blob)
    before, after, without = (run_model(x, "tflm", reference_kernels=True) for x in paths)
    assert after.arena_total_bytes < without.arena_total_bytes <= before.arena_total_bytes
    assert after.arena_head_bytes == r.head_after_bytes < p.bound_whole_tensor_bytes
    assert p.plain_measured.whole_bytes == without.arena_total_bytes
    assert p.patched_measured.whole_bytes == after.arena_total_bytes


def test_the_analytic_mac_count_equals_the_built_graphs():
    data = model_path("chain_int8").read_bytes()
    model = parse_model(data)
    for split in split_points(model)[0]:
        for rows, cols in ((1, 2), (2, 2), (3, 2)):
            plan = plan_for(model, split, rows, cols)
            whole, patched = stage_mac_ratio(model, plan)
            assert patched >= whole
            assert _macs(patch_model(data, model, plan)) - _macs(data) == patched - whole


@pytest.mark.parametrize("name, kwargs, reason", [
    ("chain_float32", {}, "computes in float32"),
    ("mlp_int8", {}, "(FULLY_CONNECTED) depends on more than a local window"),
    ("chain_int8", {"max_mac_overhead": 0.0}, "no split and grid stays within +0 % MACs"),
])
def test_refusals_say_why_and_keep_the_whole_tensor_result(profile, name, kwargs, reason):
    data = model_path(name).read_bytes()
    plain, plain_report = optimize_model_bytes(data, profile, name=name, verify=False)
    out, r = optimize_model_bytes(data, profile, name=name, patches="auto", verify=False,
                                  **kwargs)
    assert r.patches.grid is None and reason in r.patches.refused
    assert any(reason in n for n in r.notes)
    assert out == plain and r.head_after_bytes == plain_report.head_after_bytes


def test_pools_with_same_padding_at_the_border(tmp_path):
    # A max pool pads with -128 (PADV2) and stays exact; an average pool divides by the real
    # pixels only, so a patch that pads is refused.
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 12, 2), batch_size=1)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    x = keras.layers.MaxPooling2D(3, strides=1, padding="same")(x)
    x = keras.layers.Conv2D(4, 3, padding="same")(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    data = convert_keras(keras.Model(inp, x), True, samples=4)
    model = parse_model(data)
    ops = [op.op_name for op in model.main.operators]
    max_pool, avg_pool = ops.index("MAX_POOL_2D"), ops.index("AVERAGE_POOL_2D")
    patched = patch_model(data, model, plan_for(model, max_pool + 2, 2, 2))
    assert "PADV2" in parse_model(patched).op_types
    paths = [tmp_path / "a.tflite", tmp_path / "b.tflite"]
    for path, blob in zip(paths, (data, patched), strict=True):
        path.write_bytes(blob)
    inputs = random_inputs(input_specs(read_model(paths[0])), seed=5)
    for runtime in ("tflm", "litert"):
        a, b = (run_model(p, runtime, inputs=inputs, reference_kernels=True) for p in paths)
        assert all(np.array_equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))
    with pytest.raises(PatchRefused, match="AVERAGE_POOL_2D.*SAME padding at the image border"):
        patch_model(data, model, plan_for(model, avg_pool + 1, 2, 2))


def test_a_constant_over_the_whole_feature_map_ends_the_stage():
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 12, 2), batch_size=1)
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    x = x + keras.ops.convert_to_tensor(
        np.linspace(0, 1, 12 * 12 * 4, dtype="float32").reshape(1, 12, 12, 4))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3, padding="same")(x))
    model = parse_model(convert_keras(keras.Model(inp, x), True, samples=4))
    points, reason = split_points(model)
    assert points == [1]  # the conv before the ADD
    assert "(ADD) reads a constant [1, 12, 12, 4] over the whole feature map" in reason


def test_cli_fixed_grid_writes_a_patched_model(tmp_path, capsys):
    out = tmp_path / "patched.tflite"
    src = model_path("chain_int8")
    assert main(["optimize", str(src), "--profile", PROFILE, "--patches", "2x2",
                 "--patch-objective", "head", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    p = report["patches"]
    assert p["grid"] == "2x2" and report["changed"]
    assert report["measured_head_after_bytes"] < p["bound_whole_tensor_bytes"]
    assert report["outputs_identical"] == {"tflm": True, "litert": True}
    assert {c["grid"] for c in p["candidates"]} == {"2x2"}
    assert "CONCATENATION" in read_model(out).op_types
    # The text view shows the chosen plan and the pairs it was chosen from ...
    assert main(["optimize", str(src), "--profile", PROFILE, "--patches", "2x2",
                 "--patch-objective", "head", "-o", str(tmp_path / "text.tflite")]) == 0
    text = capsys.readouterr().out
    assert "patches: 2x2 grid" in text and "chosen" in text
    # ... and, minimising the whole arena, why this grid is not worth its tail.
    assert main(["optimize", str(src), "--profile", PROFILE, "--patches", "2x2",
                 "-o", str(tmp_path / "arena.tflite")]) == 0
    text = capsys.readouterr().out
    assert "patches not used" in text and "whole arena +" in text


@pytest.mark.parametrize("argv, message", [
    (["--patches", "3by3"], "'auto' or a grid 'RxC'"),
    (["--patches", "1x1"], "at least 2 patches"),
    (["--patches", "auto", "--max-mac-overhead", "-5"], "percentage >= 0"),
])
def test_cli_bad_patch_options_exit_2(tmp_path, capsys, argv, message):
    src = model_path("chain_int8")
    code = main(["optimize", str(src), "--profile", PROFILE, *argv,
                 "-o", str(tmp_path / "out.tflite")])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.tflite").exists()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from examples.digits import cached_cnn, load_digits

    folder = tmp_path_factory.mktemp("patch-digits")
    return {"model": cached_cnn(DIGITS_ARTIFACTS), **load_digits().save_npz(folder)}


def test_convert_optimize_memory_hook_runs_the_stage_in_patches(digits, tmp_path, capsys):
    out, rep = tmp_path / "m.tflite", tmp_path / "r.json"
    code = main(["convert", str(digits["model"]), "--profile", PROFILE, "--calibration",
                 str(digits["train"]), "--optimize-memory", "--patches", "auto",
                 "--patch-objective", "head", "-o", str(out), "--report", str(rep)])
    assert code == 0, capsys.readouterr().err
    opt = json.loads(rep.read_text())["memory_optimization"]
    p = opt["patches"]
    assert p["grid"] is not None and p["objective"] == "head"
    assert opt["measured_head_after_bytes"] < p["bound_whole_tensor_bytes"]
    assert opt["outputs_identical"] == {"tflm": True, "litert": True}
    model = read_model(out)
    assert NEW_OPS <= set(model.op_types)
    assert json.loads(model.metadata["devicefit.conversion"])["patches"] == "auto"


def test_convert_patches_needs_optimize_memory(digits, tmp_path, capsys):
    code = main(["convert", str(digits["model"]), "--profile", PROFILE, "--calibration",
                 str(digits["train"]), "--patches", "auto", "-o", str(tmp_path / "m.tflite")])
    assert code == 2 and "--optimize-memory" in capsys.readouterr().err


def test_fit_candidates_are_converted_through_the_patch_rewrite(digits, tmp_path):
    from devicefit.sdk.convert import loading
    from devicefit.sdk.convert.spec import ConversionSpec, MemoryOptimization
    from devicefit.sdk.fit.candidate import Context, convert_candidate
    from devicefit.sdk.fit.space import Candidate

    loaded = loading.load(str(digits["model"]))
    ctx = Context(loaded=loaded, profile=load_profile(PROFILE, []), train=None,
                  evaluation=None, calibration=np.load(digits["train"])["x"][:32], epochs=1,
                  workdir=tmp_path, float_accuracy=None,
                  spec=ConversionSpec(optimize_memory=MemoryOptimization(
                      patches="2x2", patch_objective="head")))
    tflite = convert_candidate(ctx, Candidate("int8").spec(ctx.spec)).tflite
    assert NEW_OPS <= set(parse_model(tflite).op_types)


def test_fit_patches_needs_a_tflm_profile(digits, tmp_path, capsys):
    code = main(["fit", str(digits["model"]), "--profile", "android-arm64-cpu", "--train",
                 str(digits["train"]), "--eval", str(digits["test"]), "--patches", "auto",
                 "-o", str(tmp_path / "m.tflite")])
    assert code == 2 and "TFLite-Micro" in capsys.readouterr().err


def test_a_dynamic_batch_in_the_signature_still_patches():
    # Models exported with a -1 batch (MLTK's, many Keras exports) run with batch 1.
    from devicefit.simulator.read.writer import pack, unpack

    mt = unpack(model_path("chain_int8").read_bytes())
    for t in mt.subgraphs[0].tensors:
        if t.shape is not None and len(t.shape) == 4 and mt.buffers[t.buffer].data is None:
            t.shapeSignature = [-1, *list(t.shape)[1:]]
    data = pack(mt)
    model = parse_model(data)
    assert any(t.is_dynamic for t in model.main.tensors)
    points, _ = split_points(model)
    assert points
    patched = parse_model(patch_model(data, model, plan_for(model, points[0], 2, 2)))
    assert NEW_OPS <= set(patched.op_types)
