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
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sdk.fit.candidate import Context, TrialRecord, evaluate
from sdk.fit.space import Candidate, SearchSpace
from simulator.errors import DevicefitError, UsageError

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


def covers(a: Candidate, b: Candidate, groups: tuple[str, ...]) -> bool:
    """True when ``a`` prunes every layer group at least as much as ``b``."""
    if not a.layers and not b.layers:
        return a.prune >= b.prune
    return all(a.ratio_of(g) >= b.ratio_of(g) for g in groups)


def blocking(candidate: Candidate, done: list[TrialRecord], groups: tuple[str, ...] = ()
             ) -> TrialRecord | None:
    """A finished record proving ``candidate`` cannot fit without building it."""
    for r in done:
        if r.candidate.structure != candidate.structure:
            continue
        if r.stage == "error":  # the converter or the profile cannot take this structure
            return r
        if r.stage != "static":
            continue
        missed = set(r.misses())
        # Neither the op set nor the cost model's coverage depends on pruning.
        unsupported = "unsupported" in r.note or "not estimated" in r.note
        if unsupported or (missed and missed <= set(MONOTONE_BUDGETS)
                           and covers(r.candidate, candidate, groups)):
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
        blocker = blocking(candidate, done, self.space.groups)
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
        except Exception as exc:
            if not isinstance(exc, DevicefitError) and not _converter_error(exc):
                raise  # a bug, not a property of the candidate
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("trial %d (%s) failed: %s", number, candidate.label(), message)
            return TrialRecord(number=number, candidate=candidate, stage="error",
                               verdict="fail", note=f"error: {message}")


def _converter_error(exc: Exception) -> bool:
    from tensorflow.lite.python.convert_phase import ConverterError

    return isinstance(exc, ConverterError)


class _Stop:
    """Stops the study at the trial budget, the time budget, or when the space is used up."""

    def __init__(self, settings: SearchSettings, space_size: int, deadline: float | None
                 ) -> None:
        self.settings, self.space_size, self.deadline = settings, space_size, deadline

    def finished(self, study: Any) -> bool:
        trials = study.get_trials(deepcopy=False)
        stages = [t.user_attrs[RECORD]["stage"] for t in trials if RECORD in t.user_attrs]
        # Skipped candidates cost nothing, so they do not use up --max-trials.
        judged = sum(1 for stage in stages if stage != "skipped")
        return judged >= self.settings.max_trials or len(stages) >= self.space_size or \
            len(trials) >= PROPOSALS_PER_TRIAL * self.settings.max_trials or \
            (self.deadline is not None and time.monotonic() >= self.deadline)

    def __call__(self, study: Any, trial: Any) -> None:
        if self.finished(study):
            study.stop()


def _study(name: str, settings: SearchSettings, worker: int, create: bool) -> Any:
    import optuna
    from sqlalchemy.exc import SQLAlchemyError  # optuna's RDB storage is SQLAlchemy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=settings.seed + worker, n_startup_trials=4)
    try:
        if create:
            return optuna.create_study(study_name=name, storage=settings.storage,
                                       direction="maximize", sampler=sampler,
                                       load_if_exists=True)
        return optuna.load_study(study_name=name, storage=settings.storage, sampler=sampler)
    except (SQLAlchemyError, ImportError, ValueError, KeyError, OSError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"--storage {settings.storage}: cannot open the study: {why} "
                         "(give an RDB URL such as sqlite:///fit.db)") from exc


@dataclass
class _Run:
    """One process's share of the search."""

    study: Any
    objective: Objective
    stop: _Stop

    def optimize(self, n_trials: int | None = None) -> None:
        if self.stop.finished(self.study):
            return
        remaining = None if self.stop.deadline is None else \
            max(self.stop.deadline - time.monotonic(), 0.0)
        self.study.optimize(self.objective, n_trials=n_trials, timeout=remaining,
                            callbacks=[self.stop], catch=())


def _run(study: Any, ctx: Context, space: SearchSpace, settings: SearchSettings,
         on_trial: OnTrial | None) -> _Run:
    deadline = None if settings.time_budget_s is None else \
        time.monotonic() + settings.time_budget_s
    return _Run(study, Objective(ctx, space, on_trial),
                _Stop(settings, space.size, deadline))


def _bisect(run: _Run, space: SearchSpace) -> None:
    """Find the least channel pruning whose structure fits, for the first scheme, by
    bisection (sizes, arena and MACs shrink as pruning grows), then try QAT on it.

    Accuracy usually falls as pruning grows, so the least-pruned fitting candidate is the
    one to train first; each failed probe costs one static check, and every ratio below a
    failed one is skipped without work afterwards.
    """
    ratios = space.prune_ratios
    scheme = space.schemes[0]
    lo, hi = 0, len(ratios)  # ratios[lo] is known to miss; ratios[hi:] fit (hi: unknown yet)
    first = records(run.study)
    if not first or first[0].stage != "static" or len(ratios) < 2:
        return
    while hi - lo > 1 and not run.stop.finished(run.study):
        mid = (lo + hi) // 2
        done = _probe(run, space, Candidate(scheme, ratios[mid]))
        if done is None:
            return
        if done.fits:
            hi = mid
        else:
            lo = mid
    if hi < len(ratios) and space.qat and scheme == "int8" and \
            not run.stop.finished(run.study):
        _probe(run, space, Candidate(scheme, ratios[hi], None, True))


def _probe(run: _Run, space: SearchSpace, candidate: Candidate) -> TrialRecord | None:
    """Run ``candidate`` as the next trial (or find it done); None if the search stopped."""
    known = next((r for r in records(run.study) if r.candidate == candidate), None)
    if known is not None:
        return known
    params: dict[str, Any] = {"scheme": candidate.scheme, "prune": candidate.prune,
                              "nm": candidate.nm}
    if space.qat and candidate.scheme == "int8" and candidate.nm is None:
        params["qat"] = candidate.qat
    if space.per_layer:
        params["per_layer"] = bool(candidate.layers)
        params.update({f"prune[{g}]": r for g, r in candidate.layers})
    run.study.enqueue_trial(params)
    run.optimize(n_trials=1)
    return next((r for r in records(run.study) if r.candidate == candidate), None)


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
    workers = _start_workers(ctx, space, settings, name, model_path) if settings.jobs > 1 else []
    interrupted = False
    run = _run(study, ctx, space, settings, on_trial)
    try:
        _probe(run, space, Candidate(space.schemes[0], 0.0))
        _bisect(run, space)
        run.optimize()
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
    warnings.filterwarnings("ignore", message="Statistics for quantized inputs")  # as the CLI
    from sdk.convert import loading

    loaded = loading.load(spec.model_path)
    ctx = replace(spec.ctx, loaded=replace(spec.ctx.loaded, keras_model=loaded.keras_model))
    study = _study(spec.name, spec.settings, spec.index, create=False)
    try:
        _run(study, ctx, spec.space, spec.settings, None).optimize()
    except KeyboardInterrupt:
        pass
