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
3. run that batch, with its accumulation split as ``fit`` splits it, in a fresh child; if its planned peak does not fit,
   refit through the two largest measurements and try again.

Only a batch whose own measured step fits is recommended. ``planned_peak_bytes`` is the
verified peak plus :data:`MARGIN` of what the step adds, at least :data:`MIN_MARGIN`:
the same measurement repeated in fresh processes moves by up to ~8 MiB (threads, allocator
arenas), and a real run holds a little more than the measuring child (its loss, its data
pipeline, an epoch's last update at a shape the verification did not meet): 0-14 MiB more
in tests/sdk/train/test_train.py's runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devicefit.sdk.train.backend import Backend
from devicefit.sdk.train.measure import MeasuredStep, measure_steps, micro_batches
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.units import format_size

MARGIN = 0.10
MIN_MARGIN = 32 * 1024**2
VERIFY_ROUNDS = 3
GPU_FRACTION = 0.9  # of the device's free memory; the measured peak covers the rest


@dataclass(frozen=True)
class Calibration:
    backend: Backend
    fixed_bytes: int  # runtime, model and optimizer state: the line's value at batch 0
    per_sample_bytes: int
    accumulation_bytes: int  # what accumulating adds (accumulators; measured once verified)
    baseline_bytes: int  # the process after warm-up, where the margin is counted from
    points: list[MeasuredStep]  # calibration steps, then each verification, in order
    verified: MeasuredStep  # the fresh run at the recommended batch
    planned_peak_bytes: int  # verified peak + margin: what training stays under

    def predict(self, batch_size: int, accumulation_steps: int) -> int:
        """Planned peak (margin included) at a batch size, from the fitted line."""
        return _Predictor(self.fixed_bytes, self.per_sample_bytes, self.accumulation_bytes,
                          self.baseline_bytes)(batch_size, accumulation_steps)

    def to_dict(self) -> dict:
        return {"backend": self.backend.to_dict(), "fixed_bytes": self.fixed_bytes,
                "per_sample_bytes": self.per_sample_bytes,
                "accumulation_bytes": self.accumulation_bytes,
                "measured": [p.__dict__ for p in self.points],
                "verified": self.verified.__dict__,
                "planned_peak_bytes": self.planned_peak_bytes}


def with_margin(peak: int, baseline: int) -> int:
    return peak + max(int(MARGIN * max(peak - baseline, 0)), MIN_MARGIN)


@dataclass(frozen=True)
class _Predictor:
    fixed: int
    slope: int
    accumulation: int
    baseline: int

    def __call__(self, batch_size: int, accumulation_steps: int) -> int:
        peak = self.fixed + self.slope * batch_size + \
            (self.accumulation if accumulation_steps > 1 else 0)
        return with_margin(peak, self.baseline)


def fit_line(points: list[tuple[int, int]], static_per_sample: int) -> tuple[int, int]:
    """(fixed, per_sample) through the two largest batches measured (the highest peak where
    a batch was measured twice); one batch borrows the static estimate's slope. Never a
    negative slope: memory does not shrink with the batch."""
    peaks: dict[int, int] = {}
    for b, peak in points:
        peaks[b] = max(peak, peaks.get(b, 0))
    pts = sorted(peaks.items())[-2:]
    if len(pts) == 1:
        b, peak = pts[0]
        return peak - static_per_sample * b, static_per_sample
    (b0, p0), (b1, p1) = pts
    slope = max((p1 - p0) // (b1 - b0), 0)
    return p0 - slope * b0, slope


def _largest(planned: Callable[[int], int], below: int, target: int,
             limit: int) -> int | None:
    """Largest batch under ``below`` whose planned peak fits. ``planned`` grows with the
    batch except at the target itself, where the accumulators disappear."""
    if target < below and planned(target) <= limit:
        return target
    hi = min(below - 1, target - 1)
    if hi < 1 or planned(1) > limit:
        return None
    lo = 1
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

    Raises ``UsageError`` when no batch fits.
    """
    first = measure_steps(model_path, [[b] for b in
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
    plain = [(s.batch_size, s.peak_bytes) for s in first.steps]
    points = list(first.steps)
    baseline = first.steps[0].baseline_bytes
    accumulation = accumulator_bytes  # until a verification measures it
    best: tuple[MeasuredStep, int] | None = None  # largest verified batch that fits
    fits_up_to, fails_from = 0, target_batch + 1
    for _ in range(VERIFY_ROUNDS):
        fixed, slope = fit_line(plain, static_per_sample)
        predict = _Predictor(fixed, slope, accumulation, baseline)

        def planned(b: int, p: _Predictor = predict) -> int:
            return p(b, math.ceil(target_batch / b))

        largest = _largest(planned, fails_from, target_batch, limit)
        if largest is None:
            break
        steps = math.ceil(target_batch / largest)
        batch = math.ceil(target_batch / steps)  # spread the target evenly over the steps
        if batch <= fits_up_to:
            break
        run = measure_steps(model_path, [micro_batches(batch, target_batch)],
                            optimizer=optimizer, dtype=dtype).steps[0]
        points.append(run)
        if steps == 1:
            plain.append((batch, run.peak_bytes))
        else:  # accumulating costs what the line leaves unexplained
            accumulation = max(accumulation, run.peak_bytes - fixed - slope * batch)
        if with_margin(run.peak_bytes, run.baseline_bytes) <= limit:
            best, fits_up_to = (run, steps), batch
            if batch == target_batch:
                break
        else:
            fails_from = batch
    if best is None:
        tried = points[len(first.steps):] or points
        low = min(tried, key=lambda p: p.batch_size)
        raise UsageError(
            f"no batch fits in {format_size(limit)} on {backend.describe()}: batch "
            f"{low.batch_size} (x {low.accumulation_steps}) measured "
            f"{format_size(low.peak_bytes)}, TensorFlow's runtime included, plus a margin of "
            f"{format_size(with_margin(low.peak_bytes, low.baseline_bytes) - low.peak_bytes)}"
            "; give more memory")
    run, steps = best
    fixed, slope = fit_line(plain, static_per_sample)
    return (Calibration(backend=backend, fixed_bytes=fixed, per_sample_bytes=slope,
                        accumulation_bytes=accumulation, baseline_bytes=baseline,
                        points=points, verified=run,
                        planned_peak_bytes=with_margin(run.peak_bytes, run.baseline_bytes)),
            run.batch_size, steps, limit, source)
