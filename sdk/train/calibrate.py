"""Calibrate the batch plan on this machine: measure real steps, fit, verify.

The static estimate (``sdk.train.estimate``) counts tensor bytes as TensorFlow's Eigen
kernels hold them; it is the same on every machine. What a training process really needs
also depends on the backend (oneDNN kernels and their allocator, threads, precision,
device; see ``sdk.train.backend``) and includes TensorFlow's own runtime. So the plan is
calibrated where it will run:

1. measure the process's peak at two small batch sizes, in one child started with the
   environment training will have (:func:`sdk.train.measure.measure_steps`);
2. fit ``peak(b) = fixed + per_sample * b`` through them (plus the accumulators, exact,
   when the plan accumulates) and pick the largest batch whose planned peak fits;
3. run that batch, with its accumulation, in a fresh child; if its planned peak does not fit,
   refit through the two largest measurements and try again.

Only a batch whose own measured step fits is recommended. ``planned_peak_bytes`` is the
verified peak plus :data:`MARGIN` of what the step adds, at least :data:`MIN_MARGIN`:
repeated steps on several threads do not touch exactly the same pages every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sdk.train.backend import Backend
from sdk.train.measure import MeasuredStep, measure_steps
from simulator.errors import UsageError
from simulator.units import format_size

MARGIN = 0.10
MIN_MARGIN = 16 * 1024**2
VERIFY_ROUNDS = 3
GPU_FRACTION = 0.9  # of the device's free memory; the measured peak covers the rest


@dataclass(frozen=True)
class Calibration:
    backend: Backend
    fixed_bytes: int  # runtime, model and optimizer state: the line's value at batch 0
    per_sample_bytes: int
    accumulator_bytes: int  # added when the plan accumulates
    points: list[MeasuredStep]  # calibration steps, then each verification, in order
    verified: MeasuredStep  # the fresh run at the recommended batch
    planned_peak_bytes: int  # verified peak + margin: what training stays under

    def predict(self, batch_size: int, accumulation_steps: int) -> int:
        """Planned peak (margin included) at a batch size, from the fitted line."""
        peak = self.fixed_bytes + self.per_sample_bytes * batch_size + \
            (self.accumulator_bytes if accumulation_steps > 1 else 0)
        return with_margin(peak, self.fixed_bytes)

    def to_dict(self) -> dict:
        return {"backend": self.backend.to_dict(), "fixed_bytes": self.fixed_bytes,
                "per_sample_bytes": self.per_sample_bytes,
                "accumulator_bytes": self.accumulator_bytes,
                "measured": [p.__dict__ for p in self.points],
                "verified": self.verified.__dict__,
                "planned_peak_bytes": self.planned_peak_bytes}


def with_margin(peak: int, baseline: int) -> int:
    return peak + max(int(MARGIN * max(peak - baseline, 0)), MIN_MARGIN)


@dataclass
class _Line:
    points: list[tuple[int, int]] = field(default_factory=list)  # (batch, peak w/o accum)

    def fit(self, static_per_sample: int) -> tuple[int, int]:
        """(fixed, per_sample) through the two largest batches measured (the highest peak
        where a batch was measured twice); one batch borrows the static estimate's slope.
        Never a negative slope: memory does not shrink with the batch."""
        peaks: dict[int, int] = {}
        for b, peak in self.points:
            peaks[b] = max(peak, peaks.get(b, 0))
        pts = sorted(peaks.items())[-2:]
        if len(pts) == 1:
            b, peak = pts[0]
            return peak - static_per_sample * b, static_per_sample
        (b0, p0), (b1, p1) = pts
        slope = max((p1 - p0) // (b1 - b0), 0)
        return p0 - slope * b0, slope


def _largest(planned: Callable[[int], int], target: int, limit: int) -> int | None:
    """Largest batch whose planned peak fits. ``planned`` grows with the batch except at
    the target itself, where the accumulators disappear."""
    if planned(target) <= limit:
        return target
    if planned(1) > limit:
        return None
    lo, hi = 1, target - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if planned(mid) <= limit else (lo, mid - 1)
    return lo


def calibration_batches(static_batch: int, target: int) -> list[int]:
    """Two small batch sizes below what the static plan chose (one if the target is 1)."""
    high = max(min(static_batch, target) // 2, min(target, 2))
    low = max(high // 4, 1)
    return [low, high] if low < high else [high]


def calibrate(model_path: str | Path, *, static_batch: int, static_per_sample: int,
              accumulator_bytes: int, target_batch: int, limit: int, source: str, auto: bool,
              optimizer: str, dtype: str) -> tuple[Calibration, int, int, int, str]:
    """Measure, fit and verify. Returns (calibration, batch, accumulation steps, limit,
    where the limit came from). An automatic limit on a GPU is the device's free memory
    (the host's free RAM, the ``auto`` limit passed in, is not what training fills there).

    Raises ``UsageError`` when not even the smallest measured batch fits.
    """
    first = measure_steps(model_path, [(b, 1) for b in
                                       calibration_batches(static_batch, target_batch)],
                          optimizer=optimizer, dtype=dtype)
    backend = first.backend
    if auto and backend.device != "CPU":
        if first.device_free_bytes is None:
            raise UsageError(f"cannot tell how much memory {backend.device} has free "
                             "(no nvidia-smi); pass --memory SIZE")
        limit = int(first.device_free_bytes * GPU_FRACTION)
        source = (f"auto: {GPU_FRACTION:.0%} of {format_size(first.device_free_bytes)} free "
                  f"on {backend.device} (nvidia-smi)")
    line = _Line([(s.batch_size, s.peak_bytes) for s in first.steps])
    points = list(first.steps)
    baseline = first.steps[0].baseline_bytes
    best: tuple[MeasuredStep, int] | None = None  # largest verified batch that fits
    tried: set[tuple[int, int]] = set()
    for _ in range(VERIFY_ROUNDS):
        fixed, slope = line.fit(static_per_sample)

        def planned(b: int, fixed: int = fixed, slope: int = slope) -> int:
            steps = math.ceil(target_batch / b)
            return with_margin(fixed + slope * b + (accumulator_bytes if steps > 1 else 0),
                               baseline)

        largest = _largest(planned, target_batch, limit)
        if largest is None:
            break
        steps = math.ceil(target_batch / largest)
        batch = math.ceil(target_batch / steps)  # spread the target evenly over the steps
        if (batch, steps) in tried or (best is not None and batch <= best[0].batch_size):
            break
        tried.add((batch, steps))
        run = measure_steps(model_path, [(batch, steps)], optimizer=optimizer,
                            dtype=dtype).steps[0]
        points.append(run)
        line.points.append((batch, run.peak_bytes - (accumulator_bytes if steps > 1 else 0)))
        if with_margin(run.peak_bytes, run.baseline_bytes) <= limit:
            best = (run, steps)
            if batch == target_batch:
                break
    if best is None:
        smallest = min(points, key=lambda p: p.batch_size)
        raise UsageError(
            f"not even a batch of {smallest.batch_size} fits in {format_size(limit)} on "
            f"{backend.describe()}: measured peak {format_size(smallest.peak_bytes)} "
            f"(TensorFlow's runtime included); give more memory")
    run, steps = best
    fixed, slope = line.fit(static_per_sample)
    return (Calibration(backend=backend, fixed_bytes=fixed, per_sample_bytes=slope,
                        accumulator_bytes=accumulator_bytes, points=points, verified=run,
                        planned_peak_bytes=with_margin(run.peak_bytes, run.baseline_bytes)),
            run.batch_size, steps, limit, source)
