"""SIGTERM and SIGHUP handled like Ctrl-C.

CI runners cancel a job with SIGTERM and a closed terminal sends SIGHUP; Python's default for
both is to die on the spot, which leaves the ``--run`` worker running with no timeout, the
``devicefit-run-*`` folder and half-written temp files behind. Raised as an exception instead
(a :class:`KeyboardInterrupt`, so every ``except``/``finally`` written for Ctrl-C applies):
``subprocess.run`` kills its child, ``TemporaryDirectory`` removes its folder and
:func:`simulator.fileio.write_atomic` removes its temp file on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals turned into :class:`Terminated` (SIGINT already raises KeyboardInterrupt).
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _exit(signum: int, frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + signum)


def exit_outside_work() -> None:
    """Outside :func:`terminate_as_interrupt` (start-up, the interpreter's shutdown after the
    work: pool workers joined, files closed), end at once with exit status 128 + signal:
    there is nothing to clean up, and a process killed by a signal reads as a crash."""
    for sig in SIGNALS:
        signal.signal(sig, _exit)


def ignore_during_shutdown() -> None:
    """After the work, while the interpreter shuts down: Python puts the default action
    (death by the signal) back for every signal it handled before its last cleanup, so a
    late SIGTERM would read as a crash. The work is done and written: ignore it."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def install() -> None:
    """Turn SIGTERM/SIGHUP into :class:`Terminated` in this process (worker initializer)."""
    for sig in SIGNALS:
        signal.signal(sig, _raise)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """:func:`install` for the duration of the block, the old handlers restored after (the
    CLI's ``main`` also runs inside tests). Off the main thread nothing can be installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.getsignal(sig) for sig in SIGNALS}
    install()
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
