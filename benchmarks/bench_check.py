"""Benchmark ``devicefit check``: the CI gate over a project of zoo models × device profiles.

Runs ``devicefit check`` as CI would (a fresh process: interpreter start, imports, project
parsing, every simulation, JUnit/Markdown/JSON out) in four modes, side by side:
static analysis with 1 and 2 processes, and with real inference (``--run``) with 1 and 2.
Reports the median wall time of ``--repeat`` runs, the peak resident memory of the whole
process tree (``check``, its ``--jobs`` workers and the runtime children, summed, sampled
every 50 ms in one extra run, as sampling costs CPU) and of its largest single process (``ru_maxrss``), and the ratio of the full
simulation with real inference to the static gate. It also records
whether TensorFlow got imported (``-X importtime``): it must not be.

    .venv/bin/python benchmarks/bench_check.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.zoo import BUILDERS, model_path  # noqa: E402

MCU = ["stm32l4r5-cortex-m4", "esp32-s3"]
#: Model → the profiles it is checked against: small int8 models on MCUs and the phone,
#: float or big ones on the phone and the Cortex-M7 (float TFLM kernels, 2 MiB flash).
MODELS = {
    "chain_int8": [*MCU, "android-arm64-cpu"],
    "residual_int8": [*MCU, "android-arm64-cpu"],
    "inception_int8": [*MCU, "android-arm64-cpu"],
    "unet_int8": [*MCU, "android-arm64-cpu"],
    "mlp_int8": [*MCU, "android-arm64-cpu"],
    "leaky_mid_int8": [*MCU, "android-arm64-cpu"],
    "grouped_conv_int8": ["android-arm64-cpu"],
    "chain_float32": ["stm32h743-cortex-m7", "android-arm64-cpu"],
    "dynamic_float32": ["android-arm64-cpu"],
    "large_params_int8": ["android-arm64-cpu"],
}
MODES = {
    "static, 1 process": [],
    "static, --jobs 2": ["--jobs", "2"],
    "--run, 1 process": ["--run"],
    "--run, --jobs 2": ["--run", "--jobs", "2"],
}


def make_project(folder: Path) -> tuple[Path, int]:
    lines = ["models:"]
    targets = 0
    for name, profiles in MODELS.items():
        if name not in BUILDERS:
            continue
        lines += [f"  - name: {name}", f"    path: {model_path(name)}",
                  f"    profiles: [{', '.join(profiles)}]"]
        targets += len(profiles)
    project = folder / "devicefit.yaml"
    project.write_text("\n".join(lines) + "\n")
    return project, targets


def measure(argv: list[str], sample: bool) -> dict:
    """Run ``argv`` in a child (``--child``) so RUSAGE_CHILDREN covers that one run only."""
    flag = ["--child-sampled"] if sample else ["--child"]
    out = subprocess.run([sys.executable, __file__, *flag, *argv], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and all its descendants now (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(kids)
        frontier += kids
    total = 0
    for pid in tree:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


PAGE = os.sysconf("SC_PAGE_SIZE")


def child(argv: list[str], sample: bool) -> None:
    """Run one ``check``; if ``sample``, add up the tree's RSS every 50 ms while it runs.

    Sampling scans /proc and costs CPU on a small machine, so timed runs do not sample.
    """
    start = time.perf_counter()
    # Output to files, not pipes: a JSON larger than a pipe's buffer would block the child
    # while this loop only polls.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        peak_tree = 0
        while proc.poll() is None and sample:
            peak_tree = max(peak_tree, _tree_rss_bytes(proc.pid))
            time.sleep(0.05)
        proc.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    # The sampled run prints JSON: count the targets that really ran (sanity of the mode).
    ran = (sum(r["report"] is not None and r["report"]["measured"] is not None
               for r in json.loads(stdout)["results"]) if sample and stdout else None)
    largest_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"wall_s": wall, "peak_tree_mib": peak_tree / 2**20, "ran": ran,
                      "largest_process_mib": largest_kib / 1024, "exit": proc.returncode,
                      "stderr": stderr}))


def main() -> None:
    if sys.argv[1:2] in (["--child"], ["--child-sampled"]):  # before argparse sees argv
        child(sys.argv[2:], sample=sys.argv[1] == "--child-sampled")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    # The console script, as CI runs it (``python -m sdk.cli`` would make every --jobs
    # worker re-import the CLI's __main__ with all its commands).
    devicefit = [sys.executable, str(Path(sys.executable).parent / "devicefit")]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        project, targets = make_project(folder)
        models = sum(1 for n in MODELS if n in BUILDERS)
        print(f"project: {models} models, {targets} model x profile targets; "
              f"median of {args.repeat} runs, {os.cpu_count()} CPUs")
        results = {}
        for label, extra in MODES.items():
            outputs = ["--junit", str(folder / "j.xml"), "--markdown", str(folder / "s.md")]
            argv = [*devicefit, "check", str(project), *outputs, *extra]
            runs = [measure(argv, sample=False) for _ in range(args.repeat)]
            sampled = measure([*argv, "--json"], sample=True)
            codes = {r["exit"] for r in [*runs, sampled]}
            if codes - {0, 1}:
                raise SystemExit(f"{label}: exit {codes}: {runs[-1]['stderr']}")
            results[label] = {
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "peak_tree_mib": sampled["peak_tree_mib"],
                "largest_process_mib": max(r["largest_process_mib"] for r in runs),
                "exit": sorted(codes),
                "targets_run": sampled["ran"],
            }
            r = results[label]
            print(f"{label:<18} {r['wall_s']:7.2f} s   peak RSS: all processes "
                  f"{r['peak_tree_mib']:5.0f} MiB, largest {r['largest_process_mib']:5.0f} MiB"
                  f"   exit {r['exit']}   ran {r['targets_run']}/{targets}")
        static, full = results["static, 1 process"], results["--run, 1 process"]
        ratio = full["wall_s"] / static["wall_s"]
        print(f"full simulate with real inference (--run) takes {ratio:.1f}x the static gate's "
              f"wall time; peak RSS {full['peak_tree_mib']:.0f} vs "
              f"{static['peak_tree_mib']:.0f} MiB")
        imports = subprocess.run([*devicefit[:1], "-X", "importtime", *devicefit[1:], "check",
                                  str(project), "--json"], capture_output=True, text=True)
        tf = any(line.rstrip().endswith(("| tensorflow", "| keras"))
                 for line in imports.stderr.splitlines())
        print(f"tensorflow or keras imported by check: {'YES' if tf else 'no'}")
    if args.json:
        args.json.write_text(json.dumps({"models": models, "targets": targets,
                                         "repeat": args.repeat, "modes": results,
                                         "run_over_static": ratio, "tensorflow_imported": tf},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
