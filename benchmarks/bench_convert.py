"""Benchmark ``devicefit convert`` on the scikit-learn digits CNN (examples/digits.py).

1. Overhead: wall and CPU time of ``sdk.convert.convert`` (int8, no pruning, no evaluation
   and no simulation: load → calibrate → convert → metadata → atomic write → read-back
   check) against a bare ``tf.lite.TFLiteConverter.from_keras_model`` run with the same
   settings on the same ``.keras`` file (load → convert → write). Both run ``--repeat``
   times in one warm process, interleaved; median and fastest wall time and median CPU
   time are compared (on a shared machine the fastest run is the least disturbed).
   Target: ≤ 1.2x.
2. Size/accuracy table: each scheme and sparsity variant for its profile, with the output
   size, size vs the float .tflite, test accuracy, top-1 agreement, SQNR, the simulated
   arena, and the full conversion time (with evaluation and simulation).

    .venv/bin/python -m benchmarks.bench_convert [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.digits import cached_cnn, load_digits  # noqa: E402
from simulator.units import format_size  # noqa: E402

MCU, PHONE = "stm32l4r5-cortex-m4", "android-arm64-cpu"
VARIANTS = [
    ("float32", PHONE, {"scheme": "float32"}),
    ("float16", PHONE, {"scheme": "float16"}),
    ("dynamic range", PHONE, {"scheme": "dynamic"}),
    ("int8", MCU, {}),
    ("int8, per-tensor", MCU, {"per_tensor": True}),
    ("int16x8", MCU, {"scheme": "int16x8"}),
    ("int8 + 2:4, 2 epochs", PHONE, {"sparsity_pattern": "2:4", "epochs": 2}),
    ("int8 + 50% channels", MCU, {"prune_channels": 0.5}),
    ("int8 + 50% channels, 4 epochs", MCU, {"prune_channels": 0.5, "epochs": 4}),
]


def bare_convert(model_file: Path, calibration, out: Path) -> None:
    """What a user writes by hand: the converter's documented full-integer recipe."""
    import keras
    import numpy as np
    import tensorflow as tf

    model = keras.models.load_model(model_file, compile=False)
    with contextlib.redirect_stdout(io.StringIO()):  # Keras prints the exported signature
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]

    def representative():
        for i in range(len(calibration)):
            yield [calibration[i:i + 1].astype(np.float32)]

    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    with contextlib.redirect_stdout(io.StringIO()):
        out.write_bytes(converter.convert())


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def overhead(model_file: Path, paths: dict, calibration, repeat: int, tmp: Path) -> dict:
    from sdk.convert import CALIBRATION_SAMPLES, convert

    calib = calibration[:CALIBRATION_SAMPLES]
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "devicefit": []}
    for i in range(repeat + 1):  # the first round warms TensorFlow up and is dropped
        bare = _timed(lambda: bare_convert(model_file, calib, tmp / "bare.tflite"))
        ours = _timed(lambda: convert(model_file, MCU, tmp / "ours.tflite",
                                      calibration=paths["train"], float_baseline=False,
                                      simulate=False))
        if i:
            runs["bare"].append(bare)
            runs["devicefit"].append(ours)
    stats = {}
    for name, values in runs.items():
        walls = [w for w, _ in values]
        stats[name] = {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
                       "cpu_median_s": statistics.median(c for _, c in values)}
    ratio = {k: stats["devicefit"][k] / stats["bare"][k] for k in stats["bare"]}
    return {"runs": repeat, **stats, "ratio": ratio,
            "bare_bytes": (tmp / "bare.tflite").stat().st_size,
            "devicefit_bytes": (tmp / "ours.tflite").stat().st_size}


def table(model_file: Path, paths: dict, tmp: Path) -> list[dict]:
    import dataclasses

    from sdk.convert import convert
    from simulator.profiles import load_profile

    rows = []
    for name, profile, options in VARIANTS:
        options = dict(options)
        prof = load_profile(profile)
        if options.pop("per_tensor", False):
            prof = dataclasses.replace(prof, quantization=dataclasses.replace(
                prof.quantization, per_channel=False))
        if options.get("epochs"):
            options["train"] = paths["train"]
        start = time.perf_counter()
        r = convert(model_file, prof, tmp / "variant.tflite", calibration=paths["train"],
                    eval_data=paths["test"], **options)
        rows.append({
            "variant": name, "profile": profile, "bytes": r.output_bytes,
            "vs_float": r.size_ratio, "accuracy": r.accuracy.converted_accuracy,
            "float_accuracy": r.accuracy.float_accuracy,
            "agreement": r.accuracy.top1_agreement, "sqnr_db": r.accuracy.sqnr_db,
            "arena_bytes": r.simulation["memory"]["arena_bytes"] if r.simulation else None,
            "warnings": r.warnings,
            "seconds": time.perf_counter() - start})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        digits = load_digits()
        paths = digits.save_npz(tmp)
        model_file = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
        result = {"overhead": overhead(model_file, paths, digits.x_train, args.repeat, tmp)}
        o = result["overhead"]
        print(f"int8 conversion, {o['runs']} runs each, bare TFLiteConverter vs devicefit convert "
              f"(files {o['bare_bytes']} vs {o['devicefit_bytes']} bytes):")
        for key, label in (("wall_median_s", "wall, median"), ("wall_min_s", "wall, fastest"),
                           ("cpu_median_s", "CPU, median")):
            print(f"  {label:14} {o['bare'][key]:.2f} s vs {o['devicefit'][key]:.2f} s = "
                  f"{o['ratio'][key]:.2f}x")
        print(flush=True)
        result["variants"] = table(model_file, paths, tmp)
    print("| variant | profile | .tflite | vs float | accuracy | top-1 agreement | SQNR | "
          "arena | convert |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["variants"]:
        sqnr = "identical" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f} dB"
        print(f"| {r['variant']} | {r['profile']} | {format_size(r['bytes'])} | "
              f"{r['vs_float']:.2f}x | {r['accuracy']:.2%} | {r['agreement']:.2%} | {sqnr} | "
              f"{format_size(r['arena_bytes']) if r['arena_bytes'] else 'n/a'} | "
              f"{r['seconds']:.1f} s |")
    for r in result["variants"]:
        for w in r["warnings"]:
            print(f"\n{r['variant']}: {w}")
    print(f"\nfloat Keras model: {result['variants'][0]['float_accuracy']:.2%} test accuracy")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
