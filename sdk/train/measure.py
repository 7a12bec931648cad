"""Measure the peak memory of real training steps, in a child process.

The child loads the model and sets the process up exactly as :func:`sdk.train.fit` does
(the same step function, optimizer, allocator setting and the backend the environment
selects, see ``sdk.train.backend``). For each update asked for (its micro-batch sizes, as
``fit`` splits an effective batch) it runs one warm-up update at batch 1 (traces the step,
creates the optimizer slots), resets the kernel's peak-RSS counter (``/proc/self/clear_refs`` = 5), records RSS as the baseline,
then runs the update, a short update (half a micro-batch, as an epoch's last update is) and
the update again, and reads the peak RSS (``VmHWM``). The short update matters: with
oneDNN every new input shape builds and caches kernels (measured: +8 MiB each for the first
few shapes on a 64x64 conv block), and ``fit`` meets such shapes at every epoch's end.

``peak_bytes`` is the process's private memory at its peak (Python, TensorFlow's runtime,
the model, optimizer state, the step; see :class:`PeakMeter`): what a training process
started the same way needs.
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
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.sdk.console import log_tail, step
from devicefit.sdk.train.backend import Backend
from devicefit.simulator.errors import RuntimeFailure


@dataclass(frozen=True)
class MeasuredStep:
    batch_size: int
    accumulation_steps: int
    baseline_bytes: int  # after the warm-up: runtime, model and optimizer state
    peak_bytes: int  # peak during the measured updates, private memory (or device)
    step_bytes: int  # peak - baseline


@dataclass(frozen=True)
class Measurement:
    backend: Backend
    steps: list[MeasuredStep]
    device_free_bytes: int | None  # GPU only: free device memory before the steps


def micro_batches(batch_size: int, effective_batch: int) -> list[int]:
    """How ``fit`` splits one update of ``effective_batch`` samples: micro-batches of at
    most ``batch_size``."""
    return [min(batch_size, effective_batch - start)
            for start in range(0, effective_batch, batch_size)]


def measure_steps(model_path: str | Path, updates: list[list[int]], *,
                  optimizer: str = "adam", dtype: str = "float32",
                  steady_allocator: bool = True, timeout_s: float = 600) -> Measurement:
    """Measure each update of ``updates`` (its micro-batch sizes) in one child, in order.

    With several micro-batches the child runs what ``fit`` runs then: accumulating them and
    the update from the accumulators. Raises ``RuntimeFailure`` if the child fails (e.g.
    runs out of memory).
    """
    request = json.dumps({"model": str(model_path), "updates": updates,
                          "optimizer": optimizer, "dtype": dtype,
                          "steady_allocator": steady_allocator})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    what = ", ".join("+".join(map(str, u)) for u in updates)
    step(f"measuring training steps at batch {what} (a child process)")
    # The child's stderr (TensorFlow's start-up lines, a traceback) goes to a log file that
    # is kept, and its end shown, only when the measurement fails.
    with tempfile.NamedTemporaryFile(prefix="devicefit-measure-", suffix=".log",
                                     delete=False) as log:
        try:
            done = subprocess.run([sys.executable, "-m", "devicefit.sdk.train.measure", request],
                                  stdout=subprocess.PIPE, stderr=log, text=True,
                                  timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise _failure(f"measuring batch {what} took over {timeout_s:.0f} s",
                           log.name) from exc
    if done.returncode != 0:
        cause = (f"killed by signal {-done.returncode} (out of memory?)" if done.returncode < 0
                 else f"exit {done.returncode}")
        raise _failure(f"measuring a training step at batch {what} failed ({cause})", log.name)
    Path(log.name).unlink(missing_ok=True)
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(backend=Backend(**raw["backend"]),
                       steps=[MeasuredStep(**s) for s in raw["steps"]],
                       device_free_bytes=raw["device_free_bytes"])


def _failure(message: str, log: str) -> RuntimeFailure:
    """The error with the child's last words (its exception, e.g. out of memory) and where
    its whole log is kept."""
    last = log_tail(Path(log), 1)
    return RuntimeFailure(f"{message}{': ' + last[0] if last else ''}; its log: {log}")


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


class PeakMeter:
    """Peak memory since :meth:`reset`: private (anonymous) RSS on the CPU, the allocator's
    peak on a GPU.

    Private memory is what a training process costs: TensorFlow's shared-library pages
    (hundreds of MiB of RSS) are shared and the kernel evicts them under memory pressure,
    which made whole-RSS figures drop by 250 MiB on a busy machine. The kernel keeps a
    high-water mark only for the whole RSS (``VmHWM``), so the peak is the larger of the
    private baseline plus the HWM's rise, and the highest ``RssAnon`` a 1 ms sampler saw.
    """

    def __init__(self, gpu: bool = False):
        self.gpu = gpu
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._base_rss = self._base_anon = self._max_anon = 0

    def reset(self) -> int:
        """Start a measurement; returns the baseline."""
        if self.gpu:
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats("GPU:0")
            return int(tf.config.experimental.get_memory_info("GPU:0")["current"])
        # No malloc_trim: fit does not trim either, and what the heap keeps counts.
        Path("/proc/self/clear_refs").write_text("5")
        self._base_rss, self._base_anon = _status("VmRSS"), _status("RssAnon")
        self._max_anon = self._base_anon
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self._base_anon

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._max_anon = max(self._max_anon, _status("RssAnon"))

    def peak(self) -> int:
        if self.gpu:
            import tensorflow as tf

            return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        rise = _status("VmHWM") - self._base_rss
        return max(self._base_anon + rise, self._max_anon, _status("RssAnon"))


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

    from devicefit.sdk.train.backend import backend_here

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:  # allocate as needed, so the peak is the step's, not a pre-grab
        tf.config.experimental.set_memory_growth(gpu, True)
    import keras

    from devicefit.sdk.train.optimizers import get_optimizer
    from devicefit.sdk.train.step import make_train_step, spec_of, use_steady_allocator

    if request["steady_allocator"]:
        use_steady_allocator()
    keras.utils.set_random_seed(0)
    model = _load(request["model"], request["dtype"])
    rng = np.random.default_rng(0)
    meter = PeakMeter(bool(gpus))
    free = _gpu_free_bytes() if gpus else None

    def batch(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.random((n, *model.inputs[0].shape[1:]), dtype=np.float32)
        return x, np.zeros((n, *model.outputs[0].shape[1:]), np.float32)

    compiled: dict[bool, Any] = {}
    results = []
    for sizes in request["updates"]:
        accumulate = len(sizes) > 1
        if accumulate not in compiled:
            compiled[accumulate] = make_train_step(
                model, get_optimizer(request["optimizer"]).build(1e-3),
                keras.losses.MeanSquaredError(), spec_of(batch(1)[0]), spec_of(batch(1)[1]),
                accumulate=accumulate)
        step = compiled[accumulate]
        data = {n: batch(n) for n in {*sizes, 1, (max(sizes) + 1) // 2}}

        def update(micro: list[int], step: Any = step, accumulate: bool = accumulate,
                   data: dict = data) -> None:
            if not accumulate:
                step.run(*data[micro[0]])
                return
            for n in micro:
                step.accumulate(*data[n], float(n))
            step.apply(1.0 / sum(micro))

        update([1] * len(sizes))
        # The first step at a new shape builds kernels and caches: fit pays for it too.
        baseline = meter.reset()
        for micro in (sizes, [(max(sizes) + 1) // 2], sizes):
            update(micro)
        peak = meter.peak()
        results.append(MeasuredStep(batch_size=max(sizes), accumulation_steps=len(sizes),
                                    baseline_bytes=baseline, peak_bytes=peak,
                                    step_bytes=peak - baseline).__dict__)
    return {"backend": backend_here(request["dtype"]).to_dict(), "steps": results,
            "device_free_bytes": free}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
