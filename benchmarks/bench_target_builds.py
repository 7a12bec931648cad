"""Benchmark: devicefit's arena against TFLite-Micro built for the device (Cortex-M, QEMU).

Two modes:

- ``--tflm DIR`` (a TFLM checkout with its third-party trees downloaded, the Arm GNU
  toolchain and qemu-arm): build TFLM for each recorded build (core × kernel library; the
  builds are cached, see ``simulator/targets/tflm/build.py``), run every model of
  :func:`benchmarks.target_truth.truth_models` on it (``simulator/targets/tflm/qemu.py``)
  and write what was measured to ``--out`` (default ``tests/data/tflm_builds/``), one JSON
  per build; the models' outputs are compared with the tflite-micro wheel's on the same
  inputs.
- without ``--tflm``: compare devicefit's static prediction with the recorded data:
  predicted head vs measured head, predicted tail vs the recorded one less the recording
  allocator's own bytes, predicted start arena vs the smallest working arena (never under;
  over by the median printed).

    .venv/bin/python benchmarks/bench_target_builds.py [--builds cortex-m4-cmsis-nn,...]
    .venv/bin/python benchmarks/bench_target_builds.py --tflm ~/tflite-micro \\
        [--models DIR] [--only NAME,...] [--copy-to DIR]

``--models DIR`` holds the repository models as ``<repo>__<file>.tflite`` (tflm__,
tiny__) when no git mirror of their repositories is at ``$DEVICEFIT_MIRRORS``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.target_truth import (  # noqa: E402
    BUILDS,
    DATA,
    RECORDING_BYTES,
    BuildConfig,
    TruthModel,
    build_profile,
    compare,
    load_records,
    loader,
    summarize,
    truth_models,
)

#: Third-party pins the checkout's own download scripts name (what they would fetch).
_PINS = {
    "cmsis_nn": ("tensorflow/lite/micro/tools/make/ext_libs/cmsis_nn_download.sh",
                 r'ZIP_PREFIX_NN="(\w+)"'),
    "cmsis": ("tensorflow/lite/micro/tools/make/ext_libs/cmsis_download.sh",
              r'ZIP_PREFIX="(\w+)"'),
    "cortex_dfp": ("tensorflow/lite/micro/tools/make/ext_libs/cmsis_download.sh",
                   r'ZIP_PREFIX="(\w+)"\s+CMSIS_DFP_URL'),
    "flatbuffers": ("tensorflow/lite/micro/tools/make/flatbuffers_download.sh",
                    r'ZIP_PREFIX="?([\w.]+)"?'),
    "gemmlowp": ("tensorflow/lite/micro/tools/make/third_party_downloads.inc",
                 r"GEMMLOWP_URL.*?/(\w{40})\.zip"),
    "ruy": ("tensorflow/lite/micro/tools/make/third_party_downloads.inc",
            r"RUY_URL.*?/(\w{40})\.zip"),
    "kissfft": ("tensorflow/lite/micro/tools/make/third_party_downloads.inc",
                r"KISSFFT_URL.*?/(v?\d+)\.zip"),
}


def pins(tflm: Path) -> dict[str, str]:
    out = {}
    for name, (rel, pattern) in _PINS.items():
        path = tflm / rel
        m = re.search(pattern, path.read_text()) if path.is_file() else None
        out[name] = m.group(1) if m else "unknown"
    return out


# --------------------------------------------------------------------------- measuring
def _host_outputs(path: Path, inputs: list) -> list | None:
    from devicefit.simulator.errors import DevicefitError
    from devicefit.simulator.run.runtimes import run_model

    try:
        return run_model(path, "tflm", inputs=inputs, runs=1, timeout_s=600).outputs
    except DevicefitError:
        return None


def measure_one(build: Any, model: TruthModel, data: bytes, profile: Any) -> dict[str, Any]:
    """One model exported for ``profile`` (the build's core and kernels) and measured as
    exported on ``build`` (:mod:`simulator.targets.tflm.qemu`)."""
    import numpy as np

    from devicefit.simulator.errors import DevicefitError
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.run.runtimes import (
        compare_outputs,
        input_specs,
        random_inputs,
        starting_arena,
    )
    from devicefit.simulator.simulate import static_report
    from devicefit.simulator.targets.tflm.checkout import checkout_methods
    from devicefit.simulator.targets.tflm.export import export_files, export_spec
    from devicefit.simulator.targets.tflm.measured import memory_map
    from devicefit.simulator.targets.tflm.qemu import ExportRun, measure

    entry: dict[str, Any] = {"name": model.name, "source": model.source,
                             "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{model.name}.tflite"
        path.write_bytes(data)
        m = read_model(path)
        inputs = random_inputs(input_specs(m))
        t0 = time.monotonic()
        try:
            methods, source = checkout_methods(build.spec.tflm_dir)
            memory = static_report(m, profile).memory
            assert memory is not None
            spec = export_spec(m, profile, memory, methods, source)
            run = ExportRun(tuple(export_files(spec)),
                            tuple(r.method for r in spec.registrations), spec.arena.bytes,
                            spec.name)
            result, outputs = measure(build, run, inputs, starting_arena(m),
                                      memory_map(profile))
        except DevicefitError as exc:  # a crash or a link failure is this model's finding
            return entry | {"status": "error", "message": str(exc), "unsupported_ops": []}
        entry["seconds"] = round(time.monotonic() - t0, 1)
        host = _host_outputs(path, inputs) if result.ok else None
    entry.update(status=result.status, unsupported_ops=list(result.unsupported_ops),
                 message=result.message)
    if not result.ok:
        return entry
    entry.update(
        head=result.head, tail=result.tail, total=result.total,
        min_arena_mult16=result.min_arena_bytes, min_arena_invokes=result.min_arena_invokes,
        tail_breakdown={k: {"bytes": v.used, "requested": v.requested, "count": v.count}
                        for k, v in result.tail_breakdown.items()},
        planned_tensors=result.planned_tensors,
        planner_buffers=[[b.size, b.first, b.last] + ([b.offline] if b.offline is not None
                                                      else []) for b in result.planner_buffers],
        scratch=[b.size for b in result.scratch_buffers],
        output_hash=result.output_hash)
    if host is not None:
        as_host = [np.frombuffer(o.tobytes(), dtype=h.dtype).reshape(h.shape)
                   if o.size == h.nbytes else o for o, h in zip(outputs, host)]
        exact, diff = compare_outputs(as_host, host)
        entry["outputs_vs_host_wheel"] = {"bit_exact": exact, "max_abs_difference": diff}
    else:
        entry["outputs_vs_host_wheel"] = None
    return entry


def record_build(config: BuildConfig, tflm: Path, models: list[TruthModel],
                 models_dir: Path | None, out: Path, copy_to: Path | None,
                 tflm_commit: str | None, resume: bool = False) -> None:
    from devicefit.simulator.targets.tflm.build import (
        BuildSpec,
        TflmBuild,
        qemu_version,
        toolchain_version,
    )
    from devicefit.simulator.targets.tflm.qemu import QEMU_CPU

    build = TflmBuild(BuildSpec(tflm.resolve(), config.cpu, config.kernels))
    path = out / f"{config.name}.json"
    old = {m["name"]: m for m in json.loads(path.read_text())["models"]} \
        if path.is_file() else {}
    record = {"build": {
        "name": config.name, "cpu": config.cpu, "kernels": config.kernels,
        "tflm_commit": tflm_commit or build.source, "tflm_tree": build.source,
        "cmsis_nn_commit": pins(tflm)["cmsis_nn"] if config.kernels == "cmsis-nn" else None,
        "third_party": pins(tflm), "toolchain": toolchain_version(), "qemu": qemu_version(),
        "how_run": (f"TFLM Makefile TARGET=cortex_m_qemu TARGET_ARCH={config.cpu}"
                    + (f" OPTIMIZED_KERNEL_DIR={build.spec.optimized_kernel_dir}"
                       if build.spec.optimized_kernel_dir else "")
                    + f"; the model exported and run as exported with devicefit's measuring wrapper under qemu-arm -cpu {QEMU_CPU} (semihosting, "
                    "newlib/rdimon from the armv7 Thumb multilib); min arena = smallest "
                    "multiple of 16 for MicroAllocator::Create + AllocateTensors, then "
                    "checked through one Invoke"),
        "profile": config.profile}, "models": []}
    t0 = time.monotonic()
    for model in models:
        data = model.load(models_dir)
        if data is None:
            print(f"  {model.name}: not available here, skipped", flush=True)
            if model.name in old:
                record["models"].append(old[model.name])
            continue
        if resume and model.name in old and old[model.name]["status"] != "error" and \
                old[model.name]["sha256"] == hashlib.sha256(data).hexdigest():
            record["models"].append(old[model.name])
            continue
        entry = measure_one(build, model, data, build_profile(config))
        record["models"].append(entry)
        print(f"  {model.name}: {entry['status']} {entry.get('message') or ''} head {entry.get('head')} tail "
              f"{entry.get('tail')} min {entry.get('min_arena_mult16')} "
              f"({entry.get('seconds')} s)", flush=True)
        _write(path, record, copy_to)
    names = {m["name"] for m in record["models"]}
    record["models"] += [m for n, m in old.items() if n not in names]  # --only keeps the rest
    _write(path, record, copy_to)
    print(f"{config.name}: {len(record['models'])} models in {time.monotonic() - t0:.0f} s "
          f"→ {path}", flush=True)


def _write(path: Path, record: dict, copy_to: Path | None) -> None:
    from devicefit.simulator.infra.fileio import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    if copy_to is not None:
        copy_to.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy_to / path.name)


# --------------------------------------------------------------------------- comparing
def report(data: Path, builds: list[str], models_dir: Path | None) -> int:
    records = load_records(data)
    for name in builds:
        if name not in records:
            print(f"{name}: no recorded data in {data}")
            continue
        rows, skipped = compare(records[name], loader(models_dir))
        s = summarize(rows)
        print(f"\n== {name}: {records[name]['build'].get('tflm_commit')} "
              f"({records[name]['build'].get('toolchain')})")
        measured = {m["name"]: m for m in records[name]["models"]}
        print(f"{'model':40} {'head':>7} {'pred':>7} {'tail':>6} {'ptail':>6} {'total':>7} "
              f"{'min':>7} {'start':>7} {'over':>7}")
        for c in rows:
            m = measured[c.model]
            print(f"{c.model[:40]:40} {c.measured_head:7} {c.predicted_head:7} {m['tail']:6} "
                  f"{c.predicted_tail:6} {m['total']:7} {c.min_arena:7} {c.predicted_start:7} "
                  f"{c.over:+7}{'  UNDER' if c.over < 0 else ''}")
        print(f"head exact {s.head_exact}/{s.models}; under {len(s.under)}"
              f"{': ' + ', '.join(s.under) if s.under else ''}; over median {s.median_over} B, "
              f"max {s.max_over} B")
        print(f"tail (ptail vs tail − {RECORDING_BYTES} B, the recording allocator's): under "
              f"{len(s.tail_under)}{': ' + ', '.join(s.tail_under) if s.tail_under else ''}; "
              f"over median {s.median_tail_over} B, max {s.max_tail_over} B")
        for m in measured.values():
            if m["status"] != "ok":
                why = ", ".join(m.get("unsupported_ops") or []) or (m.get("message") or "")[:90]
                print(f"  {m['name']}: {m['status']} ({why})")
        for why in skipped:
            print(f"  skipped {why}")
        if (same := _same_outputs(records, name)) is not None:
            print(f"outputs: {same}")
    return 0


def _same_outputs(records: dict[str, dict], name: str) -> str | None:
    """How many models give the same output bytes here as on the reference-kernel build of
    the same core (else of the Cortex-M4), on the same inputs."""
    b = records[name]["build"]
    if b["kernels"] == "reference":
        return None
    ref = next((r for r in records.values() if r["build"]["kernels"] == "reference"
                and r["build"]["cpu"] == b["cpu"]), records.get("cortex-m4-reference"))
    if ref is None:
        return None
    theirs = {m["name"]: m.get("output_hash") for m in ref["models"] if m["status"] == "ok"}
    both = [(m["name"], m["output_hash"] == theirs[m["name"]]) for m in records[name]["models"]
            if m["status"] == "ok" and m["name"] in theirs]
    differ = [n for n, same in both if not same]
    return (f"{len(both) - len(differ)}/{len(both)} bit-identical to {ref['build']['name']}"
            + (f" (differ: {', '.join(differ)})" if differ else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tflm", type=Path, help="TFLM checkout: re-measure (else compare)")
    p.add_argument("--models", type=Path, help="folder with the repository models")
    p.add_argument("--builds", default=",".join(b.name for b in BUILDS))
    p.add_argument("--only", default=None, help="measure only these models (comma list)")
    p.add_argument("--out", type=Path, default=DATA)
    p.add_argument("--copy-to", type=Path, default=None,
                   help="also copy each build's JSON here as it grows")
    p.add_argument("--resume", action="store_true",
                   help="keep the models already recorded in --out (same sha256)")
    p.add_argument("--tflm-commit", default=None,
                   help="the commit the checkout was exported from (an export has no .git)")
    args = p.parse_args(argv)
    builds = [b for b in BUILDS if b.name in args.builds.split(",")]
    if args.tflm is None:
        return report(args.out, [b.name for b in builds], args.models)
    from devicefit.simulator.errors import DevicefitError

    models = truth_models()
    if args.only:
        models = [m for m in models if m.name in set(args.only.split(","))]
    try:
        for config in builds:
            print(f"== {config.name}", flush=True)
            record_build(config, args.tflm, models, args.models, args.out, args.copy_to,
                         args.tflm_commit, args.resume)
    except DevicefitError as exc:
        print(f"bench_target_builds: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
