"""The search: optuna proposes candidates, :mod:`sdk.fit.candidate` judges them.

Every trial's result lives in the optuna study (a ``record`` user attribute), so the same
code serves one process, ``--jobs N`` worker processes on one machine and several machines
sharing ``--storage`` (an RDB URL such as ``sqlite:///fit.db`` or
``postgresql://host/db``): each process reads what the others found from the storage.

Several processes must never build the same candidate twice nor overrun ``--max-trials``.
Optuna hands out queued trials atomically but lets two samplers propose the same point, so
each trial *decides* (build, duplicate, skipped, over budget) right after its proposal and
records the decision in the storage; a trial waits for every lower-numbered running trial to
decide first, so the decisions are taken one at a time in trial order on every machine.
With a server database, workers send heartbeats: a worker that dies mid-trial has its trial
marked failed by the next worker that looks, and optuna's retry callback queues it again.

Cheap before expensive: the first trial is the plain post-training conversion; a candidate
whose structure is already known to miss a budget (the same scheme and sparsity with at
least as much pruning missed flash, arena or latency, or used an unsupported op) is skipped
without any work, and repeated proposals of a finished candidate are pruned without work.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import multiprocessing
import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from devicefit.sdk.fit.candidate import Context, evaluate
from devicefit.sdk.fit.space import Candidate, SearchSpace
from devicefit.sdk.fit.trial import TrialRecord, TrialStage
from devicefit.simulator import jsonout
from devicefit.simulator.errors import DevicefitError, UsageError, missing_extra
from devicefit.simulator.fileio import write_atomic
from devicefit.simulator.types import Status

log = logging.getLogger(__name__)

#: Budgets that can only get worse with less pruning (so a miss rules out larger variants).
MONOTONE_BUDGETS = ("flash", "arena", "latency")
#: Proposals allowed per distinct candidate before the search gives up finding new ones.
PROPOSALS_PER_TRIAL = 20
RECORD = "record"
#: User attribute: how a trial was decided, ``{"trial", "as", "candidate", "worker"}``.
#: Keyed by trial number because optuna's retry copies the user attributes of the dead trial.
DECISION = "decision"
BUILD, DUPLICATE, SKIPPED, OVER_BUDGET = "build", "duplicate", "skipped", "over budget"
#: How often a waiting worker looks at the storage again.
POLL_S = 0.2
#: Missed heartbeats after which a trial's worker is taken for dead.
GRACE_BEATS = 3
#: How often a trial whose worker died is queued again (a candidate that kills every
#: worker it runs on, e.g. by running out of memory, must not stall the study).
MAX_RETRIES = 2

OnTrial = Callable[[TrialRecord], None]
Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class SearchSettings:
    max_trials: int = 20
    time_budget_s: float | None = None
    #: Optuna storage URL; None keeps the study in memory (a SQLite file with ``jobs`` > 1).
    storage: str | None = None
    study_name: str | None = None
    jobs: int = 1
    seed: int = 0
    #: Seconds between a worker's heartbeats on a server database; a trial whose worker is
    #: silent for ``GRACE_BEATS`` of them is failed and queued again.
    heartbeat_s: int = 30
    #: Where candidate models and their reports go (shared by every machine of a study).
    artifacts: Path | None = None

    @property
    def distributed(self) -> bool:
        """Workers may run on other machines: a database server, not a local file."""
        return self.storage is not None and not self.storage.startswith("sqlite")


@dataclass
class SearchResult:
    records: list[TrialRecord]
    interrupted: bool
    seconds: float
    study_name: str
    storage: str | None
    #: This process should write the winner: it is alone, or it completed the study's last
    #: trial and no trial is left running anywhere (so exactly one worker writes it).
    writer: bool = True
    worker: str = ""


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
        if r.stage == TrialStage.ERROR:  # the converter or the profile cannot take it
            return r
        if r.stage != TrialStage.STATIC:
            continue
        missed = set(r.misses())
        # Neither the op set nor the cost model's coverage depends on pruning.
        unsupported = "unsupported" in r.note or "not estimated" in r.note
        if unsupported or (missed and missed <= set(MONOTONE_BUDGETS)
                           and covers(r.candidate, candidate, groups)):
            return r
    return None


class Objective:
    """Optuna's objective for one process: propose, decide, evaluate what is new."""

    def __init__(self, ctx: Context, space: SearchSpace, settings: SearchSettings,
                 on_trial: OnTrial | None, worker: str) -> None:
        self.ctx, self.space, self.settings = ctx, space, settings
        self.on_trial, self.worker = on_trial, worker
        #: Trials this process completed (the writer of the winner is chosen among them).
        self.completed: set[int] = set()

    def __call__(self, trial: Any) -> float:
        import optuna

        candidate = self.space.suggest(trial)
        verdict, why = self._decide(trial, candidate)
        if verdict in (DUPLICATE, OVER_BUDGET):
            raise optuna.TrialPruned(why)
        done = records(trial.study)
        blocker = blocking(candidate, done, self.space.groups) if verdict == SKIPPED else None
        if blocker is not None:
            record = replace(blocker, number=trial.number, candidate=candidate,
                             stage=TrialStage.SKIPPED, accuracy=None, seconds=0.0, path=None,
                             keras_path=None, fine_tune=(), note=f"not built: trial {blocker.number} "
                             f"({blocker.candidate.label()}): {blocker.note}")
        else:
            record = self._evaluate(candidate, trial.number)
        self._save(record)
        trial.set_user_attr(RECORD, record.to_dict())
        self.completed.add(trial.number)
        if self.on_trial is not None:
            self.on_trial(record)
        return record.objective

    def _decide(self, trial: Any, candidate: Candidate) -> tuple[str, str]:
        """Build, or why not; taken after every lower-numbered running trial decided."""
        study = trial.study
        trials = settled_before(study, trial.number)
        verdict, why = BUILD, ""
        same = next((t for t in trials if t.number != trial.number
                     and t.state.name in ("RUNNING", "COMPLETE")
                     and _decided(t, candidate) in (BUILD, SKIPPED)), None)
        done = [TrialRecord.from_dict(t.user_attrs[RECORD]) for t in trials
                if RECORD in t.user_attrs]
        # A finished record also counts: a study resumed from before decisions were kept.
        number = same.number if same is not None else \
            next((r.number for r in done if r.candidate == candidate), None)
        if number is not None:
            verdict, why = DUPLICATE, f"same as trial {number}"
            trial.set_user_attr("duplicate_of", number)
        elif blocking(candidate, done, self.space.groups) is not None:
            verdict = SKIPPED
        elif claimed(trials, trial.number) >= self.settings.max_trials:
            verdict, why = OVER_BUDGET, f"--max-trials {self.settings.max_trials} already " \
                "claimed by running trials"
        trial.set_user_attr(DECISION, {"trial": trial.number, "as": verdict,
                                       "candidate": candidate.to_dict(), "worker": self.worker})
        return verdict, why

    def _save(self, record: TrialRecord) -> None:
        """Next to the candidate's model, its record: the shared artifact folder then holds
        everything needed to export the winner on any machine."""
        if record.path is not None:
            write_atomic(Path(record.path).with_suffix(".json"),
                         jsonout.dumps(record.to_dict(), indent=2) + "\n")

    def _evaluate(self, candidate: Candidate, number: int) -> TrialRecord:
        # One candidate the converter or the profile cannot handle (e.g. no cost-model entry
        # for int16 ops) is a failed candidate, not the end of the search.
        try:
            return evaluate(self.ctx, candidate, number)
        except Exception as exc:
            if not isinstance(exc, DevicefitError) and not converter_error(exc):
                raise  # a bug, not a property of the candidate
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("trial %d (%s) failed: %s", number, candidate.label(), message)
            return TrialRecord(number=number, candidate=candidate, stage=TrialStage.ERROR,
                               verdict=Status.FAIL, note=f"error: {message}")


