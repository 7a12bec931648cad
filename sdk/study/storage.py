"""Where a study lives and how a process opens it: in memory, a SQLite file (a rerun
resumes it) or a server database that workers on several machines join.

A server database gets heartbeats: a worker that dies mid-trial stops beating, the next
worker that looks marks its trial failed (``GRACE_BEATS`` missed beats), and optuna's retry
callback queues the same candidate again (at most ``MAX_RETRIES`` times).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from devicefit.simulator.errors import UsageError, missing_extra

#: Missed heartbeats after which a trial's worker is taken for dead.
GRACE_BEATS = 3
#: How often a trial whose worker died is queued again (a candidate that kills every
#: worker it runs on, e.g. by running out of memory, must not stall the study).
MAX_RETRIES = 2

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class SearchSettings:
    """How a study runs: ``--max-trials``, ``--time-budget``, ``--storage``, ``--study``,
    ``--jobs``, ``--seed``, ``--heartbeat``, ``--artifacts`` (fit's and search's flags)."""

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

    def check(self) -> None:
        """A UsageError naming the flag with which no study can run."""
        if self.max_trials < 1:
            raise UsageError(f"--max-trials {self.max_trials}: give at least 1")
        if self.jobs < 1:
            raise UsageError(f"--jobs {self.jobs}: give at least 1")

    def shared_by_jobs(self, db: Path) -> SearchSettings:
        """With ``--jobs`` and no ``--storage``, the local worker processes share the study
        through the SQLite file ``db`` (memory is one process's)."""
        if self.jobs > 1 and self.storage is None:
            return replace(self, storage=f"sqlite:///{db}")
        return self


def artifact_dir(root: Path, study: str) -> Path:
    """One folder per study, so several studies can share one artifact root."""
    return Path(root) / study


@contextmanager
def work_folder(settings: SearchSettings, name: str, prefix: str,
                given: str | Path | None = None) -> Iterator[Path]:
    """Where the trials of study ``name`` write their files: the artifact folder every
    worker shares (kept), else the folder ``given`` (kept), else a temporary folder removed
    at the end."""
    own = settings.artifacts is None and given is None
    if settings.artifacts is not None:
        folder = artifact_dir(settings.artifacts, name)
    else:
        folder = Path(tempfile.mkdtemp(prefix=prefix)) if given is None else Path(given)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield folder
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def open_study(name: str, settings: SearchSettings, seed: int | None, create: bool, *,
               directions: tuple[Direction, ...] = ("maximize",)) -> Any:
    """Create (or join) the study ``name`` in the settings' storage, with the sampler for
    its ``directions`` (:func:`sampler_for`)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError  # optuna's RDB storage is SQLAlchemy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_for(directions, seed)
    try:
        storage = storage_for(settings)
        if create:
            return optuna.create_study(study_name=name, storage=storage,
                                       directions=list(directions), sampler=sampler,
                                       load_if_exists=True)
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except (SQLAlchemyError, ImportError, ValueError, KeyError, OSError) as exc:
        raise _cannot_open(settings, exc) from exc


def sampler_for(directions: tuple[Direction, ...], seed: int | None) -> Any:
    """TPE for one objective (its first four trials random), NSGA-II for a Pareto front."""
    import optuna

    if len(directions) == 1:
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    return optuna.samplers.NSGAIISampler(seed=seed)


def _cannot_open(settings: SearchSettings, exc: Exception) -> Exception:
    if missing := missing_extra(exc, f"--storage {shown_url(settings.storage)}"):
        return missing
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hint = "install that database's Python driver" if isinstance(exc, ImportError) else \
        "give an RDB URL such as sqlite:///fit.db or postgresql://user@host/db"
    return UsageError(f"--storage {settings.storage}: cannot open the study: {why} ({hint})")


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


def worker_id(pid: int | None = None) -> str:
    """host:pid of process ``pid`` (this one by default) of this machine."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def worker_seed(settings: SearchSettings, index: int) -> int:
    """Local workers take seed + index; on a server database every machine is index 0, so
    the host and process tell them apart (else all would propose the same points)."""
    if not settings.distributed:
        return settings.seed + index
    digest = hashlib.sha256(f"{settings.seed}|{worker_id()}|{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
