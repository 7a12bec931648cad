"""Benchmark the architecture search's static screen (issue 34, first part).

A grid of one family (default: the inverted-residual image CNN ``mbv2`` over input
resolution x width multiplier) is screened for a microcontroller profile in one call:
one TensorFlow child builds and converts every candidate to int8 (random shape-only
calibration), this process judges each file (offline plan, then the simulator). Reported:

- candidates judged per second (whole screen, wall time);
- the share of the wall time that is conversion (build + int8 conversion, as the child
  measured each), TensorFlow start and child overhead (child wall minus conversions), and
  judging (offline plan + simulate), from the same run;
- how many candidates fit, which budget rejected the others;
- exactness: for every converted file written to disk, the arena ``devicefit simulate
  --json`` (a separate process, the real command) judges equals the screen's, byte for byte.

    .venv/bin/python -m benchmarks.bench_search_screen [--profile P] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.sdk.search import grid, screen  # noqa: E402

RESOLUTIONS = (48, 96, 144)
WIDTHS = (0.35, 0.5, 0.75, 1.0)


def simulate_arena(path: str, profile: str) -> int:
    """The arena budget's figure as ``devicefit simulate --json`` reports it."""
    done = subprocess.run([sys.executable, "-m", "devicefit", "simulate", path, "--profile",
                           profile, "--json"], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode not in (0, 1):
        raise SystemExit(f"devicefit simulate failed on {path}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return int(next(b["value"] for b in report["budgets"] if b["name"] == "arena"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="stm32l4r5-cortex-m4")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    candidates = grid("mbv2", {"input_shape": [(r, r, 3) for r in RESOLUTIONS],
                               "width": list(WIDTHS)}, depth=(1, 2, 3, 2), expansion=4)
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        started = time.perf_counter()
        run = screen(candidates, args.profile, keep=Path(tmp))
        wall = time.perf_counter() - started
        mismatches = []
        for r in run.results:
            if r.path is None:
                continue
            planned = simulate_arena(r.path, args.profile)
            if planned != r.arena_bytes:
                mismatches.append((r.candidate.label(), r.arena_bytes, planned))
    n = len(run.results)
    rejected = Counter(str(b) for r in run.results for b in r.rejected_by)
    figures = {
        "profile": args.profile, "family": "mbv2", "candidates": n,
        "wall_s": round(wall, 2), "candidates_per_s": round(n / wall, 3),
        "conversion_share": round(run.convert_seconds / wall, 3),
        "tf_start_and_child_share": round((run.child_seconds - run.convert_seconds) / wall, 3),
        "judging_share": round(run.judge_seconds / wall, 3),
        "conversion_s_per_candidate": round(run.convert_seconds / n, 2),
        "judging_s_per_candidate": round(run.judge_seconds / n, 3),
        "fit": len(run.fitting), "rejected_by": dict(rejected),
        "offline_plan_lowered": sum(r.offline_plan_saved_bytes > 0 for r in run.results),
        "arena_checked": sum(r.path is not None for r in run.results),
        "arena_mismatches": mismatches,
    }
    for r in run.results:
        band = r.latency_band_ms
        print(f"{r.candidate.label():34} {r.verdict:5} flash {r.flash_bytes or 0:>8} "
              f"arena {r.arena_bytes or 0:>8} (plan -{r.offline_plan_saved_bytes}) latency "
              f"{r.latency_ms or 0:8.1f} ms [{band[0] if band else 0:.0f}-"
              f"{band[1] if band else 0:.0f}] convert {r.convert_seconds:5.2f} s judge "
              f"{r.judge_seconds:5.3f} s {', '.join(r.rejected_by) or r.note}")
    print(json.dumps(figures, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
