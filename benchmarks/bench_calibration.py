"""Leave-one-model-out on published board logs: is the calibrated estimate closer to what the
board measured than the uncalibrated one?

For each board, every model with a published figure is held out in turn: ``devicefit
calibrate``'s fit (:func:`simulator.estimate.calibration.fit.calibrate`) on the board's other models
predicts it, and the uncalibrated estimate is the base profile's. A board with one public
model has nothing to hold out: it is listed as blocked, with the in-sample move (calibrated
on the very log it is compared with, so no evidence for the done-when) for the record.

Two sets of boards:

- **per-op logs** (MicroProfiler output published in pull requests): the logs are small
  cited text fixtures (tests/fixtures/tflm_profiler/README.md); the models
are the boards' own public files, read from ``--models DIR`` (``DIR/<file>``, never
downloaded; e.g. ``git show HEAD:tensorflow/lite/micro/models/keyword_scrambled.tflite``
from a tflite-micro checkout), and their sha256 is printed with the result;
- **published whole-model latencies** (``simulator/estimate/latency_data/published.yaml``,
  the MLPerf Tiny, MicroNets, Espressif and XNNPACK figures with their sources): every
  (board, software stack) with two models or more, through ``--latencies``' path
  (whole-model figures), on bench_latency's models. The kernel tables were fitted with these
  very figures, which favours the uncalibrated side; ``--strict`` refits the tables without
  the board first (bench_latency's leave-one-board-out fit: slow), so neither side has seen
  it.

    .venv/bin/python benchmarks/bench_calibration.py --models DIR [--strict]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.estimate.calibration.fit import (  # noqa: E402
    Calibration,
    Evidence,
    calibrate,
)
from devicefit.simulator.estimate.calibration.logs import (  # noqa: E402
    BoardLog,
    read_profiler_log,
    runs_of,
)
from devicefit.simulator.estimate.calibration.match import check_run  # noqa: E402
from devicefit.simulator.estimate.kernels import load_kernels  # noqa: E402
from devicefit.simulator.profile_types import Profile  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402

LOGS = ROOT / "tests" / "fixtures" / "tflm_profiler"


@dataclass(frozen=True)
class Figure:
    """One published figure of one model on one board: a per-op log, or a total."""

    model_file: str
    source: str
    log: str | None = None
    total_ticks: int | None = None


@dataclass(frozen=True)
class Board:
    name: str
    #: The registry's nearest core and kernels (the base the calibration starts from).
    cpu: str
    kernels: str
    ticks_per_second: float
    figures: tuple[Figure, ...]
    note: str


BOARDS = (
    Board("Xtensa Fusion F1 (ISS, F1_190305_swupgrade), TFLM xtensa kernels, Feb 2021",
          # No Fusion F1 core in the registry: the plain Xtensa LX6 (MAC16, no SIMD) with
          # reference kernels is the nearest; the ISS prints 1000 ticks per ms.
          cpu="xtensa-lx6", kernels="reference", ticks_per_second=1e6,
          figures=(
              Figure("keyword_scrambled.tflite",
                     "https://github.com/tensorflow/tensorflow/pull/46864",
                     log="keyword_fusion_f1_pr46864.txt"),
              Figure("person_detect.tflite",
                     "https://github.com/tensorflow/tensorflow/pull/47380 "
                     "('WithPersonDataIterations(1) took 9661310 ticks'; the per-op lines "
                     "are only partly recoverable, so the total is used)",
                     total_ticks=9661310),
          ),
          note="the two figures are 3 weeks of TFLM apart (xa_nnlib conv and depthwise "
               "kernels landed in between, PRs 47378/47380), and the models share no MAC "
               "op kind (SVDF + FC vs conv + depthwise): only the per-op overhead and "
               "SOFTMAX carry over from one to the other"),
    Board("Xtensa Fusion F1 (ISS, F1_190305_swupgrade), TFLM xtensa kernels with xa_nnlib "
          "SVDF, conv and depthwise, Feb 2021",
          cpu="xtensa-lx6", kernels="reference", ticks_per_second=1e6,
          figures=(
              Figure("keyword_scrambled.tflite",
                     "https://github.com/tensorflow/tensorflow/pull/47098 (xa_nnlib SVDF)",
                     log="keyword_fusion_f1_pr47098.txt"),
              Figure("person_detect.tflite",
                     "https://github.com/tensorflow/tensorflow/pull/47380 "
                     "('WithPersonDataIterations(1) took 9661310 ticks')",
                     total_ticks=9661310),
          ),
          note="one xa_nnlib stack: PR 47380 (depthwise) came after 47378 (conv), whose "
               "published log opens with 'KeywordRunNIerations(1) took 38516 ticks', the "
               "keyword figure of 47098 (SVDF), so the keyword run is that of the person "
               "run's build as far as the kernels it uses"),
    Board("Arm Corstone-300 FVP, Cortex-M4 (no FPU), TFLM aa47932 CMSIS-NN, Dec 2024",
          # The FVP's 25 MHz clock; the log's "ticks (ms)" pairs bound the rate to it.
          cpu="cortex-m4", kernels="cmsis-nn", ticks_per_second=25e6,
          figures=(
              Figure("person_detect.tflite",
                     "tflite-micro tensorflow/lite/micro/tools/benchmarking/README.md "
                     "(90b983c2b), its example output",
                     log="person_detect_corstone300_m4_tflm_readme.txt"),
          ),
          note="one public model on this build: nothing to hold out. An FVP is a "
               "functional model, not a cycle-accurate one: its 2.82 M ticks for this "
               "model are 16x fewer than the 45.7 M cycles STM32F446RE's Cortex-M4 "
               "takes for person detection (254 ms at 180 MHz, published.yaml), so this log tests the "
               "reader and the model check, not the tables' timing"),
)


def base_profile(board: Board) -> Profile:
    p = load_profile("esp32-s3")
    return dataclasses.replace(
        p, name=f"{board.cpu}-{board.kernels}",
        device=dataclasses.replace(p.device, cpu=board.cpu, clock_hz=board.ticks_per_second),
        runtime=dataclasses.replace(p.runtime, kernels=board.kernels, version=None))


def evidence(board: Board, models: Path) -> list[Evidence]:
    out = []
    for f in board.figures:
        model = read_model(models / f.model_file)
        if f.log is not None:
            form, ops = read_profiler_log(LOGS / f.log, board.ticks_per_second)
            runs = runs_of(ops, len(model.main.operators), f.log)
            for run in runs:
                check_run(model, run, f.log)
            log = BoardLog(f.log, form, runs)
        else:
            assert f.total_ticks is not None
            log = BoardLog(f.source, "published total",
                           total_ms=f.total_ticks / board.ticks_per_second * 1e3)
        out.append(Evidence(f.model_file, model, log))
    return out


def error(estimate: float, measured: float) -> float:
    return abs(estimate / measured - 1.0) * 100.0


def table(cal: Calibration) -> list[tuple[float, float]]:
    """Prints the board's rows; (uncalibrated, held-out) errors of its held-out models."""
    print("| model | measured ms | uncalibrated ms (err) | held-out calibrated ms (err) "
          "| in-sample calibrated ms |")
    print("|---|---|---|---|---|")
    out = []
    for m in cal.moves:
        held = (f"{m.held_out_ms:.1f} ({error(m.held_out_ms, m.measured_ms):.1f}%, "
                f"{m.held_out_terms})"
                if m.held_out_ms is not None else "blocked: one public model")
        print(f"| {m.name} | {m.measured_ms:.1f} | {m.before_ms:.1f} "
              f"({error(m.before_ms, m.measured_ms):.1f}%) | {held} | {m.after_ms:.1f} |")
        if m.held_out_ms is not None:
            out.append((error(m.before_ms, m.measured_ms), error(m.held_out_ms, m.measured_ms)))
    if out:
        better = sum(b < a for a, b in out)
        print(f"\nheld out closer than uncalibrated: {better}/{len(out)}; median |error| "
              f"{statistics.median(a for a, _ in out):.1f}% uncalibrated, "
              f"{statistics.median(b for _, b in out):.1f}% calibrated; band "
              f"[{cal.band[0]:.2f}, {cal.band[1]:.2f}]")
    print()
    return out


