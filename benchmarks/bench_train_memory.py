"""Benchmark the training-memory planner: static estimate vs calibrated vs measured.

For each model, each oneDNN setting (``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1``, set for the
child processes) and each batch size, with the threads of the environment
(``TF_NUM_INTRAOP_THREADS``, default all cores):

- static: ``TrainingMemory.step_bytes``, the estimate of what one Adam update adds on top of
  parameters and optimizer state (tensor bytes; the same on every machine);
- calibrated: what ``plan-batch`` predicts for the whole training process at that batch
  from its calibration child (two small batches, ``sdk.train.calibrate``), without margin;
- measured: a fresh child running that batch (``sdk.train.measure``): its whole-process
  peak RSS and the step (peak minus the baseline after warm-up).

Ratios are predicted / measured. Prints a Markdown table; ``--json`` also writes the figures.

    .venv/bin/python benchmarks/bench_train_memory.py [--batches 32,128] [--models cnn,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _models() -> dict[str, Callable[[], object]]:
    import keras

    L = keras.layers

    def mlp():
        return keras.Sequential([keras.Input((512,)), L.Dense(1024, activation="relu"),
                                 L.Dense(1024, activation="relu"), L.Dense(10)])

    def cnn():
        return keras.Sequential([
            keras.Input((64, 64, 3)), L.Conv2D(32, 3, padding="same", activation="relu"),
            L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPooling2D(),
            L.Conv2D(64, 3, padding="same", activation="relu"), L.GlobalAveragePooling2D(),
            L.Dense(10)])

    def conv_bn():
        return keras.Sequential([
            keras.Input((64, 64, 3)), L.Conv2D(32, 3, padding="same"), L.BatchNormalization(),
            L.ReLU(), L.Conv2D(32, 3, padding="same"), L.GlobalAveragePooling2D(),
            L.Dense(10)])

    def residual():
        x = inp = keras.Input((48, 48, 16))
        y = L.Conv2D(16, 3, padding="same", activation="relu")(x)
        y = L.Conv2D(16, 3, padding="same")(y)
        x = L.MaxPooling2D()(L.ReLU()(L.Add()([x, y])))
        return keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(x)))

    def mobilenet_block():
        x = inp = keras.Input((64, 64, 16))
        x = L.Conv2D(48, 1, use_bias=False)(x)
        x = L.ReLU(6.0)(L.BatchNormalization()(x))
        x = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        x = L.ReLU(6.0)(L.BatchNormalization()(x))
        x = L.BatchNormalization()(L.Conv2D(16, 1, use_bias=False)(x))
        return keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(x)))

    def dropout_mlp():
        return keras.Sequential([keras.Input((256,)), L.Dense(2048, activation="gelu"),
                                 L.Dropout(0.2), L.Dense(10)])

    return {"mlp (params dominate)": mlp, "cnn": cnn, "conv-bn-relu-conv": conv_bn,
            "residual": residual, "mobilenet-block": mobilenet_block,
            "dense-gelu-dropout": dropout_mlp}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="32,128", help="comma-separated batch sizes")
    ap.add_argument("--models", default="cnn,conv-bn-relu-conv,residual,mobilenet-block",
                    help="comma-separated model names (of: " + ", ".join(_models()) + ")")
    ap.add_argument("--onednn", default="0,1", help="TF_ENABLE_ONEDNN_OPTS values to run")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    models = {n: f for n, f in _models().items() if n in args.models.split(",")}

    import keras

    from devicefit.sdk.train import TrainingMemoryModel
    from devicefit.sdk.train.calibrate import calibration_batches
    from devicefit.sdk.train.measure import measure_steps

    mib = 1024**2
    rows = []
    print("| model | oneDNN | batch | static step MiB | measured step MiB | static/measured | "
          "calibrated peak MiB | measured peak MiB | calibrated/measured |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in models.items():
            keras.utils.set_random_seed(0)
            model = build()
            path = Path(tmp) / "model.keras"
            model.save(path)
            tm = TrainingMemoryModel(model)
            for onednn in args.onednn.split(","):
                os.environ["TF_ENABLE_ONEDNN_OPTS"] = onednn
                # What plan-batch measures when the static plan picks the largest batch here.
                small = calibration_batches(max(batches), max(batches))
                cal = measure_steps(path, [[b] for b in small])
                (b0, p0), (b1, p1) = [(s.batch_size, s.peak_bytes) for s in cal.steps]
                slope = max((p1 - p0) / (b1 - b0), 0.0)
                for b in batches:
                    real = measure_steps(path, [[b]]).steps[0]
                    static = tm.estimate(b).step_bytes
                    predicted = p0 + slope * (b - b0)
                    rows.append({"model": name, "backend": cal.backend.to_dict(), "batch": b,
                                 "calibration_batches": small, "static_step_bytes": static,
                                 "measured_step_bytes": real.step_bytes,
                                 "calibrated_peak_bytes": int(predicted),
                                 "measured_peak_bytes": real.peak_bytes})
                    print(f"| {name} | {'on' if cal.backend.onednn else 'off'} | {b} | "
                          f"{static / mib:.1f} | {real.step_bytes / mib:.1f} | "
                          f"{static / real.step_bytes:.2f} | {predicted / mib:.1f} | "
                          f"{real.peak_bytes / mib:.1f} | {predicted / real.peak_bytes:.2f} |",
                          flush=True)
    print(f"threads: {rows[0]['backend']['intra_op_threads'] if rows else '-'}; "
          f"calibration batches {rows[0]['calibration_batches'] if rows else '-'}")
    if args.json:
        tmp_out = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp_out.write_text(json.dumps(rows, indent=2))
        os.replace(tmp_out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
