"""One trial of ``fit``, as it is kept in the optuna study and in the artifact folder: the
study's :class:`~sdk.study.record.TrialRecord` of a compression :class:`~sdk.fit.space.Candidate`,
with what fit adds (:class:`FitPayload`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.sdk.fit.space import Candidate
from devicefit.sdk.study.record import TrialRecord

__all__ = ["FitPayload", "FitTrial", "read_trial"]


@dataclass(frozen=True)
class FitPayload:
    """What a fit trial records besides the study's figures: the sizes of its file and the
    fine-tuning runs that made it."""

    model_bytes: int | None = None
    gzip_bytes: int | None = None
    #: The fine-tuned Keras model (to cluster the winner without training it again).
    keras_path: str | None = None
    fine_tune: tuple[FineTuneResult, ...] = ()
    #: An int4 candidate: each layer's weight bits and why it is not int4.
    low_bit: LowBitReport | None = None

    @property
    def epochs(self) -> int:
        """Training epochs the candidate had, over all its runs."""
        return sum(run.epochs for run in self.fine_tune)


FitTrial = TrialRecord[Candidate, FitPayload]


def read_trial(data: Mapping[str, Any]) -> FitTrial:
    """A fit trial from its JSON (a study's ``record``, a ``trial-NNN.json``, a report's)."""
    return TrialRecord.from_dict(data, Candidate, FitPayload)
