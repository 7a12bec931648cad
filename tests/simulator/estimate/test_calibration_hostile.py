"""Hostile board logs and latency tables (issue 50): each input the readers once answered with
a traceback, a hang or a "calibrated" profile of impossible timings gives one InputError line
instead. The CLI's exit code and single line are held in tests/sdk/cli/test_calibrate.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devicefit.simulator.errors import InputError
from devicefit.simulator.estimate.calibration.logs import (
    MAX_LOG_BYTES,
    MAX_TABLE_ROWS,
    OpTime,
    check_tick_rate,
    parse_micro_csv,
    parse_micro_log,
    read_latency_table,
    read_profiler_log,
    runs_of,
)

HEADER = '"Event","Tag","Ticks"'

BAD_LOGS = [
    # OverflowError: int too large to convert to float.
    ("huge-tick", "CONV_2D took " + "9" * 400 + " ticks (1 ms).\n", "64-bit counter"),
    # ValueError: Exceeds the limit (4300 digits).
    ("5000-digit-tick", "CONV_2D took " + "9" * 5000 + " ticks (1 ms).\n", "64-bit counter"),
    ("tick-over-64-bits", f"CONV_2D took {2**64} ticks (1 ms).\n", "64-bit counter"),
    # ValueError: invalid literal for int() with base 10: '3²'.
    ("csv-superscript", f"{HEADER}\n0,CONV_2D,3\u00b2\n", "not a whole number"),
    ("csv-arabic-digits", f"{HEADER}\n0,CONV_2D,\u0663\u0664\n", "not a whole number"),
    ("csv-huge-tick", f"{HEADER}\n0,CONV_2D,{'9' * 400}\n", "64-bit counter"),
    ("csv-negative-tick", f"{HEADER}\n0,CONV_2D,-5\n", "not negative"),
    ("nothing", "hello\n" * 10, "no MicroProfiler lines"),
]


@pytest.mark.parametrize("text, fragment", [c[1:] for c in BAD_LOGS], ids=[c[0] for c in BAD_LOGS])
def test_a_hostile_log_is_one_input_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "uart.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=fragment):
        read_profiler_log(path, 1e6)


def test_a_long_line_is_read_past_not_backtracked_into() -> None:
    """``(\\S+) took`` searched a 100 KB line for a minute (quadratic); the line is not an
    event and the events around it are read. (Time is the benchmark's: bench_fuzz_calibrate.)"""
    long = "x" * 1_000_000 + " took 5 ticks"
    text = f"CONV_2D took 10 ticks (0 ms).\n{long}\n{'y ' * 200_000}\nSOFTMAX took 20 ticks (0 ms).\n"
    assert parse_micro_log(text, 1e3, "log") == [OpTime("CONV_2D", 10.0), OpTime("SOFTMAX", 20.0)]


def test_an_overlong_csv_field_ends_the_table_without_a_csv_error() -> None:
    """A field over the csv module's 128 KiB limit raised _csv.Error."""
    text = f"{HEADER}\n0,CONV_2D,3\n1,\"{'x' * 200_000}\",4\n"
    assert parse_micro_csv(text, 1e3, "log") == [OpTime("CONV_2D", 3.0)]


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf"), 1e-300, 1e44])
def test_an_implausible_tick_rate_is_refused(rate: float) -> None:
    with pytest.raises(InputError, match="a board's timer counts between 1 Hz and 1e"):
        check_tick_rate(rate, "--ticks-per-second")


def test_ticks_that_convert_past_a_day_are_refused() -> None:
    with pytest.raises(InputError, match="which no board measures"):
        parse_micro_log(f"CONV_2D took {2**63} ticks (0 ms).\n", 1.0, "log")


def test_a_run_of_zero_ticks_is_refused() -> None:
    """All-zero ticks made the whole-model figure 0 ms: a division by it in the fit."""
    ops = parse_micro_log("CONV_2D took 0 ticks (0 ms).\nSOFTMAX took 0 ticks (0 ms).\n", 1e3, "log")
    with pytest.raises(InputError, match="run 1 of the log adds up to 0 ms"):
        runs_of(ops, 2, "log")


def test_more_events_than_the_bound_are_refused(tmp_path: Path) -> None:
    text = f"{HEADER}\n" + "0,A,1\n" * 200_001
    with pytest.raises(InputError, match="more than 200,000 op events"):
        parse_micro_csv(text, 1e3, "log")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("where, fragment", [
    ("fifo", "is not a regular file"),  # blocked on open until killed
    ("/dev/zero", "is not a regular file"),  # grew to 21 GB
    ("folder", "is a folder"),
    ("missing", "cannot read the log"),
])
def test_a_log_that_is_not_a_regular_file_is_refused(tmp_path: Path, fifo: Path, where: str,
                                                     fragment: str) -> None:
    path = {"fifo": fifo, "folder": tmp_path, "missing": tmp_path / "nope.txt"}.get(where,
                                                                                   Path(where))
    with pytest.raises(InputError, match=fragment):
        read_profiler_log(path, 1e6)
    with pytest.raises(InputError, match=fragment.replace("the log", "the latency table")):
        read_latency_table(path)


def test_a_log_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 100 MB log took 1.07 GB; a sparse file costs the test nothing."""
    path = tmp_path / "big.txt"
    with path.open("wb") as f:
        f.truncate(MAX_LOG_BYTES + 1)
    with pytest.raises(InputError, match=f"{MAX_LOG_BYTES + 1:,} bytes; the limit is"):
        read_profiler_log(path, 1e6)


BAD_TABLES = [
    # _csv.Error: field larger than field limit (131072).
    ("field-over-128KiB", f"m.tflite,{'1' * 140_000}\n", "a row of 140,009 characters"),
    ("quoted-field-over-128KiB", f"\"{'m' * 140_000}\",5\n", "a row of"),
    # ValueError: embedded null byte (from the path, later).
    ("nul-in-path", "m\0.tflite,5\n", "NUL byte"),
    ("nan", "m.tflite,nan\n", "not a positive number up to"),
    ("inf", "m.tflite,inf\n", "not a positive number up to"),
    ("negative", "m.tflite,-3\n", "not a positive number up to"),
    ("zero", "m.tflite,0\n", "not a positive number up to"),
    ("1e300", "m.tflite,1e300\n", "not a positive number up to"),
    ("5000-digits", f"m.tflite,{'9' * 5000}\n", "a row of"),
    ("too-many-rows", "m.tflite,5\n" * (MAX_TABLE_ROWS + 1), f"more than {MAX_TABLE_ROWS} models"),
    ("not-utf8", "m\xff.tflite,5\n", "not UTF-8"),
]


@pytest.mark.parametrize("text, fragment", [c[1:] for c in BAD_TABLES],
                         ids=[c[0] for c in BAD_TABLES])
def test_a_hostile_latency_table_is_one_input_error(tmp_path: Path, text: str,
                                                    fragment: str) -> None:
    path = tmp_path / "board.csv"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    with pytest.raises(InputError, match=fragment):
        read_latency_table(path)


def test_a_fit_beyond_what_a_profile_takes_writes_no_profile(tmp_path: Path) -> None:
    """A profile already at the largest kernel_scale, on a board 5x slower still: the fit's
    scale would not load as a profile, so it is refused instead of written."""
    from devicefit.simulator.estimate.calibration.fit import Evidence, calibrate, prior_of
    from devicefit.simulator.estimate.calibration.logs import BoardLog
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model
    from tests.zoo import model_path

    path = tmp_path / "slow.yaml"
    path.write_text("extends: stm32l4r5-cortex-m4\ncost_model:\n  kernel_scale: {default: 1000}\n")
    profile = load_profile(path)
    model = read_model(model_path("chain_int8"))
    total = prior_of(model, profile).total({}, 0.0)
    cal = calibrate(profile, [Evidence("chain", model, BoardLog("t.csv", "whole-model latency",
                                                                total_ms=5 * total))])
    with pytest.raises(InputError, match="beyond the 0.001 to 1000 a profile takes"):
        cal.cost_keys(profile.cost_model)
