"""Measure the peak memory of real training steps, in a child process.

The child loads the model, runs one warm-up update at batch 1 (traces the step, creates the
optimizer slots), returns freed heap pages to the OS (``malloc_trim``), resets the kernel's
peak-RSS counter (``/proc/self/clear_refs`` = 5) and records RSS as the baseline. It then
runs a few updates at the batch size under test and reads the peak RSS (``VmHWM``). The
difference is what the step adds on top of the persistent state: it is compared with
:attr:`TrainingMemory.step_bytes`. TensorFlow runs single-threaded and deterministic there
so that runs repeat. Run as ``python -m sdk.train.measure '<json>'``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import RuntimeFailure


@dataclass(frozen=True)
class MeasuredStep:
    batch_size: int
    baseline_bytes: int  # RSS after the warm-up, model and optimizer state included
    peak_bytes: int  # peak RSS during the measured steps
    step_bytes: int  # peak - baseline


def measure_step_peak(model_path: str | Path, batch_size: int, *, optimizer: str = "adam",
                      steps: int = 2, steady_allocator: bool = True,
                      timeout_s: float = 600) -> MeasuredStep:
    """Peak RSS that ``steps`` training updates at ``batch_size`` add over the baseline.

    ``steady_allocator`` sets the allocator up as :func:`fit` does; False measures glibc's
    default behaviour (freed tensors may stay resident, see ``use_steady_allocator``).
    """
    request = json.dumps({"model": str(model_path), "batch_size": batch_size,
                          "optimizer": optimizer, "steps": steps,
                          "steady_allocator": steady_allocator})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1",
               TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1")
    try:
        done = subprocess.run([sys.executable, "-m", "sdk.train.measure", request],
                              capture_output=True, text=True, timeout=timeout_s, env=env,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeFailure(f"measuring batch {batch_size} took over {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeFailure(f"measuring batch {batch_size} failed (exit {done.returncode}): "
                             f"{tail}")
    return MeasuredStep(**json.loads(done.stdout.strip().splitlines()[-1]))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeFailure(f"/proc/self/status has no {field}")


def _child(request: dict) -> MeasuredStep:
    import ctypes

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    import keras

    from sdk.train.loop import make_train_step, spec_of, use_steady_allocator
    from sdk.train.optimizers import get_optimizer

    if request["steady_allocator"]:
        use_steady_allocator()
    keras.utils.set_random_seed(0)
    model = keras.saving.load_model(request["model"], safe_mode=True, compile=False)
    b = request["batch_size"]
    rng = np.random.default_rng(0)

    def batch(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.random((n, *model.inputs[0].shape[1:]), dtype=np.float32)
        return x, np.zeros((n, *model.outputs[0].shape[1:]), np.float32)

    warm, data = batch(1), batch(b)
    step = make_train_step(model, get_optimizer(request["optimizer"]).build(1e-3),
                           keras.losses.MeanSquaredError(), spec_of(warm[0]), spec_of(warm[1]),
                           accumulate=False)
    step.run(*warm)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    baseline = _status("VmRSS")
    for _ in range(request["steps"]):
        step.run(*data)
    peak = _status("VmHWM")
    return MeasuredStep(batch_size=b, baseline_bytes=baseline, peak_bytes=peak,
                        step_bytes=peak - baseline)


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1])).__dict__))
