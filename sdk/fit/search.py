"""The search: optuna proposes candidates, :mod:`sdk.fit.candidate` judges them.

Every trial's result lives in the optuna study (a ``record`` user attribute), so the same
code serves one process, ``--jobs N`` worker processes on one machine and several machines
sharing ``--storage`` (an RDB URL such as ``sqlite:///fit.db``): each process reads what the
others found from the storage.

Cheap before expensive: the first trial is the plain post-training conversion; a candidate
whose structure is already known to miss a budget (the same scheme and sparsity with at
least as much pruning missed flash, arena or latency, or used an unsupported op) is skipped
without any work, and repeated proposals of a finished candidate are pruned without work.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sdk.fit.candidate import Context, TrialRecord, evaluate
from sdk.fit.space import Candidate, SearchSpace

log = logging.getLogger(__name__)

#: Budgets that can only get worse with less pruning (so a miss rules out larger variants).
MONOTONE_BUDGETS = ("flash", "arena", "latency")
#: Proposals allowed per distinct candidate before the search gives up finding new ones.
PROPOSALS_PER_TRIAL = 20
RECORD = "record"

OnTrial = Callable[[TrialRecord], None]


@dataclass(frozen=True)
class SearchSettings:
    max_trials: int = 20
    time_budget_s: float | None = None
    #: Optuna storage URL; None keeps the study in memory (a SQLite file with ``jobs`` > 1).
    storage: str | None = None
    study_name: str | None = None
    jobs: int = 1
    seed: int = 0


@dataclass
class SearchResult:
    records: list[TrialRecord]
    interrupted: bool
    seconds: float
    study_name: str
    storage: str | None


def study_name(source: str, profile: str, space: SearchSpace) -> str:
    """The same model, profile and space give the same name, so machines sharing a storage
    join one study."""
    path = Path(source)
    digest = hashlib.sha256(path.read_bytes() if path.is_file() else source.encode())
    digest.update(f"{profile}|{space.to_dict()}".encode())
    return f"devicefit-fit-{digest.hexdigest()[:12]}"


def records(study: Any) -> list[TrialRecord]:
    """Every finished candidate in the study, in trial order."""
    return [TrialRecord.from_dict(t.user_attrs[RECORD])
            for t in study.get_trials(deepcopy=False) if RECORD in t.user_attrs]


def blocking(candidate: Candidate, done: list[TrialRecord]) -> TrialRecord | None:
    """A finished record proving ``candidate`` cannot fit without building it."""
    for r in done:
        if r.candidate.structure != candidate.structure:
            continue
        if r.stage == "error":  # the converter or the profile cannot take this structure
            return r
        if r.stage != "static":
            continue
        missed = set(r.misses())
        unsupported = "unsupported" in r.note  # the op set does not depend on pruning
        if unsupported or (missed and missed <= set(MONOTONE_BUDGETS)
                           and r.candidate.prune >= candidate.prune):
            return r
    return None


class Objective:
    """Optuna's objective for one process: propose, skip what is known, evaluate the rest."""

    def __init__(self, ctx: Context, space: SearchSpace, on_trial: OnTrial | None) -> None:
        self.ctx, self.space, self.on_trial = ctx, space, on_trial

    def __call__(self, trial: Any) -> float:
        import optuna

        candidate = self.space.suggest(trial)
        done = records(trial.study)
        same = next((r for r in done if r.candidate == candidate), None)
        if same is not None:
            trial.set_user_attr("duplicate_of", same.number)
            raise optuna.TrialPruned(f"same as trial {same.number}")
        blocker = blocking(candidate, done)
        if blocker is not None:
            record = replace(blocker, number=trial.number, candidate=candidate, stage="skipped",
                             accuracy=None, seconds=0.0, path=None, keras_path=None,
                             fine_tune=[], note=f"not built: trial {blocker.number} "
                             f"({blocker.candidate.label()}): {blocker.note}")
        else:
            record = self._evaluate(candidate, trial.number)
        trial.set_user_attr(RECORD, record.to_dict())
        if self.on_trial is not None:
            self.on_trial(record)
        return record.objective


    def _evaluate(self, candidate: Candidate, number: int) -> TrialRecord:
        # One candidate the converter or the profile cannot handle (e.g. no cost-model entry
        # for int16 ops) is a failed candidate, not the end of the search.
        try:
            return evaluate(self.ctx, candidate, number)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded in the trial and logged
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("trial %d (%s) failed: %s", number, candidate.label(), message)
            return TrialRecord(number=number, candidate=candidate, stage="error",
                               verdict="fail", note=f"error: {message}")


