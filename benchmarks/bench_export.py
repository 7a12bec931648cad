"""Benchmark: public models exported and verified as exported on TFLM builds (issue 44).

For each public model (none written here: TFLM's own examples at the pinned commit, MLPerf
Tiny's trained models) and each build (Cortex-M4 and M7 with CMSIS-NN, Cortex-M4 with
reference kernels), ``simulate --run --target-build`` exports the model
(:mod:`simulator.targets.tflm.export`), compiles exactly the exported files with the
user's TFLM checkout for the core and kernels, and runs them under QEMU. Recorded per
model: whether the export was verified as exported, the arena constant against the
smallest working arena (the constant must start; ≤ 256 B above), the outputs against the
host wheel's (steps or relative difference, the profile's tolerance), the example's run,
and flash: measured in the linked image against devicefit's static estimate (the kernel
code table, ``simulator/targets/tflm/code_sizes.json``; within 10 % asked).

    .venv/bin/python benchmarks/bench_export.py --tflm ~/tflite-micro [--builds ...]
        [--only NAME,...] [--out benchmarks/results/export.json]
    .venv/bin/python benchmarks/bench_export.py --table   # the table of the last run

Models come from git mirrors of their repositories at ``$DEVICEFIT_MIRRORS``
(``owner+name/repo``), read at the commits :mod:`benchmarks.target_truth` pins.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.target_truth import (  # noqa: E402
    TFLM_COMMIT,
    TFLM_REPO,
    TINY_COMMIT,
    TINY_REPO,
    TruthModel,
    _repo_model,
)

RESULTS = ROOT / "benchmarks" / "results" / "export.json"
#: (build name, profile, kernels override)
BUILDS = (("cortex-m4-cmsis-nn", "stm32l4r5-cortex-m4", None),
          ("cortex-m7-cmsis-nn", "stm32h743-cortex-m7", None),
          ("cortex-m4-reference", "stm32l4r5-cortex-m4", "reference"))
MODELS = (
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/models/person_detect.tflite"),
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/examples/micro_speech/models/"
                                        "micro_speech_quantized.tflite"),
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/examples/micro_speech/models/"
                                        "audio_preprocessor_int8.tflite"),
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/examples/dtln/"
                                        "dtln_noise_suppression.tflite"),
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/examples/mnist_lstm/"
                                        "trained_lstm_int8.tflite"),
    _repo_model(TFLM_REPO, TFLM_COMMIT, "tensorflow/lite/micro/models/"
                                        "keyword_scrambled_8bit.tflite"),
    _repo_model(TINY_REPO, TINY_COMMIT, "benchmark/training/anomaly_detection/trained_models/"
                                        "ad01_int8.tflite"),
    _repo_model(TINY_REPO, TINY_COMMIT, "benchmark/training/image_classification/"
                                        "trained_models/pretrainedResnet_quant.tflite"),
    _repo_model(TINY_REPO, TINY_COMMIT, "benchmark/training/keyword_spotting/trained_models/"
                                        "kws_ref_model.tflite"),
    _repo_model(TINY_REPO, TINY_COMMIT, "benchmark/training/visual_wake_words/trained_models/"
                                        "vww_96_int8.tflite"),
)


def profile_for(name: str, kernels: str | None) -> Any:
    from devicefit.simulator.profiles import load_profile, with_runtime

    return with_runtime(load_profile(name), kernels=kernels)


def measure(model: TruthModel, data: bytes, build: str, profile: Any, tflm: Path,
            timeout_s: float) -> dict[str, Any]:
    from devicefit.simulator.simulate import simulate
    from devicefit.simulator.types import BuildRequest, MeasureOptions

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / model.name
        path.write_bytes(data)
        t0 = time.monotonic()
        report = simulate(path, profile, run=MeasureOptions(
            target_build=BuildRequest(str(tflm)), timeout_s=timeout_s))
        seconds = round(time.monotonic() - t0, 1)
    t = report.measured.target_build if report.measured else None
    mem = report.memory
    entry: dict[str, Any] = {
        "model": model.name, "build": build, "profile": profile.name, "seconds": seconds,
        "verdict": report.verdict.value, "flash_estimated": mem.flash_bytes,
        "flash_estimate_basis": mem.flash_code_basis, "model_bytes": len(data),
        "start_arena_predicted": max(mem.arena_bytes, mem.arena_required_bytes),
        "head_predicted": mem.arena_head_bytes,
    }
    if t is None:
        return entry | {"status": "no target build"}
    entry |= {
        "status": t.status, "message": t.message, "verified": t.verified,
        "export_sha256": t.export_sha256, "arena_constant": t.arena_constant,
        "arena_constant_starts": t.arena_constant_starts, "min_arena": t.min_arena_bytes,
        "head": t.head, "tail": t.tail, "example_ok": t.example_ok,
        "outputs_agree": t.outputs_agree, "within_tolerance": t.outputs_within_tolerance,
        "tolerance": t.tolerance,
        "output_diffs": [d.__dict__ for d in t.output_diffs],
        "flash_measured": t.flash.total_bytes if t.flash else None,
        "flash_parts": {p.name: p.bytes for p in t.flash.parts} if t.flash else None,
        "build_label": t.build,
    }
    return entry


def static_flash(model: TruthModel, profile: Any) -> tuple[int, str]:
    """devicefit's static flash estimate for ``model`` on ``profile`` (no run)."""
    from devicefit.simulator.simulate import simulate

    data = model.load()
    assert data is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / model.name
        path.write_bytes(data)
        mem = simulate(path, profile, probe=False).memory
    return mem.flash_bytes, mem.flash_code_basis


