"""The child of :mod:`.live`: ``python -m devicefit.simulator.targets.gpu._live_worker
REQUEST.json``.

Runs the request's samples through LiteRT's CompiledModel three ways, in this order, each
way's outputs saved as soon as it finishes (the GPU compilation can abort the process: the
ways before it survive that):

- ``fp32``: the CPU, XNNPACK in fp32 — the reference;
- ``fp16``: the CPU, XNNPACK with ``FORCE_FP16`` (float operators computed with fp16
  tensors where this CPU has fp16 kernels);
- ``gpu``: GPU|CPU — the GPU accelerator, whose partition the delegate logs on stderr;
  ``FULLY_ACCELERATED`` goes to stdout once the compilation succeeded
  (:func:`.delegate.read_answer` reads both);
- ``gpu_builtin``, when the request lists it: GPU|CPU again, the ops left on the CPU on
  LiteRT's builtin kernels instead of XNNPACK (:func:`.live.ways_for` says when and why).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.run.runtimes import worker_inputs
from devicefit.simulator.run.runtimes._worker import exit_with_parent, limit_memory

#: ``TFLITE_XNNPACK_DELEGATE_FLAG_QS8 | _QU8 | _FORCE_FP16`` of LiteRT's
#: ``tflite/delegates/xnnpack/xnnpack_delegate.h``: the integer operators stay on XNNPACK
#: as in the fp32 way, so only the float precision differs between the two.
FORCE_FP16_FLAGS = 0x1 | 0x2 | 0x4


def compile_model(path: str, way: str, precision: str) -> Any:
    """The model compiled for ``way``; ``precision`` "fp32" sets the GPU's ``enforce_f32``."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.options import (
        CpuKernelMode,
        CpuOptions,
        GpuOptions,
        HardwareAccelerator,
        Options,
    )

    cpu = CpuOptions(num_threads=1, xnnpack_flags=FORCE_FP16_FLAGS if way == "fp16" else None,
                     kernel_mode=CpuKernelMode.BUILTIN if way == "gpu_builtin" else None)
    if way.startswith("gpu"):
        return CompiledModel.from_file(path, options=Options(
            HardwareAccelerator.GPU | HardwareAccelerator.CPU, cpu_options=cpu,
            gpu_options=GpuOptions(enforce_f32=precision == "fp32")))
    return CompiledModel.from_file(path, options=Options(HardwareAccelerator.CPU,
                                                         cpu_options=cpu))


def run_samples(model: Any, names: list[str], samples: list[list[np.ndarray]]
                ) -> dict[str, np.ndarray]:
    """Each sample's outputs, keyed ``"<sample>:<output tensor name>"``. ``names``: the
    tensor names of the graph's inputs, the samples' order (the signature's may differ)."""
    key = next(iter(model.get_signature_list()))
    given = {n: k for k, n in enumerate(names)}
    ins = model.get_input_tensor_details(key).values()
    order = [given.get(d["name"], k) for k, d in enumerate(ins)]
    outs = list(model.get_output_tensor_details(key).values())
    in_buffers, out_buffers = model.create_input_buffers(0), model.create_output_buffers(0)
    found = {}
    for s, sample in enumerate(samples):
        for buffer, k in zip(in_buffers, order, strict=True):
            buffer.write(np.ascontiguousarray(sample[k]))
        model.run_by_index(0, in_buffers, out_buffers)
        for buffer, d in zip(out_buffers, outs, strict=True):
            shape = tuple(int(n) for n in d["shape"])
            found[f"{s}:{d['name']}"] = buffer.read(int(np.prod(shape)),
                                                     np.dtype(d["dtype"])).reshape(shape)
    return found


def samples_of(request: dict[str, Any]) -> list[list[np.ndarray]]:
    """One sample (``inputs``: as a ``--run`` worker takes them) or several (``samples``:
    an ``.npy`` of the first input's samples, already in its dtype)."""
    if "samples" in request:
        return [[x[None]] for x in np.load(request["samples"], allow_pickle=False)]
    return [worker_inputs(request)]


def main(argv: list[str]) -> int:
    exit_with_parent()
    request = json.loads(Path(argv[0]).read_text())
    work = Path(request["dir"])
    limit_memory(request["memory_bytes"])
    samples = samples_of(request)
    for way in request["ways"]:
        start = time.perf_counter()
        try:
            model = compile_model(request["model"], way, request["precision"])
            if way == "gpu":
                print("FULLY_ACCELERATED", model.is_fully_accelerated(), flush=True)
            outputs = run_samples(model, request["names"], samples)
        except Exception as exc:  # noqa: BLE001 — a refusal goes back to the parent as data
            done: dict[str, Any] = {"ok": False, "error": " ".join(str(exc).split())
                                    or type(exc).__name__}
            if way == "gpu":  # the delegate's log is where the parent reads its reason
                print(done["error"], file=sys.stderr)
        else:
            np.savez(work / f"{way}.npz", *outputs.values())
            done = {"ok": True, "error": "", "names": list(outputs)}
        done["seconds"] = time.perf_counter() - start
        write_atomic(work / f"{way}.json", json.dumps(done))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
