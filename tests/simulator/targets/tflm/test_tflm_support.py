"""TFLM op support as the pinned wheel answers it (issue 16): the probed table, kept honest
(the re-probe also covers LiteRT's table, probed with the same models).

The table ``simulator/targets/tflm/tflm_support.json`` is written by ``python -m tests.op_probe
--write``. These tests fail when the installed wheel is not the one the table was probed
on, or when a re-probe of a sample disagrees; and they judge models of the kinds the table
exists for (hybrid, float16 weights, int16, Signal custom ops) statically AND in the real
interpreter, which must agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.run.runtimes import run_model
from devicefit.simulator.targets.litert.ops import support as litert_support
from devicefit.simulator.targets.tflm.ops import support
from tests import zoo
from tests.paths import ROOT
from tests.tflite_builder import custom_model

MCU = "stm32l4r5-cortex-m4"


def test_table_was_probed_on_the_installed_wheel():
    assert support()["wheel"] == f"tflite-micro {metadata.version('tflite-micro')}", (
        "the tflite-micro wheel changed: regenerate with python -m tests.op_probe --write")


def test_a_re_probe_agrees_with_the_table():
    probed = json.loads(subprocess.run(
        [sys.executable, "-m", "tests.op_probe", "--sample"], cwd=ROOT, capture_output=True,
        text=True, check=True, timeout=300).stdout)
    table = support()
    assert probed["builtin_ops"] == table["builtin_ops"]
    assert set(probed["custom_ops"]) == {"SignalWindow", "SignalFftAutoScale"}
    assert set(probed["custom_ops"]) <= set(table["custom_ops"])
    for op, answers in probed["combinations"].items():
        for sig, answer in answers.items():
            assert table["combinations"][op][sig] == answer, (op, sig)
    # The same sample through LiteRT (tests/simulator/targets/litert/test_litert_support.py checks its wheel).
    litert = litert_support()
    for kind, stored in (("litert", litert["builtin"]), ("xnnpack", litert["xnnpack"])):
        for op, answers in probed["litert"][kind].items():
            for sig, answer in answers.items():
                assert stored[op][sig] == answer, (kind, op, sig)
    assert probed["constant_inputs"]["FILL"] == table["constant_inputs"]["FILL"]
    zp = probed["conv_weights_zero_point"]
    assert zp["tflm"] == table["zero_points"]["CONV_2D"]["weights:int8"] == "ok"
    assert zp["litert"] == litert["zero_points"]["builtin"]["CONV_2D"]["weights:int8"] != "ok"
    assert "Non-constant >dims<" in probed["constant_inputs"]["FILL"]["0"]
    # The sample holds both answers, so the comparison above can fail either way.
    flat = [a for answers in probed["combinations"].values() for a in answers.values()]
    assert "ok" in flat and any("Hybrid models are not supported" in a for a in flat)


@pytest.mark.parametrize(("name", "refused", "why"), [
    ("chain_dynamic", {"CONV_2D", "FULLY_CONNECTED"}, "hybrid"),
    ("chain_float16", {"DEQUANTIZE"}, "float16/-/float32"),
    ("chain_int16x8", set(), None),
    ("chain_int8", set(), None),
])
def test_static_verdict_agrees_with_the_interpreter(name, refused, why):
    """Converter-made models of each kind: the table's answer is what TFLM does with them."""
    path = zoo.model_path(name)
    result = check_ops(read_model(path), load_profile(MCU))
    assert {u.op for u in result.unsupported_ops} == refused
    if why:
        assert all(why in u.reason for u in result.unsupported_ops)
        with pytest.raises(RuntimeFailure, match="during 'allocate'"):
            run_model(path, "tflm")
    else:
        assert run_model(path, "tflm").arena_total_bytes > 0


@pytest.mark.parametrize(("code", "supported", "why"), [
    ("SignalWindow", True, None),                 # TFLM's micro_speech audio front end
    ("SignalFilterBankLog", True, None),
    ("TFLite_Detection_PostProcess", True, None),
    ("Convolution2DTransposeBias", False, "registers no kernel"),
    ("ethos-u", False, "compiled for the Arm Ethos-U NPU"),
    ("edgetpu-custom-op", False, "compiled for the Coral Edge TPU"),
])
def test_custom_ops_follow_the_wheel(code, supported, why):
    result = check_ops(parse_model(custom_model(code), "custom.tflite"), load_profile(MCU))
    assert result.supported is supported
    if why:
        assert why in result.unsupported_ops[0].reason


def test_hybrid_lstm_runs_in_tflm_but_returns_nan(tmp_path):
    """TFLM's LSTM kernel does not refuse int8 weights under float activations: it reads
    them as floats. The table records that as unsupported, and the interpreter shows why."""
    import numpy as np

    from tests.op_probe import B, _lstm, single_op

    path = tmp_path / "hybrid_lstm.tflite"
    path.write_bytes(single_op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, *_lstm("float32", "int8")))
    [u] = check_ops(read_model(path), load_profile(MCU)).unsupported_ops
    assert "float32/int8/float32 (hybrid" in u.reason and "NaN" in u.reason
    out = run_model(path, "tflm", inputs=[np.full((1, 2, 3), 0.5, np.float32)]).outputs[0]
    # The first invoke's outputs (a run reports those): NaN from the second time step on,
    # once the state the first step computed from the misread weights feeds back.
    assert np.isnan(out[0, 1]).all() and not np.isnan(out[0, 0]).all()
    # The same template with float weights is fine in both.
    path.write_bytes(single_op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, *_lstm("float32", "float32")))
    assert check_ops(read_model(path), load_profile(MCU)).supported


def test_fill_with_run_time_dims_is_refused():
    """TFLM plans static shapes: FILL's dims, SPLIT's axis ... must be constants (the GRU
    loop of the corpus's precise_vad computes FILL's dims; TFLM refuses it at prepare)."""
    from tests.op_probe import SHAPE_INPUT_OPS, B, single_op

    build, _ = SHAPE_INPUT_OPS["FILL"]
    for constant in (True, False):
        data = single_op(B.FILL, *build(constant))
        result = check_ops(parse_model(data, "fill.tflite"), load_profile(MCU))
        assert result.supported is constant
    assert "Non-constant >dims<" in result.unsupported_ops[0].reason
