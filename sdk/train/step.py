"""One optimizer update, compiled, and the process set-up it runs under: shared by
:func:`sdk.train.fit` (:mod:`sdk.train.loop`) and the memory measurement
(:mod:`sdk.train.measure`), so the measurement runs what training runs."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
STEADY_MMAP_THRESHOLD = 64 * 1024


def use_steady_allocator() -> bool:
    """Make glibc return each freed large tensor to the OS at once.

    By default glibc raises its mmap threshold up to 32 MiB after the first large free, so
    later tensors come from the heap and freed ones stay resident: a training step then holds
    up to ~1.7x the bytes it has live (measured, docs/benchmarks-log.md "Training memory"). A fixed
    threshold keeps peak RSS equal to the planned live bytes. Process-wide; returns False
    where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, STEADY_MMAP_THRESHOLD))
    except (OSError, AttributeError):
        log.debug("not glibc: the allocator's mmap threshold is left alone")
        return False


@dataclass
class TrainStep:
    """Compiled pieces of one update; ``measure`` reuses it so it measures what ``fit`` runs."""

    run: Callable[..., Any]  # (x, y) -> loss: forward, backward and update in one call
    accumulate: Callable[..., Any]  # (x, y, n) -> loss: adds n * gradient to the accumulators
    apply: Callable[..., Any]  # (1/N) -> None: update from the accumulators, then zero them


def make_train_step(model: Any, optimizer: Any, loss_fn: Any, x_spec: Any, y_spec: Any,
                    accumulate: bool) -> TrainStep:
    import tensorflow as tf

    variables = model.trainable_variables
    optimizer.build(variables)
    accumulators = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables] \
        if accumulate else []

    def loss_and_grads(x: Any, y: Any) -> tuple[Any, list[Any]]:
        with tf.GradientTape() as tape:
            # A loss given by name is the per-sample function: average it like a Loss object.
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            if model.losses:
                loss = loss + tf.add_n(model.losses)
        return loss, tape.gradient(loss, variables)

    @tf.function(input_signature=[x_spec, y_spec])
    def run(x: Any, y: Any) -> Any:
        loss, grads = loss_and_grads(x, y)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    @tf.function(input_signature=[x_spec, y_spec, tf.TensorSpec((), tf.float32)])
    def accumulate_fn(x: Any, y: Any, n: Any) -> Any:
        loss, grads = loss_and_grads(x, y)
        for acc, g in zip(accumulators, grads, strict=True):
            acc.assign_add(g * n)
        return loss

    @tf.function(input_signature=[tf.TensorSpec((), tf.float32)])
    def apply(scale: Any) -> None:
        optimizer.apply_gradients(
            zip([acc * scale for acc in accumulators], variables, strict=True))
        for acc in accumulators:
            acc.assign(tf.zeros_like(acc))

    return TrainStep(run=run, accumulate=accumulate_fn, apply=apply)


def spec_of(array: np.ndarray) -> Any:
    import tensorflow as tf

    return tf.TensorSpec((None, *array.shape[1:]), tf.as_dtype(array.dtype))
