"""The architecture search's second part: train the candidates the screen lets through, rank
them, verify the best in the target's runtime and write it.

:func:`search_architectures` screens a family's grid (:func:`sdk.search.screen.screen`, one
TensorFlow child, shape-only calibration), then runs an optuna study whose only parameter is
*which survivor* to train: a candidate that misses a budget is never in the space, so it is
never trained. Each trial builds the survivor with the screen's seeded weights, trains it
``epochs`` on the user's data (:func:`sdk.convert.finetune.fine_tune`, sdk.train's batch
plan), converts it to int8 calibrated on the user's data with fit's conversion
(:func:`sdk.fit.candidate.convert_candidate`), writes TFLM's offline arena plan where the
screen did (:func:`sdk.search.screen.planned`: the same arena), judges it again statically
and measures the int8 file's accuracy in LiteRT (:func:`sdk.fit.candidate.measure_accuracy`).

The study is fit's (:func:`sdk.fit.search.open_study`): in memory, SQLite (a rerun resumes:
survivors trained before are not trained again) or a server database that several machines
join; fit's trial-order decisions (:func:`sdk.fit.search.settled_before`) keep two workers
from training one survivor twice, fit's :class:`~sdk.fit.search.Stop` ends it. One objective
(accuracy, TPE) or two (accuracy against latency or arena, NSGA-II): the report then holds
the Pareto front. The winner goes through fit's verification (:func:`sdk.fit.export.verify`,
``simulate(run=True)``). Ctrl-C keeps the best survivor trained so far.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.sdk.convert.data import Dataset, DataSource
from devicefit.sdk.convert.finetune import FineTuneResult
from devicefit.sdk.convert.spec import MemoryOptimization
from devicefit.sdk.fit.search import (
    BUILD,
    DECISION,
    DUPLICATE,
    OVER_BUDGET,
    RECORD,
    SearchSettings,
    Stop,
    claimed,
    open_study,
    quiet_worker,
    settled_before,
    spawn_workers,
    worker_id,
    worker_seed,
    writes_winner,
)
from devicefit.sdk.fit.trial import TrialStage
from devicefit.sdk.search.candidate import ArchCandidate, candidate
from devicefit.sdk.search.objective import Objective
from devicefit.sdk.search.screen import Screened, ScreenRun, planned, screen
from devicefit.sdk.types import Progress
from devicefit.simulator.errors import DevicefitError, InputError, UsageError
from devicefit.simulator.fileio import write_atomic
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.report import BudgetCheck, Report, from_fields, plain_fields
from devicefit.simulator.types import BudgetName, Status

log = logging.getLogger(__name__)

#: Samples the int8 converter calibrates on (fit's number).
CALIBRATION_SAMPLES = 300
#: Adam's step when training from scratch. fit's fine-tuning step (5e-4) suits trained
#: weights; from random ones, mbv2 w0.25 d1-1 on digits reached 18 % after 3 epochs with it
#: (Keras' BatchNorm momentum), 90 % with this one and the families' BN momentum 0.9.
LEARNING_RATE = 5e-3


@dataclass(frozen=True)
class SearchSpec:
    """``devicefit search``'s training flags as one value (checked by the search)."""

    train: DataSource
    eval_data: DataSource
    #: None: the first training samples.
    calibration: DataSource | None = None
    epochs: int = 3
    objective: Objective = Objective.ACCURACY
    #: fit's settings: trials, time budget, storage, study, jobs, seed, heartbeats, artifacts.
    search: SearchSettings = field(default_factory=SearchSettings)
    #: ``--patches`` (TFLM profiles): the screen and every trained file also try running the
    #: first stage patch by patch, so a candidate can fit by it.
    optimize_memory: MemoryOptimization | None = None


