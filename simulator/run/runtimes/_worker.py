"""Child-process entry point: ``python -m simulator.run.runtimes._worker REQUEST.json``.

Loads one runner, runs the model, and writes ``result.json`` + ``outputs.npz`` next to the
request. Before each stage it records the stage name in the file ``stage``, so the parent
can say where a segfault or a hang happened. A Python exception from the runtime (a refusal,
not a crash) is written as ``{"ok": false, "stage", "error"}``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.run.runtimes import RUNNERS, worker_inputs
from devicefit.simulator.types import RunOptions


def exit_with_parent() -> None:
    """The parent kills this process on a timeout or a signal; should the parent itself die
    without that chance (SIGKILL, OOM killer), this process must not run on, unwatched."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(4)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def limit_memory(limit: int) -> None:
    """Cap this process's address space: a huge input or a runtime gone wild gets a
    MemoryError (reported as a refusal) instead of the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main(argv: list[str]) -> int:
    exit_with_parent()
    request_path = Path(argv[0])
    request = json.loads(request_path.read_text())
    work = Path(request["dir"])
    current = ["start"]

    def stage(name: str) -> None:
        current[0] = name
        (work / "stage").write_text(name)

    try:
        limit_memory(request["memory_bytes"])
        stage("inputs")
        inputs = worker_inputs(request)
        stage("load")
        runner = RUNNERS[request["runtime"]]()
        result = runner.run(request["model"], inputs, request["num_outputs"],
                            RunOptions(**request["options"]), stage)
    except Exception as exc:  # noqa: BLE001 — every refusal goes back to the parent as data
        message = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, MemoryError):
            message = (f"out of memory in the worker (limit "
                       f"{request['memory_bytes'] / 1024**3:g} GiB): {message}")
        write_atomic(work / "result.json", json.dumps(
            {"ok": False, "stage": current[0], "error": message}))
        return 3
    np.savez(work / "outputs.npz", *result.outputs)
    fields = asdict(result)
    fields.pop("outputs")
    write_atomic(work / "result.json", json.dumps({"ok": True, **fields}))
    stage("done")
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: some runtimes crash in their destructors, after the work
    # is done and saved.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
