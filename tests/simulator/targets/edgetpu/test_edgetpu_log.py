"""Recorded Edge TPU compiler output (public sources, see fixtures/edgetpu/README.md) parses
into the figures the compiler printed, with the status texts devicefit uses."""

from __future__ import annotations

import dataclasses

from devicefit.simulator.targets.edgetpu.partition import load_table, parse_compiler_log
from tests.paths import TESTS

FIXTURES = TESTS / "fixtures" / "edgetpu"


def test_compiler_15_stdout_parses_into_its_figures():
    log = parse_compiler_log((FIXTURES / "yolov3_tiny_compiler15_stdout.txt").read_text())
    assert log.version == "15.0.340273435" and log.error is None
    assert log.on_chip_used_bytes == 3 * 1024  # "3.00KiB"
    assert log.on_chip_remaining_bytes == round(7.67 * 1024**2)  # "7.67MiB"
    assert log.off_chip_bytes == 0  # "0.00B"
    assert (log.subgraphs, log.total_ops, log.tpu_ops, log.cpu_ops) == (1, 36, 2, 34)
    assert len(log.table) == 9
    assert sum(r.count for r in log.table) == log.total_ops
    assert sum(r.count for r in log.table if r.status == "Mapped to Edge TPU") == log.tpu_ops
    assert (log.table[7].operator, log.table[7].count, log.table[7].status) == (
        "LEAKY_RELU", 11, "Operation not supported")


def test_operation_log_file_gives_op_counts_from_its_table():
    # the *_edgetpu.log has no summary lines: the counts come from the table
    log = parse_compiler_log((FIXTURES / "tiny_yolo_compiler14.log").read_text())
    assert log.version == "14.1.317412892"
    assert (log.total_ops, log.tpu_ops, log.cpu_ops) == (25, 19, 6)
    assert log.on_chip_used_bytes is None and log.subgraphs is None
    assert [(r.operator, r.count) for r in log.table][:3] == [
        ("CONCATENATION", 1), ("MAX_POOL_2D", 6), ("RESIZE_NEAREST_NEIGHBOR", 1)]


def test_unparseable_op_version_is_an_error():
    log = parse_compiler_log((FIXTURES / "exp_v2_compiler16_stdout.txt").read_text())
    assert log.version == "16.0.384591198"
    assert "'EXP' version '2'" in log.error and "Model could not be parsed" in log.error
    assert log.table == [] and log.total_ops is None
    # the op table records the same limit
    assert load_table().parse_max_versions["EXP"].max_version == 1


def test_status_texts_match_the_recorded_compiler():
    recorded = {r.status for name in ("yolov3_tiny_compiler15_stdout.txt",
                                      "tiny_yolo_compiler14.log")
                for r in parse_compiler_log((FIXTURES / name).read_text()).table}
    statuses = load_table().statuses
    for key in ("mapped", "not_supported", "version", "subgraph", "unspecified"):
        assert statuses[key] in recorded, key


def test_compiler_figures_are_shown_beside_the_prediction():
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.targets.edgetpu.partition import edgetpu_partition, text_lines
    from tests.zoo import model_path

    report = edgetpu_partition(read_model(model_path("chain_int8")), load_profile("coral-edgetpu"))
    report = dataclasses.replace(report, basis="compiler", compiler=parse_compiler_log(
        (FIXTURES / "yolov3_tiny_compiler15_stdout.txt").read_text()))
    shown = "\n".join(text_lines(report))
    assert "real compiler output below" in shown
    assert "compiler 15.0.340273435: 2 TPU / 34 CPU ops, on-chip 3,072 B, off-chip 0 B" in shown
