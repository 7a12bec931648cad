"""Benchmark ``convert --weights int4`` against int8, per profile (issue 47, first part).

For the scikit-learn digits CNN (examples/digits.py, the model ``make demo`` trains), each
profile: the int8 model and the int4 one converted from the same Keras model with the same
calibration data; the file size, the bytes of the weights of conv and fully-connected
layers, the accuracy measured in LiteRT on the held-out test split, which layers went to
int4 (and what the runtime refused), the arena simulate predicts and its verdict.

    .venv/bin/python -m benchmarks.bench_int4 [--profiles A,B] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.infra.units import format_size  # noqa: E402
from examples.digits import cached_cnn, load_digits  # noqa: E402

PROFILES = ("stm32l4r5-cortex-m4", "esp32-s3", "android-arm64-cpu", "coral-edgetpu",
            "ethos-u55-128")


def weight_bytes(path: Path) -> int:
    """Bytes of the conv / fully-connected weights stored in the file (int4: two per byte)."""
    from devicefit.simulator.read.model import WEIGHTS_INPUT
    from devicefit.simulator.read.reader import read_model

    sg = read_model(path).main
    weights = [op.inputs[k] for op in sg.operators
               if (k := WEIGHTS_INPUT.get(op.op_name)) is not None and k < len(op.inputs)
               and op.inputs[k] >= 0]
    return sum(sg.tensors[w].stored_bytes for w in weights if sg.tensors[w].has_data)


def one(model: Path, data: dict, profile: str, weights: str, out: Path) -> dict:
    from devicefit.sdk.convert import convert

    start = time.perf_counter()
    # int8 I/O for both (the Edge TPU's default is uint8, which --weights int4 cannot write).
    report = convert(str(model), profile, out, calibration=data["train"],
                     eval_data=data["test"], weights=weights, io_type="int8")
    acc = report.accuracy
    arena = next((b for b in report.simulation.budgets if b.name == "arena"), None) \
        if report.simulation is not None else None
    low = report.low_bit
    return {"profile": profile, "weights": weights, "file_bytes": report.output_bytes,
            "weight_bytes": weight_bytes(out),
            "accuracy": None if acc is None else acc.converted_accuracy,
            "float_accuracy": None if acc is None else acc.float_accuracy,
            "drop_pp": None if acc is None else acc.accuracy_drop_pp,
            "int4_layers": None if low is None else f"{low.int4_layers}/{len(low.layers)}",
            "refused": [] if low is None else [f"op {w.op_index} {w.op}: {w.why}"
                                               for w in low.layers if w.why],
            "arena_bytes": None if arena is None else arena.value,
            "verdict": report.verdict, "seconds": round(time.perf_counter() - start, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-int4-") as tmp:
        data = {k: str(v) for k, v in load_digits().save_npz(Path(tmp)).items()}
        for profile in args.profiles.split(","):
            pair = [one(model, data, profile, w, Path(tmp) / f"{profile}-{w}.tflite")
                    for w in ("int8", "int4")]
            rows += pair
            int8, int4 = pair
            print(f"{profile}: file {format_size(int8['file_bytes'])} → "
                  f"{format_size(int4['file_bytes'])} "
                  f"({int4['file_bytes'] / int8['file_bytes']:.2f}x), weights "
                  f"{format_size(int8['weight_bytes'])} → {format_size(int4['weight_bytes'])} "
                  f"({int4['weight_bytes'] / int8['weight_bytes']:.2f}x); accuracy "
                  f"{int8['accuracy']:.2%} → {int4['accuracy']:.2%} (float "
                  f"{int8['float_accuracy']:.2%}); int4 layers {int4['int4_layers']}; arena "
                  f"{int8['arena_bytes']} → {int4['arena_bytes']} B; verdict "
                  f"{int8['verdict']} / {int4['verdict']}")
            for line in int4["refused"]:
                print(f"    {line[:160]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