@dataclass(frozen=True)
class Trained:
    """One trained survivor, as kept in the study (``record`` user attribute)."""

    number: int
    candidate: ArchCandidate
    #: TRAINED, or ERROR when building, training or converting it failed.
    stage: TrialStage
    #: The trained int8 file's static verdict (its structure passed the screen).
    verdict: Status
    budgets: tuple[BudgetCheck, ...] = ()
    flash_bytes: int | None = None
    arena_bytes: int | None = None
    latency_ms: float | None = None
    latency_band_ms: tuple[float, float] | None = None
    #: Top-1 accuracy of the int8 file (LiteRT) and of the trained Keras model.
    accuracy: float | None = None
    float_accuracy: float | None = None
    parameters: int | None = None
    fine_tune: FineTuneResult | None = None
    seconds: float = 0.0
    path: str | None = None
    worker: str = ""
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.verdict == Status.PASS

    def cost(self, objective: Objective) -> float | None:
        if objective.cost == "latency":
            return self.latency_ms
        return None if self.arena_bytes is None else float(self.arena_bytes)

    def values(self, objective: Objective) -> list[float]:
        """What optuna is told: accuracy (0 if none), and the cost when two objectives."""
        accuracy = self.accuracy if self.fits and self.accuracy is not None else 0.0
        if objective.cost is None:
            return [accuracy]
        cost = self.cost(objective)
        return [accuracy, float("inf") if cost is None else cost]

    def to_dict(self) -> dict[str, Any]:
        return {**plain_fields(self), "label": self.candidate.label()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trained:
        record: Trained = from_fields(cls, data)
        return record


@dataclass
class Data:
    train: Dataset
    evaluation: Dataset
    calibration: np.ndarray


@dataclass
class Searched:
    """What :func:`search_architectures` did; :mod:`sdk.search.report` builds the report."""

    profile: Profile
    objective: Objective
    settings: SearchSettings
    epochs: int
    screen: ScreenRun
    trials: list[Trained]
    study_name: str | None = None
    interrupted: bool = False
    search_seconds: float = 0.0
    #: Ranked fitting trials; the first that passed the runtime is :attr:`chosen`.
    chosen: int | None = None
    verification: Report | None = None
    #: Trials that passed the static check but failed in the runtime.
    failed_in_runtime: tuple[int, ...] = ()
    output: str | None = None
    writer: bool = True
    train_samples: int = 0
    eval_samples: int = 0
    calibration_source: str = ""

    @property
    def found(self) -> bool:
        return self.chosen is not None


OnTrial = Callable[[Trained], None]


def search_architectures(family: str, axes: Mapping[str, Sequence[Any]],
                         profile: str | Path | Profile, output: str | Path, spec: SearchSpec, *,
                         profiles_dirs: Sequence[str | Path] = (),
                         progress: Progress | None = None,
                         on_trial: OnTrial | None = None) -> Searched:
    """Screen ``family``'s grid over ``axes`` for ``profile``, train the survivors on
    ``spec``'s data, write the most accurate one that passes in the runtime to ``output``.

    ``input_shape`` and ``classes`` default to the data's (a grid axis of ``input_shape``
    must be the data's sample shape: the search trains on the data as it is).
    """
    from devicefit.sdk.convert import check_output

    settings = spec.search
    if settings.max_trials < 1:
        raise UsageError(f"--max-trials {settings.max_trials}: give at least 1")
    if settings.jobs < 1:
        raise UsageError(f"--jobs {settings.jobs}: give at least 1")
    if spec.epochs < 1:
        raise UsageError(f"--epochs {spec.epochs}: training needs at least 1")
    prof = profile if isinstance(profile, Profile) else load_profile(profile, list(profiles_dirs))
    out_path = check_output(output, spec.train, spec.eval_data, spec.calibration)
    data, fixed = _data(spec, axes)
    grid = _grid(family, {k: v for k, v in axes.items() if k not in fixed}, fixed)
    screened = screen(grid, prof, memory=spec.optimize_memory)
    survivors = list(screened.fitting)
    found = Searched(prof, spec.objective, settings, spec.epochs, screened, [],
                     train_samples=len(data.train), eval_samples=len(data.evaluation),
                     calibration_source=str(spec.calibration or data.train.source))
    if not survivors:
        return found
    name = settings.study_name or study_name(prof.name, survivors, spec)
    found.study_name = name
    if settings.artifacts is not None:
        from devicefit.sdk.fit.export import artifact_dir

        work = artifact_dir(settings.artifacts, name)
        own_work = False
    else:
        work, own_work = Path(tempfile.mkdtemp(prefix="devicefit-search-")), True
    work.mkdir(parents=True, exist_ok=True)
    if settings.jobs > 1 and settings.storage is None:
        settings = replace(settings, storage=f"sqlite:///{work / 'search.db'}")
        found.settings = settings
    try:
        job = _Job(survivors, prof, data, spec.epochs, spec.objective, work, progress,
                   spec.optimize_memory)
        started = time.monotonic()
        trials, found.interrupted, found.writer = _study(job, settings, name, on_trial)
        found.search_seconds = time.monotonic() - started
        found.trials = trials
        if found.writer:
            _write_winner(found, job, out_path, [spec.train, spec.eval_data, spec.calibration])
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return found


def _data(spec: SearchSpec, axes: Mapping[str, Sequence[Any]]
          ) -> tuple[Data, dict[str, Any]]:
    """The data, and the parameters it fixes (input_shape, classes) unless ``axes`` give them."""
    from devicefit.sdk.convert import data as data_io
    from devicefit.sdk.fit import top1_accuracy

    shape = _sample_shape(spec.train, axes)
    train = data_io.load_data(spec.train, shape, what="training")
    evaluation = data_io.load_data(spec.eval_data, shape, what="evaluation")
    if train.y is None or evaluation.y is None:
        raise UsageError("search needs labels in --train and --eval (.npz with x and y) to "
                         "train the candidates and rank them by accuracy")
    calibration = train.head(CALIBRATION_SAMPLES) if spec.calibration is None else \
        data_io.load_data(spec.calibration, shape, what="calibration",
                          limit=CALIBRATION_SAMPLES)
    classes = _classes(train.y)
    given = [int(c) for c in axes.get("classes", [])]
    if given and given != [classes]:
        raise UsageError(f"--param classes={','.join(map(str, given))}: the training labels "
                         f"have {classes} classes")
    # A label the model cannot output would only show as a low accuracy: refuse it.
    if top1_accuracy(np.zeros((1, classes)), evaluation.y[:1]) is None or \
            _classes(evaluation.y) > classes:
        raise UsageError(f"{evaluation.source}: its labels go beyond the {classes} classes "
                         "of the training data")
    fixed = {"input_shape": shape, "classes": classes}
    return Data(train, evaluation, calibration.x), fixed


def _sample_shape(source: DataSource, axes: Mapping[str, Sequence[Any]]) -> tuple[int, ...]:
    """The training samples' shape (read from the file), which every candidate takes."""
    given = [tuple(s) for s in axes.get("input_shape", [])]
    if isinstance(source, (str, Path)) and Path(source).suffix.lower() in (".npz", ".npy"):
        if not Path(source).is_file():
            raise InputError(f"training data not found: {source}")
        try:
            loaded = np.load(source, mmap_mode="r")  # only the header is read here
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    shape = tuple(int(d) for d in loaded["x"].shape[1:])
            else:
                shape = tuple(int(d) for d in loaded.shape[1:])
        except (KeyError, ValueError, OSError) as exc:
            raise InputError(f"{source}: cannot read training data x: {exc}") from None
        if given and given != [shape]:
            raise UsageError(f"--param input_shape={','.join('x'.join(map(str, s)) for s in given)}"
                             f": the training samples are {'x'.join(map(str, shape))}; the "
                             "search trains on the data as it is")
        return shape
    if len(given) != 1:
        raise UsageError("give --param input_shape=HxWxC (one value) when --train is not an "
                         ".npz or .npy file")
    return given[0]


def _classes(y: np.ndarray) -> int:
    if y.ndim == 2 and y.shape[1] > 1:
        return int(y.shape[1])
    return int(y.max()) + 1


def _grid(family: str, axes: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any]
          ) -> list[ArchCandidate]:
    from devicefit.sdk.search.candidate import grid

    if not axes:
        return [candidate(family, **fixed)]
    return grid(family, axes, **fixed)


