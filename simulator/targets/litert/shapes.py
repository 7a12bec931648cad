"""Every tensor's shape as LiteRT resolves it, asked in a child process.

``python -m devicefit.simulator.targets.litert.shapes REQUEST.json`` resizes the inputs
(``Interpreter.resize_tensor_input``), allocates, reads back each tensor's shape, then
invokes once on zeros and reads them again: outputs whose shape depends on values (a
RESHAPE fed by SHAPE arithmetic) are only sized during invoke. The parent side,
:func:`litert_shapes`, runs it like every runtime here (:func:`simulator.run.runtimes.spawn`:
a timeout, a crash is an answer, not the end of this process).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicefit.simulator.infra.fileio import temporary_folder, write_atomic
from devicefit.simulator.run.runtimes import WORKER_MEMORY_BYTES, describe_exit, spawn
from devicefit.simulator.types import RuntimeShapes


def litert_shapes(path: str | Path, inputs: Mapping[int, tuple[int, ...]],
                  timeout_s: float = 60) -> RuntimeShapes:
    """LiteRT's shapes for ``path`` with input tensor index → shape ``inputs`` resized."""
    with temporary_folder("devicefit-shapes-") as tmp:
        work = Path(tmp)
        request = {"model": str(Path(path).resolve()), "dir": str(work),
                   "inputs": {str(k): list(v) for k, v in inputs.items()}}
        (work / "request.json").write_text(json.dumps(request))
        proc, timed_out = spawn(work, timeout_s, __name__)
        if timed_out:
            return RuntimeShapes({}, problem=f"LiteRT gave no answer after {timeout_s:g} s")
        result_file = work / "result.json"
        if not result_file.exists():
            return RuntimeShapes({}, problem=(
                f"LiteRT crashed ({describe_exit(proc.returncode if proc else 1)})"))
        result = json.loads(result_file.read_text())
    return RuntimeShapes({int(k): tuple(v) for k, v in result["shapes"].items()},
                         invoked=result["invoked"], problem=result["problem"])


def _main(request_path: str) -> int:
    import numpy as np

    from devicefit.simulator.run.runtimes._worker import exit_with_parent, limit_memory
    from devicefit.simulator.targets.litert.runner import interpreter_module

    exit_with_parent()
    request = json.loads(Path(request_path).read_text())
    work = Path(request["dir"])
    shapes: dict[str, list[int]] = {}
    invoked, problem = False, None

    def read(interpreter: Any) -> None:
        for d in interpreter.get_tensor_details():
            shapes[str(d["index"])] = [int(x) for x in d["shape"]]

    try:
        limit_memory(WORKER_MEMORY_BYTES)
        mod = interpreter_module()
        interpreter = mod.Interpreter(
            model_path=request["model"],
            experimental_op_resolver_type=mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        for index, shape in request["inputs"].items():
            interpreter.resize_tensor_input(int(index), shape)
        interpreter.allocate_tensors()
        read(interpreter)
        for d in interpreter.get_input_details():
            interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interpreter.invoke()
        read(interpreter)
        invoked = True
    except Exception as exc:  # noqa: BLE001 — a refusal is the answer, sent back as data
        problem = " ".join(str(exc).split()) or type(exc).__name__
    write_atomic(work / "result.json", json.dumps(
        {"shapes": shapes, "invoked": invoked, "problem": problem}))
    sys.stdout.flush()
    os._exit(0)  # some runtimes crash in their destructors, after the answer is saved


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
