"""SIGTERM and SIGHUP handled like Ctrl-C.

CI runners cancel a job with SIGTERM and a closed terminal sends SIGHUP; Python's default for
both is to die on the spot, which leaves the ``--run`` worker running with no timeout, the
``devicefit-run-*`` folder and half-written temp files behind. Raised as an exception instead
(a :class:`KeyboardInterrupt`, so every ``except``/``finally`` written for Ctrl-C applies):
``subprocess.run`` kills its child, ``TemporaryDirectory`` removes its folder and
:func:`simulator.fileio.write_atomic` removes its temp file on the way out.
"""

from __future__ import annotations

import signal
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
