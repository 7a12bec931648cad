"""The architecture search's trials in the study (:mod:`sdk.study`): train a survivor of the
screen, convert it to int8, judge it again and measure its accuracy.

The study's only parameter is *which survivor* to train (:class:`SurvivorTrials`): a
candidate the screen rejected is not in the space, so it is never trained. Each trial
(:func:`train_survivor`) builds the survivor with the screen's seeded weights, trains it
``epochs`` on the user's data (:func:`sdk.convert.finetune.fine_tune`, sdk.train's batch
plan), converts it to int8 calibrated on the user's data with fit's conversion
(:func:`sdk.fit.candidate.convert_candidate`; an int4 survivor of the screen with int4
weights where the runtime takes them), writes TFLM's offline arena plan where the
screen did (:func:`sdk.search.screen.planned`: the same arena), judges it again statically
and measures the int8 file's accuracy in LiteRT (:func:`sdk.fit.candidate.measure_accuracy`).
One objective (accuracy, TPE) or two (accuracy against latency or arena, NSGA-II).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import Dataset
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.lowbit import LowBitReport
from devicefit.sdk.convert.spec import MemoryOptimization
from devicefit.sdk.search.candidate import ArchCandidate
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.screen import Screened, planned
from devicefit.sdk.study import Direction, TrialRecord, TrialStage
from devicefit.sdk.types import Progress
from devicefit.simulator.infra.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.types import BudgetName, Status

#: Adam's step when training from scratch. fit's fine-tuning step (5e-4) suits trained
#: weights; from random ones, mbv2 w0.25 d1-1 on digits reached 18 % after 3 epochs with it
#: (Keras' BatchNorm momentum), 90 % with this one and the families' BN momentum 0.9.
LEARNING_RATE = 5e-3


@dataclass(frozen=True)
class ArchPayload:
    """What a trained survivor records besides the study's figures."""

    #: Top-1 accuracy of the trained Keras model (the record's is the int8 file's).
    float_accuracy: float | None = None
    parameters: int | None = None
    fine_tune: FineTuneResult | None = None
    #: An int4 candidate: each layer's weight bits and why it is not int4.
    low_bit: LowBitReport | None = None


ArchTrial = TrialRecord[ArchCandidate, ArchPayload]


def read_trial(data: Mapping[str, Any]) -> ArchTrial:
    """A trained survivor from its JSON (a study's ``record``)."""
    return TrialRecord.from_dict(data, ArchCandidate, ArchPayload)


def cost(record: ArchTrial, objective: Objective) -> float | None:
    """The figure ``objective`` trades against accuracy (the arena for one objective)."""
    if objective.cost == "latency":
        return record.latency_ms
    return None if record.arena_bytes is None else float(record.arena_bytes)


@dataclass
class Data:
    train: Dataset
    evaluation: Dataset
    calibration: np.ndarray


@dataclass
class Job:
    """What every trial needs; built once per process (a worker's is pickled to it)."""

    survivors: list[Screened]
    profile: Profile
    data: Data
    epochs: int
    objective: Objective
    workdir: Path
    progress: Progress | None = None
    memory: MemoryOptimization | None = None

    @property
    def keys(self) -> list[str]:
        return [s.candidate.key for s in self.survivors]

    def survivor(self, key: str) -> Screened:
        return next(s for s in self.survivors if s.candidate.key == key)


@dataclass
class SurvivorTrials:
    """search's :class:`~sdk.study.trials.Trials`: the sampler picks a survivor; one another
    trial has trained (or is training) is not trained again, and the next untried one is
    queued instead."""

    job: Job

    @property
    def directions(self) -> tuple[Direction, ...]:
        return self.job.objective.directions

    @property
    def size(self) -> int:
        return len(self.job.survivors)

    def suggest(self, trial: Any) -> ArchCandidate:
        return self.job.survivor(trial.suggest_categorical("candidate", self.job.keys)).candidate

    def describe(self, candidate: ArchCandidate) -> dict[str, Any]:
        return {"key": candidate.key}

    def read(self, data: Mapping[str, Any]) -> ArchTrial:
        return read_trial(data)

    def skip(self, candidate: ArchCandidate, number: int, done: list[ArchTrial]) -> None:
        return None  # the screen judged them all: every survivor may fit

    def untried(self, taken: Callable[[ArchCandidate], bool]) -> dict[str, Any] | None:
        key = next((s.candidate.key for s in self.job.survivors if not taken(s.candidate)), None)
        return None if key is None else {"candidate": key}

    def evaluate(self, candidate: ArchCandidate, number: int) -> ArchTrial:
        return train_survivor(self.job, self.job.survivor(candidate.key), number)

    def failed(self, candidate: ArchCandidate, number: int, note: str) -> ArchTrial:
        return ArchTrial(number, candidate, TrialStage.ERROR, Status.FAIL, note=note,
                         payload=ArchPayload())

    def value(self, record: ArchTrial) -> float | list[float]:
        """Accuracy (0 if it misses a budget or has none), and the cost for two objectives."""
        accuracy = record.accuracy if record.fits and record.accuracy is not None else 0.0
        if self.job.objective.cost is None:
            return accuracy
        figure = cost(record, self.job.objective)
        return [accuracy, float("inf") if figure is None else figure]