def study_name(profile: str, survivors: Sequence[Screened], spec: SearchSpec) -> str:
    """The same survivors, profile, data, epochs and objective give the same name: a rerun
    on the same storage resumes the study."""
    text = json.dumps({"profile": profile, "survivors": [s.candidate.key for s in survivors],
                       "data": [str(spec.train), str(spec.eval_data), str(spec.calibration)],
                       "epochs": spec.epochs, "objective": spec.objective.value,
                       **({"memory": spec.optimize_memory.options()}
                          if spec.optimize_memory else {})},
                      sort_keys=True)
    family = survivors[0].candidate.family.replace(":", "-")
    return f"search-{family}-{profile}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


# --------------------------------------------------------------------------- the study
@dataclass
class _Job:
    """What every trial needs; built once per process."""

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


def _sampler(objective: Objective, seed: int) -> Any:
    import optuna

    if objective is Objective.ACCURACY:
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    return optuna.samplers.NSGAIISampler(seed=seed)


def _open(name: str, settings: SearchSettings, objective: Objective, index: int,
          create: bool) -> Any:
    return open_study(name, settings, None, create, directions=objective.directions,
                      sampler=_sampler(objective, worker_seed(settings, index)))


def _study(job: _Job, settings: SearchSettings, name: str, on_trial: OnTrial | None
           ) -> tuple[list[Trained], bool, bool]:
    """(trials, interrupted, this process writes the winner)."""
    study = _open(name, settings, job.objective, 0, create=True)
    workers = _start_workers(job, settings, name) if settings.jobs > 1 else []
    objective = _Trial(job, settings, on_trial)
    interrupted = False
    try:
        _optimize(study, objective, settings, len(job.survivors))
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        interrupted = True
        for w in workers:
            w.terminate()
            w.join()
    writer = not settings.distributed or writes_winner(study, objective.completed)
    return records(study), interrupted, writer


