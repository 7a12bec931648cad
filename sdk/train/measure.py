"""Measure the peak memory of real training steps, in a child process.

The child loads the model and sets the process up exactly as :func:`sdk.train.fit` does
(the same step function, optimizer, allocator setting and the backend the environment
selects, see ``sdk.train.backend``). For each batch size asked for it runs one warm-up
update (traces the step, creates the optimizer slots), returns freed heap pages to the OS
(``malloc_trim``), resets the kernel's peak-RSS counter (``/proc/self/clear_refs`` = 5),
records RSS as the baseline, runs a few updates and reads the peak RSS (``VmHWM``).

``peak_bytes`` is the whole process at its peak (Python, TensorFlow's runtime, the model,
optimizer state, the step): what a training process started the same way needs.
``step_bytes`` (peak - baseline) is what the step adds on top, comparable with
:attr:`TrainingMemory.step_bytes`. On a GPU the figures are the device allocator's
(``tf.config.experimental.get_memory_info``), not RSS. Run as
``python -m sdk.train.measure '<json>'``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk.train.backend import Backend
from simulator.errors import RuntimeFailure


@dataclass(frozen=True)
class MeasuredStep:
    batch_size: int
    accumulation_steps: int
    baseline_bytes: int  # after the warm-up: runtime, model and optimizer state
    peak_bytes: int  # peak during the measured updates, whole process (or device)
    step_bytes: int  # peak - baseline


@dataclass(frozen=True)
class Measurement:
    backend: Backend
    steps: list[MeasuredStep]
    device_free_bytes: int | None  # GPU only: free device memory before the steps


def measure_steps(model_path: str | Path, runs: list[tuple[int, int]], *,
                  optimizer: str = "adam", dtype: str = "float32", steps: int = 2,
                  steady_allocator: bool = True, timeout_s: float = 600) -> Measurement:
    """Measure each ``(batch_size, accumulation_steps)`` of ``runs`` in one child, in order.

    With accumulation the child runs what ``fit`` runs then: accumulating micro-batches and
    the update from the accumulators. Raises ``RuntimeFailure`` if the child fails (e.g.
    runs out of memory).
    """
    request = json.dumps({"model": str(model_path), "runs": runs, "optimizer": optimizer,
                          "dtype": dtype, "steps": steps, "steady_allocator": steady_allocator})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    what = ", ".join(str(b) for b, _ in runs)
    try:
        done = subprocess.run([sys.executable, "-m", "sdk.train.measure", request],
                              capture_output=True, text=True, timeout=timeout_s, env=env,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeFailure(f"measuring batch {what} took over {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if done.returncode < 0:
            tail = f"killed by signal {-done.returncode} (out of memory?)"
        raise RuntimeFailure(f"measuring a training step at batch {what} failed "
                             f"(exit {done.returncode}): {tail}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(backend=Backend(**raw["backend"]),
                       steps=[MeasuredStep(**s) for s in raw["steps"]],
                       device_free_bytes=raw["device_free_bytes"])


def measure_step_peak(model_path: str | Path, batch_size: int, *, optimizer: str = "adam",
                      steps: int = 2, steady_allocator: bool = True,
                      timeout_s: float = 600) -> MeasuredStep:
    """One batch size in a fresh child (see :func:`measure_steps`)."""
    return measure_steps(model_path, [(batch_size, 1)], optimizer=optimizer, steps=steps,
                         steady_allocator=steady_allocator, timeout_s=timeout_s).steps[0]


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeFailure(f"/proc/self/status has no {field}")


def _gpu_free_bytes() -> int | None:
    """Free memory of the first visible GPU per ``nvidia-smi``; None where it is missing."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    done = subprocess.run([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits",
                           "-i", visible], capture_output=True, text=True, check=False)
    first = done.stdout.strip().splitlines()[:1]
    return int(float(first[0])) * 1024**2 if done.returncode == 0 and first else None


class _Meter:
    """Peak memory since :meth:`reset`: RSS on the CPU, the allocator's peak on a GPU."""

    def __init__(self, tf: Any, gpu: bool):
        self.tf, self.gpu = tf, gpu

    def reset(self) -> int:
        if self.gpu:
            self.tf.config.experimental.reset_memory_stats("GPU:0")
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["current"])
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        return _status("VmRSS")

    def peak(self) -> int:
        if self.gpu:
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"])
        return _status("VmHWM")


def _load(path: str, dtype: str) -> Any:
    import keras

    model = keras.saving.load_model(path, safe_mode=True, compile=False)
    if dtype == "float32":
        return model

    def mixed(layer: Any) -> Any:  # the layers as a mixed-precision training script builds them
        return layer.__class__.from_config(layer.get_config() | {"dtype": dtype})

    return keras.models.clone_model(model, clone_function=mixed)


def _child(request: dict) -> dict:
    import numpy as np
    import tensorflow as tf

    from sdk.train.backend import backend_here

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:  # allocate as needed, so the peak is the step's, not a pre-grab
        tf.config.experimental.set_memory_growth(gpu, True)
    import keras

    from sdk.train.loop import make_train_step, spec_of, use_steady_allocator
    from sdk.train.optimizers import get_optimizer

    if request["steady_allocator"]:
        use_steady_allocator()
    keras.utils.set_random_seed(0)
    model = _load(request["model"], request["dtype"])
    rng = np.random.default_rng(0)
    meter = _Meter(tf, bool(gpus))
    free = _gpu_free_bytes() if gpus else None

    def batch(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.random((n, *model.inputs[0].shape[1:]), dtype=np.float32)
        return x, np.zeros((n, *model.outputs[0].shape[1:]), np.float32)

    warm = batch(1)
    compiled: dict[bool, Any] = {}
    results = []
    for b, accumulation in request["runs"]:
        accumulate = accumulation > 1
        if accumulate not in compiled:
            compiled[accumulate] = make_train_step(
                model, get_optimizer(request["optimizer"]).build(1e-3),
                keras.losses.MeanSquaredError(), spec_of(warm[0]), spec_of(warm[1]),
                accumulate=accumulate)
        step = compiled[accumulate]
        data = batch(b)

        def update(x: np.ndarray, y: np.ndarray, step: Any = step,
                   accumulate: bool = accumulate) -> None:
            if accumulate:  # two micro-batches, then the update: what fit runs
                step.accumulate(x, y, float(len(x)))
                step.accumulate(x, y, float(len(x)))
                step.apply(0.5 / len(x))
            else:
                step.run(x, y)

        update(*warm)
        # The first step at a new shape builds kernels and caches: fit pays for it too.
        baseline = meter.reset()
        for _ in range(request["steps"]):
            update(*data)
        peak = meter.peak()
        results.append(MeasuredStep(batch_size=b, accumulation_steps=accumulation,
                                    baseline_bytes=baseline, peak_bytes=peak,
                                    step_bytes=peak - baseline).__dict__)
    return {"backend": backend_here(request["dtype"]).to_dict(), "steps": results,
            "device_free_bytes": free}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
