"""How the static analysis scales on hostile but valid graphs (issue 24).

For each family the size doubles; the ratio of the time at 2n to the time at n is ~2 for
linear work, ~2.1-2.3 for n log n, 4 for quadratic. Measured in one run, so machine load
affects both sides alike:

- ``chain``: n RELU operators in a row (n tensors, n operators);
- ``unused``: one RELU and n activation tensors no operator touches (TFLM plans all of them
  at one step, which made the greedy planner and the plan check quadratic);
- ``nested IF``: IF subgraphs whose two branches both call the next level, depth d (2**d
  operators executed): the analysis visits each subgraph once, so time grows with d, not
  2**d (run with a --max-ops bound of 2**20 that lets depth 17 through).

    .venv/bin/python benchmarks/bench_hostile_graphs.py [--json out.json]
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


def _seconds(data: bytes, folder: Path, repeat: int = 3) -> float:
    from devicefit.simulator.simulate import simulate

    path = folder / "m.tflite"
    path.write_bytes(data)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        simulate(path, "esp32-s3")
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    from tests import hostile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["DEVICEFIT_MAX_OPS"] = str(2**20)
    families = {
        "chain (operators)": (hostile.relu_chain, [2500, 5000, 10_000, 20_000]),
        "unused (tensors)": (hostile.unused_tensors, [12_500, 25_000, 50_000, 100_000]),
        "nested IF (depth)": (hostile.nested_if, [14, 15, 16, 17]),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, sizes) in families.items():
            times = [_seconds(build(n), Path(tmp)) for n in sizes]
            ratios = [b / a for a, b in zip(times, times[1:])]
            rows.append({"family": name, "sizes": sizes, "seconds": times, "ratios": ratios})
            print(f"{name:<18} " + "  ".join(f"{n:>7}: {t:6.3f} s" for n, t in zip(sizes, times))
                  + "   doubling ratios " + ", ".join(f"{r:.2f}" for r in ratios), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
