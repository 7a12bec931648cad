"""Shapes as the runtime resolves them: dynamic dimensions (-1 in ``shape_signature``).

The models are built in code (tests/tflite_builder.py: dynamic batch and time dimensions,
a batch read at run time through SHAPE arithmetic) and by the real converter (the zoo's
dynamic-batch MLP); LiteRT (the pinned ai-edge-litert wheel, in a child process) is the
runtime they are checked against. MACs are counted by hand from the layer sizes.
"""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.check.project import ProjectError, load_project
from devicefit.sdk.cli import main
from devicefit.simulator.errors import UsageError
from devicefit.simulator.plan.shapes import (
    confirm_with_runtime,
    infer,
    parse_input_shape,
    resolve_shapes,
)
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from devicefit.simulator.types import MeasureOptions
from tests.tflite_builder import (
    conv_time_model,
    sequence_rnn_model,
    shape_reshape_model,
    shape_values_model,
)

PHONE = "android-arm64-cpu"


@pytest.fixture
def conv_time(tmp_path):
    path = tmp_path / "conv_time.tflite"
    path.write_bytes(conv_time_model())
    return path


@pytest.fixture
def shape_reshape(tmp_path):
    path = tmp_path / "shape_reshape.tflite"
    path.write_bytes(shape_reshape_model())
    return path


def conv_time_macs(batch: int, time: int) -> int:
    """By hand: a 1×3×8 window per output of the VALID convolution (time − 2 steps, 4
    filters), the MEAN reads each of its outputs once, the FC layer 4 inputs × 3 units."""
    conv_out = batch * (time - 2) * 4
    return conv_out * 3 * 8 + conv_out + batch * 3 * 4


def shapes_of(model) -> dict[str, tuple[int, ...]]:
    return {t.name: t.shape for t in model.main.tensors}


@pytest.mark.parametrize(("text", "expected"), [
    ("1x1280", (None, (1, 1280))), ("1,1280", (None, (1, 1280))),
    ("serving_default_input:0:1x1280", ("serving_default_input:0", (1, 1280))),
    ("x: 2 x 50 x 8", ("x", (2, 50, 8)))])
def test_input_shape_text(text, expected):
    assert parse_input_shape(text) == expected


@pytest.mark.parametrize("text", ["x:", "1x0", "1x-3", "x:1xa", ""])
def test_bad_input_shape_text_is_one_usage_error(text):
    with pytest.raises(UsageError, match="--input-shape"):
        parse_input_shape(text)


def test_batch_and_time_resolved_from_the_given_shape_match_litert(conv_time):
    model = read_model(conv_time)
    ours, report = resolve_shapes(model, [(None, (2, 50, 8))], confirm=False)
    theirs, confirmed = resolve_shapes(model, [(None, (2, 50, 8))])
    assert shapes_of(ours) == shapes_of(theirs)
    assert shapes_of(ours)["conv"] == (2, 1, 48, 4) and shapes_of(ours)["y"] == (2, 3)
    assert report.resolved_by == "devicefit" and confirmed.resolved_by == "LiteRT"
    assert confirmed.resolved and not confirmed.disagreements and confirmed.changed == 5


def test_a_dilated_convolution_resolves_as_litert_resolves_it(tmp_path):
    # The reader's key is the schema's attribute in snake case: dilation_wfactor. Rules
    # that looked up dilation_w_factor took every dilated convolution as undilated.
    path = tmp_path / "dilated.tflite"
    path.write_bytes(conv_time_model(dilation=2))
    model = read_model(path)
    ours, _ = resolve_shapes(model, [(None, (2, 50, 8))], confirm=False)
    theirs, confirmed = resolve_shapes(model, [(None, (2, 50, 8))])
    assert shapes_of(ours)["conv"] == shapes_of(theirs)["conv"] == (2, 1, 46, 4)
    assert confirmed.resolved and not confirmed.disagreements


def test_figures_use_the_resolved_shapes(conv_time):
    stored = simulate(conv_time, PHONE)
    for batch, time in ((1, 50), (4, 200)):
        r = simulate(conv_time, PHONE, input_shapes=[("x", (batch, time, 8))])
        assert r.compute.macs == conv_time_macs(batch, time)
        assert r.latency.band_ms is not None and "validation" in r.latency.band_basis
        assert r.memory.arena_head_bytes > stored.memory.arena_head_bytes
        conv = next(b for b in r.memory.plan if b.name == "conv")
        assert conv.shape == [batch, 1, time - 2, 4]
        assert r.model.shapes.inputs == (("x", (batch, time, 8)),)


