"""The TensorFlow backend a training step runs on: device, threads, oneDNN, precision.

A step's memory depends on it: with oneDNN (which TensorFlow turns on by itself on CPUs with
AVX-512 VNNI/BF16 or AMX) convolutions and batch norm use other kernels and buffers than
Eigen's, and every intra-op thread keeps its own scratch. So a measured figure is only true
for the backend it was measured on, and the measuring child must run under exactly the
settings ``sdk.train.fit`` runs under. Those settings come from the environment, read by
TensorFlow itself when it starts, in every process alike:

- ``TF_NUM_INTRAOP_THREADS`` / ``TF_NUM_INTEROP_THREADS``: threads (unset: all cores);
- ``TF_ENABLE_ONEDNN_OPTS``: ``0``/``1`` forces oneDNN off/on (unset: TensorFlow decides
  from the CPU's features);
- ``CUDA_VISIBLE_DEVICES``: which GPU, if any (``-1``: CPU only).

Children inherit the parent's environment unchanged, so what they measure is what a
training run started from the same shell gets. :func:`backend_here` reports what TensorFlow
actually chose; it runs inside the child, never in the CLI process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


@dataclass(frozen=True)
class Backend:
    device: str  # "CPU" or "GPU:0"
    intra_op_threads: int
    inter_op_threads: int
    onednn: bool  # TensorFlow's oneDNN CPU kernels are in use
    dtype: str  # "float32" or "mixed_float16"
    tensorflow: str  # version

    def describe(self) -> str:
        threads = (f"{self.intra_op_threads} thread" + ("s" if self.intra_op_threads > 1 else "")
                   + (f" ({self.inter_op_threads} inter-op)"
                      if self.inter_op_threads != self.intra_op_threads else ""))
        kernels = "oneDNN on" if self.onednn else "oneDNN off"
        where = self.device if self.device != "CPU" else f"CPU, {threads}"
        return f"TensorFlow {self.tensorflow} {where}, {kernels}, {self.dtype}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def cores() -> int:
    """CPUs this process may run on: TensorFlow's default thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads(variable: str) -> int:
    value = os.environ.get(variable, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else cores()


def backend_here(dtype: str) -> Backend:
    """The backend of this process; imports TensorFlow (children only)."""
    import tensorflow as tf

    try:
        from tensorflow.python.util import _pywrap_util_port

        onednn = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):  # a build without the probe: trust the variable
        onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "") == "1"
    gpus = tf.config.list_physical_devices("GPU")
    return Backend(device="GPU:0" if gpus else "CPU",
                   intra_op_threads=_threads(THREAD_VARIABLES[0]),
                   inter_op_threads=_threads(THREAD_VARIABLES[1]), onednn=onednn,
                   dtype=dtype, tensorflow=tf.__version__)
