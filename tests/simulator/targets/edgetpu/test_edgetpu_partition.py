"""The Edge TPU partition rules taken from public compiled/uncompiled pairs (edgetpu_ops.yaml
cites each), on small models of each rule's kind built in code (tests/edgetpu_models.py),
and a compiled Edge TPU file made by hand: what devicefit reads from it."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from devicefit.simulator.estimate.compute import op_work
from devicefit.simulator.plan.compat import check_ops
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.targets.edgetpu.compiled import read_package
from devicefit.simulator.targets.edgetpu.partition import (
    edgetpu_partition,
    edgetpu_report,
    load_table,
)
from tests import edgetpu_models
from tests.recurrent_models import lstm_model

MAPPED = "Mapped to Edge TPU"


@pytest.fixture(scope="module")
def coral():
    return load_profile("coral-edgetpu")


def _devices(data: bytes, profile) -> list[str]:
    return [p.device for p in edgetpu_partition(parse_model(data), profile).ops]


def test_an_op_reading_only_tpu_results_maps_after_cpu_ops(coral):
    # movenet_single_pose_lightning (compiler 16) maps ops 100-111 beside CPU ops 89-99
    r = edgetpu_partition(parse_model(edgetpu_models.branch_model()), coral)
    assert [p.device for p in r.ops] == ["tpu", "cpu", "cpu", "tpu"]
    leaky, add = r.ops[1], r.ops[2]
    assert leaky.status == "Operation not supported"
    assert add.status == load_table().statuses["subgraph"]
    assert "op 1 (LEAKY_RELU)" in add.reason and "second Edge TPU subgraph" in add.reason
    assert r.first_unmapped.op == "LEAKY_RELU" and r.tpu_subgraphs == 1
    assert r.segment == (0, 3) and (r.mapped_ops, r.cpu_ops) == (2, 2)
    # the TPU part hands one tensor to LEAKY_RELU and gives the graph output conv3
    sg = parse_model(edgetpu_models.branch_model()).main
    conv0 = sg.tensors[sg.operators[0].outputs[0]]
    assert r.latency.boundary_out_bytes == 2 * conv0.nbytes


@pytest.mark.parametrize("before, after, align, half, device", [
    (6, 12, False, True, "tpu"),    # movenet: v3 half_pixel_centers x2 (compiler 16)
    (33, 33, True, False, "tpu"),   # deeplab_mobilenet_edgetpu_slim: align_corners, same size
    (1, 33, True, False, "cpu"),    # deeplabv3_mnv2_pascal: align_corners 1x1 -> 33x33
    (33, 513, True, False, "cpu"),  # both deeplabs: align_corners 33x33 -> 513x513
    (8, 16, False, False, "tpu"),
])
def test_resize_bilinear_by_options_and_size(coral, before, after, align, half, device):
    data = edgetpu_models.resize_model(before, after, align_corners=align,
                                       half_pixel_centers=half)
    r = edgetpu_partition(parse_model(data), coral)
    assert [p.device for p in r.ops] == [device]
    if device == "cpu":
        assert f"align_corners resize {before}x{before} -> {after}x{after}" in r.ops[0].reason


def test_integer_lstm_with_int16_cell_state_maps(coral):
    # keras_lstm_mnist_ptq (compiler 16) compiles to one edgetpu-custom-op
    model = parse_model(lstm_model("int8"))
    cell = model.main.tensors[model.main.operators[0].inputs[19]]
    assert cell.dtype == "int16"
    r = edgetpu_partition(model, coral)
    assert r.ops[0].device == "tpu" and r.ops[0].status == MAPPED
    assert r.onchip_param_bytes > 0
    float_lstm = edgetpu_partition(parse_model(lstm_model("float32")), coral)
    assert float_lstm.ops[0].device == "cpu"
    assert float_lstm.ops[0].status == load_table().statuses["data_type"]
    assert "float32" in float_lstm.ops[0].reason


def test_tile_maps(coral):
    assert _devices(edgetpu_models.tile_model(), coral) == ["tpu"]


def test_package_figures_are_read_from_custom_options():
    pkg = edgetpu_models.package(cached_bytes=1000, streamed_bytes=24, instruction_bytes=64,
                                 compiler_version="cl/1")
    options = edgetpu_models.custom_options(pkg)
    c = read_package(options, 3, "<test>")
    assert (c.op_index, c.data_bytes, c.cached_param_bytes, c.streamed_param_bytes) == (
        3, len(options), 1000, 24)
    assert (c.instruction_bytes, c.executables, c.compiler_version, c.error) == (
        64, 2, "cl/1", "")
    broken = read_package(options[: len(options) // 2], 0, "<test>")
    assert broken.error and broken.cached_param_bytes == 0


@pytest.fixture()
def compiled(tmp_path):
    path = tmp_path / "m_edgetpu.tflite"
    path.write_bytes(edgetpu_models.compiled_model(cached_bytes=40_000, streamed_bytes=600))
    return read_model(path)


def test_compiled_model_reports_what_is_inside(coral, compiled):
    r = edgetpu_report(compiled, coral)
    assert r.basis == "compiled" and r.precompiled and r.compile_error is None
    assert [p.device for p in r.ops] == ["tpu", "cpu", "cpu"]
    assert r.ops[0].status == "Compiled for the Edge TPU"
    assert {p.status for p in r.ops[1:]} == {"Left on the CPU by the compiler"}
    assert (r.onchip_param_bytes, r.offchip_param_bytes) == (40_000, 600)
    (c,) = r.compiled
    assert c.data_bytes > 40_600 and c.compiler_version == "cl/test"
    cpu_macs = sum(w.macs for w in op_work(compiled) if w.op_index in (1, 2))
    assert r.cpu_macs == cpu_macs > 0 and r.cpu_share is None
    # the TPU part is opaque: no latency total, the known parts in the note
    lat = r.latency_report(coral, "compatibility.edgetpu.latency")
    assert lat.estimated_device_ms is None and "lower bound" in lat.no_estimate
    assert r.latency.cpu_ms > 0 and r.latency.link_bytes >= 600
    line = r.supported_line()
    assert "compiled for the Edge TPU already" in line and f"{cpu_macs:,} MACs" in line
    assert "0 on the Edge TPU" not in line
    assert check_ops(compiled, coral).supported


def test_simulate_a_compiled_model_never_claims_a_latency(coral, compiled):
    from devicefit.sdk.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["simulate", compiled.path, "--profile", "coral-edgetpu", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0
    assert report["latency"]["estimated_device_ms"] is None
    assert "latency" in report["unchecked_budgets"]
    etpu = report["compatibility"]["edgetpu"]
    assert etpu["basis"] == "compiled" and etpu["compiled"][0]["cached_param_bytes"] == 40_000
    text = io.StringIO()
    with redirect_stdout(text):
        assert main(["simulate", compiled.path, "--profile", "coral-edgetpu"]) == 0
    shown = text.getvalue()
    assert "read from the compiled model's edgetpu-custom-op" in shown
    assert "40,000 B (39.1 KiB) cached on chip" in shown and "600 B streamed" in shown
    assert "latency budget not checked" in shown


def test_a_compiled_model_is_at_risk_not_a_bare_pass(coral, compiled, tmp_path):
    """Its latency is unknown: the verdict passes (exit 0) but the status is at-risk in the
    JSON (``check --fail-on-risk`` fails on it), the text says the latency was not checked,
    JUnit skips the latency case and fails it with fail_on_risk."""
    import xml.etree.ElementTree as ET

    from devicefit.sdk.cli import main
    from devicefit.simulator.report.views import junit

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", compiled.path, "--profile", "coral-edgetpu", "--json"]) == 0
    report = json.loads(out.getvalue())
    assert report["verdict"] == "pass" and report["status"] == "at-risk"
    text = io.StringIO()
    with redirect_stdout(text):
        main(["simulate", compiled.path, "--profile", "coral-edgetpu"])
    verdict = text.getvalue().strip().splitlines()[-1]
    assert verdict.startswith("Verdict: PASS for the checked budgets; latency NOT CHECKED (")
    from devicefit.simulator.simulate import simulate

    sim = simulate(compiled.path, "coral-edgetpu")
    lenient = ET.fromstring(junit.render(sim))
    strict = ET.fromstring(junit.render(sim, fail_on_risk=True))
    case = ".//testcase[@name='budget.latency']"
    assert lenient.find(case + "/skipped") is not None and lenient.find(case + "/failure") is None
    assert strict.find(case + "/failure").get("type") == "BudgetNotChecked"
