"""Benchmark the training-memory estimate against measured peak memory of real steps.

For each model and batch size: the estimate's step memory (``TrainingMemory.step_bytes``:
what one Adam update adds on top of parameters and optimizer state) and the measured one
(peak RSS over the post-warm-up baseline, in a child process, see ``sdk.train.measure``),
with the allocator set up as ``fit`` does it (``steady``) and with glibc's default
(``glibc``). Prints a Markdown table; ``--json`` also writes the raw figures.

    .venv/bin/python benchmarks/bench_train_memory.py [--batches 16,64,128] [--json out.json]
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
    ap.add_argument("--batches", default="16,64,128", help="comma-separated batch sizes")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    import keras

    from sdk.train import TrainingMemoryModel
    from sdk.train.measure import measure_step_peak

    mib = 1024**2
    rows = []
    print("| model | batch | estimated MiB | measured MiB (steady) | ratio | "
          "measured MiB (glibc default) | ratio | peak at | activations share |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in _models().items():
            keras.utils.set_random_seed(0)
            model = build()
            path = Path(tmp) / "model.keras"
            model.save(path)
            tm = TrainingMemoryModel(model)
            for b in batches:
                est = tm.estimate(b)
                steady = measure_step_peak(path, b).step_bytes
                glibc = measure_step_peak(path, b, steady_allocator=False).step_bytes
                share = est.activation_bytes / est.step_bytes
                rows.append({"model": name, "batch": b, "estimated_bytes": est.step_bytes,
                             "measured_steady_bytes": steady, "measured_glibc_bytes": glibc,
                             "peak_at": est.peak_at, "activation_share": share})
                print(f"| {name} | {b} | {est.step_bytes / mib:.1f} | {steady / mib:.1f} | "
                      f"{est.step_bytes / steady:.2f} | {glibc / mib:.1f} | "
                      f"{est.step_bytes / glibc:.2f} | {est.peak_at} | {share:.0%} |",
                      flush=True)
    if args.json:
        tmp_out = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp_out.write_text(json.dumps(rows, indent=2))
        os.replace(tmp_out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
