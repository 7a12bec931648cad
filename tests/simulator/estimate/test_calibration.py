"""Calibration readers, the log/model check and the fit (no TensorFlow: zoo models are cached
.tflite files, and the real logs are published MicroProfiler output, tests/fixtures/tflm_profiler)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from devicefit.simulator.errors import InputError
from devicefit.simulator.estimate.calibration.fit import (
    BAND_MIN_MODELS,
    Evidence,
    calibrate,
    prior_of,
)
from devicefit.simulator.estimate.calibration.logs import (
    BoardLog,
    OpTime,
    parse_micro_csv,
    parse_micro_log,
    read_latency_table,
    read_profiler_log,
    runs_of,
)
from devicefit.simulator.estimate.calibration.match import check_run, check_sha256
from devicefit.simulator.estimate.kernels import kernel_data
from devicefit.simulator.estimate.latency import estimate_band, profile_core
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import read_model
from tests.paths import TESTS
from tests.zoo import model_path

LOGS = TESTS / "fixtures" / "tflm_profiler"
KEYWORD = LOGS / "keyword_fusion_f1_pr46864.txt"
PERSON = LOGS / "person_detection_fusion_f1_pr47380_excerpt.txt"
CORSTONE = LOGS / "person_detect_corstone300_m4_tflm_readme.txt"
#: keyword_scrambled.tflite's operators (tflite-micro tensorflow/lite/micro/models/).
KEYWORD_OPS = ["QUANTIZE", "SVDF", "FULLY_CONNECTED", "SVDF", "FULLY_CONNECTED", "SVDF",
               "FULLY_CONNECTED", "SVDF", "FULLY_CONNECTED", "SVDF", "SVDF", "SVDF",
               "FULLY_CONNECTED", "SOFTMAX", "QUANTIZE"]
#: The Fusion F1 ISS's rate: its log prints 1000 ticks per ms.
ISS_RATE = 1e6


def test_micro_log_reads_the_published_keyword_benchmark_output() -> None:
    form, ops = read_profiler_log(KEYWORD, ISS_RATE)
    assert form == "MicroProfiler log"
    # The runner's own lines (InitializeKeywordRunner, KeywordRunNIerations) are not ops.
    assert [o.op for o in ops] == KEYWORD_OPS
    assert ops[1] == OpTime("SVDF", 37.998)
    # The published per-op ticks add up to the run's total, 152628 ticks.
    assert sum(o.ms for o in ops) == pytest.approx(152.628)


def test_micro_log_of_the_xa_nnlib_keyword_build() -> None:
    """PR 47098's keyword log (xa_nnlib SVDF on the Fusion F1): the same 15 ops, their ticks
    adding up to the run's published total, 38516."""
    _, ops = read_profiler_log(LOGS / "keyword_fusion_f1_pr47098.txt", ISS_RATE)
    assert [o.op for o in ops] == KEYWORD_OPS
    assert sum(o.ms for o in ops) == pytest.approx(38.516)


def test_micro_log_with_lines_after_the_ops_is_read() -> None:
    """tflite-micro's generic benchmark README: person_detect.tflite on Corstone-300 (Cortex-M4,
    CMSIS-NN), its 31 op lines between the tool's "Unique Tag" tables and CRC lines (a log
    whose last line is not an op event was refused before)."""
    form, ops = read_profiler_log(CORSTONE, 25e6)
    assert form == "MicroProfiler log" and len(ops) == 31
    assert [o.op for o in ops[:3]] == ["DEPTHWISE_CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D"]
    assert [o.op for o in ops[-4:]] == ["AVERAGE_POOL_2D", "CONV_2D", "RESHAPE", "SOFTMAX"]
    # The op lines add up to the tool's "total number of ticks" of the run, 2820774; the
    # per-tag summary rows ("CONV_2D, 1817013") are not op events.
    assert sum(o.ms for o in ops) * 25e3 == pytest.approx(2820774)


def test_micro_csv_reads_logcsv_layout() -> None:
    """No published LogCsv() output was found: the keyword log's ticks in LogCsv()'s layout
    (micro_profiler.cc: a "Event","Tag","Ticks" header, then index,tag,ticks), twice (two
    runs), inside other console lines."""
    _, ops = read_profiler_log(KEYWORD, ISS_RATE)
    table = ['"Event","Tag","Ticks"',
             *(f"{i},{o.op},{round(o.ms * 1000)}" for i, o in enumerate(ops))]
    text = "\n".join(["boot", *table, "RunNIerations(1) took 1 ticks (0 ms)", *table, ""])
    read = parse_micro_csv(text, ISS_RATE, "log.csv")
    assert read == ops + ops
    assert len(runs_of(read, len(KEYWORD_OPS), "log.csv")) == 2