def refresh_estimates(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with the static estimate of the current code table (measured images
    stay as recorded)."""
    models = {m.name: m for m in MODELS}
    profiles = {b: profile_for(p, k) for b, p, k in BUILDS}
    out = []
    for r in results:
        flash, basis = static_flash(models[r["model"]], profiles[r["build"]])
        out.append(r | {"flash_estimated": flash, "flash_estimate_basis": basis})
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | build | verified | constant | smallest | over | outputs | flash "
             "measured | flash estimated | error |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        over = (r["arena_constant"] - r["min_arena"]
                if r.get("min_arena") and r.get("arena_constant") else None)
        diffs = r.get("output_diffs") or []
        if r.get("outputs_agree"):
            outputs = "bit-exact"
        elif diffs:
            worst = max(diffs, key=lambda d: (d["max_steps"] or 0, d["relative"]))
            by = (f"{worst['max_steps']} step(s)" if worst["max_steps"] is not None
                  else f"{worst['relative']:.1e} rel.")
            outputs = f"differ by {by} ({'within' if r['within_tolerance'] else 'BEYOND'})"
        else:
            outputs = "—"
        measured, estimated = r.get("flash_measured"), r["flash_estimated"]
        error = (f"{(estimated - measured) / measured:+.1%}" if measured else "—")
        lines.append(
            f"| {r['model'].split('__', 1)[-1]} | {r['build']} | "
            f"{'yes' if r.get('verified') else r.get('status')} | "
            f"{r.get('arena_constant') or '—'} | {r.get('min_arena') or '—'} | "
            f"{'' if over is None else f'{over:+}'} | {outputs} | "
            f"{measured if measured is not None else '—'} | {estimated} | {error} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, help="the TFLM checkout (with its third-party trees)")
    p.add_argument("--builds", default=",".join(b for b, _, _ in BUILDS))
    p.add_argument("--only", default=None, help="these models only (comma list)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--table", action="store_true", help="print the last run's table")
    args = p.parse_args(argv)
    if args.table or args.tflm is None:
        print(table(refresh_estimates(json.loads(args.out.read_text())["results"])))
        return 0
    from devicefit.simulator.infra.fileio import write_atomic

    old = json.loads(args.out.read_text())["results"] if args.out.is_file() else []
    results = [r for r in old if r["build"] not in args.builds.split(",")
               or (args.only and r["model"] not in args.only.split(","))]
    for build, profile_name, kernels in BUILDS:
        if build not in args.builds.split(","):
            continue
        profile = profile_for(profile_name, kernels)
        for model in MODELS:
            if args.only and model.name not in args.only.split(","):
                continue
            data = model.load()
            if data is None:
                print(f"{model.name}: not available here (no mirror), skipped", flush=True)
                continue
            entry = measure(model, data, build, profile, args.tflm, args.timeout)
            results.append(entry)
            print(json.dumps({k: entry.get(k) for k in (
                "model", "build", "status", "verified", "arena_constant", "min_arena",
                "within_tolerance", "flash_measured", "flash_estimated", "seconds")}),
                flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(args.out, json.dumps({"results": results}, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
