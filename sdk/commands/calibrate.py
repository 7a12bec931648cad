"""``devicefit calibrate``: a profile fitted to what the user's board measured.

Reads each ``--board-log`` as the first form it recognises: ``devicefit bench --json`` output
(its op profile), ``benchmark_model --enable_op_profiling`` text (parsed by
:mod:`sdk.bench.benchmark_output`), or TFLM MicroProfiler output
(:mod:`simulator.estimate.calibration.logs`); ``--latencies`` adds whole-model figures.
"""

from __future__ import annotations

import argparse
import json
import os
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


def _bench_json(data: Any) -> list[OpTime] | None:
    rows = (data.get("bench") or {}).get("results", {}).get("op_profile") \
        if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    return [OpTime(str(r["node_type"]), float(r["avg_ms"])) for r in rows
            if isinstance(r, dict) and r.get("avg_ms") is not None]


def read_log(path: Path, ticks_per_second: float | None) -> tuple[str, list[OpTime]]:
    """(form, op timings) of one log, whatever tool printed it."""
    from devicefit.sdk.bench.benchmark_output import parse_benchmark_output
    from devicefit.simulator.estimate.calibration.logs import read_profiler_log

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the log: {exc.strerror or exc}") from exc
    if text.lstrip().startswith("{"):
        try:
            found = _bench_json(json.loads(text))
        except (ValueError, KeyError, TypeError):
            found = None
        if not found:
            raise InputError(f"{path}: JSON without a bench op profile (run devicefit bench "
                             f"with --op-profiling --json)")
        return "devicefit bench op profile", found
    if "Run Order" in text:
        rows = parse_benchmark_output(text).op_profile
        return "benchmark_model op profiling", [OpTime(r.node_type, r.avg_ms or 0.0)
                                                for r in rows]
    return read_profiler_log(path, ticks_per_second)


def _calibrate(args: argparse.Namespace) -> int:
    import yaml

    from devicefit.sdk.options import profile_inputs
    from devicefit.simulator.estimate.calibration.fit import Evidence, calibrate, moved_percent
    from devicefit.simulator.estimate.calibration.logs import read_latency_table, runs_of
    from devicefit.simulator.estimate.calibration.match import check_run, check_sha256
    from devicefit.simulator.infra.fileio import check_outputs, write_atomic
    from devicefit.simulator.infra.units import format_time_ms, parse_frequency_hz
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model

    if len(args.board_log) != len(args.model):
        raise UsageError(f"give one --board-log per --model ({len(args.model)} model(s), "
                         f"{len(args.board_log)} log(s))")
    if len(args.sha256) > len(args.model):
        raise UsageError("more --sha256 than --model")
    if not args.model and not args.latencies:
        raise UsageError("give --model with --log, or --latencies")
    if args.ticks_per_second is not None and not args.ticks_per_second > 0:
        raise UsageError("--ticks-per-second must be a positive number")
    try:
        rate = parse_frequency_hz(args.clock) if args.clock else args.ticks_per_second
    except ValueError as exc:
        raise UsageError(f"--clock: {exc}") from exc
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
    write_atomic(out, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True),
                 inputs=[*models, *args.board_log, *profile.files])
    print(f"wrote {out}: extends {doc['extends']}")
    print(f"evidence: {len(evidence)} model(s); band "
          f"[{cal.band[0]:.2f}, {cal.band[1]:.2f}] ({cal.band_basis})")
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
    print(f"  per-op overhead {cal.extra_overhead_ms * 1e3 + 0.0:+.3g} us")
    return 0


def _parent_ref(profile: Profile, out: Path, dirs: list[str | Path] | None) -> str:
    """The parent by name where that name finds this very file, else by relative path."""
    from devicefit.simulator.profiles import load_profile

    try:
        if load_profile(profile.name, dirs).path.resolve() == profile.path.resolve():
            return str(profile.name)
    except InputError:
        pass
    return os.path.relpath(profile.path.resolve(), out.resolve().parent)
