"""Scale: ``check`` over many targets (time, results and page sizes) and ``optimize`` over
long graphs (time and peak memory per operator).

- ``check``: a project of n targets (small int8-like models built in code, each on two MCU
  profiles), run as CI would (a fresh process) with ``--results`` and ``--html``, with the
  default ``--details auto`` (beyond 100 targets a passing one keeps its summary) and with
  ``--details all``. Prints seconds, bytes per target and the ratio of 2n to n (≈ 2: linear).
- ``optimize``: a chain of n RELU operators, in a fresh process each; peak resident memory
  (``ru_maxrss`` of the child) and seconds, and the ratios of 2n to n.

Ratios are measured in one run, so the machine's load weighs on both sides alike.

    .venv/bin/python benchmarks/bench_scale.py [--targets 250,500,1000] [--ops 5000,10000,20000]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEVICEFIT = [sys.executable, "-m", "devicefit"]
PROFILES = ("esp32-s3", "stm32l4r5-cortex-m4")


def _child(argv: list[str]) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one fresh devicefit process running ``argv``."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, r.returncode)")
    out = subprocess.run([sys.executable, "-c", code, *DEVICEFIT, *argv], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    seconds, rss, rc = out.stdout.split()
    if int(rc) not in (0, 1):
        raise SystemExit(f"devicefit {' '.join(argv[:2])} failed with status {rc}")
    return float(seconds), int(rss)


def check_scale(counts: list[int], folder: Path) -> list[dict]:
    from tests import hostile

    models = folder / "models"
    models.mkdir()
    rows = []
    for n in counts:
        lines = ["models:"]
        for i in range(n // len(PROFILES)):
            path = models / f"m{i}.tflite"
            if not path.exists():
                path.write_bytes(hostile.relu_chain(8 + i % 8))
            lines += [f"  - name: m{i}", f"    path: {path}",
                      f"    profiles: [{', '.join(PROFILES)}]"]
        project = folder / f"p{n}.yaml"
        project.write_text("\n".join(lines) + "\n")
        for details in ("auto", "all"):
            results, page = folder / f"r{n}{details}.json", folder / f"r{n}{details}.html"
            seconds, rss = _child(["check", str(project), "--details", details,
                                   "--results", str(results), "--html", str(page)])
            rows.append({"targets": n, "details": details, "seconds": seconds,
                         "peak_rss_mb": rss / 2**20, "results_bytes": results.stat().st_size,
                         "html_bytes": page.stat().st_size})
    return rows


def optimize_scale(counts: list[int], folder: Path) -> list[dict]:
    from tests import hostile

    rows = []
    for n in counts:
        path = folder / f"chain{n}.tflite"
        path.write_bytes(hostile.relu_chain(n))
        seconds, rss = _child(["--max-ops", str(4 * n), "optimize", str(path), "--profile",
                               "esp32-s3", "-o", str(folder / f"opt{n}.tflite")])
        rows.append({"ops": n, "seconds": seconds, "peak_rss_mb": rss / 2**20})
    return rows


def _ratios(rows: list[dict], size: str, keys: tuple[str, ...]) -> None:
    for a, b in zip(rows, rows[1:]):
        if b[size] == 2 * a[size]:
            parts = ", ".join(f"{k} ×{b[k] / a[k]:.2f}" for k in keys if a[k])
            print(f"  {a[size]:,} → {b[size]:,}: {parts}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="250,500,1000")
    ap.add_argument("--ops", default="5000,10000,20000,40000")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        folder = Path(tmp)
        out["check"] = check_scale([int(x) for x in args.targets.split(",") if x], folder)
        print("check (fresh process each; results and page per target):")
        for r in out["check"]:
            print(f"  {r['targets']:>5} targets, --details {r['details']:<4}: "
                  f"{r['seconds']:6.1f} s, peak {r['peak_rss_mb']:7.1f} MB, results "
                  f"{r['results_bytes'] / 2**20:6.1f} MB ({r['results_bytes'] / r['targets']:,.0f}"
                  f" B/target), page {r['html_bytes'] / 2**20:6.1f} MB "
                  f"({r['html_bytes'] / r['targets']:,.0f} B/target)")
        for details in ("auto", "all"):
            print(f"  ratios, --details {details}:")
            _ratios([r for r in out["check"] if r["details"] == details], "targets",
                    ("seconds", "results_bytes", "html_bytes"))
        out["optimize"] = optimize_scale([int(x) for x in args.ops.split(",") if x], folder)
        print("optimize (a chain of n RELU operators):")
        for r in out["optimize"]:
            print(f"  {r['ops']:>7,} ops: {r['seconds']:6.1f} s, peak {r['peak_rss_mb']:7.1f} MB "
                  f"({r['peak_rss_mb'] * 2**20 / r['ops']:,.0f} B/op)")
        _ratios(out["optimize"], "ops", ("seconds", "peak_rss_mb"))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
