"""The Ethos-U target on public models nobody here wrote (tests/corpus.py), Vela running for
real: MLTK's MLPerf-Tiny-style int8 models, microWakeWord's streaming model (2 subgraphs,
resource variables), and files Vela compiled before devicefit saw them."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicefit.simulator.read.reader import read_model
from devicefit.simulator.simulate import simulate
from tests.corpus import corpus
from tests.vela_anchor import vela_cli_for

PROFILE = "ethos-u55-128"


@pytest.fixture(scope="module")
def models() -> dict[str, Path]:
    return {m.name: m.path for m in corpus(kinds={"mcu-int8"})}


@pytest.mark.parametrize("name", ["mltk_image_classification", "mltk_anomaly_detection",
                                  "mltk_tflite_micro_speech"])
def test_devicefits_figures_are_velas(models, tmp_path, name):
    report = simulate(models[name], PROFILE).to_dict()
    s = report["compatibility"]["ethos-u"]
    theirs = vela_cli_for(models[name], PROFILE, tmp_path).summary
    f = s["figures"]
    assert f["total_cycles"] == int(theirs["cycles_total"])
    assert f["sram_used_bytes"] == round(float(theirs["sram_memory_used"]) * 1024)
    assert f["off_chip_flash_used_bytes"] == round(float(theirs["off_chip_flash_memory_used"]) * 1024)
    assert f["encoded_weights_bytes"] == int(theirs["total_npu_encoded_weights"])
    # MLTK's anomaly detector takes and gives float: its QUANTIZE/DEQUANTIZE stay on the
    # Cortex-M (conversions, not a float model) and the verdict is a pass.
    assert {p["op"] for p in s["partition"] if p["unit"] == "cpu"} <= {"QUANTIZE", "DEQUANTIZE"}
    assert report["verdict"] == "pass"


def test_streaming_wake_word_model_keeps_its_variables_on_the_cortex_m(models):
    report = simulate(models["mww_okay_nabu"], PROFILE).to_dict()
    s = report["compatibility"]["ethos-u"]
    cpu = {p["op"] for p in s["partition"] if p["unit"] == "cpu"}
    assert {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} <= cpu
    assert any(p["reason"] == "Unsupported opType" for p in s["partition"] if p["unit"] == "cpu")
    assert s["npu_ops"] > 0 and s["ethos_u_ops"] == 1
    # Vela's own counts describe one subgraph of this 2-subgraph model: said, not trusted.
    assert any("one subgraph" in n for n in s["notes"])
    assert report["compatibility"]["supported"]  # TFLM runs the variable ops


def test_a_file_vela_compiled_elsewhere_simulates(models):
    """The corpus's Vela outputs (Vela's default config, no devicefit record): partition and
    the NPU scratch from the file; no cycles, so no latency figure, and it says why."""
    model = corpus(names={"vela_mltk_image_classification"})[0].path
    report = simulate(model, PROFILE).to_dict()
    s = report["compatibility"]["ethos-u"]
    assert s["basis"] == "compiled file" and s["figures"] is None
    assert (s["ethos_u_ops"], s["cpu_ops"]) == (1, 0)
    scratch = [t for t in read_model(model).main.tensors if t.name == "scratch"]
    assert s["scratch_bytes"] == scratch[0].nbytes > 0
    assert report["memory"]["arena_bytes"] >= s["scratch_bytes"]
    assert report["latency"]["estimated_device_ms"] is None
    assert "record" in report["latency"]["no_estimate"]
    assert report["verdict"] == "pass"


def test_a_model_vela_refuses_is_reported_with_velas_reason():
    """MediaPipe's selfie segmentation (float, MobileNetV3's HARD_SWISH): Vela 5.2.0 refuses
    the whole model at its first float HARD_SWISH rather than leaving it to the Cortex-M. A
    finding about the model on this device: a failed report, the operator and Vela's words,
    no figure of the compiled model."""
    model = corpus(names={"mp_selfie_segmentation"})[0].path
    report = simulate(model, PROFILE)
    r = report.compile_refusal
    assert r is not None and not report.ok
    assert (r.op, r.op_index, r.tensor) == ("HARD_SWISH", 3, "h_swish")
    assert read_model(model).main.operators[3].op_name == "HARD_SWISH"
    assert (r.reason, r.detail) == ("IFM has to be 8bit", "IFM type=FLOAT32")
    assert report.model.size_bytes == model.stat().st_size and report.memory is None
    assert set(report.unchecked_budgets) == {"flash", "arena", "latency"}


@pytest.mark.parametrize("name", ["mltk_image_classification", "mltk_anomaly_detection"])
def test_every_operator_is_named_as_the_file_names_it(models, tmp_path, name):
    """The partition, the chart's bars and Vela's per-layer rows name the user's operators:
    each by its index and the output tensor the file gives it. The tie of Vela's rows to
    those operators (Vela's operator database) agrees with Vela's own CLI: its per-layer CSV
    has the same rows in the same order, and where a row's output is one the file names,
    it is that operator's."""
    path = models[name]
    sg = read_model(path).main
    file_ops = [(op.op_name, sg.tensors[op.outputs[0]].name) for op in sg.operators]
    s = simulate(path, PROFILE).compatibility.section
    assert [(p.op, p.name) for p in s.partition] == file_ops
    bars = [b for part in s.display().parts if getattr(part, "name", "") == "ethos-u-layers"
            for b in part.bars]
    assert [b.label for b in bars] == [str(i) for i in range(len(file_ops))]
    assert all(b.title.startswith(f"op {i} {op} '{out}'\n")
               for i, (b, (op, out)) in enumerate(zip(bars, file_ops, strict=True)))
    # Vela's CLI, as a user runs it, with the profile's configuration.
    theirs = vela_cli_for(path, PROFILE, tmp_path, "--verbose-performance").per_layer
    assert [(r["NNG Operator"], r["Name"], int(r["Op Cycles"])) for r in theirs] == \
        [(r.vela_op, r.name, r.cycles) for r in s.per_layer]
    producer = {out: i for i, (_, out) in enumerate(file_ops)}
    assert all(r.op_index is not None for r in s.per_layer)
    tied = [(producer[r.name], r.op_index) for r in s.per_layer if r.name in producer]
    assert tied and all(a == b for a, b in tied)
