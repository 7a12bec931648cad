"""One trial of a study, as it is kept in the optuna study and in the artifact folder.

``fit`` and ``search`` judge their candidates the same way (the simulator's static check,
then an accuracy), so one :class:`TrialRecord` holds what both record; what only one of them
has — fit's file sizes and fine-tuning runs, search's float accuracy and training run — is
the record's typed ``payload`` (:class:`~sdk.fit.record.FitPayload`,
:class:`~sdk.search.trials.ArchPayload`).

A record crosses processes and machines as JSON (an optuna user attribute, the ``.json``
beside a candidate's model). :meth:`TrialRecord.to_dict` writes the payload's fields beside
the record's own, as one flat object, so the JSON each command wrote before the payload
existed still reads back (:meth:`TrialRecord.from_dict`, with :mod:`simulator.report.report`'s
machinery for the typed parts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from devicefit.simulator.report.report import BudgetCheck, build, from_fields, plain_fields
from devicefit.simulator.types import BudgetName, Status, StrEnum

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class Labelled(Protocol):
    """What the study needs of a candidate: a name for people (the JSON keeps it too)."""

    def label(self) -> str: ...


C = TypeVar("C", bound=Labelled)
P = TypeVar("P", bound="DataclassInstance")


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
class TrialRecord(Generic[C, P]):
    number: int
    candidate: C
    stage: TrialStage
    #: The static check's verdict (FAIL also when the real runtime refused it).
    verdict: Status
    budgets: tuple[BudgetCheck, ...] = ()
    flash_bytes: int | None = None
    #: The arena the budget was judged on.
    arena_bytes: int | None = None
    latency_ms: float | None = None
    #: The estimate's error band (low, high) in ms, from the latency validation.
    latency_band_ms: tuple[float, float] | None = None
    #: Top-1 accuracy of the candidate's ``.tflite`` on the evaluation data.
    accuracy: float | None = None
    seconds: float = 0.0
    #: The candidate's ``.tflite``.
    path: str | None = None
    #: The process (host:pid) that ran the trial.
    worker: str = ""
    note: str = ""
    #: What the command adds (keyword only: it follows the fields with defaults).
    payload: P = field(kw_only=True)

    @property
    def fits(self) -> bool:
        return self.verdict == Status.PASS

    def misses(self) -> dict[BudgetName, float]:
        """Budget → relative overshoot (0.1 = 10 % over) for every missed budget."""
        return {b.name: (b.value - b.limit) / b.limit for b in self.budgets
                if not b.ok and b.limit}

    def to_dict(self) -> dict[str, Any]:
        """One flat JSON object: the record's fields, the payload's, the candidate's label."""
        own = plain_fields(self)
        del own["payload"]
        return {**own, **plain_fields(self.payload), "label": self.candidate.label()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], candidate: type[C], payload: type[P]
                  ) -> TrialRecord[C, P]:
        """The inverse of :meth:`to_dict`, for the command's candidate and payload types
        (``label`` follows from the candidate; a key neither knows is ignored)."""
        theirs = {f.name for f in dataclasses.fields(payload)}
        record: TrialRecord[C, P] = from_fields(cls, {
            **{k: v for k, v in data.items() if k not in theirs},
            "candidate": build(candidate, data["candidate"]),
            "payload": build(payload, {k: v for k, v in data.items() if k in theirs})})
        return record
