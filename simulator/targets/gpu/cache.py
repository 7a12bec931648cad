"""The delegate's answers kept on disk, as the op probe keeps its own: ``simulate --run``
or ``check --run`` asked again about the same model, on the same inputs, with the same
LiteRT wheel and Vulkan driver, reads the answer instead of paying the child (about 10 s,
most of it LiteRT's start-up; ``docs/benchmarks.md`` "The phone GPU, asked live").

Only answers that ran are kept: an adapter that was missing or a child that timed out is
asked again next time. An entry is read only if it is a regular file of the expected size
and its key and format match; otherwise it is asked again and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra import distributions
from devicefit.simulator.infra.fileio import temporary_folder, write_atomic
from devicefit.simulator.read.model import Model
from devicefit.simulator.report.report import build, plain_fields
from devicefit.simulator.run.probe import read_bounded
from devicefit.simulator.targets.gpu.delegate import DelegateAnswer
from devicefit.simulator.targets.gpu.live import PrecisionCheck, default_icd
from devicefit.simulator.types import ModelRuns

#: Part of every key: a change of what is stored, or of how the child computes, asks again
#: (2: the builtin-kernel way and the cause, :func:`.live.ways_for`).
FORMAT = 2
MAX_ENTRY_BYTES = 256 * 1024


def cache_dir() -> Path:
    root = os.environ.get("DEVICEFIT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "devicefit") / "gpu-delegate"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def key(model: Model, precision: str, setup: ModelRuns) -> str:
    """What the answer depends on: the model, the inputs (a data file by its content), the
    precision asked, the LiteRT wheel and the Vulkan driver."""
    with temporary_folder("devicefit-gpu-key-") as tmp:
        source = setup.input_request(Path(tmp))
        if "file" in source:
            source["file"] = _digest(Path(source["file"]))
        if source.get("given"):
            source["given"] = _digest(Path(tmp) / "inputs.npz")
    driver = (default_icd(), os.environ.get("VK_ICD_FILENAMES"),
              os.environ.get("VK_DRIVER_FILES"))
    text = json.dumps([FORMAT, model.sha256, source, precision,
                       distributions.version("ai-edge-litert"), driver], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def cached(entry: str) -> tuple[DelegateAnswer, float, PrecisionCheck] | None:
    """The stored answer, its seconds when asked and the fp16 check; None: not stored."""
    raw = read_bounded(cache_dir() / f"{entry}.json", MAX_ENTRY_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
        if data["key"] != entry or data["format"] != FORMAT:
            return None
        a = data["answer"]
        answer = DelegateAnswer(bool(a["ok"]), str(a["error"]), str(a["adapter"]),
                                a["gpu_ops"], frozenset(a["unsupported"]))
        return answer, float(data["seconds"]), build(PrecisionCheck, data["precision"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def store(entry: str, answer: DelegateAnswer, seconds: float, check: PrecisionCheck) -> None:
    stored: dict[str, Any] = {
        "key": entry, "format": FORMAT, "seconds": seconds, "precision": plain_fields(check),
        "answer": {"ok": answer.ok, "error": answer.error, "adapter": answer.adapter,
                   "gpu_ops": answer.gpu_ops, "unsupported": sorted(answer.unsupported)}}
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(cache_dir() / f"{entry}.json", json.dumps(stored))
    except (OSError, DevicefitError):
        pass  # a read-only or full cache costs the next run its time, not this answer
