"""The per-layer table: every operator, the report's figures joined once, shown the same way
by ``--layers``, ``--csv``, JSON and the HTML table."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from devicefit.sdk.cli import main
from devicefit.simulator.infra.units import format_bytes
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.benchmark import OpProfileRow
from devicefit.simulator.report.layers import bench_times, costliest, layer_rows
from devicefit.simulator.report.report import HostOpTime
from devicefit.simulator.report.views.layertable import text_lines
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from tests.zoo import model_path


def test_rows_cover_every_operator_and_carry_the_reports_figures():
    report = simulate(model_path("residual_int8"), "stm32l4r5-cortex-m4")
    rows = report.layers
    assert [r.index for r in rows] == list(range(report.model.operators))
    assert sum(r.macs for r in rows) == report.compute.macs
    assert max(r.live_bytes for r in rows) == report.memory.lower_bound_bytes
    assert sum(r.estimated_ms for r in rows) == \
        sum(o.estimated_ms for o in report.latency.per_op)
    conv = rows[0]
    assert conv.op == "CONV_2D" and conv.input_shapes == ((1, 24, 24, 4),)
    assert conv.output_shapes == ((1, 24, 24, 16),) and conv.dtype == "int8"
    assert conv.params == 16 * 3 * 3 * 4 + 16  # kernel + bias
    assert read_report(json.loads(json.dumps(report.to_dict()))).layers == rows


def test_other_subgraphs_are_listed_without_main_graph_figures():
    path = model_path("if_float32")
    model = read_model(path)
    report = simulate(path, "android-arm64-cpu")
    assert len(report.layers) == sum(len(sg.operators) for sg in model.subgraphs) > \
        len(model.main.operators)
    branches = [r for r in report.layers if r.subgraph != model.main.index]
    assert branches and all(r.macs is None and r.live_bytes is None for r in branches)
    assert branches[0].key == f"{branches[0].subgraph}:{branches[0].index}"


def test_cli_layers_lists_all_operators_and_names_the_costliest(capsys, tmp_path):
    path = model_path("residual_int8")
    out_csv = tmp_path / "layers.csv"
    assert main(["simulate", str(path), "--profile", "stm32l4r5-cortex-m4", "--layers",
                 "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    report = simulate(path, "stm32l4r5-cortex-m4")
    assert "Layers (9 operators)" in out
    table = out[out.index("Layers ("):out.index("most live bytes")].splitlines()[2:]
    table = [line for line in table if line.strip()]
    assert [int(line.split()[0]) for line in table] == list(range(9))
    top = costliest(report.layers, "live_bytes")
    slow = costliest(report.layers, "estimated_ms")
    assert f"most live bytes: op {top.index} {top.op} ({format_bytes(top.live_bytes)})" in out
    assert f"slowest (estimated): op {slow.index} {slow.op}" in out
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(rows) == 9
    assert max(rows, key=lambda r: int(r["live_bytes"]))["op_index"] == str(top.index)
    assert max(rows, key=lambda r: float(r["estimated_ms"]))["op_index"] == str(slow.index)
    assert rows[0]["inputs"] == "1x24x24x4" and rows[0]["params"] == "592"


def test_csv_never_replaces_an_input(tmp_path, capsys):
    path = model_path("chain_int8")
    before = path.read_bytes()
    code = main(["simulate", str(path), "--profile", "stm32l4r5-cortex-m4", "--csv", str(path)])
    assert code == 2 and path.read_bytes() == before
    assert "--csv" in capsys.readouterr().err


def test_host_times_per_operator_join_their_rows():
    """No runtime here measures per-operator host times yet (LiteRT's and TFLM's Python APIs
    have no op profiler), so the section is filled by hand: what is tested is the join."""
    path = model_path("chain_int8")
    report = simulate(path, "android-arm64-cpu")
    host = tuple(HostOpTime(o.op_index, o.op, 0.1 * (o.op_index + 1))
                 for o in report.latency.per_op)
    report = dataclasses.replace(
        report, latency=dataclasses.replace(report.latency, host_per_op_ms=host))
    rows = layer_rows(read_model(path), report)
    assert [r.host_ms for r in rows] == [h.ms for h in host]
    assert "host (measured)" in text_lines(rows)[1]


def test_benchmark_rows_are_matched_by_node_index_or_output_name():
    model = read_model(model_path("chain_int8"))
    sg = model.main
    ops = sg.operators
    out1 = sg.tensors[ops[1].outputs[0]].name
    profile = [OpProfileRow(ops[0].op_name, f"{sg.tensors[ops[0].outputs[0]].name}:0",
                            None, 1.5, None, None, None, 1),
               OpProfileRow(ops[1].op_name, out1, None, 0.25, None, None, None, 1),
               # a delegate's node covers several operators: no single row to give it to
               OpProfileRow("TfLiteXNNPackDelegate", "[x]:7", None, 9.0, None, None, None, 1),
               # a wrong type at a known index is not this operator
               OpProfileRow("NOT_AN_OP", "y:2", None, 3.0, None, None, None, 1)]
    assert bench_times(sg, profile) == {0: 1.5, 1: 0.25}
