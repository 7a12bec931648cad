"""One trial of the search, as it is kept in the optuna study and in the artifact folder.

A :class:`TrialRecord` crosses processes and machines as JSON (an optuna user attribute,
the ``.json`` beside a candidate's model): :meth:`TrialRecord.to_dict` writes it and
:meth:`TrialRecord.from_dict` reads it back typed, both with :mod:`simulator.report`'s
machinery for its typed records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.fit.space import Candidate
from devicefit.simulator.report import BudgetCheck, from_fields, plain_fields
from devicefit.simulator.types import BudgetName, Status, StrEnum


class TrialStage(StrEnum):
    """How far a candidate got."""

    #: Rejected by the static check before training.
    STATIC = "static"
    TRAINED = "trained"
    #: Fits without training (plain post-training quantization).
    POST_TRAINING = "post-training"
    #: Not built: a finished trial proves it cannot fit.
    SKIPPED = "skipped"
    #: The converter or the profile could not take it.
    ERROR = "error"


@dataclass(frozen=True)
class TrialRecord:
    number: int
    candidate: Candidate
    stage: TrialStage
    #: The static check's verdict (FAIL also when the real runtime refused it).
    verdict: Status
    budgets: tuple[BudgetCheck, ...] = ()
    flash_bytes: int | None = None
    arena_bytes: int | None = None
    latency_ms: float | None = None
    #: The estimate's error band (low, high) in ms, from the latency validation.
    latency_band_ms: tuple[float, float] | None = None
    model_bytes: int | None = None
    gzip_bytes: int | None = None
    accuracy: float | None = None
    seconds: float = 0.0
    path: str | None = None
    keras_path: str | None = None
    fine_tune: tuple[FineTuneResult, ...] = ()
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.verdict == Status.PASS

    def misses(self) -> dict[BudgetName, float]:
        """Budget → relative overshoot (0.1 = 10 % over) for every missed budget."""
        return {b.name: (b.value - b.limit) / b.limit for b in self.budgets
                if not b.ok and b.limit}

    @property
    def objective(self) -> float:
        """What the search maximises: accuracy if it fits, minus its worst miss if not."""
        if self.fits:
            return self.accuracy if self.accuracy is not None else 0.0
        return -max(self.misses().values(), default=1.0)

    @property
    def epochs(self) -> int:
        """Training epochs the candidate had, over all its runs."""
        return sum(run.epochs for run in self.fine_tune)

    def to_dict(self) -> dict[str, Any]:
        return {**plain_fields(self), "label": self.candidate.label()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        """The inverse of :meth:`to_dict` (``label`` follows from the candidate)."""
        record: TrialRecord = from_fields(cls, data)
        return record