def _optimize(study: Any, objective: _Trial, settings: SearchSettings, survivors: int) -> None:
    deadline = None if settings.time_budget_s is None else \
        time.monotonic() + settings.time_budget_s
    stop = Stop(settings, survivors, deadline)
    stop.wait_for_others(study)
    if stop.finished(study):
        return
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    study.optimize(objective, timeout=remaining, callbacks=[stop], catch=())


def records(study: Any) -> list[Trained]:
    """Every trained survivor in the study, in trial order."""
    return [Trained.from_dict(t.user_attrs[RECORD])
            for t in study.get_trials(deepcopy=False) if RECORD in t.user_attrs]


class _Trial:
    """Optuna's objective: the sampler picks a survivor; a survivor another trial has (or
    is) training is not trained again, and the next untried one is queued instead."""

    def __init__(self, job: _Job, settings: SearchSettings, on_trial: OnTrial | None) -> None:
        self.job, self.settings, self.on_trial = job, settings, on_trial
        self.worker = worker_id()
        #: Trials this process completed (the writer of the winner is chosen among them).
        self.completed: set[int] = set()

    def __call__(self, trial: Any) -> float | list[float]:
        import optuna

        key = trial.suggest_categorical("candidate", self.job.keys)
        verdict, why = self._decide(trial, key)
        if verdict != BUILD:
            raise optuna.TrialPruned(why)
        record = train_survivor(self.job, self.job.survivor(key), trial.number, self.worker)
        trial.set_user_attr(RECORD, record.to_dict())
        self.completed.add(trial.number)
        if self.on_trial is not None:
            self.on_trial(record)
        values = record.values(self.job.objective)
        return values[0] if len(values) == 1 else values

    def _decide(self, trial: Any, key: str) -> tuple[str, str]:
        """Build, or why not; taken after every lower-numbered running trial decided (fit's
        order), so two workers never train one survivor."""
        trials = settled_before(trial.study, trial.number)
        taken: dict[str, int] = {}
        for t in trials:
            decided = t.user_attrs.get(DECISION)
            if t.number == trial.number or not decided or decided.get("trial") != t.number \
                    or decided["as"] != BUILD:
                continue
            # Trained (also a trial Ctrl-C ended after its record), or being trained.
            if RECORD in t.user_attrs or t.state.name in ("RUNNING", "COMPLETE"):
                taken.setdefault(decided["candidate"]["key"], t.number)
        verdict, why = BUILD, ""
        if key in taken:
            verdict, why = DUPLICATE, f"same as trial {taken[key]}"
            untried = [k for k in self.job.keys if k not in taken]
            if untried:  # the sampler repeats itself on a small space: go on with a new one
                trial.study.enqueue_trial({"candidate": untried[0]},
                                          skip_if_exists=self.settings.distributed)
        elif claimed(trials, trial.number) >= self.settings.max_trials:
            verdict, why = OVER_BUDGET, f"--max-trials {self.settings.max_trials} already " \
                "claimed by running trials"
        trial.set_user_attr(DECISION, {"trial": trial.number, "as": verdict,
                                       "candidate": {"key": key}, "worker": self.worker})
        return verdict, why


