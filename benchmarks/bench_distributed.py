"""Benchmark the two jobs that outgrow one machine, each against its one-machine run.

1. ``fit`` on a PostgreSQL study (a real server, started here as the tests do): the same
   search (digits CNN, a tight custom profile, ``--max-trials``, ``--epochs``) by one worker
   process and by two worker processes joining one study. Prints the wall-time ratio
   (2 workers / 1 worker) and the best accuracy each found.
2. ``check`` over a generated zoo (every zoo model copied ``--copies`` times under new names,
   × 3 profiles), static and with ``--run``, once unsharded and as ``--shards`` shards run
   one after the other (as separate CI runners would: each a fresh process), then
   ``check merge``. Prints the
   slowest shard + merge over the unsharded run (the CI matrix's wall time over one
   runner's), the shard balance, and whether the merged report equals the unsharded one.

Both print ratios measured in one run. The machine this was written on has 2 cores shared
with other work, so two fit workers compete for the same cores that one worker's TensorFlow
already uses several threads of: the fit ratio is a floor, not what two machines give.

    .venv/bin/python benchmarks/bench_distributed.py [--max-trials 6] [--epochs 1]
        [--copies 3] [--shards 4] [--skip-fit] [--skip-check] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.digits import cached_cnn, load_digits  # noqa: E402
from tests.postgres import postgres_server  # noqa: E402
from tests.zoo import BUILDERS, model_path  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
PROFILES = ["stm32l4r5-cortex-m4", "esp32-s3", "android-arm64-cpu"]
ZOO = ["chain_int8", "residual_int8", "inception_int8", "mlp_int8", "leaky_mid_int8",
       "grouped_conv_int8", "chain_float32"]


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "devicefit.sdk.cli", *args], env=ENV, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        log = p.communicate()[0]
        if p.returncode not in (0, 1):
            raise SystemExit(f"worker failed ({p.returncode}):\n{log[-3000:]}")


def bench_fit(folder: Path, max_trials: int, epochs: int) -> dict:
    data = load_digits().save_npz(folder)
    profile = folder / "tight-l4.yaml"
    profile.write_text("name: tight-l4\nextends: stm32l4r5-cortex-m4\n"
                       "budgets:\n  flash: 132KiB\n  arena: 4500B\n")
    model = str(cached_cnn(ROOT / "tests" / "artifacts" / "convert"))
    out: dict = {"max_trials": max_trials, "epochs": epochs}
    with postgres_server() as server:
        for workers in (1, 2):
            study = f"bench-{workers}"
            common = [model, "--profile", str(profile), "--train", str(data["train"]),
                      "--eval", str(data["test"]), "--epochs", str(epochs), "--max-trials",
                      str(max_trials), "--storage", server.url, "--study", study,
                      "--artifacts", str(folder / "shared")]
            started = time.perf_counter()
            _finish([_cli("fit", *common, "-o", str(folder / f"{study}-{i}.tflite"),
                          "--report", str(folder / f"{study}-{i}.json"))
                     for i in range(workers)])
            wall = time.perf_counter() - started
            reports = [json.loads(p.read_text()) for p in folder.glob(f"{study}-*.json")]
            written = [r for r in reports if r["study"].get("writer")]
            chosen = [t for r in written for t in r["trials"] if t["number"] == r["chosen"]]
            trials = written[0]["trials"] if written else []
            candidates = [json.dumps(t["candidate"], sort_keys=True) for t in trials]
            out[f"{workers}_workers"] = {
                "wall_s": round(wall, 1), "writers": len(written),
                "judged": sum(1 for t in trials if t["stage"] != "skipped"),
                "built_twice": len(candidates) - len(set(candidates)),
                "best_accuracy": chosen[0]["accuracy"] if chosen else None,
                "best": chosen[0]["label"] if chosen else None}
    out["wall_ratio_2_over_1"] = round(out["2_workers"]["wall_s"] / out["1_workers"]["wall_s"],
                                       2)
    return out


def _zoo(folder: Path, copies: int) -> Path:
    lines = ["models:"]
    for name in [n for n in ZOO if n in BUILDERS]:
        source = model_path(name)
        for i in range(copies):
            target = folder / f"{name}_{i}.tflite"
            shutil.copy(source, target)
            lines += [f"  - path: {target.name}", f"    profiles: [{', '.join(PROFILES)}]"]
    project = folder / "devicefit.yaml"
    project.write_text("\n".join(lines) + "\n")
    return project


def _timed(*args: str) -> tuple[float, int, str]:
    started = time.perf_counter()
    p = _cli(*args)
    log = p.communicate()[0]
    return time.perf_counter() - started, p.returncode, log


def _normal(path: Path) -> str:
    return re.sub(r' time="[0-9.]+"', "", path.read_text())


def bench_check(folder: Path, copies: int, shards: int) -> dict:
    project = _zoo(folder, copies)
    out: dict = {"targets": project.read_text().count("profiles:") * len(PROFILES),
                 "shards": shards}
    for mode, extra in (("static", []), ("--run", ["--run"])):
        out[mode] = _check_mode(folder / mode.strip("-"), project, shards, extra)
    return out


def _check_mode(folder: Path, project: Path, shards: int, extra: list[str]) -> dict:
    folder.mkdir()
    whole_s, whole_code, log = _timed("check", str(project), *extra, "--junit",
                                      str(folder / "whole.xml"))
    if whole_code not in (0, 1):
        raise SystemExit(log[-3000:])
    shard_s = []
    for k in range(1, shards + 1):
        seconds, code, log = _timed("check", str(project), *extra, "--shard", f"{k}/{shards}",
                                    "--results", str(folder / f"shard-{k}.json"))
        if code not in (0, 1):
            raise SystemExit(log[-3000:])
        shard_s.append(seconds)
    merge_s, merge_code, log = _timed(
        "check", "merge", *(str(folder / f"shard-{k}.json") for k in range(1, shards + 1)),
        "--junit", str(folder / "merged.xml"))
    return {"unsharded_s": round(whole_s, 2), "shard_s": [round(s, 2) for s in shard_s],
            "merge_s": round(merge_s, 2),
            "matrix_over_unsharded": round((max(shard_s) + merge_s) / whole_s, 2),
            "slowest_over_mean_shard": round(max(shard_s) / (sum(shard_s) / shards), 2),
            "same_exit_code": merge_code == whole_code,
            "same_junit": _normal(folder / "merged.xml") == _normal(folder / "whole.xml")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--skip-fit", action="store_true")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="devicefit-bench-") as tmp:
        if not args.skip_check:
            zoo = Path(tmp) / "zoo"
            zoo.mkdir()
            results["check"] = bench_check(zoo, args.copies, args.shards)
            print(json.dumps({"check": results["check"]}, indent=2), flush=True)
        if not args.skip_fit:
            fit_dir = Path(tmp) / "fit"
            fit_dir.mkdir()
            results["fit"] = bench_fit(fit_dir, args.max_trials, args.epochs)
            print(json.dumps({"fit": results["fit"]}, indent=2), flush=True)
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
