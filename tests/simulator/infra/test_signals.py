"""``signals.deferred`` holds a signal sent to the process while another thread runs.

Blocking a signal in the main thread does not hold it: the kernel hands a signal sent to
the process to a thread that does not block it (TensorFlow's threads, a progress bar's),
and Python then runs the handler in the main thread inside the held block. Seen in
``fit --jobs 2``: a SIGTERM raised inside optuna's commit of a trial's record, the trial
failed and logged by optuna with a traceback (1 of 7 runs of test_fit_signals).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from devicefit.simulator.infra import signals

STOPPING = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def _sleep(seconds: float) -> None:
    """Python instructions all along: a handler would run inside it."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


@pytest.mark.parametrize("sig", STOPPING, ids=[signal.Signals(s).name for s in STOPPING])
def test_a_signal_another_thread_took_waits_for_the_end_of_the_hold(sig):
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)  # started before the hold:
    other.start()  # it does not block the signals
    steps: list[str] = []
    try:
        with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt) as raised:
            with signals.deferred():
                os.kill(os.getpid(), sig)  # to the process: the other thread takes it
                _sleep(0.3)
                steps.append("held block done")
            steps.append("after the hold")
        assert steps == ["held block done"]
        assert signals.exception_for(sig).__class__ is raised.type
    finally:
        stop.set()
        other.join()


def test_a_held_signal_inside_a_delivered_block_stops_it():
    """``delivered`` lets them through again: the one held before is taken at its start."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    steps: list[str] = []
    try:
        with signals.terminate_as_interrupt(), pytest.raises(signals.Terminated):
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                _sleep(0.2)
                steps.append("held")
                with signals.delivered():
                    _sleep(0.3)
                    steps.append("delivered block done")
        assert steps == ["held"]
    finally:
        stop.set()
        other.join()