def test_ticks_need_a_rate() -> None:
    with pytest.raises(InputError, match="--ticks-per-second, or --clock"):
        parse_micro_log(KEYWORD.read_text(), None, str(KEYWORD))


def test_a_cut_log_is_not_the_log_of_the_model() -> None:
    """The person-detection log as far as it could be recovered (14 of person_detect's 31 ops)."""
    _, ops = read_profiler_log(PERSON, ISS_RATE)
    assert len(ops) == 14 and ops[0].op == "DEPTHWISE_CONV_2D"
    with pytest.raises(InputError, match="14 op events, the model has 31 operators"):
        runs_of(ops, 31, str(PERSON))


def test_the_keyword_log_does_not_match_another_model() -> None:
    model = read_model(model_path("chain_int8"))
    _, ops = read_profiler_log(KEYWORD, ISS_RATE)
    with pytest.raises(InputError, match="15 operators per run, the model 8"):
        check_run(model, tuple(ops), "kw.txt")
    # Same count, other types: named at the first op that differs.
    wrong = tuple(OpTime(n, 1.0) for n in ["CONV_2D", "DEPTHWISE_CONV_2D", *KEYWORD_OPS[2:8]])
    with pytest.raises(InputError, match="op 1 is CONV_2D in the model but DEPTHWISE_CONV_2D"):
        check_run(model, wrong, "kw.txt")


def test_sha256_is_checked(tmp_path: Path) -> None:
    path = model_path("chain_int8")
    check_sha256(path, hashlib.sha256(path.read_bytes()).hexdigest().upper())
    with pytest.raises(InputError, match="is not the 00ff"):
        check_sha256(path, "00ff")


def test_latency_table(tmp_path: Path) -> None:
    table = tmp_path / "board.csv"
    table.write_text("model,ms\nkws.tflite, 12.5\n# a note\n\nsub/vww.tflite,80\n")
    assert read_latency_table(table) == [(tmp_path / "kws.tflite", 12.5),
                                         (tmp_path / "sub" / "vww.tflite", 80.0)]
    table.write_text("kws.tflite,12\nvww.tflite,fast\n")
    with pytest.raises(InputError, match=r"board.csv:2: expected 'model file, ms'"):
        read_latency_table(table)
    table.write_text("kws.tflite,-1\n")
    with pytest.raises(InputError, match="not a positive number"):
        read_latency_table(table)


def _board_log(model_name: str, factors: dict[str, float], extra_ms: float = 0.0) -> BoardLog:
    """What a board whose kernels are ``factors`` × the tables' would print for the model
    (a stand-in board: no MCU here; the factors are what the fit must find)."""
    profile = load_profile("stm32l4r5-cortex-m4")
    model = read_model(model_path(model_name))
    prior = prior_of(model, profile)
    run = tuple(OpTime(op.op_name, factors.get(g, 1.0) * c + prior.overhead_ms + extra_ms)
                for op, g, c in zip(model.main.operators, prior.groups, prior.cycles_ms,
                                    strict=True))
    return BoardLog(f"{model_name}.txt", "MicroProfiler log", (run,))


def test_per_op_timings_move_each_group_toward_the_board() -> None:
    """A board 1.6x slower than the tables on everything, its convolutions 2x, its
    depthwise ones 1.3x: the fit finds the board's factor and each group's own."""
    profile = load_profile("stm32l4r5-cortex-m4")
    groups = ("conv.int8", "conv1x1.int8", "depthwise.int8", "fully_connected.int8",
              "elementwise.int8")
    board = {**dict.fromkeys(groups, 1.6), "conv.int8": 2.0, "depthwise.int8": 1.3}
    log = _board_log("chain_int8", board)
    cal = calibrate(profile, [Evidence("chain", read_model(model_path("chain_int8")), log)])
    (move,) = cal.moves
    # Most of the way, not all: the prior holds the groups back a little.
    assert abs(move.after_ms - move.measured_ms) < 0.2 * abs(move.before_ms - move.measured_ms)
    for g, factor in board.items():
        assert abs(cal.scale[g] - factor) < 0.5 * abs(factor - 1.0), (g, cal.scale[g])
    # Ops of a kind this model lacks (an LSTM) take the board's factor, not the tables' 1.
    assert 1.3 < cal.scale["default"] < 1.7
    assert "1 model" in cal.band_basis and "base profile's" in cal.band_basis


