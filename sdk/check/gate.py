"""The gate: simulate every model × profile of a project, then judge budgets and regressions.

Each target is one :func:`simulator.simulate.simulate` call, in this process or (``jobs`` >
1) in a pool of worker processes; results come back in project order whatever order they
finish in, so every view is deterministic. A bad model or a runtime failure is kept as that
target's error and the others still run: CI then shows every problem of the change at once.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from devicefit.simulator import signals
from devicefit.simulator.errors import DevicefitError
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.report import Report
from devicefit.simulator.simulate import simulate
from devicefit.simulator.views.json import read_report

from .baseline import RegressionCheck, compare
from .project import InputShapes, Project, Target

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


@dataclass
class Outcome:
    """One model × profile: its report, or the error that stopped it, and its regressions."""

    model: str
    model_path: str
    profile: str
    report: Report | None = None
    error: str | None = None
    regressions: list[RegressionCheck] = field(default_factory=list)
    #: Why some regression rules were not evaluated (no baseline entry, no figure).
    regression_notes: list[str] = field(default_factory=list)
    #: The metrics with a regression rule, checked or not.
    rules: list[str] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: False when the report was kept as its :meth:`~simulator.report.Report.summary`.
    detailed: bool = True

    @property
    def unchecked_budgets(self) -> dict[str, str]:
        """Budgets the (overridden) profile sets that the report could not judge → why not."""
        return {str(k): v for k, v in self.report.unchecked_budgets.items()} if self.report \
            else {}

    @property
    def status(self) -> str:
        """``"error"``, ``"fail"`` (a budget or a regression), ``"at-risk"`` (a budget met
        by the estimate but not by the top of its error band) or ``"pass"``."""
        if self.report is None:
            return "error"
        if any(not r.ok for r in self.regressions):
            return "fail"
        return self.report.status.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "model_path": self.model_path, "profile": self.profile,
            "status": self.status, "seconds": round(self.seconds, 4),
            "overridden_budgets": self.overridden,
            "budgets": [asdict(b) for b in self.report.budgets] if self.report else [],
            "unchecked_budgets": self.unchecked_budgets,
            "regressions": [asdict(r) for r in self.regressions],
            "regression_notes": self.regression_notes,
            "rules": self.rules,
            "error": self.error,
            "detailed": self.detailed,
            "report": self.report.to_dict() if self.report else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of :meth:`to_dict` (a shard's result read back by ``check merge``)."""
        return cls(data["model"], data["model_path"], data["profile"],
                   read_report(data["report"]) if data["report"] is not None else None,
                   data["error"], [RegressionCheck(**r) for r in data["regressions"]],
                   list(data["regression_notes"]),
                   list(data["rules"]), list(data["overridden_budgets"]), data["seconds"],
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


@dataclass
class CheckResult:
    project: str
    outcomes: list[Outcome]
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
        if "error" in statuses:
            return EXIT_ERROR
        if "fail" in statuses or (self.fail_on_risk and "at-risk" in statuses):
            return EXIT_FAIL
        return EXIT_PASS

    @property
    def verdict(self) -> str:
        code = self.exit_code
        if code == EXIT_PASS and any(o.status == "at-risk" for o in self.outcomes):
            return "at-risk"
        return {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_ERROR: "error"}[code]

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "at-risk": 0, "fail": 0, "error": 0}
        for o in self.outcomes:
            out[o.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project, "verdict": self.verdict, "exit_code": self.exit_code,
            "fail_on_risk": self.fail_on_risk,
            "run": self.run, "baseline": self.baseline,
            "baseline_written": self.baseline_written,
            "comparison": asdict(self.comparison()), "seconds": round(self.seconds, 3),
            "summary": self.counts(), "results": [o.to_dict() for o in self.outcomes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(data["project"], [Outcome.from_dict(o) for o in data["results"]],
                   bool(data["run"]), data["baseline"], float(data["seconds"]),
                   bool(data.get("fail_on_risk", False)), data.get("baseline_written"))


def _simulate(model_path: str, profile: Profile, run: bool, options: dict[str, Any],
              input_shapes: InputShapes = ()) -> tuple[Report | None, str | None, float]:
    """One target; module level so a worker process can run it. Only user errors are caught."""
    start = time.perf_counter()
    try:
        report = simulate(model_path, profile, run=run, input_shapes=input_shapes, **options)
    except DevicefitError as exc:
        return None, str(exc), time.perf_counter() - start
    return report, None, time.perf_counter() - start


def _simulate_in_worker(model_path: str, profile: Profile, run: bool, options: dict[str, Any],
                        input_shapes: InputShapes = ()
                        ) -> tuple[Report | None, str | None, float]:
    with signals.worker_task():
        return _simulate(model_path, profile, run, options, input_shapes)


def _results(targets: tuple[Target, ...], run: bool, jobs: int,
             options: dict[str, Any]) -> Iterator[tuple[int, tuple[Report | None, str | None,
                                                                    float]]]:
    """(index, result) in completion order."""
    if jobs <= 1 or len(targets) <= 1:
        for i, t in enumerate(targets):
            yield i, _simulate(str(t.model_path), t.profile, run, options, t.input_shapes)
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
    _start_resource_tracker()
    with ProcessPoolExecutor(max_workers=min(jobs, len(targets)), mp_context=context,
                             initializer=signals.install_in_worker) as pool:
        futures = {pool.submit(_simulate_in_worker, str(t.model_path), t.profile, run, options,
                               t.input_shapes): i
                   for i, t in enumerate(targets)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    yield futures[f], f.result()
        except BaseException:
            # A bug in one target, Ctrl-C or SIGTERM: do not wait for the queue to drain, and
            # stop the running targets (their handler kills their --run child and temp files).
            # The workers are taken first: shutdown() forgets them.
            workers = list((pool._processes or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for process in workers:
                process.terminate()
            raise


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


def run_check(project: Project, *, run: bool = False, jobs: int = 1,
              baseline: dict[str, dict[str, dict[str, Any]]] | None = None,
              baseline_path: Path | None = None, run_options: dict[str, Any] | None = None,
              on_done: Callable[[Outcome], None] | None = None,
              fail_on_risk: bool = False, passing_details: bool = True) -> CheckResult:
    """Simulate every target of ``project`` and judge it; ``on_done`` sees each as it ends.

    ``baseline`` (from :func:`~sdk.check.baseline.load_baseline`) turns the targets'
    regression rules into checks; without it the rules are not evaluated. Without
    ``passing_details`` a passing target keeps only its report's summary.
    """
    start = time.perf_counter()
    outcomes: list[Outcome | None] = [None] * len(project.targets)
    for i, (report, error, seconds) in _results(project.targets, run, jobs, run_options or {}):
        t = project.targets[i]
        o = Outcome(t.model, str(t.model_path), t.profile.name, report, error,
                    rules=[r.metric for r in t.rules], overridden=list(t.overridden),
                    seconds=seconds)
        if report is not None and t.rules:
            if baseline is None:
                o.regression_notes.append("no baseline given, regression rules not checked")
            elif t.profile.name not in baseline.get(t.model, {}):
                o.regression_notes.append(
                    f"'{t.model}' on '{t.profile.name}' is not in the baseline yet, "
                    f"regression rules not checked")
            else:
                o.regressions, o.regression_notes = compare(
                    t.rules, baseline[t.model][t.profile.name], report)
        if report is not None and not passing_details and o.status == "pass":
            o.report, o.detailed = report.summary(), False
        outcomes[i] = o
        if on_done is not None:
            on_done(o)
    return CheckResult(str(project.path), [o for o in outcomes if o is not None], run,
                       str(baseline_path) if baseline_path else None,
                       time.perf_counter() - start, fail_on_risk)
