"""Running a study: this process's trials, the worker processes of ``--jobs``, stopping.

:func:`run_study` opens (or resumes) the study, starts ``jobs - 1`` worker processes that
join it, runs trials here too, and returns every record once the study is finished —
``--max-trials`` candidates judged, every candidate judged, ``--time-budget`` used up — or
Ctrl-C ended it (the records so far are kept: the command writes the best of them).
Each trial (:class:`Run`) proposes a candidate, decides (:func:`sdk.study.decisions.decide`),
builds and judges what is new with the command's :class:`~sdk.study.trials.Trials`, and
keeps the record in the study and beside the candidate's model.

A signal (Ctrl-C, SIGTERM, SIGHUP) is taken inside a trial or between trials, never inside
optuna's own bookkeeping (a trial's creation, its result: the signals are held there), so no
trial is left running in the storage: one it cuts short is marked
:data:`~sdk.study.decisions.INTERRUPTED` in every process, the ``--jobs`` workers' too, and
the result says which (:class:`Stopped`).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic

from devicefit.sdk.console import quiet_conversions
from devicefit.sdk.study.decisions import (
    BUILD,
    DUPLICATE,
    INTERRUPTED,
    OVER_BUDGET,
    POLL_S,
    RECORD,
    SKIPPED,
    Unshown,
    claimed,
    decide,
    fail_stale,
    records,
    unshown,
    writes_winner,
)
from devicefit.sdk.study.record import C, P, TrialRecord, TrialStage
from devicefit.sdk.study.storage import SearchSettings, open_study, worker_id, worker_seed
from devicefit.sdk.study.trials import Trials
from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra import jsonout, signals
from devicefit.simulator.infra.fileio import write_atomic

log = logging.getLogger(__name__)

#: Proposals allowed per distinct candidate before the study gives up finding new ones.
PROPOSALS_PER_TRIAL = 20
#: How long a ``--jobs`` worker may take to mark the trial a signal cut short and exit
#: before it is killed (it stops within a second: a safety net, not a wait).
WORKER_EXIT_S = 30.0

OnTrial = Callable[[TrialRecord[C, P]], None]


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
        proposals = sum(1 for t in trials if INTERRUPTED not in t.user_attrs)
        return judged >= self.settings.max_trials or len(stages) >= self.space_size or \
            proposals >= PROPOSALS_PER_TRIAL * self.settings.max_trials or \
            self._past_deadline()

    def wait_for_others(self, study: Any) -> None:
        """Return once this worker has something to do or the study is finished."""
        while not self.finished(study):
            trials = study.get_trials(deepcopy=False)
            if claimed(trials) < self.settings.max_trials or \
                    any(t.state.name == "WAITING" for t in trials):
                return
            fail_stale(study)
            time.sleep(POLL_S)

    def __call__(self, study: Any, trial: Any) -> None:
        with signals.delivered():  # between trials: a signal held since the last one stops here
            self.wait_for_others(study)
            if self.finished(study):
                study.stop()


class Run(Generic[C, P]):
    """One process's share of a study, and optuna's objective in it."""

    def __init__(self, study: Any, trials: Trials[C, P], settings: SearchSettings,
                 on_trial: OnTrial[C, P] | None = None) -> None:
        self.study, self.trials, self.settings, self.on_trial = study, trials, settings, on_trial
        self.worker = worker_id()
        deadline = None if settings.time_budget_s is None else \
            time.monotonic() + settings.time_budget_s
        self.stop = Stop(settings, trials.size, deadline)
        #: Trials this process completed (the writer of the winner is chosen among them).
        self.completed: set[int] = set()
        #: The candidate of the trial running here, once proposed (named if a signal cuts
        #: the trial short), and whether this trial builds it (queued again if cut short).
        self._proposed: C | None = None
        self._building = False
        #: The first stopping signal taken while this process ran trials (:meth:`_noting`).
        self.signalled: int | None = None

    def optimize(self, n_trials: int | None = None) -> None:
        """Run trials until the study is finished (or ``n_trials`` of them)."""
        import optuna

        self.stop.wait_for_others(self.study)
        if self.stop.finished(self.study):
            return
        remaining = None if self.stop.deadline is None else \
            max(self.stop.deadline - time.monotonic(), 0.0)
        verbosity = optuna.logging.get_verbosity()
        try:
            # Held but where a trial works (__call__) or waits (Stop): a signal inside
            # optuna's creation of a trial or its telling would leave the trial RUNNING in
            # the storage for good, and a resumed study waiting for it.
            with signals.deferred(), self._noting():
                self.study.optimize(self, n_trials=n_trials, timeout=remaining,
                                    callbacks=[self.stop], catch=())
        finally:
            optuna.logging.set_verbosity(verbosity)
        self._raise_lost()  # after the last trial, in the Stop callback's wait

    @contextmanager
    def _noting(self) -> Iterator[None]:
        """Note the first stopping signal before its handler raises: native code that calls
        back into Python (TensorFlow's eager execution, building a list of results) can
        lose the handler's KeyboardInterrupt and raise a SystemError instead, or nothing at
        all, and the signal must stop the trial all the same (:meth:`__call__`). Off the
        main thread nothing can be installed, and a handler that is not Python's (the
        default action, ignored) has nothing to lose."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.getsignal(sig) for sig in signals.STOPPING}
        hook = sys.excepthook
        for sig, handler in old.items():
            if callable(handler):
                signal.signal(sig, functools.partial(self._note, handler))
        try:
            yield
        finally:
            sys.excepthook = hook
            for sig, handler in old.items():
                if callable(handler):
                    signal.signal(sig, handler)

    def _note(self, handler: Callable[[int, Any], Any], signum: int, frame: Any) -> None:
        if signals.held(signum):  # optuna's bookkeeping: it comes where the trials take it
            return
        if self.signalled is None:
            self.signalled = signum
            # Native code that loses the interrupt may print the error it got instead
            # through sys.excepthook (PyErr_Print; seen: TensorFlow's nest, a SystemError
            # traceback); the command ends by the signal, said in its one line.
            sys.excepthook = _quiet
        handler(signum, frame)

    def _raise_lost(self) -> None:
        """Raise the interrupt of a signal taken whose exception native code swallowed."""
        if self.signalled is not None:
            raise signals.exception_for(self.signalled)

    def records(self) -> list[TrialRecord[C, P]]:
        return records(self.study, self.trials.read)

    def __call__(self, trial: Any) -> float | list[float]:
        self._proposed, self._building = None, False
        try:
            with signals.delivered():
                self._raise_lost()  # since the last trial
                record = self._judge(trial)
                self._raise_lost()  # in this one: its record cannot be trusted
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP as signals.Terminated
            self._cut_short(trial, exc)
            raise
        except Exception:
            if self.signalled is None:
                raise
            # The signal's exception was lost in native code (_noting) and another raised.
            lost = signals.exception_for(self.signalled)
            self._cut_short(trial, lost)
            raise lost from None
        # The signals are held again: the record is kept whole, in the study and on disk.
        _save(record)
        trial.set_user_attr(RECORD, record.to_dict())
        self.completed.add(trial.number)
        if self.on_trial is not None:
            self.on_trial(record)
        return self.trials.value(record)

    def _judge(self, trial: Any) -> TrialRecord[C, P]:
        """Propose, decide, and build and judge (or skip) the trial's candidate."""
        import optuna

        candidate = self._proposed = self.trials.suggest(trial)
        verdict, why = decide(trial, candidate, self.trials, self.settings, self.worker)
        self._building = verdict == BUILD
        if verdict in (DUPLICATE, OVER_BUDGET):
            raise optuna.TrialPruned(why)
        skipped = self.trials.skip(candidate, trial.number, self.records()) \
            if verdict == SKIPPED else None
        return replace(skipped or self._evaluate(candidate, trial.number), worker=self.worker)

    def _cut_short(self, trial: Any, exc: KeyboardInterrupt) -> None:
        """Mark ``trial`` interrupted before optuna fails it and re-raises ``exc``; the
        candidate it was building is queued again, first for whichever process (here on
        a rerun, or another worker of a shared study) takes the next trial."""
        import optuna

        label = self._proposed.label() if self._proposed is not None else ""
        trial.set_user_attr(INTERRUPTED, {"by": signal_name(exc), "worker": self.worker,
                                          "candidate": label})
        if self._building:
            # Not skip_if_exists: this very trial holds the same parameters.
            self.study.enqueue_trial(trial.params, user_attrs={"resumes": trial.number})
        # optuna logs a failed trial with the interrupt's traceback: the command says what
        # was stopped in one line instead (optimize restores the verbosity).
        optuna.logging.set_verbosity(optuna.logging.ERROR)

    def _evaluate(self, candidate: C, number: int) -> TrialRecord[C, P]:
        """The candidate's record; one the converter or the profile cannot handle (e.g. no
        cost-model entry for int16 ops) is a failed candidate, not the end of the study."""
        started = time.perf_counter()
        try:
            return self.trials.evaluate(candidate, number)
        except Exception as exc:
            if self.signalled is not None:  # not the candidate's failure: see _noting
                raise
            if not isinstance(exc, DevicefitError) and not _converter_error(exc):
                raise  # a bug, not a property of the candidate
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.info("trial %d (%s) failed: %s", number, candidate.label(), message)
            return replace(self.trials.failed(candidate, number, f"error: {message}"),
                           seconds=time.perf_counter() - started)


