"""What a command brings to a study: its candidates, and how to judge one (:class:`Trials`).

``fit`` brings compression settings of one model (:class:`~sdk.fit.trials.FitTrials`),
``search`` the architectures its screen let through
(:class:`~sdk.search.trials.SurvivorTrials`); the study (:mod:`sdk.study.run`) proposes,
decides, records and stops the same way for both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from devicefit.sdk.study.record import C, P, TrialRecord
from devicefit.sdk.study.storage import Direction


class Trials(Protocol[C, P]):
    """A command's side of a study, candidates of type ``C``, records with payload ``P``."""

    @property
    def directions(self) -> tuple[Direction, ...]:
        """What optuna does with :meth:`value`: maximise accuracy, minimise a cost."""
        ...

    @property
    def size(self) -> int:
        """How many distinct candidates there are (the study stops when all are judged)."""
        ...

    def suggest(self, trial: Any) -> C:
        """The candidate optuna's ``trial`` proposes."""
        ...

    def describe(self, candidate: C) -> dict[str, Any]:
        """The candidate as the trial's decision records it (JSON): two proposals are the
        same candidate when their descriptions are."""
        ...

    def read(self, data: Mapping[str, Any]) -> TrialRecord[C, P]:
        """A record from its JSON (:meth:`TrialRecord.from_dict` with this command's types)."""
        ...

    def skip(self, candidate: C, number: int, done: list[TrialRecord[C, P]]
             ) -> TrialRecord[C, P] | None:
        """Trial ``number``'s record if the finished trials ``done`` prove ``candidate``
        cannot fit (it is then never built), else None."""
        ...

    def untried(self, taken: Callable[[C], bool]) -> dict[str, Any] | None:
        """Parameters of a candidate no trial has ``taken``, to queue when the sampler
        repeats itself (None: leave the next proposal to the sampler)."""
        ...

    def evaluate(self, candidate: C, number: int) -> TrialRecord[C, P]:
        """Build and judge ``candidate`` as trial ``number``. A DevicefitError or a
        converter error is the candidate's failure (:meth:`failed`); anything else a bug."""
        ...

    def failed(self, candidate: C, number: int, note: str) -> TrialRecord[C, P]:
        """The record of a candidate the converter or the profile cannot take."""
        ...

    def value(self, record: TrialRecord[C, P]) -> float | list[float]:
        """What optuna is told, one value per direction."""
        ...