def _decision(trial: Any) -> dict[str, Any] | None:
    """The trial's own decision (a retried trial carries its dead original's: ignored)."""
    decision = trial.user_attrs.get(DECISION)
    return decision if decision and decision.get("trial") == trial.number else None


def _decided(trial: Any, candidate: Candidate) -> str | None:
    """How ``trial`` was decided if it proposed ``candidate``."""
    decision = _decision(trial)
    if decision is None or Candidate.from_dict(decision["candidate"]) != candidate:
        return None
    verdict: str = decision["as"]
    return verdict


def settled_before(study: Any, number: int) -> list[Any]:
    """The study's trials once no running trial numbered below ``number`` is undecided.

    Deciding takes milliseconds; a worker that died before deciding is failed by its
    missing heartbeats, which ``fail_stale_trials`` notices while this one waits.
    """
    import optuna

    while True:
        trials: list[Any] = study.get_trials(deepcopy=False)
        if not any(t.state == optuna.trial.TrialState.RUNNING and t.number < number
                   and _decision(t) is None for t in trials):
            return trials
        _fail_stale(study)
        time.sleep(POLL_S)


def _fail_stale(study: Any) -> None:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def claimed(trials: list[Any], but: int | None = None) -> int:
    """Trials that count against ``--max-trials``: built or building, and failed trials
    queued again (a retry must not lose its place to a newer proposal)."""
    count = 0
    for t in trials:
        if t.number == but:
            continue
        decision = _decision(t)
        if t.state.name in ("RUNNING", "COMPLETE") and decision and decision["as"] == BUILD:
            count += 1
        elif t.state.name == "WAITING" and "failed_trial" in t.system_attrs and \
                (t.user_attrs.get(DECISION) or {}).get("as") == BUILD:
            count += 1
    return count


