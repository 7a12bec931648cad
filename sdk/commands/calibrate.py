"""``devicefit calibrate``: a profile fitted to what the user's board measured.

Reads each ``--board-log`` as the first form it recognises: ``devicefit bench --json`` output
(its op profile), ``benchmark_model --enable_op_profiling`` text (parsed by
:mod:`sdk.bench.benchmark_output`), or TFLM MicroProfiler output
(:mod:`simulator.estimate.calibration.logs`); ``--latencies`` adds whole-model figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.estimate.calibration.logs import BoardLog, OpTime

if TYPE_CHECKING:
    from devicefit.simulator.profile_types import Profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        description="Fit the profile's cost terms (per op kind and dtype, per-op overhead) "
                    "to per-operator timings the board printed (TFLM MicroProfiler log or "
                    "CSV, benchmark_model's op profiling, devicefit bench --json) or "
                    "to whole-model latencies, with today's kernel tables as the prior, and "
                    "write a profile that extends PROFILE with the fitted cost_model and "
                    "error_band. Exit 0, 2 on bad input.",
        epilog="example: devicefit calibrate --profile stm32l4r5-cortex-m4 --model kws.tflite "
               "--board-log uart.txt --clock 120MHz -o my-board.yaml")
    p.add_argument("--profile", required=True, metavar="NAME", help="the profile to start from")
    p.add_argument("--model", action="append", default=[], metavar="MODEL.tflite",
                   help="a model the board ran (repeat; the Nth --board-log is its log)")
    p.add_argument("--board-log", dest="board_log", action="append", default=[], metavar="LOG",
                   help="what the board printed for the Nth --model")
    p.add_argument("--sha256", action="append", default=[], metavar="HEX",
                   help="sha256 of the Nth --model as the board ran it (checked)")
    p.add_argument("--latencies", metavar="TABLE.csv",
                   help="whole-model latencies: rows 'model file, ms' (paths relative to it)")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--ticks-per-second", type=float, metavar="N",
                      help="the MicroProfiler timer's rate")
    rate.add_argument("--clock", metavar="FREQ",
                      help="the MicroProfiler ticks are CPU cycles at this clock (e.g. 120MHz)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.yaml",
                   help="the calibrated profile to write")
    p.set_defaults(handler=_calibrate)


#: Where a ``--clock`` may lie: the slowest microcontroller clocks to the fastest cores.
CLOCK_HZ = (1e3, 1e10)
#: benchmark_model output handed to its parser: whitespace-free runs cut to this many
#: characters (no op type or figure is longer), and at most this many lines.
_RUN_CHARS = 64
_MAX_BENCH_LINES = 200_000
_LONG_RUN = re.compile(rf"(\S{{{_RUN_CHARS}}})\S+")
_TIMINGS = "timings in us"


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _bench_json(data: Any, source: str) -> list[OpTime]:
    """The op profile of ``devicefit bench --json`` output: ``bench.results.op_profile``,
    rows with ``node_type`` and ``avg_ms`` (rows without a time are skipped, as bench does)."""
    from devicefit.simulator.estimate.calibration.logs import MAX_EVENTS, MAX_MS, op_time

    rows = _field(_field(_field(data, "bench"), "results"), "op_profile")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{source}: JSON without a bench op profile (run devicefit bench "
                         f"with --op-profiling --json)")
    if len(rows) > MAX_EVENTS:
        raise InputError(f"{source}: an op profile of {len(rows):,} rows; the limit is "
                         f"{MAX_EVENTS:,}")
    out = []
    for i, row in enumerate(rows):
        name, ms = _field(row, "node_type"), _field(row, "avg_ms")
        if ms is None and isinstance(name, str):
            continue
        if not isinstance(name, str) or not name or isinstance(ms, bool) \
                or not isinstance(ms, (int, float)):
            raise InputError(f"{source}: op_profile row {i} is not a node_type with a "
                             f"number avg_ms")
        # Above MAX_MS is refused anyway; float() of a 400-digit integer would overflow.
        out.append(op_time(name, float(ms) if abs(ms) <= MAX_MS else math.inf,
                           f"{source}: op_profile row {i}"))
    return out


def _benchmark_text(text: str, source: str) -> str:
    """What of ``benchmark_model`` output its parser is handed. Its patterns cost the square
    of a whitespace-free run (and of a timings line) on each line: hostile lines took 8 s a
    MiB. So each line is cut to ``MAX_LINE_CHARS``, its runs to ``_RUN_CHARS``, and only the
    last timings line is kept (its figures override the earlier ones anyway; calibrate
    needs only the op profile)."""
    from devicefit.simulator.estimate.calibration.logs import MAX_LINE_CHARS, numbered_lines

    lines = []
    for n, line in numbered_lines(text):
        if n > _MAX_BENCH_LINES:
            raise InputError(f"{source}: benchmark_model output of more than "
                             f"{_MAX_BENCH_LINES:,} lines")
        lines.append(_LONG_RUN.sub(r"\1", line[:MAX_LINE_CHARS]))
    last = max((i for i, line in enumerate(lines) if _TIMINGS in line), default=-1)
    return "\n".join(line for i, line in enumerate(lines) if i == last or _TIMINGS not in line)


def _benchmark_ops(text: str, source: str) -> list[OpTime]:
    from devicefit.sdk.bench.benchmark_output import BenchmarkOutputError, parse_benchmark_output
    from devicefit.simulator.estimate.calibration.logs import op_time

    try:
        rows = parse_benchmark_output(_benchmark_text(text, source)).op_profile
    except BenchmarkOutputError as exc:
        raise InputError(f"{source}: {exc}") from None
    if not rows:
        raise InputError(f"{source}: benchmark_model output without a Run Order op profile "
                         f"(run it with --enable_op_profiling=true)")
    return [op_time(r.node_type, math.nan if r.avg_ms is None else r.avg_ms,
                    f"{source}: Run Order row {i}") for i, r in enumerate(rows)]


def read_log(path: Path, ticks_per_second: float | None) -> tuple[str, list[OpTime]]:
    """(form, op timings) of one log, whatever tool printed it."""
    from devicefit.simulator.estimate.calibration.logs import parse_profiler_log, read_board_text

    text = read_board_text(path, "log")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting thousands deep
            raise InputError(f"{path}: not JSON ({str(exc)[:80]})") from None
        return "devicefit bench op profile", _bench_json(data, str(path))
    if "Run Order" in text:
        return "benchmark_model op profiling", _benchmark_ops(text, str(path))
    return parse_profiler_log(text, ticks_per_second, str(path))


def _calibrate(args: argparse.Namespace) -> int:
    import yaml

    from devicefit.sdk.options import profile_inputs
    from devicefit.simulator.estimate.calibration.fit import (
        BAND_MIN_MODELS,
        Evidence,
        calibrate,
        moved_percent,
    )
    from devicefit.simulator.estimate.calibration.logs import read_latency_table, runs_of
    from devicefit.simulator.estimate.calibration.match import check_run, check_sha256
    from devicefit.simulator.infra.fileio import check_outputs, write_atomic
    from devicefit.simulator.infra.units import format_time_ms
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model

    if len(args.board_log) != len(args.model):
        raise UsageError(f"give one --board-log per --model ({len(args.model)} model(s), "
                         f"{len(args.board_log)} log(s))")
    if len(args.sha256) > len(args.model):
        raise UsageError("more --sha256 than --model")
    if not args.model and not args.latencies:
        raise UsageError("give --model with --log, or --latencies")
    rate = _tick_rate(args)
    profile = load_profile(args.profile, args.profiles_dir)
    table = read_latency_table(Path(args.latencies)) if args.latencies else []
    models = [Path(m) for m in args.model] + [m for m, _ in table]
    check_outputs([("-o", args.output)],
                  [*(("model", m) for m in models), *(("--board-log", Path(x)) for x in args.board_log),
                   *([("--latencies", Path(args.latencies))] if args.latencies else []),
                   *profile_inputs(profile)])
    evidence = []
    for i, (model_path, log_path) in enumerate(zip(args.model, args.board_log, strict=True)):
        model = read_model(model_path)
        if i < len(args.sha256):
            check_sha256(Path(model_path), args.sha256[i])
        form, ops = read_log(Path(log_path), rate)
        runs = runs_of(ops, len(model.main.operators), log_path)
        for run in runs:
            check_run(model, run, log_path)
        evidence.append(Evidence(Path(model_path).name, model, BoardLog(log_path, form, runs)))
    for model_path, ms in table:
        evidence.append(Evidence(model_path.name, read_model(model_path),
                                 BoardLog(str(args.latencies), "whole-model latency",
                                          total_ms=ms)))
    cal = calibrate(profile, evidence)
    out = Path(args.output)
    doc = {"name": out.stem, "extends": _parent_ref(profile, out, args.profiles_dir),
           "description": f"{profile.name} calibrated on the board "
                          f"({', '.join(e.name for e in evidence)})",
           "cost_model": cal.cost_keys(profile.cost_model)}
    # The estimates move with one model; the band narrows only on enough of them.
    few = (f"the band rests on {len(evidence)} model(s), so it stays the base profile's: "
           f"give {BAND_MIN_MODELS} or more (--model/--board-log pairs, --latencies rows) "
           f"for a band of the board's own") if len(evidence) < BAND_MIN_MODELS else None
    said = (f"Written by devicefit calibrate from {len(evidence)} model(s) the board ran"
            + (f"; {few}" if few else "") + ". cost_model.calibration says more.")
    header = "".join(f"# {line}\n" for line in textwrap.wrap(said, 88))
    write_atomic(out, header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True),
                 inputs=[*models, *args.board_log, *profile.files])
    print(f"wrote {out}: extends {doc['extends']}")
    print(f"evidence: {len(evidence)} model(s); band "
          f"[{cal.band[0]:.2f}, {cal.band[1]:.2f}] ({cal.band_basis})")
    if few:
        print(f"note: {few}")
    for m in cal.moves:
        what = f"{m.ops_timed} ops timed" if m.ops_timed else "whole model"
        held = (f", held out {format_time_ms(m.held_out_ms)}" if m.held_out_ms is not None
                else "")
        print(f"  {m.name}: measured {format_time_ms(m.measured_ms)} ({m.form}, {what}); "
              f"estimate {format_time_ms(m.before_ms)} -> {format_time_ms(m.after_ms)} "
              f"({moved_percent(m):+.1f}%){held}")
    print(f"fitted terms (chosen by their evidence): {cal.terms_said}")
    for g, s in sorted(cal.scale.items()):
        print(f"  {'other ops (default)' if g == 'default' else g}: cycles x{s:.3f}")
    extra = cal.extra_overhead_ms
    print(f"  per-op overhead {'-' if extra < 0 else '+'}{format_time_ms(abs(extra))}")
    return 0


def _tick_rate(args: argparse.Namespace) -> float | None:
    """The MicroProfiler tick rate the flags give (None: neither given), range-checked."""
    from devicefit.simulator.estimate.calibration.logs import check_tick_rate
    from devicefit.simulator.infra.units import parse_frequency_hz

    if args.ticks_per_second is not None:
        return check_tick_rate(args.ticks_per_second, "--ticks-per-second")
    if not args.clock:
        return None
    try:
        hz = parse_frequency_hz(args.clock)
    except ValueError as exc:
        raise UsageError(f"--clock: {exc}") from exc
    low, high = CLOCK_HZ
    if not low <= hz <= high:
        raise UsageError(f"--clock {args.clock[:40]}: a CPU clock is between "
                         f"{low / 1e3:g} kHz and {high / 1e9:g} GHz")
    return hz


def _parent_ref(profile: Profile, out: Path, dirs: list[str | Path] | None) -> str:
    """The parent by name where that name finds this very file, else by relative path."""
    from devicefit.simulator.profiles import load_profile

    try:
        if load_profile(profile.name, dirs).path.resolve() == profile.path.resolve():
            return str(profile.name)
    except InputError:
        pass
    return os.path.relpath(profile.path.resolve(), out.resolve().parent)