def train_survivor(job: _Job, survivor: Screened, number: int, worker: str = "") -> Trained:
    """Build ``survivor`` (the screen's seeded weights), train it, convert it to int8
    calibrated on the data, judge it and measure its accuracy. A candidate the converter or
    the profile cannot take is a failed trial, not the end of the search."""
    from devicefit.sdk.search.screen import SEED

    started = time.perf_counter()
    cand = survivor.candidate
    try:
        return _train(job, cand, number, SEED, started, worker)
    except Exception as exc:
        from devicefit.sdk.fit.search import converter_error

        if not isinstance(exc, DevicefitError) and not converter_error(exc):
            raise  # a bug, not a property of the candidate
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("trial %d (%s) failed: %s", number, cand.label(), message)
        return Trained(number, cand, TrialStage.ERROR, Status.FAIL, worker=worker,
                       seconds=time.perf_counter() - started, note=f"error: {message}")


def _train(job: _Job, cand: ArchCandidate, number: int, seed: int, started: float,
           worker: str) -> Trained:
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

    model = built(builder(cand.family), cand.family, cand.params, seed)
    run = finetune.fine_tune(model, job.data.train, job.epochs, progress=job.progress,
                             learning_rate=LEARNING_RATE)
    loaded = loading.load(model)
    assert job.data.evaluation.y is not None  # checked when the data was read
    float_accuracy = top1_accuracy(loaded.predict(job.data.evaluation.x), job.data.evaluation.y)
    ctx = Context(loaded=loaded, profile=job.profile, train=job.data.train,
                  evaluation=job.data.evaluation, calibration=job.data.calibration,
                  epochs=job.epochs, workdir=job.workdir, float_accuracy=float_accuracy,
                  progress=job.progress)
    tflite, _ = planned(convert_candidate(ctx, ConversionSpec()).tflite, job.profile,
                        cand.label(), job.memory)
    path = job.workdir / f"trial-{number:03d}.tflite"
    write_atomic(path, tflite)
    report = static_check(path, job.profile)
    judged = next((b.value for b in report.budgets if b.name == BudgetName.ARENA), None)
    return Trained(
        number, cand, TrialStage.TRAINED, report.verdict, tuple(report.budgets),
        flash_bytes=report.memory.flash_bytes if report.memory is not None else None,
        arena_bytes=int(judged) if judged is not None
        else report.memory.arena_bytes if report.memory is not None else None,
        latency_ms=report.latency.estimated_device_ms if report.latency else None,
        latency_band_ms=report.latency.band_ms if report.latency else None,
        accuracy=measure_accuracy(ctx, path), float_accuracy=float_accuracy,
        parameters=int(model.count_params()), fine_tune=run,
        seconds=time.perf_counter() - started, path=str(path), worker=worker,
        note="" if report.ok else "the trained file misses a budget the screen passed")