def test_unresolvable_shapes_carry_no_validated_band(conv_time):
    """The stored time length (1) is narrower than the 3-wide kernel: LiteRT refuses to
    prepare it too, so no shape after the convolution is known."""
    r = simulate(conv_time, PHONE)
    s = r.model.shapes
    assert not s.resolved and {u.split()[0] for u in s.unresolved} == {"'conv'", "'mean'", "'y'"}
    assert "CONV_2D" in s.runtime_problem
    assert r.latency.band_ms is None and r.latency.band is None
    assert r.latency.band_basis.startswith("shapes unresolved")
    assert any("shapes unresolved for 3 tensor(s)" in n for n in r.notes)


def test_a_custom_op_without_shape_rule_leaves_the_rest_unresolved(tmp_path):
    path = tmp_path / "custom.tflite"
    path.write_bytes(shape_reshape_model(custom="devicefit_unknown"))
    r = simulate(path, PHONE, input_shapes=[(None, (3, 4, 6))])
    assert not r.model.shapes.resolved and r.latency.band_ms is None
    assert "devicefit_unknown" in r.model.shapes.runtime_problem


def test_batch_read_at_run_time_resolves_through_shape_arithmetic(shape_reshape):
    """SHAPE → STRIDED_SLICE → PACK → RESHAPE: the new shape is a value computed at run time;
    LiteRT sizes it only during invoke, devicefit from the propagated values."""
    model = read_model(shape_reshape)
    ours, _ = resolve_shapes(model, [(None, (3, 4, 6))], confirm=False)
    theirs, report = resolve_shapes(model, [(None, (3, 4, 6))])
    assert shapes_of(ours)["flat"] == shapes_of(theirs)["flat"] == (3, 24)
    assert report.resolved_by == "LiteRT" and not report.disagreements
    assert simulate(shape_reshape, PHONE, input_shapes=[(None, (3, 4, 6))]).compute.macs \
        == 3 * 5 * 24


def test_litert_wins_where_it_disagrees_and_the_difference_is_named(conv_time):
    """The merge itself: a deliberately wrong static answer is replaced by LiteRT's."""
    model = read_model(conv_time)
    inputs = {0: (2, 50, 8)}
    shapes, _ = infer(model, inputs)
    _, report = resolve_shapes(model, [(None, (2, 50, 8))], confirm=False)
    wrong = {**shapes, 5: (2, 1, 47, 4)}
    merged, confirmed = confirm_with_runtime(model, inputs, wrong, report)
    assert merged[5] == (2, 1, 48, 4)
    assert confirmed.disagreements == ("'conv' devicefit 2x1x47x4, LiteRT 2x1x48x4",)


def test_converter_dynamic_batch_scales_with_the_given_batch(model_zoo):
    """The real converter's dynamic-batch MLP: every layer's MACs scale with the batch."""
    path = model_zoo("dynamic_float32")
    model = read_model(path)
    x = model.main.tensors[model.main.inputs[0]]
    one = simulate(path, PHONE)
    eight = simulate(path, PHONE, input_shapes=[(x.name, (8, *x.shape[1:]))])
    assert one.compute.macs > 0 and eight.compute.macs == 8 * one.compute.macs
    assert eight.model.shapes.resolved_by == "LiteRT" and not eight.model.shapes.disagreements


def test_given_shapes_are_checked_against_the_signature(conv_time):
    with pytest.raises(UsageError, match="does not fit"):
        simulate(conv_time, PHONE, input_shapes=[(None, (2, 50, 9))])
    with pytest.raises(UsageError, match="no input 'y'"):
        simulate(conv_time, PHONE, input_shapes=[("y", (2, 3))])


