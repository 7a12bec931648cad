"""Fine-tuning a Keras model after it was compressed (pruned, clustered, quantization-aware):
a loss that matches the labels, a batch planned against memory, and a hook after every
optimizer update that keeps the compression in place (N:M masks, clusters).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError
from devicefit.simulator.infra.units import format_size

log = logging.getLogger(__name__)

LEARNING_RATE = 5e-4
#: Samples per optimizer update; ``sdk.train`` splits it into micro-batches if memory is short.
TARGET_BATCH = 32

#: What a training run was for (:attr:`FineTuneResult.purpose`), as the summary names it.
PRUNING = "channel pruning"
NM_MASKS = "N:M sparsity (masks kept)"
QAT = "quantization-aware"
#: A PTQ candidate trains the epochs its QAT twin does, the same way: like for like.
QAT_TWIN = "int8 like its QAT twin (no fake quantization)"


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
    #: What the run was for (:data:`PRUNING`, :data:`QAT`, ...); empty: plain fine-tuning.
    purpose: str = ""


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
              learning_rate: float = LEARNING_RATE, purpose: str = "") -> FineTuneResult:
    """Train ``model`` in place.

    ``loss`` replaces the loss chosen from the labels (e.g. a distillation loss whose
    targets carry the teacher's outputs, see ``sdk.convert.distill``); ``on_step_end(model)``
    runs after every optimizer update (e.g. to re-zero N:M masked weights, see
    ``sparsity.nm.keep_masks``, or to keep weights clustered). ``learning_rate``: the default
    suits fine-tuning trained weights; the architecture search trains from scratch faster.
    ``purpose`` names the run in the summary (:func:`training_summary`).
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
                          estimated_peak_bytes=plan.estimated_peak_bytes, purpose=purpose)


def training_summary(runs: Sequence[FineTuneResult]) -> str | None:
    """Every training run of a model in one line, as it happened: the epochs in all, what
    each stage trained (pruning step by step; a stage trained one epoch at a time, such as
    QAT re-measuring its ranges, as one figure), the batch, the final loss.

    ``--epochs N`` is per stage: a pruned candidate with a QAT twin trains N epochs while
    it is pruned and N more for int8, so the line says both and their sum.
    """
    if not runs:
        return None
    stages = []
    for purpose, grouped in groupby(runs, key=lambda r: r.purpose):
        epochs = [r.epochs for r in grouped]
        if purpose == PRUNING and len(epochs) > 1:
            steps = f"{epochs[0]}" if len(set(epochs)) == 1 else "+".join(map(str, epochs))
            stages.append(f"{purpose} in {len(epochs)} steps of {steps} epoch(s)")
        else:
            stages.append(f"{sum(epochs)} epoch(s)" + (f" {purpose}" if purpose else ""))
    total = sum(r.epochs for r in runs)
    # The last epoch's: a pruning step's cut raises the loss again, so first → last would
    # read as training that made it worse.
    losses = [v for r in runs for v in r.loss]
    loss = f"; final loss {losses[-1]:.3f}" if losses else ""
    return (f"fine-tuned {total} epoch(s)"
            + (f": {', then '.join(stages)}" if stages != [f"{total} epoch(s)"] else "")
            + f"; {_batches(runs)}{loss}")


def _batches(runs: Sequence[FineTuneResult]) -> str:
    """The batch once (every run plans it alike unless memory changed between them); the
    memory it was planned for only where it split the batch."""
    shown = []
    for r in runs:
        if r.accumulation_steps > 1:
            limit = "" if r.memory_limit_bytes is None else \
                f", the most that fits {format_size(r.memory_limit_bytes)}"
            text = (f"batch {r.batch_size * r.accumulation_steps} as {r.accumulation_steps}"
                    f" micro-batches of {r.batch_size}{limit}")
        else:
            text = f"batch {r.batch_size}"
        if text not in shown:
            shown.append(text)
    return ", ".join(shown)


def _update_progress(progress: Progress | None) -> Callable[[int, int, float], None] | None:
    if progress is None:
        return None
    return lambda done, total, loss: progress("fine-tuning", done, total)
