"""Edge TPU partition, parameter cache and latency split on real converted models."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from contextlib import redirect_stdout

import pytest

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.plan.compat import check_ops, static_compatibility
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.targets.edgetpu.partition import (
    MODEL_CHECKS,
    OP_CHECKS,
    edgetpu_partition,
    edgetpu_report,
    load_table,
    run_compiler,
)
from tests.zoo import model_path

MAPPED = "Mapped to Edge TPU"
SUBGRAPH = "More than one subgraph is not supported"


@pytest.fixture(scope="module")
def coral():
    return load_profile("coral-edgetpu")


def _partition(name, profile):
    return edgetpu_partition(read_model(model_path(name)), profile)


def test_all_supported_int8_cnn_maps_fully(coral):
    r = _partition("chain_int8", coral)
    assert (r.mapped_ops, r.cpu_ops, r.total_ops) == (8, 0, 8)
    assert r.compile_error is None and r.first_unmapped is None and r.fully_mapped
    assert r.segment == (0, 7) and r.tpu_subgraphs == 1
    assert {row.status for row in r.table} == {MAPPED}
    assert sum(row.count for row in r.table) == 8
    # every weight and bias fits the cache: nothing streamed
    assert r.offchip_param_bytes == 0 and r.onchip_param_bytes > 0


def test_unsupported_op_in_the_middle_splits_there(coral):
    model = read_model(model_path("leaky_mid_int8"))
    r = edgetpu_partition(model, coral)
    names = [op.op_name for op in model.main.operators]
    leaky = names.index("LEAKY_RELU")
    assert 0 < leaky < len(names) - 1
    assert r.first_unmapped.index == leaky and r.first_unmapped.op == "LEAKY_RELU"
    assert r.first_unmapped.status == "Operation not supported"
    assert "not in the Edge TPU op table" in r.first_unmapped.reason
    assert r.segment == (0, leaky - 1) and r.mapped_ops == leaky
    after = r.ops[leaky + 1:]
    assert after and all(p.device == "cpu" and p.status == SUBGRAPH for p in after)
    # the compiler-style table: one row per (operator, status), counts add up
    assert sum(row.count for row in r.table) == len(names)
    assert ("CONV_2D", SUBGRAPH) in {(row.operator, row.status) for row in r.table}
    # boundary: the graph input goes in, the tensor LEAKY_RELU reads comes back out
    sg = model.main
    leaky_in = sg.tensors[sg.operators[leaky].inputs[0]]
    graph_in = sg.tensors[sg.inputs[0]]
    assert r.latency.boundary_in_bytes == graph_in.nbytes
    assert r.latency.boundary_out_bytes == leaky_in.nbytes
    assert r.latency.cpu_ms > 0 and r.latency.cpu_macs > 0


def test_tensor_rank_over_3_innermost_dims_stops_the_tpu(coral):
    # Keras 3 UpSampling2D converts to 5-D RESHAPE/TILE: the compiler's rank status
    r = _partition("unet_int8", coral)
    assert r.first_unmapped.op == "RESHAPE" and r.mapped_ops == r.first_unmapped.index
    assert r.first_unmapped.status == load_table().statuses["rank"]
    assert "only the 3 innermost dimensions" in r.first_unmapped.reason


@pytest.mark.parametrize("op, status, detail", [
    ("STRIDED_SLICE", "Only Strided-Slice with unitary strides supported", "strides [1, 2, 1, 1]"),
    ("SOFTMAX", None, "Softmax maps only for a 1-D input"),
    ("MEAN", None, "z (channels) of size 6: z must be a multiple of 4"),
], ids=["strided-slice", "softmax-4d", "mean-z"])
def test_op_constraints_read_from_the_converted_model(coral, op, status, detail):
    # each op keeps its own reason after the split, as in the compiler's log
    r = _partition("edgetpu_limits_int8", coral)
    placed = next(p for p in r.ops if p.op == op)
    assert placed.device == "cpu" and detail in placed.reason
    assert placed.status == (status or load_table().statuses["unspecified"])
    assert r.first_unmapped.op == "STRIDED_SLICE" and r.mapped_ops == 1


def test_float_model_is_rejected_with_the_quantization_reason(coral):
    model = read_model(model_path("chain_float32"))
    r = edgetpu_partition(model, coral)
    assert r.mapped_ops == 0 and r.segment is None and r.tpu_subgraphs == 0
    assert r.first_unmapped.index == 0
    assert r.first_unmapped.status == "Operation is working on an unsupported data type"
    assert "float32" in r.first_unmapped.reason and "8-bit" in r.first_unmapped.reason
    assert r.latency.tpu_compute_ms == 0 and r.latency.link_bytes == 0
    compat = check_ops(model, coral)
    assert not compat.supported
    assert "no op maps to the Edge TPU" in compat.unsupported_ops[0].reason


def test_large_parameters_are_streamed(coral):
    model = read_model(model_path("large_params_int8"))
    r = edgetpu_partition(model, coral)
    cache = coral.target_settings.param_cache_bytes
    assert r.fully_mapped
    assert 0 < r.onchip_param_bytes <= cache < r.onchip_param_bytes + r.offchip_param_bytes
    assert r.offchip_param_bytes > 0
    assert r.onchip_param_bytes + r.offchip_param_bytes == sum(p.param_bytes for p in r.ops)
    assert {p.params_in for p in r.ops} == {"on-chip", "off-chip"}
    # streamed parameters cross the link every inference, and dominate the estimate
    lat = r.latency
    assert lat.link_bytes == lat.boundary_in_bytes + lat.boundary_out_bytes + r.offchip_param_bytes
    assert lat.link_ms == pytest.approx(1e3 * lat.link_bytes / coral.target_settings.link_bytes_per_second)
    assert lat.link_ms > lat.tpu_compute_ms
    assert lat.total_ms == pytest.approx(lat.invoke_ms + lat.tpu_compute_ms + lat.link_ms
                                         + lat.cpu_ms)


def test_a_dynamic_batch_alone_compiles(coral):
    """A -1 batch in the shape signature with every shape operand constant: the compiler's
    interpreter allocates the stored shape (LibrEdgeTPU's dense templates, [-1, N] inputs,
    were compiled whole by compiler 16)."""
    r = _partition("dynamic_int8", coral)
    assert r.compile_error is None and r.cpu_ops == 0 and r.fully_mapped


def test_dynamic_sized_tensors_are_rejected(coral, tmp_path):
    """A RESHAPE whose shape is computed in the graph (SHAPE → STRIDED_SLICE → PACK) leaves
    its output dynamic-sized until the graph runs: the compiler refuses the whole model."""
    from tests.tflite_builder import shape_reshape_model

    path = tmp_path / "reshape.tflite"
    path.write_bytes(shape_reshape_model())
    r = edgetpu_partition(read_model(path), coral)
    assert r.compile_error is not None and "dynamic-sized" in r.compile_error
    assert "op 3 RESHAPE" in r.compile_error and "'new_shape'" in r.compile_error
    assert r.mapped_ops == 0 and all(p.device == "cpu" for p in r.ops)
    assert r.first_unmapped.reason == r.compile_error


def test_op_version_newer_than_compiler_16_is_rejected(coral):
    # Keras Conv2D(groups=2) converts to CONV_2D v6, which compiler 16.0 cannot parse
    model = read_model(model_path("grouped_conv_int8"))
    assert [(op.op_name, op.version) for op in model.main.operators] == [("CONV_2D", 6)]
    r = edgetpu_partition(model, coral)
    assert "CONV_2D is version 6" in r.compile_error and "16.0" in r.compile_error
    assert "grouped convolution" in r.compile_error and r.mapped_ops == 0


def test_without_compiler_figures_are_marked_predicted(coral, monkeypatch):
    monkeypatch.setenv("PATH", "")
    r = edgetpu_report(read_model(model_path("chain_int8")), coral)
    assert r.basis == "predicted" and r.compiler is None
    assert any("not installed" in n and "predicted" in n for n in r.notes)
    assert run_compiler(model_path("chain_int8")).error == "edgetpu_compiler is not on PATH"


def test_op_table_registry_is_consistent():
    table = load_table()
    used = {c.name for c in (*table.op_requirements, *table.supported_op_requirements)}
    used |= {c.name for rule in table.ops.values() for c in rule.checks}
    assert used == set(OP_CHECKS), "every registered check is used, every used check exists"
    assert {c.name for c in table.model_requirements} == set(MODEL_CHECKS)
    assert all(rule.sources for rule in table.ops.values()), "every op cites a source"
    assert table.compiler_version == "16.0"


def test_simulate_json_and_text_carry_the_edgetpu_section(coral, tmp_path):
    from devicefit.sdk.cli import main

    path = str(model_path("leaky_mid_int8"))
    # A quarter of this model's MACs fall back to the CPU: more than coral-edgetpu accepts
    # (tests/simulator/judge/test_accelerators.py), so a profile that accepts half runs these
    # checks.
    lenient = tmp_path / "coral-lenient.yaml"
    lenient.write_text("name: coral-lenient\nextends: coral-edgetpu\nops:\n  max_cpu_share: 0.5\n")
    coral = load_profile(lenient)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["simulate", path, "--profile", str(lenient), "--json"])
    assert code == 0
    report = json.loads(out.getvalue())
    etpu = report["compatibility"]["edgetpu"]
    assert etpu["first_unmapped"]["op"] == "LEAKY_RELU"
    assert {"index", "op", "reason"} <= set(etpu["first_unmapped"])
    for key in ("mapped_ops", "cpu_ops", "onchip_param_bytes", "offchip_param_bytes", "table"):
        assert key in etpu
    assert report["latency"]["estimated_device_ms"] == pytest.approx(etpu["latency"]["total_ms"])
    assert any(b["name"] == "latency" for b in report["budgets"])
    # the same figures through the library's static path
    static = static_compatibility(read_model(path), coral)
    assert static.section.mapped_ops == etpu["mapped_ops"]
    text = io.StringIO()
    with redirect_stdout(text):
        assert main(["simulate", path, "--profile", str(lenient)]) == 0
    shown = text.getvalue()
    assert "Edge TPU (predicted" in shown and "LEAKY_RELU" in shown and SUBGRAPH in shown
    # CPU fallback is "can run", never "supported by the edgetpu op table"
    assert (f"every operator can run ({etpu['mapped_ops']} on the Edge TPU, "
            f"{etpu['cpu_ops']} on the CPU)") in shown
    assert etpu["cpu_ops"] > 0 and "supported by the edgetpu op table" not in shown


def _cost(profile, **changes):
    return dataclasses.replace(
        profile, target_settings=dataclasses.replace(profile.target_settings, **changes))


def test_invoke_overhead_and_tpu_efficiency_enter_the_estimate(coral):
    model = read_model(model_path("chain_int8"))
    peak = _cost(coral, tpu_efficiency=1.0, invoke_overhead_ms=0.0)
    base = edgetpu_partition(model, peak).latency
    assert base.invoke_ms == 0
    assert base.tpu_compute_ms == pytest.approx(1e3 * base.tpu_macs / coral.target_settings.tpu_macs_per_second)
    slow = edgetpu_partition(model, _cost(peak, tpu_efficiency=0.25,
                                          invoke_overhead_ms=1.5)).latency
    assert slow.tpu_compute_ms == pytest.approx(4 * base.tpu_compute_ms)
    assert slow.invoke_ms == 1.5 and slow.link_ms == pytest.approx(base.link_ms)
    assert slow.total_ms == pytest.approx(base.total_ms + 3 * base.tpu_compute_ms + 1.5)
    # the built-in profile carries calibrated values, and nothing invokes a TPU with no op on it
    assert 0 < coral.target_settings.tpu_efficiency < 1 and coral.target_settings.invoke_overhead_ms > 0
    assert edgetpu_partition(read_model(model_path("chain_float32")), coral).latency.invoke_ms == 0


@pytest.mark.parametrize("line, error", [
    ("tpu_efficiency: 1.5", "bad value for 'cost_model.tpu_efficiency'"),
    ("tpu_efficiency: 0", "a number > 0 and <= 1"),
    ("invoke_overhead: fast", "bad value for 'cost_model.invoke_overhead'"),
    ("invoke_overhed: 1ms", "did you mean 'invoke_overhead'"),
], ids=["efficiency-over-1", "efficiency-0", "overhead-unit", "overhead-typo"])
def test_new_cost_model_keys_are_validated(tmp_path, line, error):
    path = tmp_path / "mine.yaml"
    path.write_text(f"extends: coral-edgetpu\ncost_model:\n  {line}\n")
    with pytest.raises(ProfileError, match=re.escape(error)):
        load_profile(path)


def test_new_cost_model_keys_parse_and_default(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("extends: coral-edgetpu\ncost_model:\n  tpu_efficiency: 0.5\n"
                    "  invoke_overhead: 250us\n")
    cost = load_profile(path).target_settings
    assert (cost.tpu_efficiency, cost.invoke_overhead_ms) == (0.5, 0.25)
    # not an Edge TPU: TFLM's own settings (its output tolerance), no Edge TPU costs
    assert not isinstance(load_profile("stm32l4r5-cortex-m4").target_settings, type(cost))


def test_edge_tpu_keys_belong_to_edge_tpu_profiles(tmp_path):
    """The TPU constants are the Edge TPU target's keys: a TFLM profile setting one is told
    whose key it is (it would change nothing there)."""
    path = tmp_path / "mine.yaml"
    path.write_text("extends: esp32-s3\ncost_model:\n  param_cache: 8MiB\n")
    with pytest.raises(ProfileError, match=r"mine.yaml:3: cost_model.param_cache is a setting "
                                           r"of the edgetpu target; this profile runs 'tflm'"):
        load_profile(path)