def log_boards(models: Path) -> list[tuple[float, float]]:
    out = []
    for board in BOARDS:
        print(f"### {board.name}\n")
        print(f"base: {board.cpu} + {board.kernels} kernels; {board.note}.\n")
        for f in board.figures:
            sha = hashlib.sha256((models / f.model_file).read_bytes()).hexdigest()
            print(f"- {f.model_file} (sha256 {sha[:16]}…): {f.source}")
        print()
        out += table(calibrate(base_profile(board), evidence(board, models)))
    return out


def published_boards(strict: bool) -> list[tuple[float, float]]:
    from benchmarks import bench_latency as bl

    rows = bl.published()
    stacks: dict[tuple, list] = {}
    for r in rows:
        stacks.setdefault((r.board, r.cpu, r.clock_hz, r.runtime, r.version, r.kernels,
                           r.threads), []).append(r)
    out = []
    single = []
    for key, rs in stacks.items():
        if len(rs) < 2:
            single.append(f"{key[0]} ({key[5]}, {rs[0].model})")
            continue
        data = (load_kernels(bl.apply(bl.fit([r for r in rows if r.board != key[0] and r.fit])))
                if strict else None)
        ev = [Evidence(r.model, bl.model_and_ops(r.model)[0],
                       BoardLog("published.yaml", "published total", total_ms=r.ms)) for r in rs]
        print(f"### {key[0]}: {key[1]} {key[2] / 1e6:g} MHz, {key[3]} {key[4] or ''} "
              f"{key[5]}\n")
        out += table(calibrate(bl.profile_for(rs[0]), ev, data))
    print(f"one figure only (blocked: nothing to hold out): {', '.join(single) or 'none'}\n")
    return out


def summary(name: str, errors: Sequence[tuple[float, float]]) -> None:
    if not errors:
        print(f"{name}: no board with two models")
        return
    better = sum(b < a for a, b in errors)
    print(f"{name}: {len(errors)} held-out figures; calibrated closer on {better}; median "
          f"|error| uncalibrated {statistics.median(a for a, _ in errors):.1f}% vs held-out "
          f"calibrated {statistics.median(b for _, b in errors):.1f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True,
                    help="folder with the log boards' .tflite files")
    ap.add_argument("--strict", action="store_true",
                    help="refit the kernel tables without each published board first")
    args = ap.parse_args(argv)
    missing = [f.model_file for b in BOARDS for f in b.figures
               if not (args.models / f.model_file).exists()]
    if missing:
        print(f"{args.models}: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    print("## Per-op logs\n")
    logs = log_boards(args.models)
    print(f"## Published whole-model latencies{' (strict)' if args.strict else ''}\n")
    totals = published_boards(args.strict)
    summary("per-op log boards", logs)
    summary("published-figure boards", totals)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
