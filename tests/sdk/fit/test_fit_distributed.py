"""Distributed ``devicefit fit``: two worker processes on one study in a real PostgreSQL server
(started by the test, see tests/postgres.py), one of them killed in the middle of a trial.

The search is the digits CNN against a tight profile, so the first trial (plain int8) misses
flash and the search goes on to pruned candidates that are fine-tuned for one epoch: those
trials last seconds, long enough to kill their worker while they run.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from devicefit.sdk.cli import main
from devicefit.sdk.convert import metadata
from devicefit.sdk.convert.accuracy import run_tflite
from devicefit.sdk.fit.record import read_trial
from devicefit.sdk.fit.report import choose
from devicefit.sdk.study import BUILD, DECISION, RECORD
from devicefit.simulator.read.reader import read_model
from examples.digits import cached_cnn, load_digits
from tests.paths import ROOT
from tests.postgres import postgres_server

pytestmark = pytest.mark.slow


ARTIFACTS = ROOT / "tests" / "artifacts" / "convert"
STUDY = "digits-tight"
MAX_TRIALS = 5
WAIT_S = 300  # a safety net for a hung worker, not a performance limit


@pytest.fixture(scope="module")
def server():
    with postgres_server() as s:
        yield s


@functools.cache
def _storage(url: str):
    """One storage (one SQLAlchemy engine and its connection pool) for every read here: the
    test polls the study every 0.2 s while the workers start, and a storage per poll held a
    pool each until collected — under load, past the server's 100 connections."""
    import optuna

    return optuna.storages.RDBStorage(url)


def _study(url: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=STUDY, storage=_storage(url))


def _cli(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-m", "devicefit.sdk.cli", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def _trained_trial_running(url: str) -> tuple[int, int] | None:
    """(trial number, worker pid) of a running trial that will be fine-tuned."""
    import optuna

    try:
        trials = _study(url).get_trials(deepcopy=False)
    except KeyError:  # the study does not exist yet
        return None
    for t in trials:
        decision = t.user_attrs.get(DECISION) or {}
        candidate = decision.get("candidate") or {}
        # int8 with half the channels or more pruned uniformly passes the static check
        # (int16x8 misses the arena), so the trial goes on to fine-tuning (seconds): it
        # cannot end before the kill lands.
        fits = candidate.get("scheme") == "int8" and candidate.get("prune", 0) >= 0.5 \
            and not candidate.get("layers") and not candidate.get("nm")
        if t.state == optuna.trial.TrialState.RUNNING and decision.get("trial") == t.number \
                and decision.get("as") == BUILD and fits:
            return t.number, int(decision["worker"].rsplit(":", 1)[1])
    return None


@pytest.fixture(scope="module")
def killed_search(server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit-distributed")
    data = load_digits().save_npz(folder)
    profile = folder / "tight-l4.yaml"
    profile.write_text("name: tight-l4\nextends: stm32l4r5-cortex-m4\n"
                       "budgets:\n  flash: 132KiB\n  arena: 4500B\n")
    shared = folder / "shared"
    common = [str(cached_cnn(ARTIFACTS)), "--profile", str(profile), "--train",
              str(data["train"]), "--eval", str(data["test"]), "--epochs", "1",
              "--max-trials", str(MAX_TRIALS), "--storage", server.url, "--study", STUDY,
              "--artifacts", str(shared), "--heartbeat", "1"]
    outputs = [folder / f"worker{i}.tflite" for i in range(2)]
    workers = {}
    for out in outputs:
        process = _cli("fit", *common, "-o", str(out))
        workers[process.pid] = (process, out)
    deadline = time.monotonic() + WAIT_S
    victim = None
    while victim is None and time.monotonic() < deadline:
        victim = _trained_trial_running(server.url)
        if victim is None:
            assert all(p.poll() is None for p, _ in workers.values()), "a worker ended early"
            time.sleep(0.2)
    assert victim is not None, "no worker started a fine-tuning trial"
    killed_trial, pid = victim
    os.kill(pid, signal.SIGKILL)
    logs = {}
    for worker_pid, (process, _) in workers.items():
        logs[worker_pid] = process.communicate(timeout=WAIT_S)[0]
    survivor = next(p for p in workers if p != pid)
    return {"folder": folder, "profile": profile, "shared": shared, "data": data,
            "killed_trial": killed_trial, "killed": workers[pid],
            "survivor": workers[survivor], "logs": logs, "survivor_log": logs[survivor]}


def test_the_survivor_finishes_the_study_with_the_expected_trial_count(killed_search, server):
    process, out = killed_search["survivor"]
    assert process.returncode == 0, killed_search["survivor_log"]
    assert killed_search["killed"][0].returncode == -signal.SIGKILL
    records = [read_trial(t.user_attrs[RECORD])
               for t in _study(server.url).get_trials(deepcopy=False) if RECORD in t.user_attrs]
    judged = [r for r in records if r.stage != "skipped"]
    assert len(judged) == MAX_TRIALS
    candidates = [r.candidate for r in records]
    assert len(set(candidates)) == len(candidates), "a candidate was built twice"


def test_the_killed_trial_is_failed_and_retried_by_the_other_worker(killed_search, server):
    import optuna

    trials = {t.number: t for t in _study(server.url).get_trials(deepcopy=False)}
    killed = trials[killed_search["killed_trial"]]
    assert killed.state == optuna.trial.TrialState.FAIL  # by the survivor's heartbeat check
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1
    retry = retries[0]
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.params == killed.params
    survivor_pid = killed_search["survivor"][0].pid
    assert retry.user_attrs[DECISION]["worker"].endswith(f":{survivor_pid}")
    assert retry.user_attrs[RECORD]["stage"] == "trained"


def test_the_winner_is_written_once_and_export_gives_the_same_model(killed_search, server,
                                                                     capsys):
    survivor_process, survivor_out = killed_search["survivor"]
    _, killed_out = killed_search["killed"]
    assert survivor_out.is_file() and not killed_out.exists()
    exported = killed_search["folder"] / "exported.tflite"
    # In this process: export reads only the storage and the artifact folder the workers
    # recorded (nothing is shared with them in memory), so its own process would only add
    # the CLI's start-up.
    code = main(["fit", "--storage", server.url, "--study", STUDY, "--export", "-o",
                 str(exported)])
    assert code == 0, capsys.readouterr().err
    assert exported.read_bytes() == survivor_out.read_bytes()

    records = [read_trial(t.user_attrs[RECORD])
               for t in _study(server.url).get_trials(deepcopy=False) if RECORD in t.user_attrs]
    best = choose(records)[0]
    assert metadata.read(exported.read_bytes())["trial"] == best.number
    artifact = killed_search["shared"] / STUDY / f"trial-{best.number:03d}.tflite"
    assert artifact.is_file() and artifact.with_suffix(".json").is_file()
    # The same network as the best trial's model: same graph, same outputs.
    ours, theirs = read_model(exported), read_model(artifact)
    assert [op.op_name for op in ours.subgraphs[0].operators] == \
        [op.op_name for op in theirs.subgraphs[0].operators]
    x = np.load(killed_search["data"]["test"])["x"][:64]
    assert np.array_equal(run_tflite(exported, x), run_tflite(artifact, x))


def test_export_of_an_unknown_study_exits_2(server, tmp_path, capsys):
    code = main(["fit", "--storage", server.url, "--study", "no-such-study", "--export",
                 "-o", str(tmp_path / "x.tflite")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no-such-study" in err and "Traceback" not in err
    assert not (tmp_path / "x.tflite").exists()
