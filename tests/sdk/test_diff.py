"""``devicefit diff``: two models on one profile, one model on two profiles; text, JSON, HTML;
exit 0, or 2 on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ai_edge_litert import schema_py_generated as fb

from devicefit.sdk.cli import main
from devicefit.sdk.convert import metadata
from devicefit.simulator.read.writer import pack
from devicefit.simulator.simulate import simulate
from tests.zoo import model_path

MCU, OTHER_MCU = "stm32l4r5-cortex-m4", "nrf52840-cortex-m4"


def _json(capsys, *argv: str) -> dict:
    assert main(["diff", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _without_last_op(src: Path, dst: Path) -> Path:
    """``src`` with its last operator dropped (the graph's output becomes that op's input):
    a head removed, as a user's edit of the model would."""
    model = fb.ModelT.InitFromPackedBuf(src.read_bytes(), 0)
    sg = model.subgraphs[0]
    last = sg.operators.pop()
    sg.outputs = [last.inputs[0]]
    dst.write_bytes(pack(model))
    return dst


def test_two_models_on_one_profile(capsys, tmp_path):
    a, b = model_path("chain_int8"), model_path("chain_float32")
    out = _json(capsys, str(a), str(b), "--profile", MCU, "--html", str(tmp_path / "d.html"))
    ra, rb = simulate(a, MCU), simulate(b, MCU)
    figures = {f["name"]: f for f in out["figures"]}
    assert out["kind"] == "models" and out["layer_matching"] == "index"
    assert (figures["model size"]["a"], figures["model size"]["b"]) == \
        (ra.model.size_bytes, rb.model.size_bytes)
    arena = figures["arena"]
    assert arena["delta"] == rb.memory.arena_bytes - ra.memory.arena_bytes > 0
    lat = figures["latency (estimated)"]
    assert lat["a"] == ra.latency.estimated_device_ms and lat["b_band"] == list(rb.latency.band_ms)
    assert lat["bands_overlap"] is False  # float32 on a Cortex-M4 is far slower than int8
    assert all(c["a"] == c["b"] for c in out["op_counts"])
    first = out["layers"][0]
    assert first["change"] == "changed" and first["a"]["dtype"] == "int8" \
        and first["b"]["dtype"] == "float32"
    assert first["delta"]["live_bytes"] == rb.layers[0].live_bytes - ra.layers[0].live_bytes
    assert out["accuracy"] == []
    assert (tmp_path / "d.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["diff", str(a), str(b), "--profile", MCU]) == 0
    text = capsys.readouterr().out
    assert "Layers (paired by index): 8 changed" in text
    accuracy = next(line.split() for line in text.splitlines()
                    if line.strip().startswith("accuracy"))
    assert accuracy[1:5] == ["not", "recorded", "not", "recorded"]


def test_one_model_on_two_profiles_changes_only_the_latency(capsys):
    out = _json(capsys, str(model_path("residual_int8")), "--profile", MCU,
                "--profile", OTHER_MCU)
    assert out["kind"] == "profiles" and out["layer_matching"] == "index"
    assert (out["a"]["label"], out["b"]["label"]) == (MCU, OTHER_MCU)
    figures = {f["name"]: f for f in out["figures"]}
    assert figures["model size"]["delta"] == 0 and figures["MACs"]["delta"] == 0
    assert figures["latency (estimated)"]["delta"] != 0
    assert all(c["delta"]["macs"] == 0 for c in out["layers"])


def test_sizes_read_as_simulate_prints_them(capsys):
    """android-arm64-cpu's flash budget is written 50MB: simulate prints the file in kB, and
    so does the diff (it printed 70.7 KiB beside simulate's 72.4 kB); the arena stays KiB."""
    from devicefit.simulator.infra.units import format_size
    from devicefit.simulator.report.views import render

    a, b = model_path("chain_int8"), model_path("chain_float32")
    assert main(["diff", str(a), str(b), "--profile", "android-arm64-cpu"]) == 0
    text = capsys.readouterr().out
    rows = {line.split("  ")[1].strip(): line for line in text.splitlines()
            if line.startswith("  ") and "  " in line[2:]}
    report = simulate(b, "android-arm64-cpu")
    kb, kib = format_size(report.model.size_bytes, True), format_size(report.memory.arena_bytes)
    assert kb.endswith(" kB") and kb in rows["model size"] and kb in rows["flash"]
    assert kb in str(render("text", report)) and kib in rows["arena"] and kib.endswith(" KiB")


def test_different_graphs_are_paired_by_type_and_shape(capsys, tmp_path):
    a = model_path("chain_int8")
    b = _without_last_op(a, tmp_path / "headless.tflite")
    out = _json(capsys, str(a), str(b), "--profile", MCU)
    assert out["layer_matching"] == "op type + output shape"
    changes = [c["change"] for c in out["layers"]]
    assert changes.count("removed") == 1 and "added" not in changes
    removed = next(c for c in out["layers"] if c["change"] == "removed")
    assert removed["a"]["op"] == "SOFTMAX" and removed["b"] is None
    counts = {c["op"]: (c["a"], c["b"]) for c in out["op_counts"]}
    assert counts["SOFTMAX"] == (1, 0)
    assert main(["diff", str(a), str(b), "--profile", MCU]) == 0
    assert "paired by op type + output shape" in capsys.readouterr().out


def test_accuracy_recorded_in_the_conversion_metadata_is_compared(capsys, tmp_path):
    src = model_path("chain_int8")
    a, b = tmp_path / "a.tflite", tmp_path / "b.tflite"
    a.write_bytes(metadata.embed(src.read_bytes(), {"accuracy": 0.91, "sqnr_db": 31.5}))
    b.write_bytes(metadata.embed(src.read_bytes(), {"accuracy": 0.88, "sqnr_db": 24.0}))
    out = _json(capsys, str(a), str(b), "--profile", MCU)
    acc = {f["name"]: f for f in out["accuracy"]}
    assert acc["accuracy"]["delta"] == pytest.approx(-0.03)
    assert acc["SQNR (dB)"]["b"] == 24.0


@pytest.mark.parametrize("argv", [
    ["A", "B", "C", "--profile", MCU],
    ["A", "B", "--profile", MCU, "--profile", OTHER_MCU],
    ["A", "--profile", MCU],
    ["A", "missing.tflite", "--profile", MCU],
    ["A", "B", "--profile", "no-such-profile"],
    ["A", "CORRUPT", "--profile", MCU],
    ["A", "B", "--profile", MCU, "--html", "A"],
], ids=["three-models", "two-and-two", "one-and-one", "missing", "bad-profile", "corrupt",
        "html-over-input"])
def test_bad_input_exits_2_with_one_line(argv, tmp_path, capsys):
    a = Path(shutil.copy(model_path("chain_int8"), tmp_path / "a.tflite"))
    corrupt = tmp_path / "corrupt.tflite"
    corrupt.write_bytes(a.read_bytes()[:200])
    names = {"A": str(a), "B": str(model_path("chain_float32")), "C": str(a),
             "CORRUPT": str(corrupt)}
    before = a.read_bytes()
    assert main(["diff", *(names.get(x, x) for x in argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("devicefit: error: ") and "Traceback" not in err
    assert a.read_bytes() == before
