"""The gate: simulate every model × profile of a project, then judge budgets and regressions.

Each target is one :func:`simulator.simulate.simulate` call, in this process or (``jobs`` >
1) in a pool of worker processes; results come back in project order whatever order they
finish in, so every view is deterministic. A bad model or a runtime failure is kept as that
target's error and the others still run: CI then shows every problem of the change at once.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, cast

from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.infra import signals
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.report.report import Report, build, plain_fields
from devicefit.simulator.simulate import simulate
from devicefit.simulator.target import read_report
from devicefit.simulator.types import BudgetName, MeasureOptions, StrEnum

from .baseline import Baseline, RegressionCheck, compare
from .project import InputShapes, Project, Target

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class TargetStatus(StrEnum):
    """A target's outcome, and the run's verdict: a report's
    :class:`~simulator.report.report.Status` values, plus ERROR for a target that could not be
    simulated."""

    PASS = "pass"
    AT_RISK = "at-risk"
    FAIL = "fail"
    ERROR = "error"


@dataclass(frozen=True)
class Outcome:
    """One model × profile: its report, or the error that stopped it, and its regressions."""

    model: str
    model_path: str
    profile: str
    report: Report | None = None
    error: str | None = None
    regressions: tuple[RegressionCheck, ...] = ()
    #: Why some regression rules were not evaluated (no baseline entry, no figure).
    regression_notes: tuple[str, ...] = ()
    #: The metrics with a regression rule, checked or not.
    rules: tuple[BudgetName, ...] = ()
    overridden: tuple[BudgetName, ...] = ()
    seconds: float = 0.0
    #: False when the report was kept as its :meth:`~simulator.report.report.Report.summary`.
    detailed: bool = True

    @property
    def unchecked_budgets(self) -> dict[str, str]:
        """Budgets the (overridden) profile sets that the report could not judge → why not."""
        return {str(k): v for k, v in self.report.unchecked_budgets.items()} if self.report \
            else {}

    @property
    def status(self) -> TargetStatus:
        """ERROR, FAIL (a budget or a regression), AT_RISK (a budget met by the estimate but
        not by the top of its error band) or PASS."""
        if self.report is None:
            return TargetStatus.ERROR
        if any(not r.ok for r in self.regressions):
            return TargetStatus.FAIL
        return TargetStatus(self.report.status.value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "model_path": self.model_path, "profile": self.profile,
            "status": self.status.value, "seconds": round(self.seconds, 4),
            "overridden_budgets": [b.value for b in self.overridden],
            "budgets": [plain_fields(b) for b in self.report.budgets] if self.report else [],
            "unchecked_budgets": self.unchecked_budgets,
            "regressions": [plain_fields(r) for r in self.regressions],
            "regression_notes": list(self.regression_notes),
            "rules": [r.value for r in self.rules],
            "error": self.error,
            "detailed": self.detailed,
            "report": self.report.to_dict() if self.report else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of :meth:`to_dict` (``status``, ``budgets`` and ``unchecked_budgets``
        are the report's, read back with it)."""
        return cls(data["model"], data["model_path"], data["profile"],
                   read_report(data["report"]) if data["report"] is not None else None,
                   data["error"], tuple(build(RegressionCheck, r) for r in data["regressions"]),
                   tuple(data["regression_notes"]), tuple(BudgetName(r) for r in data["rules"]),
                   tuple(BudgetName(b) for b in data["overridden_budgets"]), data["seconds"],
                   bool(data.get("detailed", True)))


@dataclass(frozen=True)
class BaselineComparison:
    """The regression half of a run: which baseline, how many targets it judged."""

    #: The baseline file (as the project or ``--baseline`` names it); None: none was read.
    path: str | None
    #: True when this run wrote the file instead of comparing with it.
    written: bool
    #: Simulated targets that have regression rules.
    targets: int
    #: Of those, the ones the baseline had figures for (the others are new).
    compared: int
    #: Rules that failed.
    regressions: int


