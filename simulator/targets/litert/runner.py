"""LiteRT runner (``ai-edge-litert``; ``tflite_runtime`` only if it is missing).

``tf.lite`` is deliberately not a fallback: the simulator never imports TensorFlow (it is a
4.6 s import and an optional extra), and ``ai-edge-litert`` is a base dependency.

XNNPACK is LiteRT's default delegate; ``xnnpack=False`` uses the builtin kernels without it
and ``reference_kernels=True`` the reference kernels (the ones TFLM's int8 kernels match
bit for bit, used for the cross-check).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType

import numpy as np

from devicefit.simulator.errors import UsageError
from devicefit.simulator.types import RunOptions, RunResult


def interpreter_module() -> ModuleType:
    try:
        from ai_edge_litert import interpreter
    except ImportError:
        try:
            from tflite_runtime import interpreter
        except ImportError as exc:
            raise UsageError("LiteRT is not installed: pip install ai-edge-litert "
                             "(devicefit's base dependency)") from exc
    return interpreter


class LiteRTRunner:
    name = "litert"

    def run(self, model_path: str, inputs: list[np.ndarray], num_outputs: int,
            options: RunOptions, stage: Callable[[str], None]) -> RunResult:
        mod = interpreter_module()
        kinds = mod.OpResolverType
        if options.reference_kernels:
            resolver = kinds.BUILTIN_REF
        elif options.xnnpack:
            resolver = kinds.AUTO
        else:
            resolver = kinds.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        interpreter = mod.Interpreter(model_path=model_path, num_threads=options.threads,
                                      experimental_op_resolver_type=resolver)
        stage("allocate")
        input_details = interpreter.get_input_details()
        for detail, x in zip(input_details, inputs, strict=True):
            if list(detail["shape"]) != list(x.shape):
                interpreter.resize_tensor_input(detail["index"], list(x.shape))
        interpreter.allocate_tensors()
        stage("invoke")
        host_ms: list[float] = []
        for i in range(options.warmup + options.runs):
            for detail, x in zip(input_details, inputs, strict=True):
                interpreter.set_tensor(detail["index"], x)
            start = time.perf_counter()
            interpreter.invoke()
            elapsed = (time.perf_counter() - start) * 1e3
            if i >= options.warmup:
                host_ms.append(elapsed)
            if i == 0:
                # The first invoke's outputs: a stateful model answers the same inputs
                # differently on each later one (see the TFLM runner).
                details = interpreter.get_output_details()[:num_outputs]
                outputs = [np.array(interpreter.get_tensor(d["index"])) for d in details]
        # Freed here, in its own stage: a kernel that wrote outside its buffers (LiteRT's
        # SVDF reads int8 state as int16) often runs, and the process dies at this free.
        stage("release")
        del interpreter
        return RunResult(runtime=self.name, outputs=outputs, host_ms=host_ms)
