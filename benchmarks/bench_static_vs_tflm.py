"""Benchmark: the arena from static simulation vs finding it by running real TFLite-Micro.

For each model, side by side on the same machine:

- **static**: ``read_model`` + ``static_report`` (arena plan, tail estimate, MACs, budgets)
  in this process; no TensorFlow, no interpreter;
- **TFLM, one recorded run**: create the real interpreter (pip ``tflite-micro``, reference
  kernels) with a generous arena and read its RecordingMicroAllocator — the fastest way to
  get the number if you know the trick;
- **TFLM, trial and error**: what users do today (tensorflow#35070, tflm#2474): grow the
  arena by doubling until the interpreter allocates, then bisect to the smallest arena that
  works (16-byte steps), one interpreter creation per trial.

The TFLM timings run in a child process (one per model, with a timeout) that has already
imported the runtime, so neither side pays an import. Each figure is the median of
``--repeat`` rounds. It also checks that the predicted head equals the recorded head, and
reports the smallest working arena next to head + tail and to devicefit's predicted minimum
arena to start (which adds the room TFLM needs while planning). Import (cold start)
times of both sides are reported separately.

    .venv/bin/python benchmarks/bench_static_vs_tflm.py [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Zoo models the TFLM wheel runs, and the sine model the wheel ships.
MODELS = ["sine", "mlp_int8", "dynamic_float32", "grouped_conv_int8", "gap_float32",
          "two_heads_int8", "if_float32", "chain_int8", "chain_float32", "residual_int8",
          "inception_int8", "leaky_mid_int8", "unet_tconv_int8", "branches_int8",
          "mobilenet_v1_96_int8", "mobilenet_v2_96_int8", "deep_mlp_int8", "large_params_int8"]
PROFILE = "stm32l4r5-cortex-m4"
BIG_ARENA = 16 * 1024 * 1024


def _model_path(name: str) -> Path:
    if name == "sine":
        import tflite_micro

        return Path(tflite_micro.__file__).parent / "python" / "tflite_micro" / "sine_float.tflite"
    from tests.zoo import model_path

    return model_path(name)


# --------------------------------------------------------------------------- child side
def _tflm_child(path: str, repeat: int) -> dict:
    """Runs in the child: time one recorded run and a trial-and-error search."""
    import contextlib
    import os
    import tempfile

    from tflite_micro.python.tflite_micro import runtime

    crashes: list[int] = []

    def works(size: int) -> bool:
        # Some too-small arenas crash TFLM (SIGSEGV) instead of failing cleanly, so each
        # trial runs in a forked copy of this process: a crash counts as "too small".
        pid = os.fork()
        if pid == 0:
            try:
                runtime.Interpreter.from_file(path, arena_size=size)
                code = 0
            except RuntimeError:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            crashes.append(size)
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    def recorded() -> tuple[int, int]:
        interp = runtime.Interpreter.from_file(path, arena_size=BIG_ARENA)
        # print_allocations writes to the C++ stderr (fd 2): capture it through a file.
        with tempfile.TemporaryFile() as log:
            saved = os.dup(2)
            try:
                os.dup2(log.fileno(), 2)
                interp.print_allocations()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            log.seek(0)
            text = log.read().decode()
        values = {}
        for line in text.splitlines():
            for key in ("head", "tail"):
                if f"allocation {key}" in line:
                    values[key] = int(line.split()[-2])
        return values["head"], values["tail"]

    def search() -> tuple[int, int]:
        trials, hi = 0, 4096
        while not works(hi):
            trials, hi = trials + 1, hi * 2
        lo = hi // 2 if hi > 4096 else 0
        while hi - lo > 16:
            trials += 1
            mid = (lo + hi) // 2 // 16 * 16
            if works(mid):
                hi = mid
            else:
                lo = mid
        return hi, trials + 1

    with contextlib.suppress(Exception):
        recorded()  # warm-up: first use loads kernels' static data
    one, trial = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        head, tail = recorded()
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        smallest, trials = search()
        trial.append(time.perf_counter() - t)
    return {"head": head, "tail": tail, "one_run_s": statistics.median(one),
            "search_s": statistics.median(trial), "smallest_arena": smallest, "trials": trials,
            "crashed_sizes": sorted(set(crashes))}


# --------------------------------------------------------------------------- parent side
def _static(path: Path, repeat: int) -> tuple[float, int, int, int]:
    from devicefit.simulator.profiles import load_profile, with_runtime
    from devicefit.simulator.read.reader import read_model
    from devicefit.simulator.simulate import static_report

    # The pip wheel runs reference kernels on a 64-bit host: predict for that.
    profile = with_runtime(load_profile(PROFILE), kernels="reference", pointer_bytes=8)
    static_report(read_model(path), profile)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        report = static_report(read_model(path), profile)
        times.append(time.perf_counter() - t)
    mem = report.memory
    return (statistics.median(times), mem.arena_head_bytes, mem.arena_tail_bytes,
            mem.arena_required_bytes)


def _import_s(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, timeout=120).stdout) for _ in range(3)]
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "REPEAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_tflm_child(args.child[0], int(args.child[1]))))
        return 0
    rows = []
    for name in MODELS:
        path = _model_path(name)
        static_s, head, tail, required = _static(path, args.repeat)
        child = subprocess.run([sys.executable, __file__, "--child", str(path), str(args.repeat)],
                               capture_output=True, text=True, timeout=600, check=True)
        real = json.loads(child.stdout.strip().splitlines()[-1])
        rows.append({"model": name, "static_ms": static_s * 1e3,
                     "tflm_one_run_ms": real["one_run_s"] * 1e3,
                     "tflm_search_ms": real["search_s"] * 1e3, "trials": real["trials"],
                     "ratio_one_run": real["one_run_s"] / static_s,
                     "ratio_search": real["search_s"] / static_s,
                     "head_predicted": head, "head_tflm": real["head"],
                     "tail_predicted": tail, "tail_tflm": real["tail"],
                     "smallest_arena": real["smallest_arena"], "required_predicted": required,
                     "crashed_sizes": real["crashed_sizes"]})
    print("| model | static ms | TFLM 1 run ms | ratio | TFLM trial & error ms (trials) | ratio "
          "| head predicted = TFLM | tail predicted / TFLM | smallest working arena "
          "| − (head+tail) | − predicted minimum |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['static_ms']:.2f} | {r['tflm_one_run_ms']:.2f} | "
              f"{r['ratio_one_run']:.1f}x | {r['tflm_search_ms']:.1f} ({r['trials']}) | "
              f"{r['ratio_search']:.0f}x | {r['head_predicted']} "
              f"{'=' if r['head_predicted'] == r['head_tflm'] else '!='} {r['head_tflm']} | "
              f"{r['tail_predicted']} / {r['tail_tflm']} | "
              f"{r['smallest_arena']} | {r['smallest_arena'] - r['head_tflm'] - r['tail_tflm']} | "
              f"{r['smallest_arena'] - r['required_predicted']} |")
    crashed = [f"{r['model']} at {r['crashed_sizes']}" for r in rows if r["crashed_sizes"]]
    if crashed:
        print("\nTFLM crashed (SIGSEGV) instead of refusing a too-small arena: " + "; ".join(crashed))
    geo = statistics.geometric_mean
    print(f"\ngeometric mean ratio: one recorded run {geo([r['ratio_one_run'] for r in rows]):.1f}x, "
          f"trial and error {geo([r['ratio_search'] for r in rows]):.0f}x; "
          f"heads equal: {sum(r['head_predicted'] == r['head_tflm'] for r in rows)}/{len(rows)}")
    print(f"cold import: simulator.simulate {_import_s('devicefit.simulator.simulate'):.2f} s, "
          f"tflite_micro runtime {_import_s('tflite_micro.python.tflite_micro.runtime'):.2f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
