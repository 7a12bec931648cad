"""``simulate --run`` / ``check --run`` on models that used to end the measurement (issue 16):
int16 models (they had no device latency estimate on the MCU profile: a TypeError traceback
with exit 1 before; the "no estimate" path itself is tested in estimate/test_latency.py) and a cross-check runtime refusing a file the target's runtime runs (exit 2
before). Both are findings in the report; the exit code follows the verdict."""

from __future__ import annotations

import json
import shutil

from devicefit.sdk.cli import main
from tests.simulator.targets.litert.test_litert_support import per_channel_model
from tests.zoo import model_path

MCU = "stm32l4r5-cortex-m4"


def test_int16_model_runs_without_a_traceback(capsys):
    path = str(model_path("chain_int16x8"))
    code = main(["simulate", path, "--profile", MCU, "--run", "--runs", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    report = json.loads(out)
    assert report["latency"]["host_ms"]["runs"] == 2
    assert report["measured"]["outputs_agree"] is True  # int16x8: bit-exact too
    assert report["latency"]["estimated_device_ms"] > 0  # int16 kernels are in the tables now
    assert main(["simulate", path, "--profile", MCU, "--run", "--runs", "1"]) == 0
    assert "device       " in capsys.readouterr().out


def test_check_run_on_an_int16_model(tmp_path, capsys):
    shutil.copy(model_path("chain_int16x8"), tmp_path / "kws16.tflite")
    project = tmp_path / "devicefit.yaml"
    project.write_text(f"models:\n  - path: kws16.tflite\n    profiles: [{MCU}]\n")
    code = main(["check", str(project), "--run", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "Traceback" not in err


def int8_elu() -> bytes:
    """One int8 ELU: TFLM runs it and so do LiteRT's builtin kernels, but LiteRT's
    reference resolver (the cross-check's bit-exact partner) has no ELU kernel."""
    from ai_edge_litert import schema_py_generated as fb

    from tests.op_probe import _unary, single_op

    return single_op(fb.BuiltinOperator.ELU, *_unary("int8"))


def test_a_refused_cross_check_is_a_finding(tmp_path, capsys):
    """TFLM runs this ELU, LiteRT's reference kernels refuse it: on the MCU profile the
    measurement stands and the refusal is reported in the result."""
    path = tmp_path / "elu.tflite"
    path.write_bytes(int8_elu())
    code = main(["simulate", str(path), "--profile", MCU, "--run", "--runs", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    cross = report["measured"]["cross_check"]
    assert cross["bit_exact"] is None and "Didn't find op for builtin opcode 'ELU'" in cross["error"]
    assert report["measured"]["arena_head_bytes"] > 0
    assert any(n.startswith("cross-check not done") for n in report["notes"])
    main(["simulate", str(path), "--profile", MCU, "--run", "--runs", "1"])
    assert "cross-check failed, a finding" in capsys.readouterr().out


def test_a_cross_check_litert_cannot_load_is_skipped_with_the_reason(tmp_path, capsys):
    """quantized_dimension 7 on a per-tensor filter: TFLM runs it, LiteRT's loader refuses
    it, which the static LiteRT check knows — so the cross-check says why it is not done."""
    path = tmp_path / "conv.tflite"
    path.write_bytes(per_channel_model(7, 1))
    code = main(["simulate", str(path), "--profile", MCU, "--run", "--runs", "1", "--json"])
    cross = json.loads(capsys.readouterr().out)["measured"]["cross_check"]
    assert code == 0 and "quantized_dimension must be in range" in cross["skipped"]


def test_dynamic_input_hint_and_real_sized_data(tmp_path, capsys):
    """openWakeWord's mel-spectrogram front end (corpus): its input is [-1, -1], stored as
    [1, 1]. Run at that placeholder, XNNPACK refuses it; the message says why, and data of
    a real size (80 ms of 16 kHz audio) is accepted and runs."""
    import numpy as np

    from tests.corpus import corpus

    [m] = corpus(names=["oww_melspectrogram"])
    phone = "android-arm64-cpu"
    # The runtime's refusal is the run's answer, reported with the hint: a failing verdict.
    assert main(["simulate", str(m.path), "--profile", phone, "--run", "--runs", "1"]) == 1
    assert "has dynamic dimensions [-1, -1] and ran at the shape stored" in capsys.readouterr().out
    audio = tmp_path / "audio.npy"
    np.save(audio, np.zeros((1, 1280), np.float32))
    code = main(["simulate", str(m.path), "--profile", phone, "--run", "--runs", "1",
                 "--input", str(audio)])
    assert code == 0, capsys.readouterr().err


def signal_window_model() -> bytes:
    """TFLM's ``SignalWindow`` custom op (micro_speech's audio front end): int16 samples ×
    int16 Q12 window, options a flexbuffer map {"shift": 12}."""
    from ai_edge_litert import schema_py_generated as fb
    from flatbuffers import flexbuffers

    from devicefit.simulator.read.writer import pack
    from tests.op_probe import T, const, single_op

    data = single_op(fb.BuiltinOperator.CUSTOM, [T((8,), "int16", scale=1.0),
                                                 const((8,), "int16", 1.0, [4096] * 8)],
                     [T((8,), "int16", scale=1.0)])
    m = fb.ModelT.InitFromPackedBuf(data, 0)
    m.operatorCodes[0].customCode = "SignalWindow"
    m.subgraphs[0].operators[0].customOptions = list(flexbuffers.Dumps({"shift": 12}))
    return pack(m)


def test_signal_ops_run_in_tflm(tmp_path, capsys):
    """The wheel registers TFLM's Signal library: the check passes it and the real run
    agrees; LiteRT has no such kernel, so there is no cross-check (said, not failed)."""
    import numpy as np

    from devicefit.simulator.run.runtimes import run_model

    path = tmp_path / "window.tflite"
    path.write_bytes(signal_window_model())
    x = np.arange(8, dtype=np.int16) * 100
    np.testing.assert_array_equal(run_model(path, "tflm", inputs=[x]).outputs[0], x)
    code = main(["simulate", str(path), "--profile", MCU, "--run", "--runs", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["compatibility"]["supported"]
    cross = report["measured"]["cross_check"]
    assert "LiteRT cannot run CUSTOM:SignalWindow" in cross["skipped"] and cross["error"] is None
