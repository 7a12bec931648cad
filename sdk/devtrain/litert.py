"""The trainable model run in LiteRT (a child without TensorFlow: ``python -m`` this module).

Two jobs, each in a fresh process so that nothing else's memory is counted:

- ``measure``: the memory LiteRT takes to run the ``train`` signature. The interpreter is
  made (the model mapped), the process's resident memory read, the kernel's peak counter
  reset (``/proc/self/clear_refs`` = 5), then the signature allocated and invoked once; the
  rise of the peak (``VmHWM``) over the baseline is ``peak_rise_bytes``: everything LiteRT
  allocated and touched for it (tensor arena, variables, the XNNPACK delegate's packed
  weights and workspace, kernels' scratch). ``tensor_bytes`` is the union of the address
  ranges of the signature's tensors outside the model's own buffer: the bytes of LiteRT's
  arena some tensor occupies (overlapping tensors counted once). Holes the arena planner
  leaves that no tensor ever occupies are not in it (the arena's own size is not exposed to
  Python), and neither are a delegate's internal buffers, which are not tensors.
  ``heap_bytes`` is what the C allocator holds for it: glibc's ``mallinfo2`` (bytes in use,
  ``uordblks`` + ``hblkhd``) after the invoke minus before the signature was allocated — the
  arena as allocated (holes and untouched pages included), the variables, the kernels' own
  data; the figure a plan of the arena and the variables is compared with.
- ``adapt``: held-out accuracy through ``infer``, the ``train`` steps on the adaptation
  data (each timed), then the accuracy again.

The request (a JSON file, the child's one argument after the job) names the model, the
``.npy`` files of the data and where the result goes, so one work folder serves several
candidate models and data splits (``--update auto``).
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _interpreter(request: dict[str, Any]) -> Any:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.AUTO if request["xnnpack"] else \
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    content = Path(request["model"]).read_bytes()
    return Interpreter(model_content=content, num_threads=request["threads"],
                       experimental_op_resolver_type=resolver), content


def _tensor_bytes(interpreter: Any, content: bytes, signature: str) -> int:
    wrapper = interpreter._interpreter
    subgraph = wrapper.GetSubgraphIndexFromSignature(signature)
    model_start = np.frombuffer(content, np.uint8).__array_interface__["data"][0]
    ranges = []
    for index in range(wrapper.NumTensors(subgraph)):
        try:
            # Resource handles and strings are objects: mapping one as an array crashes.
            if wrapper.TensorType(index, subgraph) is np.object_:
                continue
            view = wrapper.tensor(interpreter, index, subgraph)
        except ValueError:  # no type, or no buffer (a tensor the delegate took over)
            continue
        if view is None:
            continue
        start = view.__array_interface__["data"][0]
        if view.nbytes and not model_start <= start < model_start + len(content):
            ranges.append((start, start + view.nbytes))
    total, end = 0, 0
    for start, stop in sorted(ranges):
        total += max(0, stop - max(start, end))
        end = max(end, stop)
    return total


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _heap_in_use() -> int:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def measure(request: dict[str, Any]) -> dict[str, Any]:
    interpreter, content = _interpreter(request)
    x = np.zeros(request["x_shape"], np.float32)
    y = np.zeros(request["x_shape"][0], np.int32)
    heap = _heap_in_use()
    baseline = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    interpreter.get_signature_runner("train")(x=x, y=y)
    return {"peak_rise_bytes": _status("VmHWM") - baseline, "heap_bytes": _heap_in_use() - heap,
            "tensor_bytes": _tensor_bytes(interpreter, content, "train")}


def _accuracy(infer: Any, x: np.ndarray, y: np.ndarray, batch: int) -> float:
    """Top-1 accuracy over all of ``x``: the last batch is padded to the signature's fixed
    size and the padding's predictions dropped."""
    right = 0
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        padded = np.concatenate([chunk, np.zeros((batch - len(chunk), *x.shape[1:]), x.dtype)])
        out = infer(x=padded)["output"][:len(chunk)]
        right += int((out.argmax(axis=-1) == y[start:start + batch]).sum())
    return right / len(x)


def adapt(request: dict[str, Any]) -> dict[str, Any]:
    x, y = np.load(request["adapt_x"]), np.load(request["adapt_y"]).astype(np.int32)
    x_eval, y_eval = np.load(request["eval_x"]), np.load(request["eval_y"])
    batch = request["x_shape"][0]
    interpreter, _ = _interpreter(request)
    infer, train = interpreter.get_signature_runner("infer"), interpreter.get_signature_runner(
        "train")
    before = _accuracy(infer, x_eval, y_eval, batch)
    rng = np.random.default_rng(request["seed"])
    per_epoch = len(x) // batch  # the batch dimension is fixed: a short last batch is left
    losses: list[float] = []
    times: list[float] = []
    order = np.arange(0)
    for step in range(request["steps"]):
        if step % per_epoch == 0:
            order = rng.permutation(len(x))
        pick = order[(step % per_epoch) * batch:(step % per_epoch + 1) * batch]
        started = time.perf_counter()
        losses.append(float(train(x=x[pick], y=y[pick])["loss"]))
        times.append(time.perf_counter() - started)
    return {"accuracy_before": before, "accuracy_after": _accuracy(infer, x_eval, y_eval, batch),
            "first_loss": losses[0], "last_loss": losses[-1],
            "step_seconds_median": float(np.median(times)), "steps": len(times)}


JOBS = {"measure": measure, "adapt": adapt}


def main(job: str, request_file: Path) -> int:
    request = json.loads(request_file.read_text())
    try:
        result = JOBS[job](request)
    except Exception:
        traceback.print_exc()  # to the child's log, which the parent names
        return 1
    Path(request["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
