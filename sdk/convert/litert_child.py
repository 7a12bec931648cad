"""Run a ``.tflite`` on a batch of float inputs in LiteRT; meant to run in a child process.

``python -m sdk.convert.litert_child MODEL.tflite INPUTS.npy OUTPUTS.npy [tflm]``: quantizes the
float inputs with the model's input parameters, runs one sample at a time (device models
have a batch of one) and writes the first output, dequantized to float32. A native crash
kills only this process; the parent sees the exit status. With ``tflm`` the model runs in
the tflite-micro wheel's interpreter instead (a model with TFLM's DECODE operator, which
LiteRT lacks).
"""

from __future__ import annotations

import sys

import numpy as np


def run(model_path: str, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=model_path, num_threads=1)
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    batch = int(inp["shape"][0]) or 1
    if len(x) and batch != 1 and batch != len(x):
        raise SystemExit(f"model batch {batch} does not divide the inputs")
    interpreter.allocate_tensors()
    results = []
    for i in range(len(x)):
        interpreter.set_tensor(inp["index"], _quantize(x[i:i + 1], inp))
        interpreter.invoke()
        results.append(_dequantize(interpreter.get_tensor(out["index"]), out))
    return np.concatenate(results).astype(np.float32)


def run_tflm(model_path: str, x: np.ndarray) -> np.ndarray:
    from tflite_micro.python.tflite_micro import runtime

    with open(model_path, "rb") as f:
        interpreter = runtime.Interpreter.from_bytes(f.read(), arena_size=64 << 20)

    def detail(d: dict) -> dict:
        q = d["quantization_parameters"]
        scale = float(q["scales"][0]) if len(q["scales"]) else 0.0
        zero = int(q["zero_points"][0]) if len(q["zero_points"]) else 0
        return {"dtype": d["dtype"], "quantization": (scale, zero)}

    inp, out = detail(interpreter.get_input_details(0)), detail(interpreter.get_output_details(0))
    results = []
    for i in range(len(x)):
        interpreter.set_input(_quantize(x[i:i + 1], inp), 0)
        interpreter.invoke()
        results.append(_dequantize(np.array(interpreter.get_output(0)), out))
    return np.concatenate(results).astype(np.float32)


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    dtype = detail["dtype"]
    scale, zero = detail["quantization"]
    if np.issubdtype(dtype, np.floating):
        return x.astype(dtype)
    info = np.iinfo(dtype)
    q = np.round(x / scale + zero) if scale else np.round(x)
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    if np.issubdtype(y.dtype, np.floating) or not scale:
        return y.astype(np.float32)
    return (y.astype(np.float32) - zero) * scale


def main(argv: list[str]) -> int:
    model_path, inputs, outputs, *runtime = argv
    runner = run_tflm if runtime == ["tflm"] else run
    np.save(outputs, runner(model_path, np.load(inputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
