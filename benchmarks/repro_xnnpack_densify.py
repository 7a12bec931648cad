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
(seed 1), against the same model on LiteRT's reference kernels (``CpuKernelMode.REFERENCE``);
then the DEQUANTIZE's output itself, read after a run on the CPU.
The GPU rows need Chromium's SwiftShader Vulkan driver (the adapter ``simulate --run``
uses); without it they print why not.

    .venv/bin/python benchmarks/repro_xnnpack_densify.py     # about 40 s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devicefit.simulator.targets.gpu.delegate import ICDS, vulkan_env  # noqa: E402

#: (weights, consumer, channels, compiled for, CPU kernels, GPU option set): one child each.
#: "interpreter": the older Interpreter API with its default resolver (XNNPACK applied).
CASES = (
    ("fp16", "topk", 8, "cpu", "xnnpack", ""),
    ("fp16", "topk", 8, "interpreter", "xnnpack", ""),
    ("fp16", "topk", 8, "cpu", "builtin", ""),
    ("fp32", "topk", 8, "cpu", "xnnpack", ""),
    ("fp16", "conv", 8, "cpu", "xnnpack", ""),
    ("fp16", "conv", 8, "gpu", "xnnpack", ""),
    ("fp16", "conv", 8, "gpu", "xnnpack", ""),  # again: another process, other garbage
    ("fp16", "conv", 6, "gpu", "xnnpack", ""),
    *(("fp16", "conv", 8, "gpu", "xnnpack", flag) for flag in (
        "benchmark_mode", "hint_waiting_for_completion", "allow_src_quantized_fc_conv_ops",
        "infinite_float_capping", "constant_tensor_sharing")),
    ("fp16", "conv", 8, "gpu", "builtin", ""),
    ("fp32", "conv", 8, "gpu", "xnnpack", ""),
)

CHILD = """
import json, sys
import numpy as np
from ai_edge_litert.compiled_model import CompiledModel
from ai_edge_litert.options import (CpuKernelMode, CpuOptions, GpuOptions,
                                    HardwareAccelerator, Options)
from tests.tflite_builder import sparse_weights_model

weights, consumer, channels, accel, kernels, flag, path = sys.argv[1:]
Path = __import__("pathlib").Path
Path(path).write_bytes(sparse_weights_model(weights == "fp16", consumer, int(channels)))
mode = {"xnnpack": None, "builtin": CpuKernelMode.BUILTIN,
        "reference": CpuKernelMode.REFERENCE}


class Interpreted:
    # The Interpreter API behind run()'s calls (its default resolver applies XNNPACK).

    def __init__(self):
        from ai_edge_litert.interpreter import Interpreter
        self.it = Interpreter(path)
        self.it.allocate_tensors()

    def get_signature_list(self):
        return {"": None}

    def get_output_tensor_details(self, key):
        return {d["name"]: d for d in self.it.get_output_details()[:1]}

    def create_input_buffers(self, index):
        return [self]

    def create_output_buffers(self, index):
        return [self]

    def write(self, x):
        self.it.set_tensor(self.it.get_input_details()[0]["index"], x)

    def run_by_index(self, index, ins, outs):
        self.it.invoke()

    def read(self, n, dtype):
        return self.it.get_tensor(self.it.get_output_details()[0]["index"]).ravel()[:n]


def compiled(accel, kernels, flag=""):
    cpu = CpuOptions(num_threads=1, kernel_mode=mode[kernels])
    if accel == "interpreter":
        return Interpreted()
    if accel == "gpu":
        gpu = GpuOptions(enforce_f32=True)
        if flag:
            setattr(gpu, flag, True)
        return CompiledModel.from_file(path, options=Options(
            HardwareAccelerator.GPU | HardwareAccelerator.CPU, cpu_options=cpu,
            gpu_options=gpu))
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
case = compiled(accel, kernels, flag)  # first: no earlier model's freed memory to reuse
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
    print(f"{'weights':8} {'read by':12} {'channels':>8}  {'compiled for':66} "
          f"max |diff| against LiteRT's reference kernels")
    with tempfile.TemporaryDirectory(prefix="devicefit-repro-") as tmp:
        for case in CASES:
            print(one_row(case, env, have_gpu, Path(tmp) / "model.tflite"), flush=True)
        print(dequantized_weights(Path(tmp) / "topk.tflite"))
    return 0


def dequantized_weights(path: Path) -> str:
    """The DEQUANTIZE's output itself after a run, every tensor kept apart (the Interpreter
    API's ``experimental_preserve_all_tensors``: no arena sharing, so no other tensor's
    values land in it): with XNNPACK it is not the weights, its input never written."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tests.tflite_builder import sparse_weights_model

    path.write_bytes(sparse_weights_model(True, "topk"))
    found = []
    for resolver, name in ((OpResolverType.AUTO, "XNNPACK (default resolver)"),
                           (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, "builtin")):
        with warnings.catch_warnings():  # its "for debugging only" warning: it is that
            warnings.simplefilter("ignore")
            it = Interpreter(str(path), experimental_op_resolver_type=resolver,
                             experimental_preserve_all_tensors=True)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 8), np.float32))
        it.invoke()
        (w,) = [d["index"] for d in it.get_tensor_details() if d["name"] == "w"]
        values = it.get_tensor(w)
        nan = int(np.isnan(values).sum())
        found.append(f"{name}: {np.count_nonzero(values)} of {values.size} non-zero, "
                     f"max |w| {np.nanmax(np.abs(values), initial=0.0):.3g}"
                     + (f", {nan} nan" if nan else ""))
    return "the DEQUANTIZE's output after a run (fp16 sparse weights, TOPK_V2 reader): " + (
        "; ".join(found))


def one_row(case: tuple[str, str, int, str, str, str], env: dict[str, str], have_gpu: bool,
            path: Path) -> str:
    """One case in a fresh child: the row's text."""
    weights, consumer, channels, accel, kernels, flag = case
    reader = "CONV_2D 1x1" if consumer == "conv" else "TOPK_V2"
    cpu = "XNNPACK" if kernels == "xnnpack" else "builtin kernels"
    where = {"gpu": f"GPU|CPU, GpuOptions.{flag}, CPU ops on {cpu}" if flag
             else f"GPU|CPU, CPU ops on {cpu}",
             "cpu": f"CPU on {cpu}", "interpreter": "CPU, Interpreter API"}[accel]
    head = f"{weights:8} {reader:12} {channels:>8}  {where:66} "
    if accel == "gpu" and not have_gpu:
        return head + "not run: Chromium's SwiftShader Vulkan driver is not installed"
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, weights, consumer,
                               str(channels), accel, kernels, flag, str(path)],
                              env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return head + "no answer in 120 s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return head + f"failed (exit {done.returncode})"
    r = json.loads(lines[-1])
    verdict = "WRONG" if r["nan"] or r["max_abs_diff"] > 1e-3 * r["ref_max"] else "right"
    nan = f", {r['nan']} nan" if r["nan"] else ""
    return head + (f"{r['max_abs_diff']:>10.3g} (outputs up to {r['ref_max']:.2g}{nan})"
                   f"  {verdict}")


if __name__ == "__main__":
    sys.exit(main())
