"""Benchmark: what the ``devicefit`` command costs to start, in CPU seconds of its process.

Runs, in fresh processes and interleaved round by round (so that a busy machine slows every
command alike), with the bytecode cache and the op-probe cache warm (one untimed run of each
first):

- ``python -c "import devicefit"``: Python's own start, the yardstick;
- ``devicefit --version``, ``devicefit --help`` and a mistyped command (``simulat``);
- a static ``devicefit simulate`` of MLPerf Tiny's visual wake words model
  (``vww_96_int8.tflite``, from the mlcommons/tiny mirror ``benchmarks/target_truth.py``
  reads) on ``stm32l4r5-cortex-m4``, its report printed to a pipe.

It prints each command's median CPU time (user + system of the child, ``getrusage``),
``--version``'s ratio to the yardstick, and whether the targets of issue 46 hold in this
run: ``--version`` ≤ 1.3× the yardstick, ``--help`` and the mistyped command ≤ 0.2 CPU-s,
the static simulate ≤ 0.35 CPU-s. ``--compare DIR`` times another checkout (say, the one
before a change) in the same rounds.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_startup [--rounds 15] [--compare DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROFILE = "stm32l4r5-cortex-m4"
VWW = "benchmark/training/visual_wake_words/trained_models/vww_96_int8.tflite"
#: (what, the figure it must stay within: a ratio to the yardstick or CPU seconds).
TARGETS = {"--version": ("ratio", 1.3), "--help": ("cpu", 0.2), "mistyped": ("cpu", 0.2),
           "simulate": ("cpu", 0.35)}


def _vww(folder: Path) -> Path:
    from benchmarks.target_truth import TINY_COMMIT, TINY_REPO, _repo_model

    data = _repo_model(TINY_REPO, TINY_COMMIT, VWW).load()
    if data is None:
        sys.exit(f"bench_startup: {VWW} is not here: it is read from the mlcommons/tiny "
                 "mirror ($DEVICEFIT_MIRRORS, default /work/.mirror)")
    path = folder / "vww_96_int8.tflite"
    path.write_bytes(data)
    return path


def _commands(model: Path) -> dict[str, list[str]]:
    """What is timed, as argv after the interpreter: the console script pip writes (it is
    what a user runs), or ``-m devicefit`` where there is none beside the interpreter."""
    script = Path(sys.executable).parent / "devicefit"
    devicefit = [str(script)] if script.is_file() else ["-m", "devicefit"]
    return {"import devicefit": ["-c", "import devicefit"],
            "--version": [*devicefit, "--version"],
            "--help": [*devicefit, "--help"],
            "mistyped": [*devicefit, "simulat"],
            "simulate": [*devicefit, "simulate", str(model), "--profile", PROFILE]}


def _cpu(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], rounds: int, model: Path) -> dict[str, dict[str, float]]:
    """Median CPU seconds of each command in each tree, the rounds interleaved."""
    commands = _commands(model)
    envs = {}
    for name, tree in trees.items():
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        envs[name] = {**env, "PYTHONPATH": str(tree)}
        for argv in commands.values():  # bytecode written, op probe cached: untimed
            _cpu(argv, envs[name])
    samples: dict[str, dict[str, list[float]]] = {t: {c: [] for c in commands} for t in trees}
    for _ in range(rounds):
        for name in trees:
            for command, argv in commands.items():
                samples[name][command].append(_cpu(argv, envs[name]))
    return {t: {c: statistics.median(xs) for c, xs in per.items()} for t, per in samples.items()}


def report(figures: dict[str, dict[str, float]]) -> list[str]:
    lines = []
    for tree, per in figures.items():
        base = per["import devicefit"]
        lines.append(f"{tree}: median CPU-s per process (user + system)")
        for command, seconds in per.items():
            ratio = seconds / base
            line = f"  {command:<16} {seconds:6.3f} s  {ratio:5.2f}x import devicefit"
            if command in TARGETS:
                kind, limit = TARGETS[command]
                figure = ratio if kind == "ratio" else seconds
                unit = "x" if kind == "ratio" else " s"
                line += (f"  target <= {limit}{unit}: "
                         + ("within" if figure <= limit else "OVER"))
            lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--compare", type=Path, default=None, metavar="DIR",
                        help="also time the checkout in DIR, in the same rounds")
    args = parser.parse_args()
    trees = {"this checkout": ROOT}
    if args.compare is not None:
        trees[f"{args.compare}"] = args.compare.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure(trees, args.rounds, _vww(Path(tmp)))
    print(f"{args.rounds} rounds, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end; Python {sys.version.split()[0]}")
    print("\n".join(report(figures)))


if __name__ == "__main__":
    main()