@dataclass(frozen=True)
class CheckResult:
    """A whole run (or a shard's part of one, or the shards merged): every JSON, JUnit,
    Markdown, HTML and table view is of this, and :meth:`from_dict` reads its JSON back."""

    project: str
    outcomes: tuple[Outcome, ...]
    run: bool
    baseline: str | None
    seconds: float
    #: ``check --fail-on-risk``: an at-risk budget fails the gate (exit 1).
    fail_on_risk: bool = False
    #: The baseline file this run wrote (``--update-baseline``, or a project's first run).
    baseline_written: str | None = None

    def comparison(self) -> BaselineComparison:
        """What the regression rules were compared against, for the summaries."""
        ruled = [o for o in self.outcomes if o.rules and o.report is not None]
        return BaselineComparison(
            self.baseline_written or self.baseline, self.baseline_written is not None,
            len(ruled), sum(1 for o in ruled if o.regressions),
            sum(1 for o in ruled for r in o.regressions if not r.ok))

    @property
    def exit_code(self) -> int:
        statuses = {o.status for o in self.outcomes}
        if TargetStatus.ERROR in statuses:
            return EXIT_ERROR
        if TargetStatus.FAIL in statuses or (self.fail_on_risk
                                             and TargetStatus.AT_RISK in statuses):
            return EXIT_FAIL
        return EXIT_PASS

    @property
    def verdict(self) -> TargetStatus:
        code = self.exit_code
        if code == EXIT_PASS and any(o.status == TargetStatus.AT_RISK for o in self.outcomes):
            return TargetStatus.AT_RISK
        return {EXIT_PASS: TargetStatus.PASS, EXIT_FAIL: TargetStatus.FAIL,
                EXIT_ERROR: TargetStatus.ERROR}[code]

    def counts(self) -> dict[TargetStatus, int]:
        out = dict.fromkeys(TargetStatus, 0)
        for o in self.outcomes:
            out[o.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project, "verdict": self.verdict.value, "exit_code": self.exit_code,
            "fail_on_risk": self.fail_on_risk,
            "run": self.run, "baseline": self.baseline,
            "baseline_written": self.baseline_written,
            "comparison": plain_fields(self.comparison()), "seconds": round(self.seconds, 3),
            "summary": {k.value: v for k, v in self.counts().items()},
            "results": [o.to_dict() for o in self.outcomes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        """The inverse of :meth:`to_dict` (a shard's result read back by ``check merge``);
        ``KeyError``/``TypeError``/``ValueError`` if malformed."""
        return cls(data["project"], tuple(Outcome.from_dict(o) for o in data["results"]),
                   bool(data["run"]), data["baseline"], float(data["seconds"]),
                   bool(data.get("fail_on_risk", False)), data.get("baseline_written"))


#: One target's report, or its error, and the seconds it took.
_Result = tuple[Report | None, str | None, float]


def _simulate(model_path: str, profile: Profile, run: MeasureOptions | None, probe: bool,
              input_shapes: InputShapes = ()) -> _Result:
    """One target; module level so a worker process can run it. Only user errors are caught."""
    start = time.perf_counter()
    try:
        report = simulate(model_path, profile, run=run, probe=probe, input_shapes=input_shapes)
    except DevicefitError as exc:
        return None, str(exc), time.perf_counter() - start
    return report, None, time.perf_counter() - start


def _simulate_in_worker(model_path: str, profile: Profile, run: MeasureOptions | None,
                        probe: bool, input_shapes: InputShapes = ()) -> _Result:
    with signals.worker_task():
        return _simulate(model_path, profile, run, probe, input_shapes)


def _results(targets: tuple[Target, ...], run: MeasureOptions | None, probe: bool, jobs: int
             ) -> Iterator[tuple[int, _Result]]:
    """(index, result) in completion order.

    With a pool, a stopping signal is noted (:func:`~simulator.infra.signals.noted`), not
    raised wherever the pool's code happens to be, and the pool is stopped from here; the
    signal is then raised as usual (the caller's outputs stay all or nothing)."""
    if jobs <= 1 or len(targets) <= 1:
        for i, t in enumerate(targets):
            yield i, _simulate(str(t.model_path), t.profile, run, probe, t.input_shapes)
        return
    # Not fork: the CLI's progress bar runs a thread, and forking a threaded process can
    # copy a held lock (logging, rich) into the worker. The fork server imports the simulator
    # once and forks the workers from there, so they start almost as fast as with fork.
    if "forkserver" in multiprocessing.get_all_start_methods():
        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload([__name__])
        context: BaseContext = forkserver
    else:
        context = multiprocessing.get_context("spawn")
    with signals.noted() as note:
        _start_resource_tracker()
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(targets)), mp_context=context,
                                   initializer=signals.install_in_worker)
        futures: dict[Future[_Result], int] = {}
        try:
            for i, t in enumerate(targets):
                if note.signum is not None:
                    break
                futures[pool.submit(_simulate_in_worker, str(t.model_path), t.profile, run,
                                    probe, t.input_shapes)] = i
            pending = set(futures)
            while note.signum is None and pending:
                # A timeout, to look at the note: nothing can wake the wait safely from a
                # signal handler (it would take the futures' locks the wait holds).
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    yield futures[f], f.result()
            if note.signum is None:
                pool.shutdown()
            if note.signum is not None:  # before the last target, or while the pool ended
                raise signals.interruption(note.signum)
        except BaseException as exc:
            # A signal, a bug in one target, or the caller stopped reading: do not wait for
            # the queue to drain, and stop the running targets (their handler kills their
            # --run child and temp files).
            stopped_by = note.signum or _signal_of_workers(pool, exc)
            _stop(pool)
            if stopped_by is not None and not isinstance(exc, (KeyboardInterrupt,
                                                               GeneratorExit)):
                raise signals.interruption(stopped_by) from None
            raise


