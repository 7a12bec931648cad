"""Trial-order decisions: which proposals are built when several processes share a study.

Every trial's result lives in the study (a ``record`` user attribute), so one process,
``--jobs N`` processes on one machine and several machines sharing ``--storage`` all read
what the others found from the storage. They must never build the same candidate twice nor
overrun ``--max-trials``. Optuna hands out queued trials atomically but lets two samplers
propose the same point, so each trial *decides* (build, duplicate, skipped, over budget)
right after its proposal and records the decision in the storage; a trial waits for every
lower-numbered running trial to decide first, so the decisions are taken one at a time in
trial order on every machine.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devicefit.sdk.study.record import C, P, TrialRecord
from devicefit.sdk.study.storage import SearchSettings
from devicefit.sdk.study.trials import Trials

#: User attribute: the trial's :class:`~sdk.study.record.TrialRecord` as JSON.
RECORD = "record"
#: User attribute: how a trial was decided, ``{"trial", "as", "candidate", "worker"}``.
#: Keyed by trial number because optuna's retry copies the user attributes of the dead trial.
DECISION = "decision"
#: User attribute of a trial a signal cut short, ``{"by", "worker", "candidate"}`` (the
#: signal's name, the process, the candidate's label): optuna records it failed; nothing here
#: counts it (not taken, not claimed, no retry used up), and the candidate it was building
#: is queued again (a trial whose ``resumes`` attribute names it), so a resumed study
#: builds it first.
INTERRUPTED = "interrupted"
BUILD, DUPLICATE, SKIPPED, OVER_BUDGET = "build", "duplicate", "skipped", "over budget"
#: How often a waiting worker looks at the storage again.
POLL_S = 0.2


def decide(trial: Any, candidate: C, trials: Trials[C, P], settings: SearchSettings,
           worker: str) -> tuple[str, str]:
    """(verdict, why) for ``trial``'s proposal, recorded in the study; taken after every
    lower-numbered running trial decided."""
    settled = settled_before(trial.study, trial.number)
    done = [trials.read(t.user_attrs[RECORD]) for t in settled if RECORD in t.user_attrs]
    taken = _taken(settled, trial.number, done, trials)
    described = trials.describe(candidate)
    verdict, why = BUILD, ""
    if (number := taken.get(_key(described))) is not None:
        verdict, why = DUPLICATE, f"same as trial {number}"
        trial.set_user_attr("duplicate_of", number)
        # The sampler repeats itself on a small space: go on with a candidate not taken.
        untried = trials.untried(lambda c: _key(trials.describe(c)) in taken)
        if untried is not None:
            trial.study.enqueue_trial(untried, skip_if_exists=settings.distributed)
    elif trials.skip(candidate, trial.number, done) is not None:
        verdict = SKIPPED
    elif claimed(settled, trial.number) >= settings.max_trials:
        verdict, why = OVER_BUDGET, f"--max-trials {settings.max_trials} already " \
            "claimed by running trials"
    trial.set_user_attr(DECISION, {"trial": trial.number, "as": verdict,
                                   "candidate": described, "worker": worker})
    return verdict, why


def _key(described: Mapping[str, Any]) -> str:
    """A described candidate as one string, the same after a trip through the storage."""
    return json.dumps(described, sort_keys=True)


def _taken(settled: list[Any], number: int, done: list[TrialRecord[C, P]],
           trials: Trials[C, P]) -> dict[str, int]:
    """Candidate (:func:`_key`) → the trial that built, is building or skipped it. A record
    also counts: a study resumed from before decisions were kept, or a trial Ctrl-C ended
    after its record."""
    taken: dict[str, int] = {}
    for t in settled:
        decision = _decision(t)
        if t.number != number and decision and decision["as"] in (BUILD, SKIPPED) and \
                t.state.name in ("RUNNING", "COMPLETE"):
            taken.setdefault(_key(decision["candidate"]), t.number)
    for r in done:
        taken.setdefault(_key(trials.describe(r.candidate)), r.number)
    return taken


def _decision(trial: Any) -> dict[str, Any] | None:
    """The trial's own decision (a retried trial carries its dead original's: ignored)."""
    decision: dict[str, Any] | None = trial.user_attrs.get(DECISION)
    return decision if decision and decision.get("trial") == trial.number else None


def settled_before(study: Any, number: int) -> list[Any]:
    """The study's trials once no running trial numbered below ``number`` is undecided.

    Deciding takes milliseconds; a worker that died before deciding is failed by its
    missing heartbeats, which :func:`fail_stale` notices while this one waits.
    """
    import optuna

    while True:
        trials: list[Any] = study.get_trials(deepcopy=False)
        if not any(t.state == optuna.trial.TrialState.RUNNING and t.number < number
                   and _decision(t) is None for t in trials):
            return trials
        fail_stale(study)
        time.sleep(POLL_S)


def fail_stale(study: Any) -> None:
    """Fail the running trials whose workers stopped beating (optuna then retries them)."""
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


@dataclass(frozen=True)
class Unshown:
    """A trial number the study used without a record to show: why the numbers skip it."""

    number: int
    why: str


def unshown(study: Any) -> tuple[Unshown, ...]:
    """The finished trials that have no record (optuna numbers every proposal, the study
    keeps a record only of the candidates it judged), each with the reason in words."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if RECORD in t.user_attrs or t.state.name in ("RUNNING", "WAITING"):
            continue
        decision, mark = _decision(t) or {}, t.user_attrs.get(INTERRUPTED)
        if mark:
            why = f"cut short by {mark.get('by', 'a signal')} (its candidate queued again)"
        elif decision.get("as") == DUPLICATE:
            why = "the sampler proposed a candidate already taken again (pruned)"
        elif decision.get("as") == OVER_BUDGET:
            why = "proposed once --max-trials was taken by running trials"
        else:
            why = "its worker stopped before it was judged (retried as a later trial)"
        out.append(Unshown(t.number, why))
    return tuple(out)


def records(study: Any, read: Callable[[Mapping[str, Any]], TrialRecord[C, P]]
            ) -> list[TrialRecord[C, P]]:
    """Every finished candidate in the study, in trial order."""
    return [read(t.user_attrs[RECORD]) for t in study.get_trials(deepcopy=False)
            if RECORD in t.user_attrs]


def writes_winner(study: Any, mine: set[int]) -> bool:
    """Exactly one worker of a shared study writes the winner: the one that completed the
    last judged trial, once no trial runs or waits anywhere. (Any machine can also export
    fit's later with ``fit --export``.)"""
    trials = study.get_trials(deepcopy=False)
    if any(t.state.name in ("RUNNING", "WAITING") for t in trials):
        return False
    judged = [t for t in trials if RECORD in t.user_attrs and t.datetime_complete is not None]
    if not judged:
        return True
    last = max(judged, key=lambda t: (t.datetime_complete, t.number))
    return last.number in mine
