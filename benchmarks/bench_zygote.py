"""Benchmark: what a child process costs, started plainly or forked from a zygote.

devicefit runs every runtime (``--run``, the op probe) and every TensorFlow conversion in a
child process; ``simulator/run/zygote.py`` forks those children from a process that has done
their imports once. This runs the same work twice, each time in a fresh measuring process:
``DEVICEFIT_ZYGOTE=0`` (every child is ``python -m ...``) and the default (forked), and prints
wall time and CPU (the measuring process and all its children) and their ratios, measured in
this one run:

- ``--children N`` runs of a small float model in LiteRT (``runtimes.run_model``);
- ``--conversions N`` int8 conversions of a small Keras model (``sdk.convert.convert``).

    .venv/bin/python benchmarks/bench_zygote.py [--children 20] [--conversions 3] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _models(folder: Path) -> tuple[Path, Path, Path]:
    """A small Keras model, its float ``.tflite`` and calibration data (built with TF here)."""
    import numpy as np

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3),
                              keras.layers.ReLU(), keras.layers.Flatten(),
                              keras.layers.Dense(10)])
    keras_path, tflite_path, data = folder / "m.keras", folder / "m.tflite", folder / "x.npy"
    model.save(keras_path)
    with contextlib.redirect_stdout(io.StringIO()):  # Keras' exporter lists the signatures
        tflite_path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    np.save(data, np.random.default_rng(0).random((32, 16, 16, 3), np.float32))
    return keras_path, tflite_path, data


def _work(kind: str, n: int, keras_path: str, tflite_path: str, data: str) -> None:
    if kind == "run":
        from devicefit.simulator.run.runtimes import run_model

        for _ in range(n):
            run_model(tflite_path, "litert", runs=1, warmup=0)
    else:
        from devicefit.sdk.convert import convert

        with tempfile.TemporaryDirectory() as out:
            for i in range(n):
                convert(keras_path, "stm32l4r5-cortex-m4", Path(out) / f"{i}.tflite",
                        calibration=data, simulate=False)


def _measure(args: list[str]) -> None:
    """In a fresh process: do the work, end the zygotes (their CPU then counts), report."""
    from devicefit.simulator.run import zygote

    kind, n, *paths = args
    start = time.perf_counter()
    _work(kind, int(n), *paths)
    zygote.stop_all()
    wall = time.perf_counter() - start
    cpu = sum(getattr(resource.getrusage(who), f) for who in
              (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    print(json.dumps({"wall_s": wall, "cpu_s": cpu}))


def _one(kind: str, n: int, paths: tuple[Path, ...], zygote: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), DEVICEFIT_ZYGOTE="1" if zygote else "0",
               TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, __file__, "--measure", kind, str(n),
                           *map(str, paths)], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--children", type=int, default=20)
    ap.add_argument("--conversions", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        _measure(args.measure)
        return 0
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="devicefit-bench-zygote-") as tmp:
        paths = _models(Path(tmp))
        for kind, n in (("run", args.children), ("convert", args.conversions)):
            if n <= 0:
                continue
            label = f"{kind} x{n}"
            results[label] = {"plain": _one(kind, n, paths, False),
                              "zygote": _one(kind, n, paths, True)}
    print(f"{'work':<14}{'plain wall':>11}{'zygote wall':>12}{'ratio':>7}"
          f"{'plain CPU':>11}{'zygote CPU':>11}{'ratio':>7}")
    for label, r in results.items():
        p, z = r["plain"], r["zygote"]
        print(f"{label:<14}{p['wall_s']:>10.1f}s{z['wall_s']:>11.1f}s"
              f"{z['wall_s'] / p['wall_s']:>7.2f}{p['cpu_s']:>10.1f}s{z['cpu_s']:>10.1f}s"
              f"{z['cpu_s'] / p['cpu_s']:>7.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
