"""Fine-tuning a Keras model after it was compressed (pruned, clustered, quantization-aware):
a loss that matches the labels, a batch planned against memory, and a hook after every
optimizer update that keeps the compression in place (N:M masks, clusters).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError

log = logging.getLogger(__name__)

LEARNING_RATE = 5e-4
#: Samples per optimizer update; ``sdk.train`` splits it into micro-batches if memory is short.
TARGET_BATCH = 32


@dataclass
class FineTuneResult:
    epochs: int
    batch_size: int
    accumulation_steps: int
    loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: What ``sdk.train.plan_batch`` planned the batch against.
    memory_limit_bytes: int | None = None
    estimated_peak_bytes: int | None = None


def loss_for(model: Any, y: np.ndarray) -> Any:
    """A loss matching the labels and the model's last activation."""
    import keras

    units = int(model.outputs[0].shape[-1])
    last = getattr(model.layers[-1], "activation", None)
    from_logits = getattr(last, "__name__", "") != "softmax"
    if np.issubdtype(y.dtype, np.integer) and (y.ndim == 1 or y.shape[-1] == 1) and units > 1:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
    if y.ndim == 2 and y.shape[-1] == units and units > 1:
        return keras.losses.CategoricalCrossentropy(from_logits=from_logits)
    return keras.losses.MeanSquaredError()


def fine_tune(model: Any, data: Dataset, epochs: int, *,
              progress: Progress | None = None, loss: Any = None,
              on_step_end: Callable[[Any], None] | None = None,
              learning_rate: float = LEARNING_RATE) -> FineTuneResult:
    """Train ``model`` in place.

    ``loss`` replaces the loss chosen from the labels (e.g. a distillation loss whose
    targets carry the teacher's outputs, see ``sdk.convert.distill``); ``on_step_end(model)``
    runs after every optimizer update (e.g. to re-zero N:M masked weights, see
    ``sparsity.nm.keep_masks``, or to keep weights clustered). ``learning_rate``: the default
    suits fine-tuning trained weights; the architecture search trains from scratch faster.
    """
    if data.y is None:
        raise UsageError(f"{data.source}: fine-tuning needs labels (an .npz with x and y, or a "
                         "folder of class sub-folders)")
    from devicefit.sdk import train

    started = time.perf_counter()
    plan = train.plan_batch(model, optimizer="adam", target_batch=TARGET_BATCH)
    summary = train.fit(model, data.x, data.y, epochs=epochs, plan=plan, optimizer="adam",
                        loss=loss if loss is not None else loss_for(model, data.y),
                        learning_rate=learning_rate,
                        on_step_end=on_step_end, progress=_update_progress(progress))
    return FineTuneResult(epochs=epochs, batch_size=plan.batch_size,
                          accumulation_steps=plan.accumulation_steps,
                          loss=[float(v) for v in summary.get("loss", [])],
                          seconds=time.perf_counter() - started,
                          memory_limit_bytes=plan.memory_limit_bytes,
                          estimated_peak_bytes=plan.estimated_peak_bytes)


def _update_progress(progress: Progress | None) -> Callable[[int, int, float], None] | None:
    if progress is None:
        return None
    return lambda done, total, loss: progress("fine-tuning", done, total)
