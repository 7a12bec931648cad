"""Benchmark QAT for 4-bit layers against post-training int4 (issue 47).

The scikit-learn digits CNN (examples/digits.py, the model ``make demo`` trains) and its
held-out split, for one profile: the layers ``--weights int4`` writes at 4 bits there
(asked of the runtime), then three int4 files, each accuracy measured in LiteRT on the test
split:

* **PTQ**: the trained model quantized as it is;
* **PTQ + E epochs**: the same after E more epochs of plain fine-tuning (like for like with
  QAT: the same data, steps and seed, no fake quantization);
* **QAT**: E epochs with the 4-bit layers on the int4 grid and the others on int8's, then
  quantized the same way. Its Keras model's accuracy is printed too: the int4 file should
  lose almost nothing against it (its kernels are on the grid already).

Accuracy on a fixed seed and data; run it twice to see how far it moves on this machine.

    .venv/bin/python -m benchmarks.bench_int4_qat [--profile P] [--epochs E] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.digits import cached_cnn, load_digits  # noqa: E402


def accuracy(tflite: bytes, x: Any, y: Any, folder: Path) -> float:
    import numpy as np

    from devicefit.sdk.convert.accuracy import run_tflite

    path = folder / "m.tflite"
    path.write_bytes(tflite)
    return float(np.mean(run_tflite(path, x).argmax(1) == y))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="stm32l4r5-cortex-m4")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import numpy as np

    from devicefit.sdk.convert import loading, quantize
    from devicefit.sdk.convert.data import Dataset
    from devicefit.sdk.convert.qat import int4_layers
    from devicefit.sdk.convert.stages import Stages, run
    from devicefit.sdk.fit.int4 import int4_weights
    from devicefit.simulator.infra.fileio import write_atomic
    from devicefit.simulator.profiles import load_profile

    profile = load_profile(args.profile)
    digits = load_digits()
    train = Dataset(digits.x_train, digits.y_train, "digits train")
    calibration = digits.x_train[:300]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        loaded = loading.load(cached_cnn(ROOT / "build" / "bench-int4-qat"))
        ptq, report = int4_weights(loaded, calibration, train.source, profile)
        grid = int4_layers(loaded.keras_model, report)
        quant = quantize.resolve(profile, "int8", "int8")
        rows = {"PTQ": accuracy(ptq, digits.x_test, digits.y_test, folder)}
        for kind in ("plain", "qat"):
            stages = Stages(epochs=args.epochs, int8_training=kind,  # type: ignore[arg-type]
                            int4=tuple(sorted(grid.items())) if kind == "qat" else ())
            done = run(loaded, stages, quant, calibration, train)
            model = loading.load(done.model)
            tflite, _ = int4_weights(model, calibration, train.source, profile)
            label = f"PTQ + {args.epochs} epochs" if kind == "plain" else "QAT"
            rows[label] = accuracy(tflite, digits.x_test, digits.y_test, folder)
            if kind == "qat":
                keras_acc = float(np.mean(model.predict(digits.x_test).argmax(1)
                                          == digits.y_test))
        float_acc = float(np.mean(loaded.predict(digits.x_test).argmax(1) == digits.y_test))
    out = {"profile": args.profile, "epochs": args.epochs, "float_accuracy": float_acc,
           "int4_layers": {k: "per channel" if v else "per tensor" for k, v in grid.items()},
           "accuracy": rows, "qat_keras_accuracy": keras_acc, "test_samples": len(digits.y_test)}
    print(f"digits CNN on {args.profile}: int4 layers "
          + ", ".join(f"{k} ({v})" for k, v in out["int4_layers"].items()))
    print(f"float32 (Keras): {float_acc:.2%}; QAT model in Keras: {keras_acc:.2%}")
    for label, value in rows.items():
        print(f"int4 {label:<18} {value:.2%} (LiteRT, {len(digits.y_test)} test samples)")
    if args.json:
        write_atomic(Path(args.json), json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
