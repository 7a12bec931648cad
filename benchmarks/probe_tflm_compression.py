"""Where TFLM's look-up-table compression and Vela's weight encoding save bytes (issue 47,
"Compression the target reads").

On ``make demo``'s int8 digits CNN: each conv / fully-connected filter clustered to at most
2**bits int8 values per channel, 2:4-pruned after training (no fine-tuning), or both
(:mod:`sdk.convert.lut`); the clustered ones also compressed by TFLM's own tool as the
``tflite_micro`` wheel ships it (LUT indices plus value tables, a ``TFLM_DECODE`` operator
before each consumer). Each model runs in the wheel's interpreter on the held-out digits
(file size, accuracy, the arena head its recording allocator reports), and the uncompressed
ones go through Vela for devicefit's Ethos-U55-128 profile (weights before and after Vela's
encoding, off-chip flash).

    .venv/bin/python benchmarks/probe_tflm_compression.py [--bits 4] [--out DIR]

With ``--out`` the models are kept there (for ``simulate --target-build``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.sdk.convert.lut import compress, edit_filters  # noqa: E402
from devicefit.simulator.infra.fileio import write_atomic  # noqa: E402

#: ``make demo``'s int8 digits CNN for the STM32L4R5 (int8 I/O).
DEMO_MODEL = ROOT / "build/demo/digits_0_stm32l4r5-cortex-m4.tflite"


def run_wheel(model_bytes: bytes, x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Accuracy in the wheel's TFLM interpreter and the arena head it reports."""
    from tflite_micro.python.tflite_micro import runtime

    from devicefit.simulator.targets.tflm.runner import capture_fd2, parse_allocations

    with capture_fd2() as err:
        try:
            interp = runtime.Interpreter.from_bytes(model_bytes, arena_size=1 << 20)
        except RuntimeError as exc:
            raise RuntimeError(" | ".join(err[-4:])) from exc
    with capture_fd2() as lines:
        interp.print_allocations()
    totals, _ = parse_allocations(lines)
    det = interp.get_input_details(0)
    scale, zero = det["quantization_parameters"]["scales"][0], \
        det["quantization_parameters"]["zero_points"][0]
    hits = 0
    for xi, yi in zip(x, y):
        q = np.clip(np.round(xi / scale + zero), -128, 127).astype(np.int8)
        interp.set_input(q[None], 0)
        interp.invoke()
        hits += int(np.argmax(interp.get_output(0)) == yi)
    return hits / len(y), totals["head"]


def vela_weights(path: Path) -> tuple[int, int, int]:
    """Vela's (original, encoded weight bytes, off-chip flash) as devicefit's Ethos-U55-128
    profile compiles the model (``simulate --format json``)."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-m", "devicefit", "simulate", str(path),
                           "--profile", "ethos-u55-128", "--format", "json"],
                          capture_output=True, text=True, check=False)
    f = json.loads(done.stdout)["compatibility"]["ethos-u"]["figures"]
    return (f["original_weights_bytes"], f["encoded_weights_bytes"],
            f["off_chip_flash_used_bytes"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--model", type=Path, default=DEMO_MODEL)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dense = args.model.read_bytes()
    data = np.load(ROOT / "build/demo/digits_test.npz")
    clustered, tensors = edit_filters(dense, args.bits, prune=False)
    pruned, _ = edit_filters(dense, None, prune=True)
    both, _ = edit_filters(dense, args.bits, prune=True)
    models = {"int8": dense, "clustered": clustered, "pruned": pruned,
              "pruned+clustered": both}
    for name, blob in (("lut", clustered), ("pruned+lut", both)):
        try:
            models[name] = compress(blob, tensors, args.bits)
        except Exception as exc:  # the tool's failure is the finding
            print(f"compress {name} failed: {type(exc).__name__}: {exc}")
    out = args.out or Path(tempfile.mkdtemp(prefix="probe-tflm-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{2 ** args.bits} values per channel; TFLM wheel measured; Vela 5.2.0 on "
          "ethos-u55-128 (weights original -> encoded, off-chip flash)")
    print(f"{'model':<18}{'file B':>8}{'accuracy':>9}{'arena B':>8}   Vela weights")
    for name, blob in models.items():
        path = out / f"{name.replace('+', '_')}.tflite"
        write_atomic(path, blob, inputs=[args.model])
        try:
            acc, arena = run_wheel(blob, data["x"], data["y"])
            line = f"{name:<18}{len(blob):>8}{acc:>9.4f}{arena:>8}"
        except Exception as exc:
            line = f"{name:<18}{len(blob):>8}  wheel failed: {type(exc).__name__}: {exc}"
        if "lut" not in name:
            orig, enc, flash = vela_weights(path)
            line += f"   {orig} -> {enc}, flash {flash}"
        print(line)
    print(f"models in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
