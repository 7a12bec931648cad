"""``devicefit calibrate`` on hostile logs, tables and flags (issue 50): exit 2 and one clear
line on stderr, no profile written; before, tracebacks (exit 1, "a budget failed"), hangs,
and "calibrated" profiles of NaN, negative or 1e300 ms timings (exit 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devicefit.sdk.cli import main
from tests.zoo import model_path

PROFILE = "stm32l4r5-cortex-m4"
#: chain_int8's operators, in order.
OPS = ["CONV_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "AVERAGE_POOL_2D", "RESHAPE",
       "FULLY_CONNECTED", "SOFTMAX"]


def _bench_json(times: list[object]) -> str:
    rows = [{"node_type": op, "avg_ms": ms} for op, ms in zip(OPS, times, strict=True)]
    return json.dumps({"bench": {"results": {"op_profile": rows}}})


def _calibrate(tmp_path: Path, *flags: str) -> int:
    return main(["calibrate", "--profile", PROFILE, *flags, "-o", str(tmp_path / "out.yaml")])


def _one_line(capsys: pytest.CaptureFixture[str], fragment: str) -> None:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert fragment in lines[0], (fragment, lines[0])


def test_a_bench_json_log_calibrates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same shape of input with plausible timings is calibrated."""
    log = tmp_path / "bench.json"
    log.write_text(_bench_json([2.0, 3.0, 1.0, 2.5, 0.2, 0.01, 0.3, 0.05]))
    assert _calibrate(tmp_path, "--model", str(model_path("chain_int8")),
                      "--board-log", str(log)) == 0
    assert "kernel_scale" in (tmp_path / "out.yaml").read_text()


HOSTILE_LOGS = [
    # AttributeError: 'list' object has no attribute 'get'.
    ("results-is-a-list", json.dumps({"bench": {"results": []}}), "JSON without a bench op"),
    ("bench-is-a-list", json.dumps({"bench": [1, 2]}), "JSON without a bench op"),
    ("row-is-a-list", json.dumps({"bench": {"results": {"op_profile": [[1]]}}}),
     "op_profile row 0 is not a node_type"),
    # RecursionError.
    ("deep-nesting", '{"a":' * 100_000 + "1" + "}" * 100_000, "not JSON"),
    ("5000-digit-int", '{"bench": ' + "9" * 5000 + "}", "not JSON"),
    # Accepted before, and written as a "calibrated" profile.
    ("nan-ms", _bench_json([float("nan")] * 8), "which no board measures"),
    ("inf-ms", _bench_json([float("inf")] * 8), "which no board measures"),
    ("negative-ms", _bench_json([-1.0] * 8), "which no board measures"),
    ("1e300-ms", _bench_json([1e300] * 8), "which no board measures"),
    ("huge-int-ms", _bench_json([10**400] * 8), "which no board measures"),
    ("zero-ms", _bench_json([0.0] * 8), "adds up to 0 ms"),
    # Plausible per op, but a wrong rate's distance from the estimate (the fit's matrix
    # went singular on a profile 2**70 off).
    ("1e6-times-slower", _bench_json([1e6] * 8), "more than 1000x apart"),
    ("1e6-times-faster", _bench_json([1e-6] * 8), "more than 1000x apart"),
    ("bool-ms", _bench_json([True] * 8), "not a node_type with a number avg_ms"),
    # benchmark_model text: a count of thousands of digits (ValueError in int()), a NaN row.
    ("benchmark-model-digits", "Run Order\ncount=" + "9" * 5000 + " curr=5\n",
     "printed no inference timings"),
    ("benchmark-model-nan-row", "count=5 curr=5 avg=5\n============ Run Order ============\n"
     "\t [node type]\t [avg ms]\t [Name]\n\t CONV_2D\t nan\t [c]\n",
     "which no run can measure"),
    ("micro-huge-tick", "CONV_2D took " + "9" * 5000 + " ticks (1 ms).\n", "64-bit counter"),
]


