"""The conversion stages on a Keras model, run by ``convert`` (in its TensorFlow process,
:mod:`sdk.convert.transform`) and by ``fit`` for every candidate (:mod:`sdk.fit.candidate`):

    distillation targets → each sparsity kind in order (channel pruning in stages, N:M
    masks; each fine-tunes when there is training data) → int8 training (quantization-aware,
    or the same epochs without fake quantization) → quantize → optimize memory

:func:`run` is the one entry for everything up to quantize. :func:`optimize_memory` works on
``.tflite`` bytes with the simulator's optimizer and needs the profile, so convert runs it in
its own process after checking the scheme, and fit right after :func:`run`. TensorFlow is
imported only inside the stages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from devicefit.sdk.convert import finetune, qat, quantize
from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.distill import DistillSettings, distillation
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.loading import LoadedModel
from devicefit.sdk.convert.sparsity import SparsityOutcome, SparsitySpec, Training
from devicefit.sdk.convert.sparsity.base import clone_model
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import UsageError
from devicefit.simulator.profile_types import Profile

if TYPE_CHECKING:
    from devicefit.sdk.convert.lowbit import LowBitReport
    from devicefit.sdk.convert.spec import ConversionSpec
    from devicefit.simulator.optimize.driver import OptimizeReport

#: Called when a stage starts (convert's TensorFlow process reports it to the CLI).
StageStart = Callable[[str], None]
#: Training for int8 after sparsity (see :attr:`Stages.int8_training`).
Int8Training = Literal["qat", "plain"]


@dataclass(frozen=True)
class Stages:
    """What the stages do to a Keras model before it is quantized."""

    #: Applied in this order (convert takes one kind; fit's candidates may combine channel
    #: pruning with N:M).
    sparsity: tuple[SparsitySpec, ...] = ()
    #: Epochs of each training run (with training data).
    epochs: int = 0
    #: The unpruned model teaches the compressed one (soft labels).
    distill: DistillSettings | None = None
    #: After sparsity, ``epochs`` more for int8: "qat" trains on the converter's int8 grid
    #: (:mod:`sdk.convert.qat`); "plain" trains the same epochs the same way, one at a time,
    #: without fake quantization (fit's PTQ twin of a QAT candidate: like for like).
    int8_training: Int8Training | None = None
    #: "qat" for 4-bit layers: the Keras layers that train on the int4 grid, each with
    #: whether per channel (:func:`sdk.convert.qat.int4_layers`); the others train on int8's.
    int4: tuple[tuple[str, bool], ...] = ()

    def structure(self) -> Stages:
        """The same compression without training (right sizes, rough weights): fit judges a
        candidate's flash, arena and latency on it before spending any training."""
        return Stages(self.sparsity)


@dataclass
class Converted:
    """What :func:`run` made."""

    tflite: bytes
    #: The compressed (and trained) Keras model that was quantized.
    model: Any
    sparsity: SparsityOutcome = field(default_factory=SparsityOutcome)
    #: Every training run in order: the sparsity kinds' fine-tuning, then int8 training.
    fine_tune: list[FineTuneResult] = field(default_factory=list)
    #: fit's int4 candidates: what re-quantizing the float model gave each layer.
    low_bit: LowBitReport | None = None


#: Trained sparsity results :func:`run` keeps in a ``reuse`` mapping, newest last.
REUSED = 4

#: What the sparsity kinds made of a model: the model and their outcome.
Sparse = tuple[Any, SparsityOutcome]


def run(loaded: LoadedModel, stages: Stages, quant: quantize.QuantSettings,
        calibration: np.ndarray | None, training: Dataset | None = None,
        progress: Progress | None = None, stage: StageStart | None = None,
        reuse: dict[Any, Sparse] | None = None) -> Converted:
    """Compress ``loaded``'s Keras model as ``stages`` say (training only with ``training``)
    and quantize it; the caller's model is never changed.

    ``reuse``, kept by a caller that runs many stages on the same model and training data
    (fit), holds the last trained sparsity results: training is seeded, so stages that
    differ only after sparsity (a PTQ candidate and its QAT twin, two schemes) train the
    sparsity once and get the same model.
    """
    model, loss = loaded.keras_model, None
    if stage is not None and stages.sparsity:
        stage("sparsity")
    if stages.distill is not None and training is not None:
        training, loss = distillation(model, model, training, stages.distill)
    key = (stages.sparsity, stages.epochs, stages.distill)
    kept = reuse if training is not None and stages.sparsity else None
    if kept is not None and key in kept:
        model, outcome = kept[key]
    else:
        model, outcome = _sparsify(model, stages, training, loss, progress)
        if kept is not None:
            kept[key] = (model, outcome)
            for old in list(kept)[:-REUSED]:
                del kept[old]
    runs = list(outcome.fine_tune)
    if stages.int8_training is not None and training is not None:
        # Training works in place: never on the caller's model or a kept one.
        if not stages.sparsity or kept is not None:
            model = clone_model(model)
        if stage is not None:
            stage("QAT" if stages.int8_training == "qat" else "int8 training")
        runs += _int8_training(model, stages, training, calibration, loss, progress)
    if stage is not None:
        stage("quantize")
    if model is not loaded.keras_model:
        loaded = dataclasses.replace(loaded, keras_model=model)
    return Converted(quantize.to_tflite(loaded, quant, calibration, progress), model, outcome,
                     runs)


def _sparsify(model: Any, stages: Stages, training: Dataset | None, loss: Any,
              progress: Progress | None) -> Sparse:
    outcome = SparsityOutcome()
    for kind in stages.sparsity:
        model, done = kind.apply(model, Training(training, stages.epochs, progress, loss))
        outcome = outcome.merged(done)
    return model, outcome


def _int8_training(model: Any, stages: Stages, training: Dataset,
                   calibration: np.ndarray | None, loss: Any,
                   progress: Progress | None) -> list[FineTuneResult]:
    if stages.int8_training == "qat":
        if calibration is None:
            raise UsageError("quantization-aware training measures the converter's "
                             "activation ranges: it needs calibration data")
        return qat.quantization_aware_fit(model, training, stages.epochs, calibration,
                                          loss=loss, progress=progress,
                                          int4=dict(stages.int4)).fine_tune
    if training.y is None:
        raise UsageError(f"{training.source}: fine-tuning needs labels")
    loss = loss if loss is not None else finetune.loss_for(model, training.y)
    return [finetune.fine_tune(model, training, 1, loss=loss, progress=progress,
                               purpose=finetune.QAT_TWIN) for _ in range(stages.epochs)]


def optimize_memory(tflite: bytes, profile: Profile, spec: ConversionSpec, name: str = "<bytes>"
                    ) -> tuple[bytes, OptimizeReport | None]:
    """``--optimize-memory``: the rewritten bytes and what was done (unchanged without it)."""
    if spec.optimize_memory is None:
        return tflite, None
    from devicefit.simulator.optimize import optimize_model_bytes

    return optimize_model_bytes(tflite, profile, name=name, **spec.optimize_memory.options())