class _Stop:
    """Stops the study at the trial budget, the time budget, or when the space is used up."""

    def __init__(self, settings: SearchSettings, space_size: int, deadline: float | None
                 ) -> None:
        self.settings, self.space_size, self.deadline = settings, space_size, deadline

    def __call__(self, study: Any, trial: Any) -> None:
        trials = study.get_trials(deepcopy=False)
        distinct = sum(1 for t in trials if RECORD in t.user_attrs)
        limit = min(self.settings.max_trials, self.space_size)
        if distinct >= limit or len(trials) >= PROPOSALS_PER_TRIAL * limit or \
                (self.deadline is not None and time.monotonic() >= self.deadline):
            study.stop()


def _study(name: str, settings: SearchSettings, worker: int, create: bool) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=settings.seed + worker, n_startup_trials=4)
    if create:
        return optuna.create_study(study_name=name, storage=settings.storage,
                                   direction="maximize", sampler=sampler, load_if_exists=True)
    return optuna.load_study(study_name=name, storage=settings.storage, sampler=sampler)


def _optimize(study: Any, ctx: Context, space: SearchSpace, settings: SearchSettings,
              on_trial: OnTrial | None, started: float) -> None:
    deadline = None if settings.time_budget_s is None else started + settings.time_budget_s
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    study.optimize(Objective(ctx, space, on_trial), timeout=remaining,
                   callbacks=[_Stop(settings, len(space.candidates()), deadline)],
                   catch=())


def search(ctx: Context, space: SearchSpace, settings: SearchSettings, *, name: str,
           model_path: Path | None = None, on_trial: OnTrial | None = None) -> SearchResult:
    """Run the search; Ctrl-C ends it early with what has been found so far.

    With ``settings.jobs`` > 1, ``jobs - 1`` worker processes (which load the model from
    ``model_path``) run trials next to this one, all sharing the study's storage.
    """
    if settings.jobs > 1 and settings.storage is None:
        settings = replace(settings, storage=f"sqlite:///{ctx.workdir / 'fit.db'}")
    started = time.monotonic()
    study = _study(name, settings, 0, create=True)
    if not study.get_trials(deepcopy=False):
        first = {"scheme": space.schemes[0], "prune": 0.0, "nm": None}
        study.enqueue_trial({**first, "qat": False} if space.qat else first)
    workers = _start_workers(ctx, space, settings, name, model_path) if settings.jobs > 1 else []
    interrupted = False
    try:
        _optimize(study, ctx, space, settings, on_trial, started)
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        interrupted = True
        for w in workers:
            w.terminate()
            w.join()
    return SearchResult(records(study), interrupted, time.monotonic() - started, name,
                        settings.storage)


@dataclass(frozen=True)
class _WorkerSpec:
    model_path: str
    ctx: Context
    space: SearchSpace
    settings: SearchSettings
    name: str
    index: int


def _start_workers(ctx: Context, space: SearchSpace, settings: SearchSettings, name: str,
                   model_path: Path | None) -> list[Any]:
    if model_path is None:
        model_path = ctx.workdir / "model.keras"
        ctx.model.save(model_path)
    spawn = multiprocessing.get_context("spawn")  # TensorFlow does not survive fork
    shared = replace(ctx, loaded=replace(ctx.loaded, keras_model=None), progress=None)
    workers = []
    for index in range(1, settings.jobs):
        spec = _WorkerSpec(str(model_path), shared, space, settings, name, index)
        process = spawn.Process(target=_worker, args=(spec,), daemon=True)
        process.start()
        workers.append(process)
    return workers


def _worker(spec: _WorkerSpec) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from sdk.convert import loading

    loaded = loading.load(spec.model_path)
    ctx = replace(spec.ctx, loaded=replace(spec.ctx.loaded, keras_model=loaded.keras_model))
    study = _study(spec.name, spec.settings, spec.index, create=False)
    try:
        _optimize(study, ctx, spec.space, spec.settings, None, time.monotonic())
    except KeyboardInterrupt:
        pass
