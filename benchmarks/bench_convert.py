"""Benchmark ``devicefit convert``.

1. Parity with bare TensorFlow (``benchmarks/convert_parity.py``): the CLI with its defaults
   against a bare ``TFLiteConverter`` script, each a fresh process, on four models (digits
   CNN, MLP, DS-CNN, MobileNetV2-0.35): file size, wall, CPU and peak RSS ratios, medians
   of ``--repeat`` interleaved runs. Targets: size ≤ 1.05x, wall/CPU ≤ 1.2x, memory ≤ 1.3x.
2. Size/accuracy table on the scikit-learn digits CNN (examples/digits.py): each scheme and
   sparsity variant for its profile, with the output size, size vs the float .tflite, test
   accuracy, top-1 agreement, SQNR, the simulated arena, and the full conversion time (with
   float baseline, evaluation and simulation).

    .venv/bin/python -m benchmarks.bench_convert [--repeat 3] [--skip-table] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
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


def table(model_file: Path, paths: dict, tmp: Path) -> list[dict]:
    from devicefit.sdk.convert import convert
    from devicefit.simulator.profiles import load_profile

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
                    eval_data=paths["test"], float_baseline=True, **options)
        rows.append({
            "variant": name, "profile": profile, "bytes": r.output_bytes,
            "vs_float": r.size_ratio, "accuracy": r.accuracy.converted_accuracy,
            "float_accuracy": r.accuracy.float_accuracy,
            "agreement": r.accuracy.top1_agreement, "sqnr_db": r.accuracy.sqnr_db,
            "arena_bytes": r.simulation.memory.arena_bytes if r.simulation else None,
            "warnings": r.warnings,
            "seconds": time.perf_counter() - start})
    return rows


def main(argv: list[str] | None = None) -> int:
    from benchmarks import convert_parity

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-table", action="store_true", help="only the parity measurement")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result: dict = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        models = convert_parity.build_in_child(tmp)
        print(f"parity with bare TensorFlow, int8 for {MCU}, {args.repeat} runs each "
              "(medians; fresh processes, interleaved):", flush=True)
        parity = convert_parity.measure(models, tmp, args.repeat)
        print(convert_parity.table(parity), flush=True)
        result["parity"] = [dataclasses.asdict(p) for p in parity]
        if not args.skip_table:
            digits = load_digits()
            paths = digits.save_npz(tmp)
            model_file = cached_cnn(ROOT / "tests" / "artifacts" / "convert")
            result["variants"] = table(model_file, paths, tmp)
            _print_variants(result["variants"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _print_variants(variants: list[dict]) -> None:
    print("\n| variant | profile | .tflite | vs float | accuracy | top-1 agreement | SQNR | "
          "arena | convert |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in variants:
        sqnr = "identical" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f} dB"
        print(f"| {r['variant']} | {r['profile']} | {format_size(r['bytes'])} | "
              f"{r['vs_float']:.2f}x | {r['accuracy']:.2%} | {r['agreement']:.2%} | {sqnr} | "
              f"{format_size(r['arena_bytes']) if r['arena_bytes'] else 'n/a'} | "
              f"{r['seconds']:.1f} s |")
    for r in variants:
        for w in r["warnings"]:
            print(f"\n{r['variant']}: {w}")
    print(f"\nfloat Keras model: {variants[0]['float_accuracy']:.2%} test accuracy")


if __name__ == "__main__":
    sys.exit(main())