# --------------------------------------------------------------------------- ranking
def ranked(trials: Sequence[Trained]) -> list[Trained]:
    """Fitting trials, best first: accuracy, then smaller arena, flash, trial number."""
    fitting = [t for t in trials if t.fits and t.accuracy is not None]
    return sorted(fitting, key=lambda t: (-(t.accuracy or 0.0), t.arena_bytes or 0,
                                          t.flash_bytes or 0, t.number))


def pareto_front(trials: Sequence[Trained], objective: Objective) -> list[int]:
    """Fitting trials no other fitting trial beats on accuracy and on the objective's cost
    at once (for one objective: the cost is the arena)."""
    metric = objective if objective.cost else Objective.ARENA
    scored = [(t.number, t.accuracy or 0.0, c) for t in ranked(trials)
              if (c := t.cost(metric)) is not None]

    def beats(a: tuple[int, float, float], b: tuple[int, float, float]) -> bool:
        return a[1] >= b[1] and a[2] <= b[2] and (a[1], a[2]) != (b[1], b[2])

    return sorted(n for n, acc, c in scored if not any(beats(o, (n, acc, c)) for o in scored))


def _write_winner(found: Searched, job: _Job, out_path: Path, inputs: list[Any]) -> None:
    """Verify the ranked fitting trials in the runtime; write the first that passes."""
    from devicefit.sdk.fit.export import verify, write_verified

    failed = []
    for record in ranked(found.trials):
        tflite = _metadata(_bytes(job, record), found, record)
        verified = verify(tflite, job.profile)
        if not verified.ok:
            log.warning("trial %d passed the static check but not the real run; trying the "
                        "next candidate", record.number)
            failed.append(record.number)
            continue
        found.verification = write_verified(out_path, tflite, verified, inputs)
        found.chosen, found.output = record.number, str(out_path)
        break
    found.failed_in_runtime = tuple(failed)


def _bytes(job: _Job, record: Trained) -> bytes:
    """The trial's file (trained again, seeded, when another machine trained it and the
    artifact folder is not shared)."""
    path = Path(record.path or "")
    if path.is_file():
        return path.read_bytes()
    if (here := job.workdir / path.name).is_file():
        return here.read_bytes()
    again = train_survivor(job, job.survivor(record.candidate.key), record.number)
    return Path(again.path or "").read_bytes()


def _metadata(tflite: bytes, found: Searched, record: Trained) -> bytes:
    import tensorflow as tf

    from devicefit.sdk.convert import metadata, quantize

    quant = quantize.resolve(found.profile, "int8", None)
    return metadata.embed(tflite, {
        "tool": "devicefit search", "profile": found.profile.name,
        "runtime": found.profile.runtime.name, "scheme": "int8", "io_type": quant.io_type,
        "per_channel": quant.per_channel, "family": record.candidate.family,
        "architecture": record.candidate.params.to_dict(), "candidate": record.candidate.key,
        "trial": record.number, "train_epochs": found.epochs,
        "calibration": {"source": found.calibration_source,
                        "samples": CALIBRATION_SAMPLES, "random": False},
        "converter": f"tensorflow {tf.__version__}"})


# --------------------------------------------------------------------------- --jobs N
@dataclass(frozen=True)
class _WorkerSpec:
    job: _Job
    settings: SearchSettings
    name: str
    index: int


def _start_workers(job: _Job, settings: SearchSettings, name: str) -> list[Any]:
    shared = dataclasses.replace(job, progress=None)
    return spawn_workers(_worker, [_WorkerSpec(shared, settings, name, index)
                                   for index in range(1, settings.jobs)])


def _worker(spec: _WorkerSpec) -> None:
    quiet_worker()
    study = _open(spec.name, spec.settings, spec.job.objective, spec.index, create=False)
    try:
        _optimize(study, _Trial(spec.job, spec.settings, None), spec.settings,
                  len(spec.job.survivors))
    except KeyboardInterrupt:
        pass


__all__ = ["Objective", "SearchSpec", "Searched", "Trained", "pareto_front", "ranked",
           "search_architectures"]
