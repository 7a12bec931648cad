"""Why LiteRT's GPU path gives wrong outputs on MediaPipe's sparse models: the smallest
reproduction, on the CPU alone and through the GPU.

Weights stored sparse in fp16 are made dense by DENSIFY, then fp32 by DEQUANTIZE
(``tests/tflite_builder.py``, ``sparse_weights_model``: 8 filters of 8 channels, about
60 % non-zero). LiteRT's XNNPACK unpacks such weights itself and skips the DENSIFY; when the
op reading the DEQUANTIZE's output is not XNNPACK's — an op it lacks (TOPK_V2), or an op the
GPU delegate took (CONV_2D) — it leaves the DEQUANTIZE to LiteRT's builtin kernel, which
then reads DENSIFY's output, never written (``tflite/delegates/xnnpack/xnnpack_delegate.cc``,
``PrepareOpsToDelegate``: a skipped producer is given back only for the direct inputs of an
op XNNPACK does not take). Each row is one fresh child process (uninitialised memory differs
between processes): the model compiled as the row says, run three times on random inputs
(seed 1), against the same model on LiteRT's reference kernels (``CpuKernelMode.REFERENCE``).
The GPU rows need Chromium's SwiftShader Vulkan driver (the adapter ``simulate --run``
uses); without it they print why not.

    .venv/bin/python benchmarks/repro_xnnpack_densify.py     # about 30 s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devicefit.simulator.targets.gpu.delegate import ICDS, vulkan_env  # noqa: E402

#: (weights, consumer, channels, accelerator, CPU kernels): one child each.
CASES = (
    ("fp16", "topk", 8, "cpu", "xnnpack"),
    ("fp16", "topk", 8, "cpu", "builtin"),
    ("fp32", "topk", 8, "cpu", "xnnpack"),
    ("fp16", "conv", 8, "cpu", "xnnpack"),
    ("fp16", "conv", 8, "gpu", "xnnpack"),
    ("fp16", "conv", 6, "gpu", "xnnpack"),
    ("fp16", "conv", 8, "gpu", "builtin"),
    ("fp32", "conv", 8, "gpu", "xnnpack"),
)

CHILD = """
import json, sys
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.options import (CpuKernelMode, CpuOptions, GpuOptions,
                                    HardwareAccelerator, Options)
from tests.tflite_builder import sparse_weights_model

weights, consumer, channels, accel, kernels, path = sys.argv[1:]
Path = __import__("pathlib").Path
Path(path).write_bytes(sparse_weights_model(weights == "fp16", consumer, int(channels)))
mode = {"xnnpack": None, "builtin": CpuKernelMode.BUILTIN,
        "reference": CpuKernelMode.REFERENCE}


def compiled(accel, kernels):
    cpu = CpuOptions(num_threads=1, kernel_mode=mode[kernels])
    if accel == "gpu":
        return CompiledModel.from_file(path, options=Options(
            HardwareAccelerator.GPU | HardwareAccelerator.CPU, cpu_options=cpu,
            gpu_options=GpuOptions(enforce_f32=True)))
    return CompiledModel.from_file(path, options=Options(HardwareAccelerator.CPU,
                                                         cpu_options=cpu))


def run(model, x):
    key = next(iter(model.get_signature_list()))
    out = next(iter(model.get_output_tensor_details(key).values()))
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    ins[0].write(x)
    model.run_by_index(0, ins, outs)
    return outs[0].read(int(np.prod(out["shape"])), np.float32)


shape = (1, 4, 4, int(channels)) if consumer == "conv" else (1, 8)
rng = np.random.default_rng(1)
xs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(3)]
case = compiled(accel, kernels)  # first: no earlier model's freed memory to reuse
got = [run(case, x) for x in xs]
ref = [run(compiled("cpu", "reference"), x) for x in xs]
diff = max(float(np.nanmax(np.abs(g - r), initial=0.0)) for g, r in zip(got, ref))
print(json.dumps({"max_abs_diff": diff, "nan": int(sum(np.isnan(g).sum() for g in got)),
                  "ref_max": max(float(np.abs(r).max()) for r in ref)}))
"""


def main() -> int:
    swiftshader = ICDS["swiftshader"]
    have_gpu = bool(swiftshader) and Path(str(swiftshader)).is_file()
    env = {**vulkan_env(swiftshader if have_gpu else None),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    print(f"{'weights':8} {'read by':16} {'channels':>8}  {'compiled for':28} "
          f"max |diff| against LiteRT's reference kernels")
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for weights, consumer, channels, accel, kernels in CASES:
        reader = "CONV_2D 1x1" if consumer == "conv" else "TOPK_V2"
        where = ("GPU|CPU, CPU ops on " if accel == "gpu" else "CPU on ") + (
            "XNNPACK" if kernels == "xnnpack" else "builtin")
        head = f"{weights:8} {reader:16} {channels:>8}  {where:28} "
        if accel == "gpu" and not have_gpu:
            print(head + "not run: Chromium's SwiftShader Vulkan driver is not installed")
            continue
        path = tmp / f"devicefit-repro-{os.getpid()}.tflite"
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, weights, consumer,
                                   str(channels), accel, kernels, str(path)], env=env,
                                  capture_output=True, text=True, timeout=120)
        finally:
            path.unlink(missing_ok=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(head + f"failed (exit {done.returncode})")
            continue
        r = json.loads(lines[-1])
        verdict = "WRONG" if r["nan"] or r["max_abs_diff"] > 1e-3 * r["ref_max"] else "right"
        nan = f", {r['nan']} nan" if r["nan"] else ""
        print(head + f"{r['max_abs_diff']:>20.3g} (outputs up to {r['ref_max']:.2g}{nan})"
              f"  {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
