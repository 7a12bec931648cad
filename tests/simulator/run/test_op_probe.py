"""Op support asked of the runtime (simulator/run/probe.py) and ``--run`` that always runs.

Each class of model the op tables got wrong on public models is built here in code, one
operator each (tests/op_probe.py's builder), and answered by the real TFLM and LiteRT wheels
in child processes: an int8 → int16 softmax with output zero point −32768 and an int16 →
int32 QUANTIZE (TFLM's ``keyword_scrambled``), an SVDF with int16 state, a uint8 CAST as the
first op (MoveNet), a softmax whose input scale TFLM aborts on (an untrained MobileNetV2).
"""

from __future__ import annotations

import json

import pytest

from devicefit.sdk.cli import main
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.target import read_report
from devicefit.simulator.types import MeasureOptions
from tests.op_probe import OPT, B, T, _opts, const, fb, single_op

TFLM, LITERT = "stm32h743-cortex-m7", "android-arm64-cpu"


def _softmax(input_scale: float, out: T) -> bytes:
    return single_op(B.SOFTMAX, [T((1, 4), "int8", scale=input_scale, zero_point=2)], [out],
                     OPT.SoftmaxOptions, _opts(fb.SoftmaxOptionsT, beta=1.0))


def _svdf() -> bytes:
    """keyword_scrambled's SVDF: int8 in and out, int16 time weights and int16 state."""
    return single_op(
        B.SVDF, [T((1, 8), "int8", scale=0.06, zero_point=-128), const((4, 8), "int8", 0.009),
                 const((4, 4), "int16", 0.0037), const((4,), "int32", 1.6e-5),
                 T((1, 16), "int16", scale=0.0044, variable=True)],
        [T((1, 4), "int8", scale=0.24, zero_point=-128)], OPT.SVDFOptions,
        _opts(fb.SVDFOptionsT, rank=1, fusedActivationFunction=fb.ActivationFunctionType.RELU))


