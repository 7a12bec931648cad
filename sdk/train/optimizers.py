"""Optimizers devicefit can train with: their per-parameter state and how to build them.

``slots`` is the number of parameter-sized state tensors the Keras 3 optimizer keeps
(Adam's m and v, momentum's velocity...). ``update_temps`` is how many parameter-sized
temporaries one variable's update allocates at once (Adam computes ``g - m``,
``sqrt(v) + eps`` and the step before assigning); it sizes the update workspace, which is
bounded by the largest variable because variables are updated one after another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devicefit.simulator.errors import UsageError


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    slots: int
    update_temps: int
    build: Callable[[float], Any]  # learning rate -> keras optimizer


def _keras(cls_name: str, **kwargs: Any) -> Callable[[float], Any]:
    def build(learning_rate: float) -> Any:
        import keras

        return getattr(keras.optimizers, cls_name)(learning_rate=learning_rate, **kwargs)

    return build


OPTIMIZERS: dict[str, OptimizerSpec] = {s.name: s for s in (
    OptimizerSpec("sgd", 0, 1, _keras("SGD")),
    OptimizerSpec("momentum", 1, 2, _keras("SGD", momentum=0.9)),
    OptimizerSpec("nesterov", 1, 2, _keras("SGD", momentum=0.9, nesterov=True)),
    OptimizerSpec("rmsprop", 1, 2, _keras("RMSprop")),
    OptimizerSpec("adagrad", 1, 2, _keras("Adagrad")),
    OptimizerSpec("adadelta", 2, 3, _keras("Adadelta")),
    OptimizerSpec("adam", 2, 3, _keras("Adam")),
    OptimizerSpec("adamw", 2, 3, _keras("AdamW")),
    OptimizerSpec("adamax", 2, 3, _keras("Adamax")),
    OptimizerSpec("nadam", 2, 3, _keras("Nadam")),
    OptimizerSpec("lion", 1, 2, _keras("Lion")),
)}


def get_optimizer(name: str) -> OptimizerSpec:
    try:
        return OPTIMIZERS[name.lower()]
    except KeyError:
        raise UsageError(f"unknown optimizer '{name}'; choose one of "
                         f"{', '.join(OPTIMIZERS)}") from None
