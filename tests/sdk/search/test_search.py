"""The architecture search's first part: families, candidates and the static screen.

One screen (one TensorFlow child, real int8 conversion of a handful of tiny candidates)
serves every test that needs converted files; they are read back with the simulator's
reader, judged again by ``devicefit simulate`` and compared with the screen's figures. The
profile is a tight custom one extending the STM32L4R5 profile.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.search import Rejection, candidate, grid, screen
from devicefit.sdk.search.families import FAMILIES, params_for
from devicefit.simulator.errors import UsageError
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.types import Status

BASE = "stm32l4r5-cortex-m4"
# TFLM's code for a dense model is ~55 KiB of flash (its core and the kernels, as linked for
# the Cortex-M4 with CMSIS-NN; a CNN's ~100 KiB): 160 KiB keeps the 96x96 MobileNetV2 step
# (151 KiB) and rejects the 130k-weight dense layer (161 KiB). An arena of 64 KiB
# holds 32x32 feature maps of the small image CNN, not 96x96x3 ones.
BUDGETS = {"flash": "160KiB", "arena": "64KiB", "latency": "400ms"}

SMALL_IMAGE = candidate("mbv2", input_shape=[32, 32, 1], width=0.5, depth=[1, 2], kernel=3,
                        expansion=2)
BIG_IMAGE = candidate("mbv2", input_shape=[96, 96, 3], width=1.0, depth=[1, 2])
# ~130k int8 weights in one dense layer: over the flash budget, tiny arena and latency.
WIDE_MLP = candidate("mlp", input_shape=[128, 3], width=4.0, depth=[1])
AUDIO = candidate("dscnn", input_shape=[49, 10, 1], width=0.25, depth=[1, 1], kernel=5)
SENSOR = candidate("cnn1d", input_shape=[64, 3], width=0.5, depth=[2, 1], kernel=5)
USER = candidate("tests.sdk.search.search_family:tiny", input_shape=[8, 8, 1], classes=4)
BROKEN = candidate("tests.sdk.search.search_family:not_a_model", input_shape=[4])
ALL = (SMALL_IMAGE, BIG_IMAGE, WIDE_MLP, AUDIO, SENSOR, USER, BROKEN)
WIDE_MLP_INT4 = replace(WIDE_MLP, weights="int4")
WIDE_MLP_AUTO = replace(WIDE_MLP, weights="auto")


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("search-profile") / "tight-search.yaml"
    path.write_text("\n".join(["name: tight-search", f"extends: {BASE}", "budgets:",
                               *(f"  {k}: {v}" for k, v in BUDGETS.items())]) + "\n")
    return path


@pytest.fixture(scope="module")
def screened(profile, tmp_path_factory):
    run = screen(ALL, str(profile), keep=tmp_path_factory.mktemp("screened"))
    return {r.candidate: r for r in run.results}, run


@pytest.mark.slow
def test_screen_rejects_by_the_right_budget(screened):
    results, run = screened
    # The int4 twin of the one candidate int8 rejects on flash alone follows it, and its
    # auto twin (fewer int4 layers do) follows that.
    assert [r.candidate for r in run.results] == [
        *ALL[:3], WIDE_MLP_INT4, WIDE_MLP_AUTO, *ALL[3:]]
    assert results[SMALL_IMAGE].fits and results[SMALL_IMAGE].rejected_by == ()
    assert results[USER].fits
    assert Rejection.ARENA in results[BIG_IMAGE].rejected_by
    assert Rejection.FLASH not in results[BIG_IMAGE].rejected_by
    assert results[WIDE_MLP].rejected_by == (Rejection.FLASH,)
    assert results[BROKEN].rejected_by == (Rejection.ERROR,)
    assert "not a keras.Model" in results[BROKEN].note
    for r in run.results:
        if r.rejected_by == (Rejection.ERROR,):
            continue
        over = {Rejection(k) for k, v in BUDGETS.items()
                if (r.flash_bytes if k == "flash" else r.arena_bytes if k == "arena"
                    else r.latency_ms) > _limit(v)}
        assert over == set(r.rejected_by), r.candidate.label()
        assert r.verdict == (Status.PASS if not over else Status.FAIL)
        low, high = r.latency_band_ms
        assert low <= r.latency_ms <= high
    assert run.convert_seconds > 0 and run.judge_seconds > 0


@pytest.mark.slow
def test_a_flash_budget_int8_misses_keeps_the_candidate_at_int4(screened, profile):
    results, _ = screened
    int8, int4 = results[WIDE_MLP], results[WIDE_MLP_INT4]
    assert int8.rejected_by == (Rejection.FLASH,) and int4.fits
    assert int4.flash_bytes < _limit(BUDGETS["flash"]) < int8.flash_bytes
    # Every layer with weights is listed; TFLM takes its FULLY_CONNECTED at 4 bits only
    # per tensor (its reference kernel refused per channel), and the row says which.
    assert int4.low_bit is not None and int4.low_bit.int4_layers >= 1
    four = [w for w in int4.low_bit.layers if w.bits == 4]
    assert {(w.op, w.granularity) for w in four} == {("FULLY_CONNECTED", "per tensor")}
    assert all("refused" in w.why for w in four)
    assert int4.note.startswith(f"int4 on {len(four)} of {len(int4.low_bit.layers)} layers")
    weights = {t.dtype for t in read_model(Path(int4.path)).main.tensors if t.has_data}
    assert "int4" in weights
    # Candidates that miss any other budget, or none, get no twin.
    assert {r.candidate.weights for r in results.values()} == {"int8", "int4", "auto"}
    assert sum(r.candidate.weights == "int4" for r in results.values()) == 1
    assert sum(r.candidate.weights == "auto" for r in results.values()) == 1


@pytest.mark.slow
def test_fewer_int4_layers_that_fit_get_an_auto_twin(screened):
    results, _ = screened
    int8, int4, auto = results[WIDE_MLP], results[WIDE_MLP_INT4], results[WIDE_MLP_AUTO]
    assert auto.fits and auto.flash_bytes < _limit(BUDGETS["flash"]) < int8.flash_bytes
    assert auto.low_bit is not None and int4.low_bit is not None
    assert 1 <= auto.low_bit.int4_layers < int4.low_bit.int4_layers
    # The largest layer went to int4 (bytes decide: random weights say nothing of accuracy),
    # the others stayed int8 and say why; the file holds exactly that many int4 tensors.
    biggest = max((w for w in int4.low_bit.layers if w.bits == 4), key=lambda w: w.weight_bytes)
    [four] = [w for w in auto.low_bit.layers if w.bits == 4]
    assert four.op_index == biggest.op_index and four.granularity == biggest.granularity
    assert all("not needed for the flash budget" in w.why for w in auto.low_bit.layers
               if w.bits == 8 and w.op_index != four.op_index and w.op == "FULLY_CONNECTED")
    dtypes = [t.dtype for t in read_model(Path(auto.path)).main.tensors if t.has_data]
    assert dtypes.count("int4") == 1
    assert auto.flash_bytes > int4.flash_bytes  # fewer int4 layers: a bigger file
    assert auto.note.startswith("auto: int4 on 1 of")


def _limit(text: str) -> float:
    units = {"KiB": 1024, "ms": 1, "B": 1}
    unit = next(u for u in units if text.endswith(u))
    return float(text[:-len(unit)]) * units[unit]


@pytest.mark.slow
def test_families_build_the_shapes_their_params_say(screened):
    results, _ = screened
    for r in (results[c] for c in (SMALL_IMAGE, AUDIO, SENSOR, WIDE_MLP)):
        p = r.candidate.params
        model = read_model(r.path)
        graph = model.subgraphs[0]
        tensors = graph.tensors
        assert tuple(tensors[graph.inputs[0]].shape) == (1, *p.input_shape)
        assert tuple(tensors[graph.outputs[0]].shape) == (1, p.classes)
        ops = [op.op_name for op in graph.operators]
        if r.candidate.family in ("mbv2", "dscnn"):
            assert ops.count("DEPTHWISE_CONV_2D") == sum(p.depth)
            depthwise = [op for op in graph.operators
                         if op.op_name == "DEPTHWISE_CONV_2D"]
            assert all(tuple(tensors[op.inputs[1]].shape[1:3]) == (p.kernel, p.kernel)
                       for op in depthwise)
        elif r.candidate.family == "cnn1d":  # the stem and one convolution per block
            assert ops.count("CONV_2D") == 1 + sum(p.depth)
        else:  # mlp: one hidden layer per block and the classifier
            assert ops.count("FULLY_CONNECTED") == sum(p.depth) + 1
        assert Path(r.path).name == f"{r.candidate.key}.tflite"


@pytest.mark.slow
def test_screen_arena_equals_simulate_on_the_written_file(screened, profile, capsys):
    _, run = screened
    for r in (r for r in run.results if r.path is not None):
        capsys.readouterr()
        code = main(["simulate", r.path, "--profile", str(profile), "--json"])
        report = json.loads(capsys.readouterr().out)
        arena = next(b["value"] for b in report["budgets"] if b["name"] == "arena")
        assert arena == r.arena_bytes
        assert report["memory"]["flash_bytes"] == r.flash_bytes
        assert code == (0 if r.fits else 1)


@pytest.mark.slow
def test_a_user_family_that_cannot_be_imported_is_one_error(profile):
    # The child stops at the import, before any conversion (the zygote is already up).
    with pytest.raises(UsageError, match="cannot import tests.sdk.no_such_family"):
        screen([candidate("tests.sdk.no_such_family:build", input_shape=[4])], str(profile))
    with pytest.raises(UsageError, match="has no function missing"):
        screen([candidate("tests.sdk.search.search_family:missing", input_shape=[4])], str(profile))


def test_candidates_have_stable_keys_and_labels():
    again = candidate("mbv2", input_shape=(32, 32, 1), width=0.5, depth=(1, 2), kernel=3,
                      expansion=2)
    assert again == SMALL_IMAGE and again.key == SMALL_IMAGE.key
    assert SMALL_IMAGE.key != BIG_IMAGE.key
    assert SMALL_IMAGE.label() == "mbv2 32x32x1 w0.5 d1-2 k3 e2"
    assert AUDIO.label() == "dscnn 49x10x1 w0.25 d1-1 k5"  # DS-CNN has no expansion
    assert WIDE_MLP.label() == "mlp 128x3 w4 d1"
    # An int8 candidate keeps the key it had before weights were chosen; int4 is another.
    assert WIDE_MLP.to_dict() == {"family": "mlp", "params": WIDE_MLP.params.to_dict()}
    assert WIDE_MLP_INT4.label() == "mlp 128x3 w4 d1 int4 weights"
    assert WIDE_MLP_INT4.key != WIDE_MLP.key
    assert type(WIDE_MLP).from_dict(WIDE_MLP_INT4.to_dict()) == WIDE_MLP_INT4
    cells = grid("dscnn", {"width": [0.25, 0.5], "kernel": [3, 5]}, depth=[1])
    assert [(c.params.width, c.params.kernel) for c in cells] == [
        (0.25, 3), (0.25, 5), (0.5, 3), (0.5, 5)]
    assert len({c.key for c in cells}) == 4


@pytest.mark.parametrize(("family", "params", "message"), [
    ("resnet", {}, "unknown family 'resnet'"),
    ("mbv2", {"widht": 2}, "unknown parameter widht"),
    ("dscnn", {"expansion": 6}, "family dscnn has no parameter expansion"),
    ("mbv2", {"kernel": 4}, "kernel 4 (an odd size"),
    ("mbv2", {"width": 0}, "width 0"),
    ("mbv2", {"input_shape": [32, 32]}, "is not an image (H, W, C)"),
    ("mbv2", {"input_shape": [8, 8, 1], "depth": [1, 1, 1, 1]}, "too small for 4 stages"),
    ("cnn1d", {"depth": []}, "depth []"),
    ("cnn1d", {"depth": 2}, "depth 2 (a list"),
    ("mlp", {"input_shape": 128}, "input_shape 128 is not"),
    ("mod:func", {}, "give input_shape"),
    ("mod:func", {"input_shape": 4}, "input_shape 4 (a list of sizes)"),
    ("mod:", {}, "unknown family 'mod:'"),
])
def test_bad_params_and_unknown_families_are_one_clear_error(family, params, message):
    with pytest.raises(UsageError) as err:
        params_for(family, params)
    assert message in str(err.value)


def test_every_family_default_is_valid():
    for fam in FAMILIES.values():
        fam.check(fam.defaults)


@pytest.mark.slow
def test_search_screen_command_prints_the_table(profile, capsys):
    code = main(["--no-color", "search", "--family", "mlp", "--profile", str(profile),
                 "--screen", "--param", "input_shape=128x3", "--param", "width=0.5,4",
                 "--param", "depth=1"])
    out = capsys.readouterr().out
    # w0.5 fits; w4 misses flash at int8 and fits with int4 weights, and with int4 on its
    # largest layer only (auto)
    assert code == 0
    assert "3 of 4 fit" in out
    rows = [line for line in out.splitlines() if "mlp 128x3" in line]
    assert len(rows) == 4 and "pass" in rows[0] and "flash" in rows[1] and "fail" in rows[1]
    assert "w4 d1 int4 weights" in rows[2] and "pass" in rows[2]
    assert "w4 d1 auto weights" in rows[3] and "pass" in rows[3]


@pytest.mark.parametrize(("argv", "says"), [
    (["--family", "resnet", "--screen"], "unknown family 'resnet'"),
    (["--family", "mbv2"], "needs --train, --eval, -o to train the candidates"),
    (["--family", "mbv2", "--screen", "--param", "width"], "--param width: give NAME=VALUE"),
    (["--family", "mbv2", "--screen", "--param", "width=big"], "--param value 'big'"),
    (["--family", "mbv2", "--screen", "--param", "kernel=4"], "kernel 4 (an odd size"),
])
def test_search_command_bad_input_is_one_line_exit_2(argv, says, capsys):
    code = main(["search", "--profile", BASE, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and says in err


# mbv2 on 32x32x3 needs 12,896 B of arena with TFLM's own plan and the offline plan, 11,872 B
# when its first stage runs patch by patch: a 12 KiB arena takes it only with patches.
PATCHED = candidate("mbv2", input_shape=[32, 32, 3], width=0.35, depth=[1, 1], expansion=2)


@pytest.mark.slow
def test_patches_let_the_screen_pass_a_candidate_its_arena_rejects(tmp_path, capsys):
    profile = tmp_path / "patch-search.yaml"
    profile.write_text(f"name: patch-search\nextends: {BASE}\nbudgets:\n  flash: 200KiB\n"
                       "  arena: 12KiB\n  latency: 400ms\n")
    plain = screen([PATCHED], str(profile)).results[0]
    assert plain.rejected_by == (Rejection.ARENA,) and plain.arena_bytes > 12 * 1024
    assert main(["search", "--family", "mbv2", "--profile", str(profile), "--screen",
                 "--param", "input_shape=32x32x3", "--param", "width=0.35", "--param",
                 "depth=1-1", "--param", "expansion=2", "--patches", "auto", "--json"]) == 0
    (patched,) = json.loads(capsys.readouterr().out)
    assert patched["key"] == PATCHED.key and patched["verdict"] == "pass"
    assert patched["arena_bytes"] <= 12 * 1024 < plain.arena_bytes
    # The halo is computed again: more work, judged on the rewritten file.
    assert patched["latency_ms"] > plain.latency_ms


def test_the_report_of_an_int4_winner_lists_its_layers_and_reads_back():
    from devicefit.sdk.convert.lowbit import LayerWeights, LowBitReport
    from devicefit.sdk.search.architectures import Searched
    from devicefit.sdk.search.objective import Objective
    from devicefit.sdk.search.report import render_search_html, to_dict
    from devicefit.sdk.search.screen import ScreenRun
    from devicefit.sdk.search.trials import ArchPayload, ArchTrial, read_trial
    from devicefit.sdk.study import SearchSettings, TrialStage
    from devicefit.simulator.profiles import load_profile

    low_bit = LowBitReport((
        LayerWeights(0, "FULLY_CONNECTED", "mlp_1/dense_1/MatMul", 4, "per tensor", 16_384,
                     "int4 per channel refused: the reference kernel"),
        LayerWeights(1, "FULLY_CONNECTED", "mlp_1/classes_1/MatMul", 4, "per tensor", 320,
                     "int4 per channel refused: the reference kernel")), "AI Edge Quantizer", 2)
    trial = ArchTrial(0, WIDE_MLP_INT4, TrialStage.TRAINED, Status.PASS, flash_bytes=150_000,
                      arena_bytes=2_000, latency_ms=3.0, accuracy=0.9,
                      payload=ArchPayload(0.91, 1_000, None, low_bit))
    found = Searched(load_profile(BASE), Objective.ACCURACY, SearchSettings(), 3,
                     ScreenRun((), 0.0, 0.0), [trial], chosen=0)
    page = render_search_html(found)
    assert "Weights of the chosen candidate (AI Edge Quantizer)" in page
    assert "mlp_1/dense_1/MatMul" in page and "int4 per tensor" in page
    saved = to_dict(found)["trials"][0]
    assert saved["label"] == "mlp 128x3 w4 d1 int4 weights"
    again = read_trial(saved)
    assert again.candidate == WIDE_MLP_INT4 and again.payload.low_bit == low_bit