def train_survivor(job: Job, survivor: Screened, number: int) -> ArchTrial:
    """Build ``survivor`` (the screen's seeded weights), train it, convert it to int8
    calibrated on the data, judge it and measure its accuracy."""
    from devicefit.sdk.convert import finetune, loading
    from devicefit.sdk.convert.spec import ConversionSpec
    from devicefit.sdk.fit import top1_accuracy
    from devicefit.sdk.fit.candidate import (
        Context,
        convert_candidate,
        measure_accuracy,
        static_check,
    )
    from devicefit.sdk.search.families import builder, built
    from devicefit.sdk.search.screen import SEED

    started = time.perf_counter()
    cand = survivor.candidate
    model = built(builder(cand.family), cand.family, cand.params, SEED)
    run = finetune.fine_tune(model, job.data.train, job.epochs, progress=job.progress,
                             learning_rate=LEARNING_RATE)
    loaded = loading.load(model)
    assert job.data.evaluation.y is not None  # checked when the data was read
    float_accuracy = top1_accuracy(loaded.predict(job.data.evaluation.x), job.data.evaluation.y)
    ctx = Context(loaded=loaded, profile=job.profile, train=job.data.train,
                  evaluation=job.data.evaluation, calibration=job.data.calibration,
                  epochs=job.epochs, workdir=job.workdir, float_accuracy=float_accuracy,
                  progress=job.progress)
    converted = convert_candidate(ctx, ConversionSpec(weights=cand.weights))
    tflite, _ = planned(converted.tflite, job.profile, cand.label(), job.memory)
    path = job.workdir / f"trial-{number:03d}.tflite"
    write_atomic(path, tflite)
    report = static_check(path, job.profile)
    judged = next((b.value for b in report.budgets if b.name == BudgetName.ARENA), None)
    return ArchTrial(
        number, cand, TrialStage.TRAINED, report.verdict, tuple(report.budgets),
        flash_bytes=report.memory.flash_bytes if report.memory is not None else None,
        arena_bytes=int(judged) if judged is not None
        else report.memory.arena_bytes if report.memory is not None else None,
        latency_ms=report.latency.estimated_device_ms if report.latency else None,
        latency_band_ms=report.latency.band_ms if report.latency else None,
        accuracy=measure_accuracy(ctx, path), seconds=time.perf_counter() - started,
        path=str(path),
        note="" if report.ok else "the trained file misses a budget the screen passed",
        payload=ArchPayload(float_accuracy, int(model.count_params()), run, converted.low_bit))


def ranked(trials: Sequence[ArchTrial]) -> list[ArchTrial]:
    """Fitting trials, best first: accuracy, then smaller arena, flash, trial number."""
    fitting = [t for t in trials if t.fits and t.accuracy is not None]
    return sorted(fitting, key=lambda t: (-(t.accuracy or 0.0), t.arena_bytes or 0,
                                          t.flash_bytes or 0, t.number))


def pareto_front(trials: Sequence[ArchTrial], objective: Objective) -> list[int]:
    """Fitting trials no other fitting trial beats on accuracy and on the objective's cost
    at once (for one objective: the cost is the arena)."""
    metric = objective if objective.cost else Objective.ARENA
    scored = [(t.number, t.accuracy or 0.0, c) for t in ranked(trials)
              if (c := cost(t, metric)) is not None]

    def beats(a: tuple[int, float, float], b: tuple[int, float, float]) -> bool:
        return a[1] >= b[1] and a[2] <= b[2] and (a[1], a[2]) != (b[1], b[2])

    return sorted(n for n, acc, c in scored if not any(beats(o, (n, acc, c)) for o in scored))
