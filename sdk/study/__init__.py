"""The optuna study machinery ``fit`` and ``search`` share.

A command hands :func:`run_study` its :class:`Trials` (its candidates and how to judge one);
the study does the rest the same way for both:

- :mod:`sdk.study.storage`: the settings (:class:`SearchSettings`), opening or resuming a
  study in memory, in SQLite or on a database server several machines join, heartbeats;
- :mod:`sdk.study.decisions`: the trial-order decisions that keep two workers from building
  one candidate and the study within ``--max-trials``, and which worker writes the winner;
- :mod:`sdk.study.run`: a process's trials, the ``--jobs`` worker processes, stopping
  (Ctrl-C keeps what was found; a trial a signal cuts short is marked interrupted and built
  again by a resumed study);
- :mod:`sdk.study.record`: the one :class:`TrialRecord` both keep, with a typed payload for
  what each adds.

optuna (the ``convert`` extra) and SQLAlchemy are imported only inside functions.
"""

from devicefit.sdk.study.decisions import (
    BUILD,
    DECISION,
    DUPLICATE,
    INTERRUPTED,
    OVER_BUDGET,
    RECORD,
    SKIPPED,
    Unshown,
    claimed,
    decide,
    records,
    unshown,
    writes_winner,
)
from devicefit.sdk.study.record import TrialRecord, TrialStage
from devicefit.sdk.study.run import CutShort, Run, Stopped, StudyResult, run_study
from devicefit.sdk.study.storage import (
    Direction,
    SearchSettings,
    artifact_dir,
    open_study,
    shown_url,
    storage_for,
    work_folder,
)
from devicefit.sdk.study.trials import Trials

__all__ = ["BUILD", "DECISION", "DUPLICATE", "INTERRUPTED", "OVER_BUDGET", "RECORD", "SKIPPED",
           "CutShort", "Direction", "Run", "SearchSettings", "Stopped", "StudyResult", "Trials",
           "TrialRecord", "TrialStage", "Unshown",
           "artifact_dir", "claimed", "decide", "open_study", "records", "run_study",
           "shown_url", "storage_for", "unshown", "work_folder", "writes_winner"]