MODELS = {
    "softmax_int16_out": _softmax(0.07, T((1, 4), "int16", scale=1 / 65536,
                                          zero_point=-32768)),
    "svdf_int16_state": _svdf(),
    "quantize_int16_int32": single_op(B.QUANTIZE, [T((4,), "int16", scale=1.5e-5)],
                                      [T((4,), "int32", scale=3e-5, quantized=True)]),
    "cast_uint8": single_op(B.CAST, [T((1, 4), "uint8")], [T((1, 4), "int8")]),
    "softmax_tiny_scale": _softmax(7.8e-9, T((1, 4), "int8", scale=1 / 256, zero_point=-128)),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe-models")
    for name, data in MODELS.items():
        (folder / f"{name}.tflite").write_bytes(data)
    return {name: folder / f"{name}.tflite" for name in MODELS}


@pytest.mark.parametrize("name", ["softmax_int16_out", "svdf_int16_state",
                                  "quantize_int16_int32"])
@pytest.mark.parametrize("profile", [TFLM, LITERT])
def test_what_both_runtimes_run_the_table_and_the_probe_pass(models, name, profile):
    model, loaded = read_model(models[name]), load_profile(profile)
    assert check_ops(model, loaded).supported, "the table alone"
    probed = check_ops(model, loaded, probe=True)
    assert probed.supported and probed.disagreements == ()
    assert probed.probe.signatures == 1 and not probed.probe.not_probed


def test_uint8_cast_tflm_refuses_at_invoke_the_table_and_the_probe_agree(models):
    path = str(models["cast_uint8"])
    table = check_ops(read_model(path), load_profile(TFLM))
    probed = check_ops(read_model(path), load_profile(TFLM), probe=True)
    for found in (table, probed):
        [u] = found.unsupported_ops
        assert u.op == "CAST" and "Input type UINT8 (3) not supported" in u.reason
    assert probed.disagreements == ()
    assert check_ops(read_model(path), load_profile(LITERT), probe=True).supported


def test_run_json_on_a_model_that_fails_at_invoke_prints_the_report_and_exits_1(models,
                                                                               capsys):
    code = main(["simulate", str(models["cast_uint8"]), "--profile", TFLM, "--run", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and captured.err == ""
    report = json.loads(captured.out)
    failure = report["measured"]["failure"]
    assert (failure["stage"], failure["op"], failure["op_index"]) == ("invoke", "CAST", 0)
    assert failure["op_found_by"] == "the runtime's message" and not failure["crashed"]
    assert report["verdict"] == "fail" and report["compatibility"]["disagreements"] == []
    # ``check merge`` and baselines read reports back: the new sections survive the trip.
    assert read_report(report).to_dict() == report


def test_tiny_softmax_scale_tflm_aborts_on_is_a_disagreement_in_text_and_json(models,
                                                                              capsys):
    path = str(models["softmax_tiny_scale"])
    model = read_model(path)
    assert check_ops(model, load_profile(TFLM)).supported, "the table misses it"
    assert check_ops(model, load_profile(LITERT), probe=True).supported, "LiteRT runs it"
    assert main(["simulate", path, "--profile", TFLM]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE" in out and "SIGABRT" in out and "7.8e-09" in out
    assert main(["simulate", path, "--profile", TFLM, "--json"]) == 1
    compat = json.loads(capsys.readouterr().out)["compatibility"]
    [u] = compat["unsupported_ops"]
    assert u["op"] == "SOFTMAX" and "at allocate: crashed" in u["reason"]
    [d] = compat["disagreements"]
    assert (d["op"], d["table"], d["source"]) == ("SOFTMAX", "supported", "probe")
    # --run without the probe: the run disagrees with the table; the crash names no
    # operator, so it is found by running each one alone.
    assert main(["simulate", path, "--profile", TFLM, "--run", "--json", "--no-probe"]) == 1
    report = json.loads(capsys.readouterr().out)
    failure = report["measured"]["failure"]
    assert failure["crashed"] and failure["stage"] == "allocate"
    assert failure["op"] == "SOFTMAX" and "running each operator alone" in failure["op_found_by"]
    [d] = report["compatibility"]["disagreements"]
    assert (d["op"], d["table"], d["source"]) == ("SOFTMAX", "supported", "run")


def test_the_table_refusing_what_the_run_runs_is_a_disagreement_the_run_wins(models,
                                                                            monkeypatch):
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.targets.tflm import ops as tflm

    # A table entry made wrong on purpose (as the zero-point rule was): the run overrules it.
    wrong = dict(tflm.support())
    wrong["combinations"] = {**wrong["combinations"],
                             "SVDF": {"int8/int8/int8": "prepare: made up"}}
    monkeypatch.setattr(tflm, "support", lambda: wrong)
    report = simulate(models["svdf_int16_state"], TFLM, run=MeasureOptions(runs=1),
                      probe=False)
    assert report.ok and report.compatibility.supported
    [d] = report.compatibility.disagreements
    assert d.source == "run" and "made up" in d.table and d.runtime.startswith("ran")


def test_answers_are_cached_a_second_check_starts_no_child(models, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path))
    model, profile = read_model(models["svdf_int16_state"]), load_profile(TFLM)
    first = check_ops(model, profile, probe=True).probe
    assert (first.probed, first.cached, first.children) == (1, 0, 1)
    assert len(list((tmp_path / "op-probe").glob("*.json"))) == 1
    again = check_ops(model, profile, probe=True).probe
    assert (again.probed, again.cached, again.children) == (0, 1, 0)
    # Another runtime is another key: LiteRT is asked itself.
    litert = check_ops(model, load_profile(LITERT), probe=True).probe
    assert (litert.probed, litert.children) == (1, 1)


def test_disagreement_reaches_junit_markdown_and_html(models):
    from devicefit.simulator.report.views import render
    from devicefit.simulator.simulate import simulate

    report = simulate(models["softmax_tiny_scale"], TFLM)
    for view in ("junit", "markdown", "html"):
        text = render(view, report).replace("&#x27;", "'")
        assert "op support: op 0 SOFTMAX: the table says 'supported'" in text, view
    assert "<system-out>op support: op 0 SOFTMAX" in render("junit", report)


def _fp16_weights_conv() -> bytes:
    """MediaPipe's layout: float16 weights expanded by DEQUANTIZE, then a float conv."""
    import numpy as np

    from tests.tflite_builder import _buffer, _model, _opcode, _operator, _tensor

    f32, f16 = fb.TensorType.FLOAT32, fb.TensorType.FLOAT16
    return _model(
        [_opcode(B.DEQUANTIZE), _opcode(B.CONV_2D)],
        [_tensor("x", (1, 4, 4, 2), f32, 0), _tensor("w16", (2, 3, 3, 2), f16, 1),
         _tensor("w", (2, 3, 3, 2), f32, 0), _tensor("b", (2,), f32, 2),
         _tensor("y", (1, 4, 4, 2), f32, 0)],
        [_buffer(np.full((2, 3, 3, 2), 0.1, np.float16)), _buffer(np.zeros(2, np.float32))],
        [_operator(0, [1], [2]),
         _operator(1, [0, 2, 3], [4], OPT.Conv2DOptions,
                   _opts(fb.Conv2DOptionsT, padding=fb.Padding.SAME, strideW=1, strideH=1,
                         dilationWFactor=1, dilationHFactor=1))],
        [0], [4])


def test_weights_computed_from_constants_are_probed_with_their_consumer(tmp_path):
    path = tmp_path / "fp16_conv.tflite"
    path.write_bytes(_fp16_weights_conv())
    model = read_model(path)
    # LiteRT folds the DEQUANTIZE into the conv's weights: alone it fails under XNNPACK,
    # cut out with its consumer it runs, and nobody disagrees.
    litert = check_ops(model, load_profile(LITERT), probe=True)
    assert litert.supported and litert.disagreements == ()
    assert (litert.probe.signatures, litert.probe.not_probed) == (1, ())
    # TFLM refuses the float16 DEQUANTIZE (the table knows); the conv is not blamed for it.
    tflm = check_ops(model, load_profile(TFLM), probe=True)
    assert [u.op for u in tflm.unsupported_ops] == ["DEQUANTIZE"] and tflm.disagreements == ()


def test_a_refusal_on_the_probes_made_up_shape_values_does_not_count(tmp_path):
    """A RESHAPE whose target shape is computed at run time (SHAPE → PACK → RESHAPE, as
    converters write dynamic flattening): alone, the probe must invent the shape's values,
    and LiteRT refuses the invented ones at invoke. That says nothing about the model."""
    path = tmp_path / "reshape.tflite"
    path.write_bytes(single_op(B.RESHAPE, [T((1, 4), "float32"), T((2,), "int32")],
                               [T((2, 2), "float32")]))
    found = check_ops(read_model(path), load_profile(LITERT), probe=True)
    assert found.supported and found.disagreements == ()
    [why] = found.probe.not_probed
    assert "made up" in why and "not counted" in why


def test_small_integer_parameters_are_part_of_the_signature(tmp_path, monkeypatch):
    """SLICE with begin 2 runs; the same SLICE with begin 200,000,000 crashes TFLM. Only the
    begin's value differs, so the cached answer of one must never stand for the other, in
    whichever order they are asked."""
    from tests.tflite_builder import slice_model

    monkeypatch.setenv("DEVICEFIT_CACHE", str(tmp_path))
    profile = load_profile(TFLM)
    paths = {}
    for name, begin in {"ok": 2, "crash": 200_000_000}.items():
        paths[name] = tmp_path / f"slice_{name}.tflite"
        paths[name].write_bytes(slice_model(begin))
    ok = check_ops(read_model(paths["ok"]), profile, probe=True)
    crash = check_ops(read_model(paths["crash"]), profile, probe=True)
    assert ok.supported and (ok.probe.probed, ok.probe.cached) == (1, 0)
    assert not crash.supported and (crash.probe.probed, crash.probe.cached) == (1, 0)
    assert "crashed" in crash.summary()