def converter_error(exc: Exception) -> bool:
    from tensorflow.lite.python.convert_phase import ConverterError

    return isinstance(exc, ConverterError)



class Stop:
    """Stops the study at the trial budget, the time budget, or when the space is used up;
    waits while the rest of the budget is being built by other workers (one of them may
    die, and its trial is then retried here)."""

    def __init__(self, settings: SearchSettings, space_size: int, deadline: float | None
                 ) -> None:
        self.settings, self.space_size, self.deadline = settings, space_size, deadline

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def finished(self, study: Any) -> bool:
        trials = study.get_trials(deepcopy=False)
        stages = [t.user_attrs[RECORD]["stage"] for t in trials if RECORD in t.user_attrs]
        # Skipped candidates cost nothing, so they do not use up --max-trials.
        judged = sum(1 for stage in stages if stage != TrialStage.SKIPPED)
        return judged >= self.settings.max_trials or len(stages) >= self.space_size or \
            len(trials) >= PROPOSALS_PER_TRIAL * self.settings.max_trials or \
            self._past_deadline()

    def wait_for_others(self, study: Any) -> None:
        """Return once this worker has something to do or the study is finished."""
        while not self.finished(study):
            trials = study.get_trials(deepcopy=False)
            if claimed(trials) < self.settings.max_trials or \
                    any(t.state.name == "WAITING" for t in trials):
                return
            _fail_stale(study)
            time.sleep(POLL_S)

    def __call__(self, study: Any, trial: Any) -> None:
        self.wait_for_others(study)
        if self.finished(study):
            study.stop()


def storage_for(settings: SearchSettings) -> Any:
    """The URL, or for a server database an RDB storage with heartbeats and retries: one per
    process and database (each storage is a SQLAlchemy engine with its own connection pool;
    one per study opened would hold a pool per call until collected)."""
    if settings.storage is None or not settings.distributed:
        return settings.storage
    return _rdb_storage(settings.storage, settings.heartbeat_s)


@functools.cache
def _rdb_storage(url: str, heartbeat_s: int) -> Any:
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RDBStorage(engine_url(url), heartbeat_interval=heartbeat_s,
                          grace_period=GRACE_BEATS * heartbeat_s,
                          heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                              max_retry=MAX_RETRIES))


def engine_url(url: str) -> str:
    """``url`` with the PostgreSQL driver the 'distributed' extra installs (psycopg2) when it
    names none: SQLAlchemy 2.1 takes a bare ``postgresql://`` for psycopg 3, which it lacks."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.drivername != "postgresql" or importlib.util.find_spec("psycopg") is not None:
        return url
    return parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)


def open_study(name: str, settings: SearchSettings, seed: int | None, create: bool, *,
               directions: tuple[Direction, ...] = ("maximize",), sampler: Any = None) -> Any:
    """Create (or join) the study ``name`` in the settings' storage. fit maximises one value
    with TPE; the architecture search (:mod:`sdk.search.train`) may pass several
    ``directions`` and its own ``sampler``."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError  # optuna's RDB storage is SQLAlchemy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if sampler is None:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    try:
        storage = storage_for(settings)
        if create:
            return optuna.create_study(study_name=name, storage=storage,
                                       directions=list(directions), sampler=sampler,
                                       load_if_exists=True)
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except (SQLAlchemyError, ImportError, ValueError, KeyError, OSError) as exc:
        if missing := missing_extra(exc, f"--storage {shown_url(settings.storage)}"):
            raise missing from exc
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = "install that database's Python driver" if isinstance(exc, ImportError) else \
            "give an RDB URL such as sqlite:///fit.db or postgresql://user@host/db"
        raise UsageError(f"--storage {settings.storage}: cannot open the study: {why} "
                         f"({hint})") from exc


