"""Knowledge distillation: fine-tune a pruned student with the original model as teacher.

The loss mixes the hard-label cross-entropy with the KL divergence between the teacher's
and the student's class distributions softened by a temperature T (Hinton et al., 2015):
``alpha * CE(y, student) + (1 - alpha) * T^2 * KL(teacher_T || student_T)``. The teacher's
soft labels are computed once, before training, and travel with the hard labels in one
target array ``[one-hot labels | teacher probabilities]``, so the ordinary training loop
(``sdk.train.fit``, with its batch planner and gradient accumulation) trains with it.
Models may end in a softmax or output logits; softmax outputs are turned back into
log-probabilities, which soften the same way as logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.simulator.errors import UsageError

TEMPERATURE = 4.0
ALPHA = 0.5


@dataclass(frozen=True)
class DistillSettings:
    temperature: float = TEMPERATURE
    alpha: float = ALPHA

    def to_dict(self) -> dict[str, float]:
        return {"temperature": self.temperature, "alpha": self.alpha}


def outputs_logits(model: Any) -> bool:
    """True when the model's last layer does not end in a softmax."""
    last = getattr(model.layers[-1], "activation", None)
    return getattr(last, "__name__", "") != "softmax"


def teacher_targets(teacher: Any, data: Dataset, settings: DistillSettings) -> Dataset:
    """``data`` with targets ``[one-hot labels | teacher's softened probabilities]``."""
    if data.y is None:
        raise UsageError(f"{data.source}: distillation needs labelled training data")
    out = np.asarray(teacher.predict(data.x, batch_size=256, verbose=0), dtype=np.float64)
    classes = out.shape[-1]
    if out.ndim != 2 or classes < 2:
        raise UsageError("distillation needs a classifier (one output of class scores)")
    y = np.asarray(data.y)
    labels = y.reshape(-1).astype(int) if y.ndim == 1 or y.shape[-1] == 1 else y.argmax(-1)
    logits = out if outputs_logits(teacher) else np.log(np.clip(out, 1e-7, 1.0))
    soft = _softmax(logits / settings.temperature)
    onehot = np.eye(classes)[labels]
    return Dataset(data.x, np.concatenate([onehot, soft], axis=1).astype(np.float32),
                   data.source)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class DistillationLoss:
    """A Keras loss over the packed targets of :func:`teacher_targets`."""

    def __init__(self, classes: int, from_logits: bool, settings: DistillSettings) -> None:
        self.classes = classes
        self.from_logits = from_logits
        self.settings = settings
        self.__name__ = "distillation"

    def __call__(self, y_true: Any, y_pred: Any) -> Any:
        from keras import ops

        t, a = self.settings.temperature, self.settings.alpha
        hard, soft = y_true[:, :self.classes], y_true[:, self.classes:]
        logits = y_pred if self.from_logits else ops.log(ops.clip(y_pred, 1e-7, 1.0))
        log_p = ops.log_softmax(logits, axis=-1)
        log_p_t = ops.log_softmax(logits / t, axis=-1)
        ce = -ops.sum(hard * log_p, axis=-1)
        kl = ops.sum(soft * (ops.log(ops.clip(soft, 1e-7, 1.0)) - log_p_t), axis=-1)
        return ops.mean(a * ce + (1.0 - a) * t * t * kl)


def distillation(teacher: Any, student: Any, data: Dataset,
                 settings: DistillSettings | None = None) -> tuple[Dataset, DistillationLoss]:
    """The packed training data and the loss that distil ``teacher`` into ``student``."""
    settings = settings or DistillSettings()
    packed = teacher_targets(teacher, data, settings)
    assert packed.y is not None  # the targets teacher_targets made
    classes = packed.y.shape[1] // 2
    return packed, DistillationLoss(classes, outputs_logits(student), settings)
