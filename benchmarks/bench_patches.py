"""Benchmark patch-based execution (``devicefit optimize --patches auto``) on int8 vision models.

For each model and each search objective (``head``: the head alone, as MCUNetV2 reports it;
``arena``: the arena to start, head + tail, what the device needs, the default): TFLM's
measured head before (whole-tensor file order), the whole-tensor lower bound (best order,
what ``optimize`` without patches reaches), the measured head after the rewrite and its ratio
to the bound; head, tail and whole arena (64-bit host, reference kernels, measured) of the
plain offline plan (``optimize`` without patches), of the best patched graph the search
planned (kept or not) and of the file written; the MAC overhead, and the host-latency
overhead: input and written files timed in TFLM (reference kernels) in the same process
run, alternated, fastest of N invokes each, as a ratio. Outputs are bit-identical in TFLM
and LiteRT for every row (checked by the optimizer; a row says so).

Models: MobileNet v1 (α 0.25) and a MobileNetV2-style net at 96×96, the ResNet-style and
conv-chain test models (tests/zoo.py, real converter), the public MLPerf Tiny architectures
built by ``bench_latency.py`` (ResNet-8, DS-CNN; random weights), and any ``--extra`` .tflite files (e.g. the public MLTK int8 models of the
test corpus).

    .venv/bin/python benchmarks/bench_patches.py [--profile NAME] [--runs N] [--json out.json]
        [--markdown] [--only NAME ...] [--extra FILE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.errors import DevicefitError  # noqa: E402
from devicefit.simulator.optimize import optimize_model_bytes  # noqa: E402
from devicefit.simulator.optimize.driver import rebuild_patched  # noqa: E402
from devicefit.simulator.profiles import load_profile  # noqa: E402
from devicefit.simulator.read.reader import read_model  # noqa: E402
from devicefit.simulator.run.runtimes import input_specs, random_inputs, run_model  # noqa: E402
from tests.zoo import model_path  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_latency  # noqa: E402  (its MLPerf Tiny builders and cache)

ZOO = ["mobilenet_v1_96_int8", "mobilenet_v2_96_int8", "residual_int8", "chain_int8"]
#: (Its person-detection MobileNet with random weights is left out: TFLM aborts on its
#: vanishing quantization scales before any rewrite.)
MLPERF_TINY = ["ic_resnet8", "kws_dscnn"]
OBJECTIVES = ("head", "arena")
#: The issue's target for MobileNetV1-0.25 at 96×96: head ≤ 0.6 × the whole-tensor bound.
TARGET_RATIO = 0.6


def _host_ms(paths: list[Path], inputs, runs: int, rounds: int = 3) -> tuple[list[float], list]:
    """Fastest invoke of each file in TFLM (reference kernels), the files alternated over
    ``rounds`` so a busy machine slows both alike; the minimum is what load cannot inflate."""
    best = [float("inf")] * len(paths)
    results: list = [None] * len(paths)
    for _ in range(rounds):
        for i, path in enumerate(paths):
            r = run_model(path, "tflm", inputs=inputs, runs=runs, warmup=1,
                          reference_kernels=True)
            best[i], results[i] = min(best[i], min(r.host_ms)), r
    return best, results


def _arena(run) -> dict[str, int]:
    """Head, tail and whole arena TFLM measured (RecordingMicroAllocator)."""
    return {"head": run.arena_head_bytes, "tail": run.arena_total_bytes - run.arena_head_bytes,
            "whole": run.arena_total_bytes}


def bench_one(name: str, path: Path, profile, objective: str, runs: int) -> dict:
    data = path.read_bytes()
    started = time.perf_counter()
    out, r = optimize_model_bytes(data, profile, name=name, patches="auto",
                                  patch_objective=objective)
    seconds = time.perf_counter() - started
    p = r.patches
    row = {"model": name, "objective": objective, "grid": p.grid, "split": p.split,
           "refused": p.refused, "bound": p.bound_whole_tensor_bytes,
           "optimize_s": round(seconds, 1)}
    plain, _ = optimize_model_bytes(data, profile, name=name, verify=False)
    best = rebuild_patched(data, p, profile)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for which, blob in (("written", out), ("plain", plain), ("patched", best)):
            if blob is not None:
                files[which] = Path(tmp) / f"{which}.tflite"
                files[which].write_bytes(blob)
        inputs = random_inputs(input_specs(read_model(path)), seed=0)
        (ms_before, ms_after), (before, after) = _host_ms([path, files["written"]], inputs,
                                                          runs)
        measured = {which: run_model(f, "tflm", inputs=inputs, reference_kernels=True)
                    for which, f in files.items() if which != "written"}
    row.update(
        head_before=before.arena_head_bytes, head_after=after.arena_head_bytes,
        plain=_arena(measured["plain"]), written=_arena(after),
        patched=_arena(measured["patched"]) if "patched" in measured else None,
        patched_grid=f"{p.patched_grid} over {p.patched_split} ops" if p.patched_grid else None,
        predicted={"plain": p.plain_arena and p.plain_arena.start_bytes,
                   "patched": p.patched_arena and p.patched_arena.start_bytes},
        kept_despite_host=next((n for n in r.notes if n.startswith("patches kept")), None),
        ratio_to_bound=round(after.arena_head_bytes / row["bound"], 3) if row["bound"] else None,
        mac_overhead_pct=round(p.mac_overhead_pct, 1),
        latency_ratio=round(ms_after / ms_before, 3) if ms_before else None,
        estimated_latency_ratio=round(p.estimated_ms_after / p.estimated_ms_before, 3)
        if p.estimated_ms_before and p.estimated_ms_after else None,
        identical=all(r.outputs_identical.values()) if r.outputs_identical else None,
        file_bytes=f"{len(data):,} → {len(out):,}",
        operators=f"{p.operators_before} → {p.operators_after}")
    return row


def _sum(a: dict | None) -> str:
    return "-" if a is None else f"{a['head']:,} + {a['tail']:,} = **{a['whole']:,}**"


def markdown(rows: list[dict]) -> str:
    head = ("| model | objective | written | head before (B) | whole-tensor bound (B) | "
            "head after (B) | after / bound | plain offline plan: head + tail = whole (B) | "
            "best patched: head + tail = whole (B) | whole written (B) | MACs | "
            "host latency (TFLM) | est. device latency | ops | file (B) | identical |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n")
    lines = []
    for r in rows:
        what = f"{r['grid']} over {r['split']} ops" if r["grid"] else "no patches"
        est = f"×{r['estimated_latency_ratio']:.2f}" if r["estimated_latency_ratio"] else "-"
        best = f"{r['patched_grid']}: {_sum(r['patched'])}" if r["patched"] else "-"
        lines.append(
            f"| {r['model']} | {r['objective']} | {what} | {r['head_before']:,} | "
            f"{r['bound']:,} | {r['head_after']:,} | {r['ratio_to_bound']:.2f} | "
            f"{_sum(r['plain'])} | {best} | {r['written']['whole']:,} | "
            f"+{r['mac_overhead_pct']:.1f} % | "
            f"×{r['latency_ratio']:.2f} | {est} | {r['operators']} | {r['file_bytes']} | "
            f"{'yes' if r['identical'] else 'not run' if r['identical'] is None else 'NO'} |")
    refused = [f"- {r['model']} ({r['objective']}): {r['refused']}" for r in rows if r["refused"]]
    return head + "\n".join(lines) + "\n" + ("\n" + "\n".join(refused) + "\n" if refused else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="stm32l4r5-cortex-m4")
    ap.add_argument("--runs", type=int, default=5, help="timed TFLM invokes per file (5)")
    ap.add_argument("--extra", nargs="*", default=[], metavar="FILE",
                    help="more int8 .tflite files (e.g. public models)")
    ap.add_argument("--only", nargs="*", metavar="NAME",
                    help="only these built-in models (default: all of them)")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    profile = load_profile(args.profile, [])
    keep = set(args.only) if args.only is not None else set(ZOO + MLPERF_TINY)
    models = [(n, model_path(n)) for n in ZOO if n in keep]
    models += [(n, bench_latency.model_path(n)) for n in MLPERF_TINY if n in keep]
    models += [(Path(f).stem, Path(f)) for f in args.extra]
    rows = []
    for name, path in models:
        for objective in OBJECTIVES:
            try:
                row = bench_one(name, path, profile, objective, args.runs)
            except DevicefitError as exc:  # e.g. a model TFLM itself cannot run
                print(f"{name}: skipped: {exc}", flush=True)
                break
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(markdown(rows) if args.markdown else "")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    # The rule of the default objective: never a whole arena above the plain offline plan's
    # on the profile's build. Measured here on the host build, a growth is only right where
    # the optimizer says the profile's build (smaller pointers, other kernels) still gains.
    by_arena = [r for r in rows if r["objective"] == "arena"]
    host = [r for r in by_arena if r["written"]["whole"] > r["plain"]["whole"]]
    grew = [r["model"] for r in host if not r["kept_despite_host"]]
    print(f"arena objective: the written whole arena measured on the host exceeds the plain "
          f"offline plan's on {len(host)} of {len(by_arena)} models, unexplained on "
          f"{len(grew)}" + (f": {', '.join(grew)}" if grew else ""))
    for r in host:
        if r["kept_despite_host"]:
            print(f"- {r['model']}: {r['kept_despite_host']}")
    v1 = next((r for r in rows if r["model"] == "mobilenet_v1_96_int8"
               and r["objective"] == "head"), None)
    if v1 is None:
        return 1 if grew else 0
    print(f"MobileNetV1-0.25 96×96 (head objective): head after / whole-tensor bound = "
          f"{v1['ratio_to_bound']:.2f} (target ≤ {TARGET_RATIO}) at +{v1['mac_overhead_pct']} % "
          f"MACs (limit +20 %), outputs identical: {v1['identical']}")
    return 0 if v1["ratio_to_bound"] <= TARGET_RATIO and v1["identical"] and not grew else 1


if __name__ == "__main__":
    raise SystemExit(main())
