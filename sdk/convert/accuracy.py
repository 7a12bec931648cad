"""What the conversion cost: float model vs the written ``.tflite`` on evaluation data.

The ``.tflite`` runs in LiteRT in a child process (a native crash or hang must not take the
converter down); the float reference is the Keras/SavedModel model itself. The child is
``sdk.convert.litert_child`` rather than ``simulator.run.runtimes.run_model``, which runs one
input per process: evaluation needs hundreds of samples through one interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicefit.simulator.errors import RuntimeFailure
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.run import zygote
from devicefit.simulator.run.runtimes import WORKER_PRELOAD

#: Seconds per evaluated sample allowed to the child, plus a fixed start-up allowance.
CHILD_TIMEOUT_PER_SAMPLE_S = 0.5
CHILD_TIMEOUT_BASE_S = 60.0


@dataclass
class AccuracyReport:
    samples: int
    #: Top-1 accuracy against the labels (None without labels or for non-classifiers).
    float_accuracy: float | None
    converted_accuracy: float | None
    #: Fraction of samples where float and converted models pick the same class.
    top1_agreement: float | None
    #: Signal-to-quantization-noise ratio of the converted outputs, in dB (None: identical).
    sqnr_db: float | None
    runtime: str = "litert (host, child process)"

    @property
    def accuracy_drop_pp(self) -> float | None:
        if self.float_accuracy is None or self.converted_accuracy is None:
            return None
        return 100.0 * (self.float_accuracy - self.converted_accuracy)


def run_tflite(model_path: Path, x: np.ndarray, runtime: str = "litert") -> np.ndarray:
    """Outputs of the ``.tflite`` for float inputs ``x``, from LiteRT (or the TFLM wheel:
    ``runtime="tflm"``) in a child process."""
    timeout = CHILD_TIMEOUT_BASE_S + CHILD_TIMEOUT_PER_SAMPLE_S * len(x)
    name = "TFLM" if runtime == "tflm" else "LiteRT"
    with temporary_folder("devicefit-eval-") as tmp:
        inputs, outputs = Path(tmp) / "x.npy", Path(tmp) / "y.npy"
        np.save(inputs, x.astype(np.float32))
        done = zygote.run("devicefit.sdk.convert.litert_child",
                          [str(model_path), str(inputs), str(outputs), runtime],
                          preload=WORKER_PRELOAD,
                          env=zygote.child_env(), timeout_s=timeout, work=Path(tmp))
        if done.code is None:
            raise RuntimeFailure(f"{name} did not finish evaluating {model_path.name} in "
                                 f"{timeout:.0f} s")
        if done.code != 0:
            tail = (done.stderr.decode(errors="replace").strip().splitlines()
                    or ["no message"])[-1]
            raise RuntimeFailure(f"{name} failed on {model_path.name} (exit {done.code}): "
                                 f"{tail}")
        return np.load(outputs)


def compare(reference: np.ndarray, converted: np.ndarray, labels: np.ndarray | None
            ) -> AccuracyReport:
    """Accuracy, top-1 agreement and SQNR of ``converted`` against the float ``reference``."""
    ref = reference.reshape(len(reference), -1).astype(np.float64)
    got = converted.reshape(len(converted), -1).astype(np.float64)
    noise = float(np.sum((ref - got) ** 2))
    signal = float(np.sum(ref ** 2))
    sqnr = None if noise == 0 else float(10.0 * np.log10(max(signal, 1e-30) / noise))
    classifier = ref.shape[1] > 1
    agreement = float(np.mean(ref.argmax(1) == got.argmax(1))) if classifier else None
    float_acc = conv_acc = None
    if classifier and labels is not None:
        y = labels.argmax(1) if labels.ndim == 2 and labels.shape[1] > 1 else labels.reshape(-1)
        float_acc = float(np.mean(ref.argmax(1) == y))
        conv_acc = float(np.mean(got.argmax(1) == y))
    return AccuracyReport(samples=len(ref), float_accuracy=float_acc,
                          converted_accuracy=conv_acc, top1_agreement=agreement, sqnr_db=sqnr)