def test_cli_input_shape_json_and_bad_input(conv_time, capsys):
    code = main(["simulate", str(conv_time), "--profile", PHONE, "--json",
                 "--input-shape", "x:2x50x8"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["compute"]["macs"] == conv_time_macs(2, 50)
    assert report["model"]["shapes"]["inputs"] == [["x", [2, 50, 8]]]
    assert read_report(report).model.shapes.inputs == (("x", (2, 50, 8)),)
    assert main(["simulate", str(conv_time), "--profile", PHONE,
                 "--input-shape", "x:2x50x9"]) == 2
    assert "does not fit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(conv_time), "--profile", PHONE, "--input-shape", "2xq"])
    assert exc.value.code == 2


def test_check_takes_input_shapes_per_model_and_per_profile_entry(conv_time, capsys):
    project = conv_time.parent / "devicefit.yaml"
    project.write_text(f"models:\n  - path: {conv_time.name}\n    input_shapes: x:1x50x8\n"
                       f"    profiles:\n      - {PHONE}\n"
                       f"      - {{name: stm32h743-cortex-m7, input_shapes: [2x100x8]}}\n")
    targets = load_project(project).targets
    assert [t.input_shapes for t in targets] == [(("x", (1, 50, 8)),), ((None, (2, 100, 8)),)]
    assert main(["check", str(project), "--json"]) in (0, 1)
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["report"]["compute"]["macs"] for r in results] == [
        conv_time_macs(1, 50), conv_time_macs(2, 100)]
    project.write_text(f"models:\n  - path: {conv_time.name}\n    input_shapes: [1x0]\n"
                       f"    profiles: [{PHONE}]\n")
    with pytest.raises(ProjectError, match=r"input_shapes\[0\].*at least 1"):
        load_project(project)


def test_run_uses_the_given_shape_where_the_runtime_resizes(conv_time):
    r = simulate(conv_time, PHONE, run=MeasureOptions(runs=1),
                 input_shapes=[(None, (2, 50, 8))])
    assert r.measured.skipped is None and "at x 2x50x8" in r.measured.inputs
    assert r.latency.host_ms is not None and r.compute.macs == conv_time_macs(2, 50)


def test_tflm_cannot_resize_an_input_and_the_report_says_so(conv_time):
    mcu = "stm32h743-cortex-m7"
    r = simulate(conv_time, mcu, input_shapes=[(None, (2, 50, 8))])
    assert r.compute.macs == conv_time_macs(2, 50)
    assert any("cannot resize them" in n for n in r.notes)
    with pytest.raises(UsageError, match="cannot resize an input"):
        simulate(conv_time, mcu, run=MeasureOptions(), input_shapes=[(None, (2, 50, 8))])


def test_a_recurrent_layer_over_a_dynamic_time_axis(tmp_path):
    """UNIDIRECTIONAL_SEQUENCE_RNN over 30 steps: each step multiplies its input (4 → 6)
    and its state (6 → 6) matrices; the FC layer after it runs on every step's output."""
    path = tmp_path / "rnn.tflite"
    path.write_bytes(sequence_rnn_model(units=6, features=4))
    model = read_model(path)
    ours, _ = resolve_shapes(model, [(None, (1, 30, 4))], confirm=False)
    theirs, report = resolve_shapes(model, [(None, (1, 30, 4))])
    assert shapes_of(ours) == shapes_of(theirs) and shapes_of(ours)["y"] == (1, 30, 2)
    assert report.resolved_by == "LiteRT" and not report.disagreements
    r = simulate(path, PHONE, input_shapes=[(None, (1, 30, 4))])
    assert r.compute.macs == 30 * (4 * 6 + 6 * 6) + 30 * 2 * 6


@pytest.mark.parametrize("time", [64, 4])
def test_sizes_computed_from_values_as_a_spectrogram_front_end_does(tmp_path, time):
    """BirdNET's front end sizes its frames at run time (SHAPE → SPLIT_V → REDUCE_PROD →
    FLOOR_DIV → MAXIMUM → RANGE) and takes an RFFT2D: devicefit alone gets LiteRT's sizes."""
    path = tmp_path / "values.tflite"
    path.write_bytes(shape_values_model(fft=16))
    model = read_model(path)
    ours, report = resolve_shapes(model, [(None, (1, time))], confirm=False)
    theirs, confirmed = resolve_shapes(model, [(None, (1, time))])
    assert report.resolved and not confirmed.disagreements
    assert shapes_of(ours) == shapes_of(theirs)
    assert shapes_of(ours)["frames"] == (max(time // 4, 2),)
    assert shapes_of(ours)["spectrum"] == (1, 1, 9)
