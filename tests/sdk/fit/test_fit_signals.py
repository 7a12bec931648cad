"""A signal inside a trial of ``devicefit fit``: the real command in a process of its own,
signalled once the study shows a trial building its candidate (a deterministic moment: the
trial has decided, and fine-tuning takes seconds), then the same command resumes the study.

What must hold: no traceback and no optuna log line, exit 128 + the signal, one last line
naming the trial cut short and what was kept, the trial marked interrupted in the study
(failed for optuna, counted by nothing), and the resumed study judging exactly
``--max-trials`` candidates, the interrupted one among them (SIGINT on SQLite with one
process). SIGTERM on a PostgreSQL server (tests/postgres.py) with ``--jobs 2`` cuts short
a worker process's trial, which the worker marks itself (benchmarks/bench_trial_signals.py
resumes such studies too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devicefit.sdk.study import DECISION, INTERRUPTED, RECORD
from devicefit.simulator.simulate import simulate
from devicefit.simulator.types import MeasureOptions
from examples.digits import cached_cnn, load_digits
from tests.paths import ROOT
from tests.postgres import postgres_server

pytestmark = pytest.mark.slow

STUDY = "signals"
WAIT_S = 300  # a safety net for a hung command, not a performance limit


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fit-signals")
    profile = folder / "tight-l4.yaml"
    # Plain int8 misses flash and arena; half the channels pruned fits and is fine-tuned.
    profile.write_text("name: tight-l4\nextends: stm32l4r5-cortex-m4\n"
                       "budgets:\n  flash: 132KiB\n  arena: 4500B\n")
    paths = load_digits().save_npz(folder)
    return {"folder": folder, "profile": profile, "model": cached_cnn(ROOT / "tests" /
                                                                       "artifacts" / "convert"),
            **paths}


def _argv(inputs: dict[str, Path], storage: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "devicefit", "fit", str(inputs["model"]),
            "--profile", str(inputs["profile"]), "--train", str(inputs["train"]),
            "--eval", str(inputs["test"]), "--epochs", "1", "--storage", storage,
            "--study", STUDY, "-o", str(out), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}


def _trials(storage: str) -> list[Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=STUDY, storage=storage).get_trials(deepcopy=False)
    except KeyError:  # not created yet
        return []


def _building(storage: str, command_pid: int | None) -> Any:
    """A running trial that decided to build its candidate: in the command's process one
    that will be fine-tuned (int8, half the channels or more pruned: it passes the static
    check, the bisection's second probe), in a --jobs worker (a process other than
    ``command_pid``) any, as the sampler proposes it (a static check takes seconds too)."""
    for t in _trials(storage):
        decision = t.user_attrs.get(DECISION) or {}
        candidate = decision.get("candidate") or {}
        trains = candidate.get("scheme") == "int8" and candidate.get("prune", 0) >= 0.5 \
            and not candidate.get("nm")
        pid = int(decision.get("worker", "x:0").rsplit(":", 1)[1])
        if t.state.name == "RUNNING" and decision.get("as") == "build" and \
                (trains if command_pid is None else pid != command_pid):
            return t
    return None


def _signalled(argv: list[str], storage: str, sig: int, *, worker: bool
               ) -> tuple[int, str, Any]:
    """Run ``argv``; once a trial builds its candidate (in a --jobs worker when ``worker``),
    send ``sig`` to the command's process; (status, stderr, that trial)."""
    proc = subprocess.Popen(argv, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    trial = None
    while trial is None and proc.poll() is None and time.monotonic() < deadline:
        trial = _building(storage, proc.pid if worker else None)
        time.sleep(0.2)
    assert trial is not None, f"no trial started to build: {proc.communicate()[1][-2000:]}"
    time.sleep(0.3)  # into the trial's work: conversion, static check, fine-tuning
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, err, trial


def _judged(storage: str) -> list[Any]:
    return [t for t in _trials(storage) if RECORD in t.user_attrs
            and t.user_attrs[RECORD]["stage"] != "skipped"]


def _check_stopped(code: int, err: str, sig: int, cut: Any, storage: str) -> None:
    assert code == 128 + sig, err
    assert "Traceback" not in err and "[W " not in err and "failed with" not in err, err
    last = err.strip().splitlines()[-1]
    said = "devicefit: interrupted" if sig == signal.SIGINT else \
        f"devicefit: stopped by {signal.Signals(sig).name}"
    assert last.startswith(f"{said} during ") and f"trial {cut.number} (" in last, err
    assert sum(line.startswith("devicefit: ") for line in err.splitlines()) == 1, err
    marked = next(t for t in _trials(storage) if t.number == cut.number)
    assert marked.state.name == "FAIL" and RECORD not in marked.user_attrs
    assert marked.user_attrs[INTERRUPTED]["by"] == signal.Signals(sig).name
    assert not [t for t in _trials(storage) if t.state.name == "RUNNING"]


def _check_resumed(argv: list[str], storage: str, cut: Any, max_trials: int) -> None:
    done = subprocess.run(argv, env=_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode in (0, 1), done.stderr
    judged = _judged(storage)
    assert len(judged) == max_trials, [t.user_attrs[RECORD]["label"] for t in judged]
    # The candidate the signal cut short was built again, and counted once.
    again = [t for t in judged if t.user_attrs[DECISION]["candidate"]
             == cut.user_attrs[DECISION]["candidate"]]
    assert len(again) == 1 and again[0].number > cut.number


def test_ctrl_c_inside_a_trial_marks_it_interrupted_and_a_rerun_builds_it(inputs):
    folder = inputs["folder"]
    storage = f"sqlite:///{folder / 'fit.db'}"
    out = folder / "one.tflite"
    argv = _argv(inputs, storage, out, "--max-trials", "3")
    code, err, cut = _signalled(argv, storage, signal.SIGINT, worker=False)
    _check_stopped(code, err, signal.SIGINT, cut, storage)
    kept = [t for t in _judged(storage) if t.user_attrs[RECORD]["verdict"] == "pass"]
    if kept:  # the best fitting candidate so far is written, verified in TFLM
        assert f"kept the best fitting candidate so far, trial {kept[0].number}" in err
        assert simulate(out, inputs["profile"], run=MeasureOptions()).ok
    else:
        assert "nothing written" in err and not out.exists()
    _check_resumed(argv, storage, cut, 3)


@pytest.fixture(scope="module")
def server():
    with postgres_server() as s:
        yield s


def test_sigterm_inside_a_workers_trial_marks_it_interrupted(inputs, server):
    folder = inputs["folder"]
    out = folder / "jobs.tflite"
    # Enough trials that the worker, which starts after TensorFlow's import, gets some.
    argv = _argv(inputs, server.url, out, "--max-trials", "8", "--jobs", "2",
                 "--heartbeat", "1")
    code, err, cut = _signalled(argv, server.url, signal.SIGTERM, worker=True)
    _check_stopped(code, err, signal.SIGTERM, cut, server.url)
    # Failed by the worker itself, not by missed heartbeats (whose retry would carry
    # failed_trial); its candidate queued again once, for whoever takes the next trial.
    trials = _trials(server.url)
    assert not [t for t in trials if "failed_trial" in t.system_attrs]
    queued = [t for t in trials if t.user_attrs.get("resumes") == cut.number]
    assert [t.state.name for t in queued] == ["WAITING"]
    assert queued[0].system_attrs["fixed_params"] == cut.params  # optuna's enqueued params
