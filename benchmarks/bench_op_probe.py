"""Benchmark: what asking the runtime about each operator signature costs, first and cached.

For every model of the public corpus (``tests/corpus.py``), or every ``.tflite`` of a folder
(``--models DIR``), and for a TFLM profile and a LiteRT one: the wall time of devicefit's op
support with the op tables alone, with the per-operator probe on an empty cache (one child
process per model and runtime, more after a crash) and again with the cache filled; the
operators, distinct signatures and child processes. The cache is a fresh temporary folder
(``$DEVICEFIT_CACHE``), so the figures do not depend on what ran before.

``--repeat N`` asks every model N times more, each on a fresh cache, and counts the
operators whose answer (runs or not) changed between runs and the operators left unasked
("no answer: ..."): both must be 0 (issue 50).

    .venv/bin/python benchmarks/bench_op_probe.py [--models a,b | --models DIR] [--run]
                                                  [--repeat N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROFILES = {"tflm": "stm32l4r5-cortex-m4", "litert": "android-arm64-cpu"}


def measure(path: Path, profile_name: str) -> dict:
    from devicefit.simulator.plan.compat import check_ops
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model

    model, profile = read_model(path), load_profile(profile_name)
    start = time.perf_counter()
    check_ops(model, profile)
    table_s = time.perf_counter() - start
    start = time.perf_counter()
    first = check_ops(model, profile, probe=True)
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    again = check_ops(model, profile, probe=True)
    cached_s = time.perf_counter() - start
    p = first.probe
    return {"operators": sum(len(sg.operators) for sg in model.subgraphs),
            "signatures": p.signatures if p else 0, "children": p.children if p else 0,
            "not_probed": len(p.not_probed) if p else 0, "table_s": table_s,
            "children_cached": again.probe.children if again.probe else 0,
            "first_s": first_s, "cached_s": cached_s,
            "disagreements": [d.line() for d in first.disagreements]}


def repeat(path: Path, profile_name: str, times: int) -> dict:
    """``times`` fresh-cache probes of one model: the operators whose answer changed
    between them, the unasked operators summed over the runs, the seconds per run."""
    from devicefit.simulator.plan.compat import table_for
    from devicefit.simulator.profiles import load_profile
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.run.probe import NO_ANSWER, probe_ops, probe_runtime

    model, profile = read_model(path), load_profile(profile_name)
    runtime = probe_runtime(table_for(profile), profile)
    if runtime is None:
        return {"repeat": 0}
    seen: dict[tuple[int, int], set[bool]] = {}
    stages: dict[tuple[int, int], set[str]] = {}
    runs: dict[tuple[int, int], int] = {}
    unasked, seconds = 0, []
    for _ in range(times):
        with tempfile.TemporaryDirectory(prefix="devicefit-probe-repeat-") as cache:
            os.environ["DEVICEFIT_CACHE"] = cache
            start = time.perf_counter()
            outcome = probe_ops(model, runtime)
            seconds.append(time.perf_counter() - start)
        for where, answer in outcome.answers.items():
            seen.setdefault(where, set()).add(answer.ok)
            runs[where] = runs.get(where, 0) + 1
            stages.setdefault(where, set()).add(answer.stage)
        unasked += sum(f": {NO_ANSWER}" in why for why in outcome.summary.not_probed)
    changed = [f"op {i}" + (f" (subgraph {sg})" if sg else "") for (sg, i), oks in
               sorted(seen.items()) if len(oks) > 1 or runs[(sg, i)] != times]
    return {"repeat": times, "changed": changed, "unasked": unasked,
            "stage_varies": sum(len(v) > 1 for v in stages.values()),
            "refused": sum(False in oks for oks in seen.values()),
            "repeat_s": statistics.median(seconds)}


def run_agrees(path: Path, profile_name: str) -> str:
    """``simulate --run``'s outcome against its own static answer: "agree (runs)", "agree
    (refused)", or "disagreement reported: ..." (a contradiction it did not report would
    be "UNREPORTED", the defect this column exists to catch)."""
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.types import MeasureOptions

    static = simulate(path, profile_name).compatibility
    report = simulate(path, profile_name,
                      run=MeasureOptions(runs=1, cross_check=False))
    ran = report.measured is not None and report.measured.failure is None
    runs = [d for d in report.compatibility.disagreements if d.source == "run"]
    if ran == static.supported:
        return "agree (runs)" if ran else "agree (refused)"
    return (f"disagreement reported: {runs[0].line()}"[:160] if runs else "UNREPORTED")


def main() -> int:
    from benchmarks.bench_corpus import models

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated corpus names (default: all), or a "
                                     "folder of .tflite files")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--repeat", type=int, default=0, metavar="N",
                    help="also probe every model N times on fresh caches and count the answers "
                         "that change and the operators left unasked")
    ap.add_argument("--run", action="store_true",
                    help="also run each model (simulate --run) and say whether the run agrees "
                         "with the static answer or reports the disagreement")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="devicefit-probe-bench-") as cache:
        os.environ["DEVICEFIT_CACHE"] = cache
        for m in models(args.models):
            for runtime, profile in PROFILES.items():
                row = {"model": m.name, "runtime": runtime, **measure(m.path, profile)}
                if args.run:
                    row["run"] = run_agrees(m.path, profile)
                if args.repeat:
                    row.update(repeat(m.path, profile, args.repeat))
                    os.environ["DEVICEFIT_CACHE"] = cache
                rows.append(row)
    print("| model | runtime | ops | signatures | not asked | children | tables alone | "
          "probe, first run | probe, cached (children) | disagreements |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['runtime']} | {r['operators']} | {r['signatures']} | "
              f"{r['not_probed']} | {r['children']} | {r['table_s'] * 1e3:.1f} ms | "
              f"{r['first_s']:.2f} s | {r['cached_s'] * 1e3:.0f} ms ({r['children_cached']}) "
              f"| {len(r['disagreements'])} |")
    for r in rows:
        for d in r["disagreements"]:
            print(f"  {r['model']} ({r['runtime']}): {d}")
    for r in rows:
        if "run" in r:
            print(f"  --run {r['model']} ({r['runtime']}): {r['run']}")
    for runtime in PROFILES:
        mine = [r for r in rows if r["runtime"] == runtime]
        if not mine:
            continue
        first = [r["first_s"] for r in mine]
        cached = [r["cached_s"] * 1e3 for r in mine]
        print(f"\n{runtime}: {len(mine)} models, {sum(r['signatures'] for r in mine)} "
              f"signatures of {sum(r['operators'] for r in mine)} ops; first run median "
              f"{statistics.median(first):.2f} s (max {max(first):.2f} s, total "
              f"{sum(first):.1f} s); cached median {statistics.median(cached):.0f} ms (max "
              f"{max(cached):.0f} ms)")
    repeated = [r for r in rows if r.get("repeat")]
    if repeated:
        print(f"\n{args.repeat} fresh-cache probes of each of {len(repeated)} model × runtime "
              f"pairs: operators whose answer changed between runs "
              f"{sum(len(r['changed']) for r in repeated)}, operators left unasked "
              f"{sum(r['unasked'] for r in repeated)} (summed over runs), operators refused "
              f"{sum(r['refused'] for r in repeated)}, whose failing stage varied "
              f"{sum(r['stage_varies'] for r in repeated)}; median seconds per probe "
              f"{statistics.median(r['repeat_s'] for r in repeated):.2f}")
        for r in repeated:
            if r["changed"] or r["unasked"]:
                print(f"  {r['model']} ({r['runtime']}): changed {', '.join(r['changed'])}; "
                      f"unasked {r['unasked']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