def shown_url(url: str | None) -> str | None:
    """The storage URL without its password: reports and the study are shared."""
    if url is None:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_seed(settings: SearchSettings, index: int) -> int:
    """Local workers take seed + index; on a server database every machine is index 0, so
    the host and process tell them apart (else all would propose the same points)."""
    if not settings.distributed:
        return settings.seed + index
    digest = hashlib.sha256(f"{settings.seed}|{worker_id()}|{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


@dataclass
class _Run:
    """One process's share of the search."""

    study: Any
    objective: Objective
    stop: Stop

    def optimize(self, n_trials: int | None = None) -> None:
        self.stop.wait_for_others(self.study)
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
    return _Run(study, Objective(ctx, space, settings, on_trial, worker_id()),
                Stop(settings, space.size, deadline))


def writes_winner(study: Any, mine: set[int]) -> bool:
    """Exactly one worker of a shared study writes the winner: the one that completed the
    last judged trial, once no trial runs or waits anywhere. (Any machine can also export
    it later with ``fit --export``.)"""
    trials = study.get_trials(deepcopy=False)
    if any(t.state.name in ("RUNNING", "WAITING") for t in trials):
        return False
    judged = [t for t in trials if RECORD in t.user_attrs and t.datetime_complete is not None]
    if not judged:
        return True
    last = max(judged, key=lambda t: (t.datetime_complete, t.number))
    return last.number in mine


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
    if not first or first[0].stage != TrialStage.STATIC or len(ratios) < 2:
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
    # Another worker may have queued the same probe: one queued copy is enough.
    run.study.enqueue_trial(params, skip_if_exists=run.objective.settings.distributed)
    run.optimize(n_trials=1)
    return next((r for r in records(run.study) if r.candidate == candidate), None)


def search(ctx: Context, space: SearchSpace, settings: SearchSettings, *, name: str,
           model_path: Path | None = None, on_trial: OnTrial | None = None) -> SearchResult:
    """Run the search; Ctrl-C ends it early with what has been found so far.

    With ``settings.jobs`` > 1, ``jobs - 1`` worker processes (which load the model from
    ``model_path``) run trials next to this one, all sharing the study's storage. On a
    server database the same call on other machines joins the study.
    """
    if settings.jobs > 1 and settings.storage is None:
        settings = replace(settings, storage=f"sqlite:///{ctx.workdir / 'fit.db'}")
    started = time.monotonic()
    study = open_study(name, settings, worker_seed(settings, 0), create=True)
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
    writer = not settings.distributed or writes_winner(study, run.objective.completed)
    return SearchResult(records(study), interrupted, time.monotonic() - started, name,
                        settings.storage, writer=writer, worker=run.objective.worker)


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
    shared = replace(ctx, loaded=replace(ctx.loaded, keras_model=None), progress=None)
    return spawn_workers(_worker, [_WorkerSpec(str(model_path), shared, space, settings, name,
                                               index) for index in range(1, settings.jobs)])


def spawn_workers(target: Callable[[Any], None], specs: list[Any]) -> list[Any]:
    """A daemon process running ``target(spec)`` for each of ``specs``, spawned: TensorFlow
    does not survive fork."""
    spawn = multiprocessing.get_context("spawn")
    workers = []
    for spec in specs:
        process = spawn.Process(target=target, args=(spec,), daemon=True)
        process.start()
        workers.append(process)
    return workers


def quiet_worker() -> None:
    """A spawned worker's start, as the CLI's: TensorFlow's C++ log and the converter's
    per-conversion warning off."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", message="Statistics for quantized inputs")


def _worker(spec: _WorkerSpec) -> None:
    quiet_worker()
    from devicefit.sdk.convert import loading

    loaded = loading.load(spec.model_path)
    ctx = replace(spec.ctx, loaded=replace(spec.ctx.loaded, keras_model=loaded.keras_model))
    study = open_study(spec.name, spec.settings, worker_seed(spec.settings, spec.index),
                   create=False)
    try:
        _run(study, ctx, spec.space, spec.settings, None).optimize()
    except KeyboardInterrupt:
        pass
