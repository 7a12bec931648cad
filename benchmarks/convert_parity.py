"""Parity of ``devicefit convert`` (the CLI, defaults) with a bare TensorFlow script.

Each side runs as its own fresh process, as a user would run them: the bare script loads
the ``.keras`` file, converts it with the converter's documented int8 recipe and writes the
file; ``devicefit convert MODEL --profile stm32l4r5-cortex-m4 --calibration DATA -o OUT``
does the same plus its checks, metadata, read-back and simulation (the TensorFlow part in
its child process). Both get the same calibration samples. Measured per model, interleaved:
wall time, CPU time of the whole process tree, peak RSS (devicefit: its own peak plus its
TensorFlow child's, as if both peaked at once), and the file size. Targets (issue 23):
size ≤ 1.05×, wall and CPU ≤ 1.2×, peak memory ≤ 1.3×.

A last column runs devicefit with ``--eval`` on 1,000 samples: the float reference and the
LiteRT evaluation must not blow the memory up (batches of 256 once peaked at 3.3 GB).

The measuring process never imports TensorFlow (the models are built in a child): Linux
keeps a process's peak RSS across ``exec``, so processes started from a big launcher would
all report at least the launcher's size.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MCU = "stm32l4r5-cortex-m4"

BARE = r"""
import contextlib, io, os, resource, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras, numpy as np, tensorflow as tf
model_file, data_file, out = sys.argv[1:4]
x = np.load(data_file)[:300]
model = keras.models.load_model(model_file, compile=False)
with contextlib.redirect_stdout(io.StringIO()):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
converter.optimizations = [tf.lite.Optimize.DEFAULT]
converter.representative_dataset = lambda: ([x[i:i + 1]] for i in range(len(x)))
converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
converter.inference_input_type = tf.int8
converter.inference_output_type = tf.int8
with contextlib.redirect_stdout(io.StringIO()):
    data = converter.convert()
with open(out, "wb") as f:
    f.write(data)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

DEVICEFIT = r"""
import resource, sys
from devicefit.sdk.cli import main
code = main(["convert", *sys.argv[1:]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    peak_rss_kib: int
    bytes: int


@dataclass
class Parity:
    model: str
    params: int
    bare: list[Run] = field(default_factory=list)
    devicefit: list[Run] = field(default_factory=list)
    eval_peak_rss_kib: int | None = None

    def median(self, side: str, key: str) -> float:
        return statistics.median(getattr(r, key) for r in getattr(self, side))

    def ratio(self, key: str) -> float:
        return self.median("devicefit", key) / self.median("bare", key)


def build_models(folder: Path) -> dict[str, tuple[Path, Path]]:
    """name → (.keras file, calibration .npy): the digits CNN (trained), an MLP, a DS-CNN
    (keyword spotting layout, 49×10 MFCC) and MobileNetV2-0.35 at 96×96 (random weights)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    from examples.digits import cached_cnn, load_digits

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    digits = load_digits()
    out: dict[str, tuple[Path, Path]] = {}
    np.save(folder / "digits.npy", digits.x_train[:1000])
    out["digits CNN"] = (cached_cnn(ROOT / "tests" / "artifacts" / "convert"),
                         folder / "digits.npy")

    inp = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inp)
    for units in (256, 128):
        x = keras.layers.Dense(units, activation="relu")(x)
    keras.Model(inp, keras.layers.Dense(10)(x), name="mlp").save(folder / "mlp.keras")
    out["MLP"] = (folder / "mlp.keras", folder / "digits.npy")

    inp = keras.Input((49, 10, 1))
    x = keras.layers.Conv2D(64, (10, 4), strides=2, padding="same", activation="relu")(inp)
    for _ in range(4):
        x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
        x = keras.layers.Conv2D(64, 1, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    keras.Model(inp, keras.layers.Dense(12)(x), name="ds_cnn").save(folder / "ds_cnn.keras")
    np.save(folder / "mfcc.npy", rng.normal(size=(1000, 49, 10, 1)).astype(np.float32))
    out["DS-CNN"] = (folder / "ds_cnn.keras", folder / "mfcc.npy")

    mnv2 = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None,
                                          classes=10)
    mnv2.save(folder / "mobilenet_v2_035.keras")
    np.save(folder / "images.npy", rng.random((1000, 96, 96, 3), dtype=np.float32))
    out["MobileNetV2-0.35"] = (folder / "mobilenet_v2_035.keras", folder / "images.npy")
    return out


