"""What ``fit`` is asked to do besides which model, profile and output: :class:`FitSpec`.

Its parts are convert's where they mean the same (:class:`~sdk.convert.spec.FineTuning`,
:class:`~sdk.convert.spec.MemoryOptimization`) and the study's
(:class:`~sdk.study.storage.SearchSettings`). :meth:`FitSpec.conversion` is the
:class:`~sdk.convert.spec.ConversionSpec` every candidate shares; a candidate adds its scheme
and sparsity (``Candidate.spec``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devicefit.sdk.convert.data import DataSource
from devicefit.sdk.convert.spec import ConversionSpec, FineTuning, MemoryOptimization
from devicefit.sdk.study import SearchSettings

__all__ = ["FitSpec"]


@dataclass(frozen=True)
class FitSpec:
    """``devicefit fit``'s flags as one value (``fit()`` checks the values)."""

    #: Labelled training data, epochs of each training run, distillation.
    fine_tune: FineTuning
    #: Labelled evaluation data: the search ranks candidates by accuracy on it.
    eval_data: DataSource
    #: Calibration data; None: the first training samples.
    calibration: DataSource | None = None
    search: SearchSettings = field(default_factory=SearchSettings)
    #: Cluster the chosen candidate's weights to this many values per layer.
    cluster: int | None = None
    #: ``--patches`` (TFLM profiles): every candidate is rewritten before it is judged, so a
    #: model can fit by running its first stage patch by patch.
    optimize_memory: MemoryOptimization | None = None
    #: Trust the model: allow Lambda layers.
    unsafe: bool = False

    def conversion(self) -> ConversionSpec:
        """What every candidate's conversion shares."""
        return ConversionSpec(calibration=self.calibration, unsafe=self.unsafe,
                              optimize_memory=self.optimize_memory)
