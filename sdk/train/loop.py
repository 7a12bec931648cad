"""A training loop that follows a :class:`BatchPlan`: micro-batches + gradient accumulation.

One optimizer update consumes ``plan.effective_batch`` samples as micro-batches of at most
``plan.batch_size``. The loss of each micro-batch is a mean over its samples, so the
gradient of the large batch is the micro-batch gradients weighted by their share of the
samples: ``sum_i (n_i / N) * g_i``. Accumulating ``n_i * g_i`` and scaling by ``1/N`` once
gives the same update as one big batch (up to floating-point order), also when the last
micro-batch of an epoch is smaller. Batch-norm statistics are per micro-batch, as in any
accumulation scheme. With one micro-batch per update no accumulator is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from devicefit.sdk.train.optimizers import get_optimizer
from devicefit.sdk.train.plan import BatchPlan
from devicefit.sdk.train.step import make_train_step, spec_of, use_steady_allocator
from devicefit.simulator.errors import UsageError

StepCallback = Callable[[Any], None]
ProgressCallback = Callable[[int, int, float], None]  # (update, total updates, loss)


def resolve_loss(model: Any, loss: Any) -> Any:
    import keras

    if loss is None:
        loss = getattr(model, "loss", None)
        if loss is None:
            raise UsageError("no loss given and the model is not compiled with one; pass "
                             "loss='sparse_categorical_crossentropy' (or another Keras loss)")
    try:
        return keras.losses.get(loss) if isinstance(loss, str) else loss
    except ValueError as exc:
        raise UsageError(f"unknown loss {loss!r}: {exc}") from exc


def fit(model: Any, x: np.ndarray, y: np.ndarray, *, epochs: int, plan: BatchPlan,
        optimizer: str = "adam", loss: Any = None, learning_rate: float = 1e-3,
        on_step_end: StepCallback | None = None, progress: ProgressCallback | None = None,
        seed: int = 0, shuffle: bool = True, steady_allocator: bool = True) -> dict:
    """Train ``model`` in place on ``(x, y)`` with the plan's micro-batch and accumulation.

    ``on_step_end(model)`` runs after every optimizer update (e.g. to re-apply pruning
    masks); ``progress(update, total_updates, loss)`` after every update too.
    ``steady_allocator`` calls :func:`use_steady_allocator` so memory follows the plan.
    Returns a summary: the batch settings used, the number of updates and the mean loss per
    epoch.
    """
    import keras

    x, y = np.asarray(x), np.asarray(y)
    if len(x) != len(y) or len(x) == 0:
        raise UsageError(f"x and y must be non-empty with the same number of samples "
                         f"(got {len(x)} and {len(y)})")
    if epochs < 1:
        raise UsageError(f"epochs must be at least 1, got {epochs}")
    if plan.dtype != "float32":
        raise UsageError(f"fit trains in the model's float32 weights; plan with dtype "
                         f"'float32' (got '{plan.dtype}')")
    if steady_allocator:
        use_steady_allocator()
    keras.utils.set_random_seed(seed)
    opt = get_optimizer(optimizer).build(learning_rate)
    accumulating = plan.accumulation_steps > 1
    step = make_train_step(model, opt, resolve_loss(model, loss), spec_of(x), spec_of(y),
                           accumulate=accumulating)
    rng = np.random.default_rng(seed)
    per_epoch = math.ceil(len(x) / plan.effective_batch)
    total, done, epoch_losses = per_epoch * epochs, 0, []
    for _ in range(epochs):
        order = rng.permutation(len(x)) if shuffle else np.arange(len(x))
        losses, weights = [], []
        for start in range(0, len(x), plan.effective_batch):
            chunk = order[start:start + plan.effective_batch]
            if accumulating:
                update_loss = 0.0
                for m in range(0, len(chunk), plan.batch_size):
                    idx = np.sort(chunk[m:m + plan.batch_size])
                    n = float(len(idx))
                    update_loss += float(step.accumulate(x[idx], y[idx], n)) * n
                step.apply(1.0 / len(chunk))
                update_loss /= len(chunk)
            else:
                idx = np.sort(chunk)
                update_loss = float(step.run(x[idx], y[idx]))
            losses.append(update_loss)
            weights.append(len(chunk))
            done += 1
            if on_step_end is not None:
                on_step_end(model)
            if progress is not None:
                progress(done, total, update_loss)
        epoch_losses.append(float(np.average(losses, weights=weights)))
    return {"batch_size": plan.batch_size, "accumulation_steps": plan.accumulation_steps,
            "effective_batch": plan.effective_batch, "epochs": epochs, "updates": done,
            "samples": len(x), "loss": epoch_losses}
