"""The distributed search's bookkeeping on a real optuna study (SQLite file storage), trial
by trial: how a proposal is decided, what counts against --max-trials, who writes the winner.
The concurrent case with a real PostgreSQL server and killed workers is
tests/sdk/fit/test_fit_distributed.py; these cover each rule on its own, fast."""

from __future__ import annotations

import warnings

import optuna
import pytest

from devicefit.sdk.fit.space import SearchSpace
from devicefit.sdk.fit.trials import FitTrials
from devicefit.sdk.study import (
    BUILD,
    DECISION,
    DUPLICATE,
    OVER_BUDGET,
    RECORD,
    SearchSettings,
    claimed,
    decide,
    shown_url,
    writes_winner,
)

SPACE = SearchSpace(schemes=("int8",), prune_ratios=(0.0, 0.5), nm_patterns=(None,), qat=False)
#: fit's trials without a model: deciding needs only the space.
TRIALS = FitTrials(None, SPACE)


@pytest.fixture
def study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 'fit.db'}", direction="maximize")


def _decide(trial, settings: SearchSettings):
    return decide(trial, TRIALS.suggest(trial), TRIALS, settings, "host:1")


def _propose(study, settings: SearchSettings, prune: float):
    study.enqueue_trial({"scheme": "int8", "prune": prune, "nm": None})
    trial = study.ask()
    return trial, _decide(trial, settings)


def test_a_candidate_running_elsewhere_is_a_duplicate(study):
    settings = SearchSettings(max_trials=5)
    first, (verdict, _) = _propose(study, settings, 0.5)
    assert verdict == BUILD
    second, (verdict, why) = _propose(study, settings, 0.5)
    assert verdict == DUPLICATE and why == f"same as trial {first.number}"
    third, (verdict, _) = _propose(study, settings, 0.0)
    assert verdict == BUILD


def test_running_builds_claim_the_trial_budget_until_they_fail(study):
    settings = SearchSettings(max_trials=1)
    first, (verdict, _) = _propose(study, settings, 0.5)
    assert verdict == BUILD and claimed(study.get_trials()) == 1
    _, (verdict, why) = _propose(study, settings, 0.0)
    assert verdict == OVER_BUDGET and "--max-trials 1" in why
    study.tell(first, state=optuna.trial.TrialState.FAIL)  # its worker died
    assert claimed(study.get_trials()) == 0
    _, (verdict, _) = _propose(study, settings, 0.0)
    assert verdict == BUILD


def test_a_queued_retry_keeps_its_claim_and_ignores_the_copied_decision(study):
    settings = SearchSettings(max_trials=1)
    first, _ = _propose(study, settings, 0.5)
    dead = study.get_trials()[first.number]
    study.tell(first, state=optuna.trial.TrialState.FAIL)
    # What optuna's RetryHeartbeatStaleTrialCallback queues: params, user attrs (with the
    # dead trial's decision) and the number of the failed trial.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2)(study, dead)
    trials = study.get_trials()
    assert claimed(trials) == 1
    retry = study.ask()
    assert retry.user_attrs[DECISION]["trial"] == first.number  # copied, not its own
    verdict, _ = _decide(retry, settings)
    assert verdict == BUILD  # the dead original no longer counts


def test_the_winner_is_written_by_the_worker_of_the_last_trial_once_nothing_runs(study):
    settings = SearchSettings()
    first, _ = _propose(study, settings, 0.0)
    second, _ = _propose(study, settings, 0.5)
    first.set_user_attr(RECORD, {})  # a judged trial
    study.tell(first, 0.5)
    assert not writes_winner(study, {first.number})  # the second trial still runs
    second.set_user_attr(RECORD, {})
    study.tell(second, 0.9)
    assert writes_winner(study, {second.number})
    assert not writes_winner(study, {first.number})


def test_reports_show_the_storage_without_its_password():
    assert shown_url("postgresql://fit:s3cret@db/fit") == "postgresql://fit:***@db/fit"
    assert shown_url("sqlite:///fit.db") == "sqlite:///fit.db"


def test_trial_numbers_the_table_skips_and_rows_over_max_trials_say_why(study):
    """optuna numbers every proposal; the study records only what it judged. The table's
    note names what --max-trials counted, the skipped rows it did not, and each number the
    rows skip: what a user saw as '--max-trials 2 shows 3 trials' and numbers that jump."""
    from devicefit.sdk.fit.record import FitPayload, FitTrial
    from devicefit.sdk.fit.report import trials_note
    from devicefit.sdk.fit.space import Candidate
    from devicefit.sdk.study import TrialStage, Unshown, unshown
    from devicefit.simulator.types import Status

    settings = SearchSettings(max_trials=2)
    built, (verdict, _) = _propose(study, settings, 0.5)
    assert verdict == BUILD
    judged = FitTrial(built.number, Candidate("int8", 0.5), TrialStage.TRAINED, Status.PASS,
                      accuracy=0.9, payload=FitPayload())
    built.set_user_attr(RECORD, judged.to_dict())
    study.tell(built, 0.9)
    repeat, (verdict, _) = _propose(study, settings, 0.5)
    assert verdict == DUPLICATE
    study.tell(repeat, state=optuna.trial.TrialState.PRUNED)
    skipped = FitTrial(2, Candidate("int8", 0.0), TrialStage.SKIPPED, Status.FAIL,
                       payload=FitPayload(), note="not built: trial 0 …")
    assert unshown(study) == (Unshown(1, "the sampler proposed a candidate already taken "
                                         "again (pruned)"),)
    assert trials_note([judged, skipped], unshown(study), 2) == (
        "1 candidate judged (--max-trials 2); not counted: trial 2, skipped without building "
        "(an earlier trial shows it misses); no trial 1: the sampler proposed a candidate "
        "already taken again (pruned)")
    assert trials_note([judged], (), 2) is None
