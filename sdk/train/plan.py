"""Pick the largest micro-batch that fits a memory limit, and the accumulation to reach a target.

The static estimate plans instantly; with ``calibrate=<model file>`` the plan is then
measured and verified with real steps on this machine's backend (``sdk.train.calibrate``),
and the limit is compared with the training process's measured private memory at its peak.
``memory_bytes=None`` plans against what this machine has free now: ``MemAvailable`` from
``/proc/meminfo``, or the cgroup's remaining allowance when a container limit is lower,
minus a safety margin (the estimate leaves out the framework's own memory and allocator
slack; see docs/benchmarks.md "Training memory").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicefit.sdk.train.calibrate import Calibration, calibrate
from devicefit.sdk.train.estimate import TrainingMemory, TrainingMemoryModel
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.units import format_size

SAFETY_FRACTION = 0.8  # use at most 80 % of what is free ...
SAFETY_RESERVE = 512 * 1024**2  # ... and leave at least 512 MiB to TensorFlow itself


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int  # micro-batch per forward/backward
    accumulation_steps: int  # micro-batches per optimizer update
    effective_batch: int  # samples per optimizer update (= the target)
    estimated_peak_bytes: int  # at batch_size, with accumulators if any
    memory_limit_bytes: int
    memory_source: str  # "given" or where the auto limit came from
    optimizer: str
    dtype: str
    estimate: TrainingMemory
    table: list[TrainingMemory] = field(default_factory=list)  # batch size vs memory
    calibration: Calibration | None = None  # None: the static estimate alone

    @property
    def basis(self) -> str:
        return "static" if self.calibration is None else "calibrated"

    @property
    def planned_peak_bytes(self) -> int:
        """The figure the limit was checked against: measured + margin when calibrated."""
        return self.estimated_peak_bytes if self.calibration is None \
            else self.calibration.planned_peak_bytes

    def table_peak(self, t: TrainingMemory) -> int:
        """A table row's planned peak: the static estimate, or the calibrated line's."""
        if self.calibration is None:
            return t.peak_bytes
        if t.batch_size == self.batch_size:
            return self.calibration.planned_peak_bytes
        return self.calibration.predict(t.batch_size,
                                        math.ceil(self.effective_batch / t.batch_size))

    def to_dict(self) -> dict:
        return {
            "batch_size": self.batch_size, "accumulation_steps": self.accumulation_steps,
            "effective_batch": self.effective_batch,
            "estimated_peak_bytes": self.estimated_peak_bytes,
            "memory_limit_bytes": self.memory_limit_bytes, "memory_source": self.memory_source,
            "optimizer": self.optimizer, "dtype": self.dtype, "basis": self.basis,
            "planned_peak_bytes": self.planned_peak_bytes,
            "backend": None if self.calibration is None else self.calibration.backend.to_dict(),
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "breakdown": _row(self.estimate),
            "table": [_row(t) | {"planned_peak_bytes": self.table_peak(t),
                                 "fits": self.table_peak(t) <= self.memory_limit_bytes}
                      for t in self.table],
        }


def _row(t: TrainingMemory) -> dict:
    return {"batch_size": t.batch_size, "peak_bytes": t.peak_bytes,
            "parameter_bytes": t.parameter_bytes, "gradient_bytes": t.gradient_bytes,
            "optimizer_slot_bytes": t.optimizer_slot_bytes,
            "accumulator_bytes": t.accumulator_bytes, "activation_bytes": t.activation_bytes,
            "kept_activation_bytes": t.kept_activation_bytes,
            "workspace_bytes": t.workspace_bytes, "input_bytes": t.input_bytes,
            "peak_at": t.peak_at}


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def free_memory(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")
                ) -> tuple[int, str]:
    """Bytes this process could still allocate, and where that figure came from."""
    found: list[tuple[int, str]] = []
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "MemAvailable"))
    except OSError:
        pass
    for limit, usage, name in (("memory.max", "memory.current", "cgroup v2"),
                               ("memory/memory.limit_in_bytes",
                                "memory/memory.usage_in_bytes", "cgroup v1")):
        lim, used = _read_int(cgroup / limit), _read_int(cgroup / usage)
        if lim is not None and used is not None and lim < 2**60:  # v1 "no limit" is ~2**63
            found.append((max(lim - used, 0), f"{name} limit"))
    if not found:
        raise UsageError("cannot tell how much memory is free (no /proc/meminfo); "
                         "pass --memory SIZE")
    return min(found)


def auto_memory_limit() -> tuple[int, str]:
    free, source = free_memory()
    limit = max(min(int(free * SAFETY_FRACTION), free - SAFETY_RESERVE), 0)
    return limit, f"auto: {format_size(free)} free ({source}), kept {format_size(free - limit)}"


def check_parameters(parameter_bytes: int, limit: int) -> None:
    """Raise ``UsageError`` when the model's parameters alone exceed ``limit`` (``plan-batch``
    also asks it of the parameters stored in the file, before TensorFlow starts)."""
    if parameter_bytes > limit:
        raise UsageError(f"memory limit {format_size(limit)} is smaller than the model's "
                         f"parameters alone ({format_size(parameter_bytes)})")


def plan_batch(model: Any, *, memory_bytes: int | None = None, optimizer: str = "adam",
               target_batch: int = 32, dtype: str = "float32",
               calibrate_with: str | Path | None = None) -> BatchPlan:
    """The largest micro-batch that fits ``memory_bytes`` and the accumulation to reach
    ``target_batch`` samples per update. Raises ``UsageError`` if nothing fits.

    ``calibrate_with`` (the model's file) measures and verifies the plan with real steps in
    child processes, on the backend the environment selects; on a GPU an automatic limit
    is the device's free memory, not the host's.
    """
    if target_batch < 1:
        raise UsageError(f"target batch must be at least 1, got {target_batch}")
    tm = TrainingMemoryModel(model, optimizer=optimizer, dtype=dtype)
    if memory_bytes is None:
        limit, source = auto_memory_limit()
    else:
        limit, source = int(memory_bytes), "given"

    def fits(b: int) -> bool:
        return tm.estimate(b, accumulation_steps=math.ceil(target_batch / b)).peak_bytes <= limit

    one = tm.estimate(1, accumulation_steps=target_batch)
    check_parameters(one.parameter_bytes, limit)
    if one.persistent_bytes > limit:
        raise UsageError(
            f"memory limit {format_size(limit)} is smaller than the parameters and "
            f"{optimizer} optimizer state alone ({format_size(one.persistent_bytes)}); "
            "give more memory or pick an optimizer with less state (e.g. sgd)")
    if not fits(1):
        raise UsageError(f"not even a batch of 1 fits in {format_size(limit)} (needs "
                         f"{format_size(one.peak_bytes)}); give more memory")
    lo, hi = 1, target_batch  # the estimate grows with the batch: bisect the largest fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    steps = math.ceil(target_batch / lo)
    batch = math.ceil(target_batch / steps)  # spread the target evenly over the steps
    if calibrate_with is not None:
        return _calibrated(tm, target_batch, (limit, source, memory_bytes is None),
                           calibrate_with, dtype, _table(tm, target_batch, batch), batch)
    chosen = tm.estimate(batch, accumulation_steps=steps)
    return BatchPlan(batch_size=batch, accumulation_steps=steps, effective_batch=target_batch,
                     estimated_peak_bytes=chosen.peak_bytes, memory_limit_bytes=limit,
                     memory_source=source, optimizer=chosen.optimizer, dtype=dtype,
                     estimate=chosen, table=_table(tm, target_batch, batch))


def _table(tm: TrainingMemoryModel, target: int, batch: int) -> list[TrainingMemory]:
    sizes = sorted({2**i for i in range(int(math.log2(target)) + 1)} | {batch, target})
    return [tm.estimate(b, accumulation_steps=math.ceil(target / b)) for b in sizes]


def _calibrated(tm: TrainingMemoryModel, target: int, memory: tuple[int, str, bool],
                path: str | Path, dtype: str, table: list[TrainingMemory],
                static_batch: int) -> BatchPlan:
    limit, source, auto = memory
    small, large = tm.estimate(1), tm.estimate(2)
    cal, batch, steps, limit, source = calibrate(
        path, static_batch=static_batch,
        static_per_sample=max(large.peak_bytes - small.peak_bytes, 0),
        accumulator_bytes=tm.estimate(1, accumulation_steps=2).accumulator_bytes,
        target_batch=target, limit=limit, source=source, auto=auto,
        optimizer=tm.optimizer.name, dtype=dtype)
    chosen = tm.estimate(batch, accumulation_steps=steps)
    table = sorted({t.batch_size: t for t in table + [chosen]}.values(),
                   key=lambda t: t.batch_size)
    return BatchPlan(batch_size=batch, accumulation_steps=steps, effective_batch=target,
                     estimated_peak_bytes=chosen.peak_bytes, memory_limit_bytes=limit,
                     memory_source=source, optimizer=chosen.optimizer, dtype=dtype,
                     estimate=chosen, table=table, calibration=cal)
