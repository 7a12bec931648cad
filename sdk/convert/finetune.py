"""Pruning with fine-tuning: N:M masks kept at zero while training, and channel pruning in a
few stages with training between them (removing half the filters at once loses more accuracy
than removing them in steps the network can recover from).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sdk.convert import sparsity
from sdk.convert.data import Dataset
from simulator.errors import UsageError

log = logging.getLogger(__name__)

#: Most channel-pruning stages; fewer when there are fewer epochs.
MAX_STAGES = 3
LEARNING_RATE = 5e-4
#: Samples per optimizer update; ``sdk.train`` splits it into micro-batches if memory is short.
TARGET_BATCH = 32

Progress = Callable[[str, int, int], None]


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


@dataclass
class ChannelPruning:
    model: Any
    layers: list[sparsity.PrunedLayer]
    stages: list[float]
    fine_tune: list[FineTuneResult]


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
              masks: dict[str, np.ndarray] | None = None,
              progress: Progress | None = None, loss: Any = None,
              on_step_end: Callable[[Any], None] | None = None) -> FineTuneResult:
    """Train ``model`` in place; masked weights are re-zeroed after every optimizer update.

    ``loss`` replaces the loss chosen from the labels (e.g. a distillation loss whose
    targets carry the teacher's outputs, see ``sdk.fit.distill``); ``on_step_end(model)``
    runs after every update, after the masks (e.g. to keep weights clustered or quantized).
    """
    if data.y is None:
        raise UsageError(f"{data.source}: fine-tuning needs labels (an .npz with x and y, or a "
                         "folder of class sub-folders)")
    from sdk import train

    started = time.perf_counter()
    plan = train.plan_batch(model, optimizer="adam", target_batch=TARGET_BATCH)
    step_end = _step_end(masks, on_step_end)
    summary = train.fit(model, data.x, data.y, epochs=epochs, plan=plan, optimizer="adam",
                        loss=loss if loss is not None else loss_for(model, data.y),
                        learning_rate=LEARNING_RATE,
                        on_step_end=step_end, progress=_update_progress(progress))
    return FineTuneResult(epochs=epochs, batch_size=plan.batch_size,
                          accumulation_steps=plan.accumulation_steps,
                          loss=[float(v) for v in summary.get("loss", [])],
                          seconds=time.perf_counter() - started,
                          memory_limit_bytes=plan.memory_limit_bytes,
                          estimated_peak_bytes=plan.estimated_peak_bytes)


def _step_end(masks: dict[str, np.ndarray] | None, extra: Callable[[Any], None] | None
              ) -> Callable[[Any], None] | None:
    if not masks:
        return extra

    def run(model: Any) -> None:
        sparsity.apply_masks(model, masks)
        if extra is not None:
            extra(model)
    return run


def _update_progress(progress: Progress | None) -> Callable[[int, int, float], None] | None:
    if progress is None:
        return None
    return lambda done, total, loss: progress("fine-tuning", done, total)


def prune_channels(model: Any, ratio: float, train: Dataset | None, epochs: int,
                   progress: Progress | None = None, loss: Any = None,
                   layer_ratios: dict[str, float] | None = None) -> ChannelPruning:
    """Remove ``ratio`` of the prunable channels, in stages with fine-tuning between them.

    Without training data it is one step and no training (the report says so). Each stage
    removes the same share of the original channels: fractions kept go 1 → 1-r/K → … → 1-r.
    ``layer_ratios`` gives some layers their own ratio (see ``sparsity.prune_channels``).
    """
    # At least two epochs per stage: one epoch does not recover from a cut.
    stages = max(1, min(MAX_STAGES, epochs // 2)) if train is not None else 1
    first: dict[str, int] = {}
    last: dict[str, sparsity.PrunedLayer] = {}
    results: list[FineTuneResult] = []
    ratios: list[float] = []
    for k in range(1, stages + 1):
        ratios.append(ratio * k / stages)
        staged = {n: r * k / stages for n, r in layer_ratios.items()} if layer_ratios else None
        pruned = sparsity.prune_channels(model, ratios[-1], first, staged)
        model = pruned.model
        for layer in pruned.layers:
            first.setdefault(layer.name, layer.before)
            last[layer.name] = layer
        if train is not None:
            share = epochs // stages + (1 if k <= epochs % stages else 0)
            results.append(fine_tune(model, train, share, progress=progress, loss=loss))
    layers = [sparsity.PrunedLayer(n, layer.op, first[n], layer.after) for n, layer in last.items()]
    return ChannelPruning(model, layers, ratios, results)