def build_in_child(folder: Path) -> dict[str, tuple[Path, Path, int]]:
    """:func:`build_models` in a child process: name → (.keras, calibration .npy, params)."""
    code = ("import json, sys; from pathlib import Path; "
            "from benchmarks.convert_parity import build_models, params; "
            "models = build_models(Path(sys.argv[1])); "
            "print(json.dumps({k: [str(m), str(d), params(m)] for k, (m, d) in models.items()}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                          text=True, env=env, cwd=ROOT, check=True)
    built = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: (Path(m), Path(d), int(n)) for k, (m, d, n) in built.items()}


def params(model_file: Path) -> int:
    import keras

    return int(keras.models.load_model(model_file, compile=False).count_params())


def _run(argv: list[str], out: Path) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:4]} failed: {done.stderr.strip()[-500:]}")
    own, children = (int(v) for v in done.stdout.split()[-2:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall_s=wall, cpu_s=cpu, peak_rss_kib=own + children, bytes=out.stat().st_size)


def measure(models: dict[str, tuple[Path, Path, int]], tmp: Path, repeat: int,
            eval_samples: int = 1000) -> list[Parity]:
    results = []
    for name, (model_file, data_file, count) in models.items():
        p = Parity(model=name, params=count)
        for _ in range(repeat):
            bare_out, ours_out = tmp / "bare.tflite", tmp / "ours.tflite"
            p.bare.append(_run([sys.executable, "-c", BARE, str(model_file), str(data_file),
                                str(bare_out)], bare_out))
            p.devicefit.append(_run([sys.executable, "-c", DEVICEFIT, str(model_file),
                                     "--profile", MCU, "--calibration", str(data_file),
                                     "-o", str(ours_out)], ours_out))
        eval_data = tmp / "eval.npy"
        np.save(eval_data, np.load(data_file)[:eval_samples])
        p.eval_peak_rss_kib = _run([sys.executable, "-c", DEVICEFIT, str(model_file),
                                    "--profile", MCU, "--calibration", str(data_file),
                                    "--eval", str(eval_data), "-o", str(ours_out)],
                                   ours_out).peak_rss_kib
        results.append(p)
        print(f"  {name}: done", flush=True)
    return results


def table(results: list[Parity]) -> str:
    lines = ["| model | params | size (bare → devicefit) | wall | CPU | peak RSS | "
             "peak RSS with --eval 1,000 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for p in results:
        mib = 1024.0
        lines.append(
            f"| {p.model} | {p.params:,} | {p.median('bare', 'bytes'):,.0f} → "
            f"{p.median('devicefit', 'bytes'):,.0f} B = **{p.ratio('bytes'):.3f}×** | "
            f"{p.median('bare', 'wall_s'):.1f} → {p.median('devicefit', 'wall_s'):.1f} s = "
            f"**{p.ratio('wall_s'):.2f}×** | {p.median('bare', 'cpu_s'):.1f} → "
            f"{p.median('devicefit', 'cpu_s'):.1f} s = **{p.ratio('cpu_s'):.2f}×** | "
            f"{p.median('bare', 'peak_rss_kib') / mib:.0f} → "
            f"{p.median('devicefit', 'peak_rss_kib') / mib:.0f} MiB = "
            f"**{p.ratio('peak_rss_kib'):.2f}×** | "
            f"{(p.eval_peak_rss_kib or 0) / mib:.0f} MiB |")
    return "\n".join(lines)