def _converter_error(exc: Exception) -> bool:
    from tensorflow.lite.python.convert_phase import ConverterError

    return isinstance(exc, ConverterError)


def _save(record: TrialRecord[C, P]) -> None:
    """Next to the candidate's model, its record: a shared artifact folder then holds
    everything needed to export the winner on any machine."""
    if record.path is not None:
        write_atomic(Path(record.path).with_suffix(".json"),
                     jsonout.dumps(record.to_dict(), indent=2) + "\n")


def signal_name(exc: KeyboardInterrupt) -> str:
    """The signal that raised ``exc``: SIGTERM or SIGHUP as :class:`signals.Terminated`,
    Ctrl-C (SIGINT) as a plain KeyboardInterrupt."""
    signum = exc.signum if isinstance(exc, signals.Terminated) else signal.SIGINT
    return signal.Signals(signum).name


def _quiet(*_: object) -> None:
    """An excepthook that prints nothing (:meth:`Run._note`)."""


@dataclass(frozen=True)
class CutShort:
    """A trial a signal cut short: no record, and a resumed study builds its candidate again."""

    number: int
    #: The candidate's label; empty when the signal came before it was proposed.
    candidate: str = ""


@dataclass(frozen=True)
class Stopped:
    """How a signal stopped a study: its name and the trials it cut short, in every process
    of this run (``--jobs`` workers included)."""

    by: str
    trials: tuple[CutShort, ...] = ()

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a process that a signal ends reports it."""
        return 128 + int(signal.Signals[self.by])


@dataclass(frozen=True)
class StudyResult(Generic[C, P]):
    records: list[TrialRecord[C, P]]
    #: The signal that ended the study early (the records so far are kept), or None.
    stopped: Stopped | None
    seconds: float
    study_name: str
    storage: str | None
    #: This process should write the winner: it is alone, or it completed the study's last
    #: trial and no trial is left running anywhere (so exactly one worker writes it).
    writer: bool = True
    worker: str = ""
    #: The trial numbers without a record (a repeated proposal, a trial cut short): shown
    #: with the records, so numbers that skip say why.
    unshown: tuple[Unshown, ...] = ()


def run_study(trials: Trials[C, P], settings: SearchSettings, name: str, *,
              workers: Callable[[], Trials[C, P]] | None = None,
              first: Callable[[Run[C, P]], None] | None = None,
              on_trial: OnTrial[C, P] | None = None) -> StudyResult[C, P]:
    """Run the study ``name``; Ctrl-C ends it early with what has been found so far.

    With ``settings.jobs`` > 1, ``jobs - 1`` worker processes run trials next to this one,
    each with the :class:`Trials` that ``workers()`` makes there (a picklable callable: the
    processes are spawned). ``first`` runs this process's first trials (e.g. queued probes)
    before the sampler proposes the rest. On a server database the same call on other
    machines joins the study.
    """
    started = time.monotonic()
    study = open_study(name, settings, worker_seed(settings, 0), create=True,
                       directions=trials.directions)
    processes = _start_workers(workers, settings, name) if settings.jobs > 1 else []
    run = Run(study, trials, settings, on_trial)
    stopped = None
    try:
        if first is not None:
            first(run)
        run.optimize()
        for process in processes:
            process.join()
    except KeyboardInterrupt as exc:
        with signals.deferred():  # the workers mark their trials before they are read
            _stop_workers(processes)
        ours = {run.worker, *(worker_id(process.pid) for process in processes)}
        stopped = Stopped(signal_name(exc), cut_short(study, ours))
    writer = not settings.distributed or writes_winner(study, run.completed)
    return StudyResult(run.records(), stopped, time.monotonic() - started, name,
                       settings.storage, writer=writer, worker=run.worker,
                       unshown=unshown(study))


def cut_short(study: Any, workers: set[str]) -> tuple[CutShort, ...]:
    """The trials a signal cut short in the processes ``workers`` (host:pid)."""
    return tuple(CutShort(t.number, mark.get("candidate", ""))
                 for t in study.get_trials(deepcopy=False)
                 if (mark := t.user_attrs.get(INTERRUPTED)) and mark.get("worker") in workers)


# --------------------------------------------------------------------------- --jobs N
@dataclass(frozen=True)
class _WorkerSpec(Generic[C, P]):
    make: Callable[[], Trials[C, P]]
    settings: SearchSettings
    name: str
    index: int


def _start_workers(make: Callable[[], Trials[C, P]] | None, settings: SearchSettings,
                   name: str) -> list[Any]:
    """A daemon process per extra job, spawned: TensorFlow does not survive fork."""
    if make is None:
        raise ValueError("--jobs > 1 needs a way to make the workers' trials")
    from multiprocessing import resource_tracker

    spawn = multiprocessing.get_context("spawn")
    # Started on the first spawn otherwise, and it lets SIGINT and SIGTERM through again
    # as it starts, which would undo the hold below.
    resource_tracker.ensure_running()
    processes = []
    for index in range(1, settings.jobs):
        process = spawn.Process(target=_worker, args=(_WorkerSpec(make, settings, name, index),),
                                daemon=True)
        # Started with the stopping signals held (a new process inherits the mask): a Ctrl-C
        # to the terminal's group while it imports would print a KeyboardInterrupt
        # traceback; _worker lets them in once it handles them.
        with signals.deferred():
            process.start()
        processes.append(process)
    return processes


def _stop_workers(processes: list[Any]) -> None:
    """SIGTERM each worker (it marks the trial it cuts short, then exits), wait for it."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(WORKER_EXIT_S)
        if process.is_alive():
            log.warning("worker %d did not stop in %.0f s: killed", process.pid, WORKER_EXIT_S)
            process.kill()
            process.join()


def _worker(spec: _WorkerSpec[C, P]) -> None:
    """A worker process: quiet as the CLI is, its trials made here, its share of the study.

    It dies with the command: a signal between trials (or while it starts) ends it at once,
    one inside a trial after the trial is marked interrupted (:func:`signals.worker_task`),
    with status 128 + the signal and no word (the command says what was stopped).
    """
    signals.install_in_worker()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(signals.STOPPING))
    quiet_conversions()
    trials = spec.make()
    study = open_study(spec.name, spec.settings, worker_seed(spec.settings, spec.index),
                       create=False, directions=trials.directions)
    with signals.worker_task():
        Run(study, trials, spec.settings).optimize()
