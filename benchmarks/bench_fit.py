"""Benchmark ``devicefit fit``: accuracy vs size vs arena of every candidate the search
tried on scikit-learn's digits (shipped inside scikit-learn: no download), and the time the
search took.

The model is the digits CNN of ``examples/digits.py`` (8 epochs, ~98.6 % test accuracy).
Its plain int8 conversion needs ~173 KiB of flash (100 KiB of it TFLM code) and ~6.7 KB of
arena, so two tight custom profiles (extending ``stm32l4r5-cortex-m4``) force the search to
prune: "tight" (flash 132 KiB, arena 4500 B) and "tighter" (flash 116 KiB, arena 3600 B).
The chosen candidate is verified with ``simulate(run=True)`` (the real TFLM run).

    .venv/bin/python benchmarks/bench_fit.py [--max-trials 12] [--epochs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from devicefit.sdk.convert.spec import FineTuning  # noqa: E402
from devicefit.sdk.fit import FitSpec, SearchSettings, fit  # noqa: E402
from devicefit.sdk.fit.report import FitReport, latency_text  # noqa: E402
from devicefit.simulator.infra.units import format_size  # noqa: E402
from examples.digits import cached_cnn, load_digits  # noqa: E402

PROFILES = {"tight": {"flash": "132KiB", "arena": "4500B"},
            "tighter": {"flash": "116KiB", "arena": "3600B"}}
BASE = "stm32l4r5-cortex-m4"


def write_profile(folder: Path, name: str, budgets: dict[str, str]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text("\n".join([f"name: {name}", f"extends: {BASE}", "budgets:",
                               *(f"  {k}: {v}" for k, v in budgets.items())]) + "\n")
    return path


def markdown(report: FitReport, wall_s: float) -> str:
    lines = [f"### {report.profile}: flash ≤ {format_size(report.budgets.flash)}, arena ≤ "
             f"{format_size(report.budgets.arena)}",
             "",
             f"Float model: {report.float_accuracy:.2%} on {report.eval_samples} test images. "
             f"Search: {len(report.trials)} trials in {report.search_seconds:.0f} s "
             f"(whole run with verification: {wall_s:.0f} s).",
             "",
             "| # | candidate | accuracy | flash | arena | est. latency | gzip | verdict | time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in report.trials:
        skipped = t.stage in ("skipped", "error")
        verdict = ("**PASS, chosen**" if t.number == report.chosen else
                   "pass" if t.fits else f"fail ({t.note or t.stage})")
        lines.append(
            f"| {t.number} | {t.candidate.label()} | "
            f"{'-' if t.accuracy is None else f'{t.accuracy:.2%}'} | "
            f"{'-' if skipped else format_size(t.flash_bytes)} | "
            f"{'-' if skipped else format_size(t.arena_bytes)} | "
            f"{'-' if skipped or t.latency_ms is None else latency_text(t)} | "
            f"{'-' if skipped else format_size(t.payload.gzip_bytes)} | {verdict} | {t.seconds:.1f} s |")
    if report.found:
        measured = report.verification.measured if report.verification else None
        lines += ["", f"Chosen: {report.reason}. Accuracy loss {report.accuracy_loss_pp:.2f} "
                  f"pp; TFLM measured arena "
                  f"{format_size(measured.arena_bytes if measured else None)}."]
    else:
        lines += ["", "Nothing fits; closest: " + "; ".join(
            f"{m.budget} over by {m.over_fraction:+.1%}" for m in report.closest_misses)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    digits = load_digits()
    model = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        folder = Path(tmp)
        paths = digits.save_npz(folder)
        for name, budgets in PROFILES.items():
            started = time.perf_counter()
            spec = FitSpec(FineTuning(str(paths["train"]), args.epochs), str(paths["test"]),
                           search=SearchSettings(max_trials=args.max_trials))
            report = fit(str(model), write_profile(folder, name, budgets),
                         folder / f"{name}.tflite", spec)
            wall = time.perf_counter() - started
            print(markdown(report, wall) + "\n", flush=True)
            results[name] = {**report.to_dict(), "wall_seconds": wall}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