@pytest.mark.parametrize("text, fragment", [c[1:] for c in HOSTILE_LOGS],
                         ids=[c[0] for c in HOSTILE_LOGS])
def test_a_hostile_board_log_exits_2_with_one_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   text: str, fragment: str) -> None:
    log = tmp_path / "uart.txt"
    log.write_text(text)
    assert _calibrate(tmp_path, "--model", str(model_path("chain_int8")), "--board-log",
                      str(log), "--ticks-per-second", "1e6") == 2
    _one_line(capsys, fragment)
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize("where", ["fifo", "/dev/zero", "folder"])
def test_a_board_log_that_is_not_a_regular_file_exits_2(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        where: str) -> None:
    """A FIFO hung until killed, /dev/zero grew to 21 GB."""
    path = {"fifo": tmp_path / "pipe", "folder": tmp_path / "dir"}.get(where, Path(where))
    if where == "fifo":
        os.mkfifo(path)
    elif where == "folder":
        path.mkdir()
    assert _calibrate(tmp_path, "--model", str(model_path("chain_int8")),
                      "--board-log", str(path), "--clock", "120MHz") == 2
    _one_line(capsys, "is a folder" if where == "folder" else "is not a regular file")


@pytest.mark.parametrize("row, fragment", [
    ("chain.tflite,inf", "not a positive number up to"),
    ("chain.tflite,1e300", "not a positive number up to"),
    ("chain.tflite,-2", "not a positive number up to"),
    ("chain\0.tflite,5", "NUL byte"),
    (f"chain.tflite,{'1' * 140_000}", "a row of"),
])
def test_a_hostile_latency_table_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         row: str, fragment: str) -> None:
    table = tmp_path / "board.csv"
    table.write_text(f"model,ms\n{row}\n")
    assert _calibrate(tmp_path, "--latencies", str(table)) == 2
    _one_line(capsys, fragment)


@pytest.mark.parametrize("flag, value, fragment", [
    ("--clock", "1e-300Hz", "a CPU clock is between 1 kHz and 10 GHz"),
    ("--clock", "9" * 44 + "GHz", "a CPU clock is between 1 kHz and 10 GHz"),
    ("--clock", "fast", "expected a frequency"),
    ("--ticks-per-second", "nan", "a board's timer counts between"),
    ("--ticks-per-second", "0", "a board's timer counts between"),
])
def test_an_implausible_rate_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     flag: str, value: str, fragment: str) -> None:
    log = tmp_path / "uart.txt"
    log.write_text("".join(f"{op} took 1000 ticks (1 ms).\n" for op in OPS))
    assert _calibrate(tmp_path, "--model", str(model_path("chain_int8")),
                      "--board-log", str(log), flag, value) == 2
    _one_line(capsys, fragment)
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize("capture", sorted(
    p.name for p in (Path(__file__).parents[2] / "fixtures" / "benchmark_model").glob("*.txt")))
def test_cutting_benchmark_model_lines_keeps_what_the_real_captures_say(capture: str) -> None:
    """The lines handed to the benchmark_model parser are cut (linear time); on the real
    captures the op profile and the latency are the same as from the whole text."""
    from devicefit.sdk.bench.benchmark_output import BenchmarkOutputError, parse_benchmark_output
    from devicefit.sdk.commands.calibrate import _benchmark_text

    text = (Path(__file__).parents[2] / "fixtures" / "benchmark_model" / capture).read_text(
        errors="replace")
    try:
        whole = parse_benchmark_output(text)
    except BenchmarkOutputError:  # a capture of the GPU delegate's partition log, no timings
        with pytest.raises(BenchmarkOutputError):
            parse_benchmark_output(_benchmark_text(text, "x"))
        return
    cut = parse_benchmark_output(_benchmark_text(text, "x"))
    assert [(r.node_type, r.avg_ms) for r in cut.op_profile] == \
        [(r.node_type, r.avg_ms) for r in whole.op_profile]
    assert cut.inference_avg_ms == whole.inference_avg_ms