def test_one_total_moves_the_estimate_part_way_and_keeps_the_prior_shape() -> None:
    profile = load_profile("stm32l4r5-cortex-m4")
    model = read_model(model_path("chain_int8"))
    prior = prior_of(model, profile)
    before = prior.total({}, 0.0)
    log = BoardLog("board.csv", "whole-model latency", total_ms=2.0 * before)
    cal = calibrate(profile, [Evidence("chain", model, log)])
    after = cal.moves[0].after_ms
    assert before < after < 2.0 * before
    assert after > 1.5 * before  # one precise figure outweighs the ±40% prior
    assert all(s > 1.0 for s in cal.scale.values())


def _uniform_board(names: Sequence[str], factor: float = 1.6) -> list[Evidence]:
    board = {g: factor for g in ("conv.int8", "conv1x1.int8", "depthwise.int8",
                                 "fully_connected.int8", "elementwise.int8")}
    return [Evidence(n, read_model(model_path(n)), _board_log(n, board)) for n in names]


def test_two_models_move_the_estimates_but_not_the_band() -> None:
    """Two models held out in turn give two ratios, not a band: the band stays the base
    profile's (widened to hold them) and its basis says on how little it rests (issue 46:
    two whole-model figures narrowed ±20 % to ±3 % without a word)."""
    profile = load_profile("stm32l4r5-cortex-m4")
    cal = calibrate(profile, _uniform_board(("chain_int8", "mlp_int8")))
    for m in cal.moves:
        assert m.held_out_ms is not None
        # Held out, each model is still predicted better than by the tables alone (the other
        # model carries the shared fully connected cost and the per-op overhead).
        assert abs(m.held_out_ms / m.measured_ms - 1) < abs(m.before_ms / m.measured_ms - 1)
    ratios = [m.measured_ms / m.held_out_ms for m in cal.moves]  # type: ignore[operator]
    (base_low, base_high), _ = estimate_band(profile, profile_core(profile), kernel_data(),
                                             read_model(model_path("chain_int8")))
    low, high = cal.band
    assert (low, high) == (min(base_low, *ratios), max(base_high, *ratios))
    assert high - low > max(ratios) - min(ratios)  # not the two ratios' range
    assert "2 models" in cal.band_basis and "2 held-out models are too few" in cal.band_basis
    assert f"it takes {BAND_MIN_MODELS}" in cal.band_basis


def test_enough_models_make_a_band_of_their_own() -> None:
    names = ("chain_int8", "mlp_int8", "residual_int8", "branches_int8", "two_heads_int8",
             "inception_int8", "mobilenet_v1_96_int8", "deep_mlp_int8")
    assert len(names) == BAND_MIN_MODELS
    cal = calibrate(load_profile("stm32l4r5-cortex-m4"), _uniform_board(names))
    assert f"{BAND_MIN_MODELS} models" in cal.band_basis
    assert cal.band_basis.endswith("leave-one-model-out residuals")
    low, high = cal.band
    ratios = [m.measured_ms / m.held_out_ms for m in cal.moves]  # type: ignore[operator]
    assert (low, high) == (min(1.0, *ratios), max(1.0, *ratios))


def test_kernel_scale_multiplies_the_named_groups_and_default_the_rest(tmp_path: Path) -> None:
    model = read_model(model_path("chain_int8"))
    base = prior_of(model, load_profile("stm32l4r5-cortex-m4"))
    path = tmp_path / "scaled.yaml"
    path.write_text("extends: stm32l4r5-cortex-m4\ncost_model:\n"
                    "  kernel_scale: {conv.int8: 3.0, default: 2.0}\n")
    scaled = prior_of(model, load_profile(path))
    for g, before, after in zip(base.groups, base.cycles_ms, scaled.cycles_ms, strict=True):
        assert after == pytest.approx(before * (3.0 if g == "conv.int8" else 2.0))


@pytest.mark.parametrize("scale, why", [
    ("{convolution.int8: 2}", "'convolution.int8' is not 'default' or <kind>.<dtype>"),
    ("{conv.int8: 0}", "a scale must be between 0.001 and 1000"),
    ("{default: 1180591620717411303424}", "a scale must be between 0.001 and 1000"),
    ("[2]", "expected a mapping"),
])
def test_kernel_scale_keys_are_checked(tmp_path: Path, scale: str, why: str) -> None:
    from devicefit.simulator.errors import ProfileError

    path = tmp_path / "bad.yaml"
    path.write_text(f"extends: stm32l4r5-cortex-m4\ncost_model:\n  kernel_scale: {scale}\n")
    with pytest.raises(ProfileError, match=f"bad.yaml:3: bad value for 'cost_model.kernel_scale'.*{why}"):
        load_profile(path)