#: How often the pool's caller looks for a signal while it waits (s).
POLL_S = 0.1
#: How long a stopped worker gets to clean its task up (kill its --run child, remove its temp
#: folder) before it is killed (s).
STOP_GRACE_S = 10.0


def _signal_of_workers(pool: ProcessPoolExecutor, exc: BaseException) -> int | None:
    """The stopping signal the workers died of, when that broke the pool (it went to the
    workers, or to the process group and this process has not seen it yet); None when one
    died of anything else (killed for memory: the error is the pool's)."""
    if not isinstance(exc, BrokenProcessPool):
        return None
    codes = {c for p in (pool._processes or {}).values() if (c := p.exitcode) is not None}
    by_code = {c: s for s in signals.STOPPING for c in (128 + s, -s)}
    if not codes or not codes <= by_code.keys():
        return None
    # The pool itself sends SIGTERM to the rest once one died: another signal came first.
    found = {int(by_code[c]) for c in codes}
    return min(found - {signal.SIGTERM} or found)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool without waiting for its work: cancel what has not started, stop the
    workers (each cleans its task up) and wait for them, killing one that does not end, then
    for the pool's thread, so that nothing is left for the interpreter's exit to wait on."""
    workers = list((pool._processes or {}).values())  # shutdown() forgets them
    # (typeshed types the thread as its wake-up pipe)
    manager = cast("threading.Thread | None", pool._executor_manager_thread)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        if process.exitcode is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in workers:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join()
    if manager is not None:
        # With every worker gone the thread sees a broken pool and ends.
        manager.join(STOP_GRACE_S)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker deaf to SIGHUP, writing to fd 2 (the CLI's
    native log).

    The tracker ignores SIGINT and SIGTERM but not SIGHUP: a closed terminal killed it with
    the process group, and the pool's shutdown then started a new one that knew none of the
    pool's semaphores and printed a ``KeyError`` traceback for each. A signal blocked while
    it starts stays blocked in it (the mask survives fork and exec); the tracker still ends
    when the last process holding its pipe does. It inherits ``sys.stderr``'s descriptor,
    which the CLI points at the terminal: what it prints belongs in the log.
    """
    shown = sys.stderr
    sys.stderr = sys.__stderr__
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sys.stderr = shown


def run_check(project: Project, *, run: MeasureOptions | None = None, probe: bool = True,
              jobs: int = 1, baseline: Baseline | None = None,
              baseline_path: Path | None = None,
              on_done: Callable[[Outcome], None] | None = None,
              fail_on_risk: bool = False, passing_details: bool = True) -> CheckResult:
    """Simulate every target of ``project`` and judge it; ``on_done`` sees each as it ends.

    ``run``: also run each model in its profile's runtime, so (None: the static half
    only); ``probe``: ask the runtimes about op support (see
    :func:`~simulator.simulate.simulate`). ``baseline`` (from
    :func:`~sdk.check.baseline.load_baseline`) turns the targets' regression rules into
    checks; without it the rules are not evaluated. Without ``passing_details`` a passing
    target keeps only its report's summary.
    """
    start = time.perf_counter()
    outcomes: list[Outcome | None] = [None] * len(project.targets)
    for i, (report, error, seconds) in _results(project.targets, run, probe, jobs):
        t = project.targets[i]
        regressions, notes = _regressions(t, report, baseline)
        o = Outcome(t.model, str(t.model_path), t.profile.name, report, error,
                    tuple(regressions), tuple(notes), tuple(r.metric for r in t.rules),
                    t.overridden, seconds)
        if report is not None and not passing_details and o.status == TargetStatus.PASS:
            o = dataclasses.replace(o, report=report.summary(), detailed=False)
        outcomes[i] = o
        if on_done is not None:
            on_done(o)
    return CheckResult(str(project.path), tuple(o for o in outcomes if o is not None),
                       run is not None,
                       str(baseline_path) if baseline_path else None,
                       time.perf_counter() - start, fail_on_risk)


def _regressions(t: Target, report: Report | None, baseline: Baseline | None
                 ) -> tuple[list[RegressionCheck], list[str]]:
    """The target's regression checks, and why rules were not checked."""
    if report is None or not t.rules:
        return [], []
    if baseline is None:
        return [], ["no baseline given, regression rules not checked"]
    entry = baseline.entry(t.model, t.profile.name)
    if entry is None:
        return [], [f"'{t.model}' on '{t.profile.name}' is not in the baseline yet, "
                    f"regression rules not checked"]
    return compare(t.rules, entry, report)
