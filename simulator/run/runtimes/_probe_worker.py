"""Child-process entry point of the op probe: ``python -m ...runtimes._probe_worker REQUEST``.

For each requested operator of a model it builds a one-op model
(:func:`simulator.read.writer.cut_ops`) and runs it once in the requested runner — the same
runners ``--run`` uses — on inputs from :func:`probe_inputs`. Each
answer is appended to ``answers.jsonl`` once the operator's interpreter is freed (a kernel
that wrote outside its buffers crashes there, ``release``), and the key of the operator
being probed is written to ``current`` before it starts: when a kernel kills the process
(TFLM aborts on a quantization scale it cannot use), the parent knows which operator was
running and starts a new child for the rest (:func:`simulator.run.probe._probe_in_children`).

It imports no more than it runs (not :mod:`simulator.plan.compat`, which brings the profiles,
reports and YAML): a probe child starts for every model whose signatures are not cached.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from devicefit.simulator.read.model import Model
from devicefit.simulator.run.runtimes import RUNNERS, starting_arena
from devicefit.simulator.run.runtimes._worker import exit_with_parent, limit_memory
from devicefit.simulator.types import Runner, RunOptions


def probe_inputs(model: Model) -> list[np.ndarray]:
    """Inputs a one-op model is invoked on: integers over their whole quantized range,
    floats in [0.25, 1) (so LOG, SQRT, DIV stay finite and a NaN means the kernel misread
    its types), int32/int64 zeros (always a valid index, axis or count)."""
    rng = np.random.default_rng(0)
    out = []
    for index in model.main.inputs:
        t = model.main.tensors[index]
        shape = t.shape
        dt = np.dtype(t.dtype)
        if dt.kind in "iu" and dt.itemsize <= 2:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt))
        elif dt.kind in "iub":
            out.append(np.zeros(shape, dt))
        else:
            out.append(rng.uniform(0.25, 1.0, size=shape).astype(dt))
    return out


_SOURCE_PATH = re.compile(r"\S*(?:tensorflow|tflite)/\S+\.(?:cc|h)(?::\d+)?\s*")
#: The interpreters' follow-up lines after a kernel's own complaint.
_NOISE = re.compile(r"\(number \d+\) failed|^Node number \d+ \(\S+\) failed|^Failed to|"
                    r"^TFLM failed|^Interpreter invocation failed")
_WRAPPER = re.compile(r"^TFLM (could not create the interpreter|invoke failed):\s*")


def runtime_message(text: str) -> str:
    """A runtime's refusal as one line: the kernel's complaint, without source paths and
    the interpreter's follow-up lines ("Node CAST (number 0) failed to invoke")."""
    parts = []
    for part in re.split(r"\s*\|\s*|(?<=\.)(?=Node number)", text):
        part = _WRAPPER.sub("", _SOURCE_PATH.sub("", part).strip())
        if part and not _NOISE.search(part):
            parts.append(part)
    return " ".join(dict.fromkeys(parts))[:400] or " ".join(text.split())[:400]



def _ask(runner: Runner, work: Path, data: bytes, inputs: list[np.ndarray], outputs: int,
         options: RunOptions) -> dict:
    """One one-op model through the runner: {"ok", "stage", "message"}."""
    stage = ["load"]

    def enter(name: str) -> None:
        stage.append(name)
        (work / "stage").write_text(name)

    try:
        with tempfile.NamedTemporaryFile(suffix=".tflite", dir=work) as f:
            f.write(data)
            f.flush()
            enter("load")
            result = runner.run(f.name, inputs, outputs, options, enter)
        if not all(np.isfinite(o).all() for o in result.outputs if o.dtype.kind == "f"):
            # Accepted, but the kernel read its weights as another type (TFLM's float LSTM
            # with int8 weights); the probe's inputs keep sane ops finite.
            raise ValueError("runs but returns NaN/Inf: the kernel does not handle these "
                             "types")
    except Exception as exc:  # noqa: BLE001 — a refusal is the answer, as data
        # Past "release" only the outputs' check can fail: about what invoke returned.
        where = "invoke" if stage[-1] == "release" else stage[-1]
        return {"ok": False, "stage": where, "message": runtime_message(str(exc))}
    return {"ok": True, "stage": "done", "message": ""}


def main(argv: list[str]) -> int:
    from devicefit.simulator.read.reader import parse_model
    from devicefit.simulator.read.writer import cut_ops, model_table

    exit_with_parent()
    request = json.loads(Path(argv[0]).read_text())
    work = Path(request["dir"])
    limit_memory(request["memory_bytes"])
    runner = RUNNERS[request["runtime"]]()
    model = model_table(Path(request["model"]).read_bytes())
    with open(work / "answers.jsonl", "a", encoding="utf-8") as answers:
        for subgraph, op_indices, key in request["ops"]:
            (work / "current").write_text(key)
            (work / "stage").write_text("build")
            try:
                data = cut_ops(model, subgraph, op_indices)
                one = parse_model(data, "probe.tflite")
                inputs = probe_inputs(one)
            except Exception as exc:  # noqa: BLE001 — the probe's limit, not the runtime's
                answer = {"skipped": f"cannot be cut out alone ({exc})"}
            else:
                options = RunOptions(runs=1, warmup=0, threads=request["threads"],
                                     xnnpack=request["xnnpack"],
                                     arena_size=starting_arena(one))
                answer = _ask(runner, work, data, inputs, len(one.main.outputs), options)
                # Whatever the interpreter left (a cycle, an exception's frames) is freed
                # now, while this op is the current one: heap damage shows at the free.
                (work / "stage").write_text("release")
                gc.collect()
            answers.write(json.dumps({"key": key, **answer}) + "\n")
            answers.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown (see _worker)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
