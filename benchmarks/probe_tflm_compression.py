"""Probe where TFLM's look-up-table compression runs (issue 47, "Compression the target reads").

On the README tour's int8 digits CNN (``tests/docs_models.py``): cluster each conv /
fully-connected filter to at most 2**bits int8 values per output channel (k-means on the int8
values, written back with ``simulator/read/writer.py``), compress it with TFLM's own tool as
the ``tflite_micro`` wheel ships it (``tensorflow/lite/micro/compression/compress.py``: LUT
indices plus value tables, a ``TFLM_DECODE`` custom operator before each consumer), then run
the dense, the clustered and the compressed model in the wheel's interpreter on the held-out
digits; print file sizes, accuracy and the arena the wheel's recording allocator reports.

    .venv/bin/python benchmarks/probe_tflm_compression.py [--bits 4] [--out DIR]

With ``--out`` the three models are kept there (for the target build and Vela).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devicefit.simulator.read import writer  # noqa: E402

#: ``make demo``'s int8 digits CNN for the STM32L4R5 (int8 I/O).
DEMO_MODEL = ROOT / "build/demo/digits_0_stm32l4r5-cortex-m4.tflite"
#: The input index of the filter of the operators whose weights are clustered.
FILTER_INPUT = {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "FULLY_CONNECTED": 1}


def kmeans_1d(values: np.ndarray, k: int, iters: int = 30) -> np.ndarray:
    """``values`` (int8) mapped onto at most ``k`` int8 centres (Lloyd's, quantile start)."""
    uniq = np.unique(values)
    if uniq.size <= k:
        return values
    x = values.astype(np.float64).ravel()
    centres = np.quantile(x, (np.arange(k) + 0.5) / k)
    for _ in range(iters):
        assign = np.abs(x[:, None] - centres[None, :]).argmin(axis=1)
        for j in range(k):
            if np.any(assign == j):
                centres[j] = x[assign == j].mean()
    centres = np.clip(np.round(centres), -128, 127)
    assign = np.abs(x[:, None] - centres[None, :]).argmin(axis=1)
    return centres[assign].astype(np.int8).reshape(values.shape)


def prune_2_4(w: np.ndarray) -> np.ndarray:
    """The two smallest of each four consecutive weights along the input axis set to 0."""
    flat = w.reshape(w.shape[0], -1)
    groups = flat[:, : flat.shape[1] // 4 * 4].reshape(flat.shape[0], -1, 4).copy()
    drop = np.argsort(np.abs(groups.astype(np.int16)), axis=2)[:, :, :2]
    np.put_along_axis(groups, drop, 0, axis=2)
    out = flat.copy()
    out[:, : groups.shape[1] * 4] = groups.reshape(flat.shape[0], -1)
    return out.reshape(w.shape)


def edit_filters(model_bytes: bytes, bits: int | None, prune: bool
                 ) -> tuple[bytes, dict[int, int]]:
    """Each filter 2:4-pruned (``prune``, after training: no fine-tuning) and/or clustered to
    ``2**bits`` values per channel of its quantization (the depthwise filter's last axis);
    the model and {filter's tensor index: that axis}."""
    from ai_edge_litert import schema_py_generated as schema

    model = writer.unpack(model_bytes)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    sg = model.subgraphs[0]
    done: dict[int, int] = {}
    for op in sg.operators:
        code = model.operatorCodes[op.opcodeIndex]
        name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode))
        k = FILTER_INPUT.get(name or "")
        if k is None:
            continue
        t = sg.tensors[op.inputs[k]]
        buf = model.buffers[t.buffer]
        if t.type != schema.TensorType.INT8 or buf.data is None or t.buffer == 0:
            continue
        w = np.asarray(buf.data, dtype=np.uint8).view(np.int8).reshape(t.shape)
        axis = t.quantization.quantizedDimension if t.quantization is not None else 0
        out = prune_2_4(w) if prune else w
        if bits is not None:
            out = np.stack([kmeans_1d(ch, 2 ** bits) for ch in np.moveaxis(out, axis, 0)])
            out = np.moveaxis(out, 0, axis)
        buf.data = np.ascontiguousarray(out).view(np.uint8).ravel()
        done[op.inputs[k]] = axis
    return writer.pack(model), done


def compress(model_bytes: bytes, tensors: dict[int, int], bits: int) -> bytes:
    """TFLM's own tool (the wheel's copy): LUT compression of ``{tensor: channel axis}``, one
    value table per channel."""
    import importlib

    # The package's __init__ re-exports the function under the module's own name.
    tflm_compress = importlib.import_module(
        "tflite_micro.tensorflow.lite.micro.compression.compress")
    spec = importlib.import_module("tflite_micro.tensorflow.lite.micro.compression.spec")

    lines = ["tensors:"]
    for t, axis in tensors.items():
        lines += ["  - subgraph: 0", f"    tensor: {t}", "    compression:",
                  "      - lut:", f"          index_bitwidth: {bits}",
                  "          per_channel:", f"            axis: {axis}"]
    return bytes(tflm_compress.compress(model_bytes, spec.parse_yaml("\n".join(lines))))


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
    print(f"{2 ** args.bits} values per output channel; TFLM wheel measured; Vela 5.2.0 on "
          "ethos-u55-128 (weights original -> encoded, off-chip flash)")
    print(f"{'model':<18}{'file B':>8}{'accuracy':>9}{'arena B':>8}   Vela weights")
    for name, blob in models.items():
        path = out / f"{name.replace('+', '_')}.tflite"
        path.write_bytes(blob)
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
