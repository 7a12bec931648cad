"""SIGTERM and SIGHUP handled like Ctrl-C.

CI runners cancel a job with SIGTERM and a closed terminal sends SIGHUP; Python's default for
both is to die on the spot, which leaves the ``--run`` worker running with no timeout, the
``devicefit-run-*`` folder and half-written temp files behind. Raised as an exception instead
(a :class:`KeyboardInterrupt`, so every ``except``/``finally`` written for Ctrl-C applies):
``subprocess.run`` kills its child, ``TemporaryDirectory`` removes its folder and
:func:`simulator.infra.fileio.write_atomic` removes its temp file on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

#: The signals turned into :class:`Terminated` (SIGINT already raises KeyboardInterrupt).
SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Every signal that stops the command: SIGNALS and Ctrl-C.
STOPPING = (signal.SIGINT, *SIGNALS)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


#: Set by the first signal that unwinds the work: a second one (the group's copy of a
#: signal also sent to this process, a parent dying) must not cut the clean-up short.
_stopping = False
#: The signal that set ``_stopping``.
_stopped_by = 0


def _raise(signum: int, frame: FrameType | None) -> None:
    if _stopping or held(signum):
        return
    raise interruption(signum)


def held(signum: int) -> bool:
    """Whether ``signum`` is held by :func:`deferred` where the handler runs; if so, it is
    sent back to the main thread, where it waits until the hold ends. A handler of ours
    asks first and returns when it is.

    Blocking a signal in the main thread does not hold one sent to the process: the kernel
    gives it to a thread that does not block it (TensorFlow's, a progress bar's, started
    before the hold), whose C handler has Python run the handler in the main thread at its
    next instruction, inside the held block (seen: a SIGTERM raised inside optuna's commit
    of a trial's record, the trial then failed and logged by optuna with the traceback)."""
    if threading.current_thread() is not threading.main_thread() or \
            signum not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return False
    signal.pthread_kill(threading.get_ident(), signum)
    return True


def interruption(signum: int) -> KeyboardInterrupt:
    """The exception that stops the work for ``signum`` (raise it); later signals are then
    ignored until the clean-up is done."""
    _take(signum)
    return exception_for(signum)


def exception_for(signum: int) -> KeyboardInterrupt:
    """The exception a stopping signal raises: Ctrl-C's :class:`KeyboardInterrupt`, or
    :class:`Terminated` for SIGTERM and SIGHUP."""
    return Terminated(signum) if signum != signal.SIGINT else KeyboardInterrupt()


def _take(signum: int) -> None:
    global _stopping, _stopped_by
    if not _stopping:
        _stopping, _stopped_by = True, signum


def taken() -> int | None:
    """The stopping signal the work has taken (raised, or noted by :func:`noted`), if any.

    Whatever exception the work then ends with is the signal's doing: native code that calls
    back into Python (TensorFlow's eager execution and nest, a C extension building a list)
    can lose the handler's exception and raise another in its place, a ``SystemError``
    ("error return without exception set", "returned a result with an exception set"), and
    the command must still end by the signal, in its one line."""
    return _stopped_by if _stopping else None


def stopped_message(signum: int) -> str:
    """The one line the command ends with when ``signum`` stopped it."""
    if signum == signal.SIGINT:
        return "devicefit: interrupted"
    return f"devicefit: stopped by {signal.Signals(signum).name}"


def _exit(signum: int, frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, (stopped_message(signum) + "\n").encode())
    os._exit(128 + signum)


def exit_outside_work() -> None:
    """Outside :func:`terminate_as_interrupt` (start-up while modules import, argument
    parsing), end at once with one line and exit status 128 + signal: there is nothing to
    clean up, and a traceback from inside an import or a process killed by a signal reads
    as a crash."""
    for sig in STOPPING:
        signal.signal(sig, _exit)


def ignore_during_shutdown() -> None:
    """After the work, while the interpreter shuts down: Python puts the default action
    (death by the signal) back for every signal it handled before its last cleanup, so a
    late SIGTERM would read as a crash, and a late Ctrl-C raises in an exit handler. The
    work is done and written: ignore them."""
    for sig in STOPPING:
        signal.signal(sig, signal.SIG_IGN)


def install() -> None:
    """Turn SIGTERM/SIGHUP into :class:`Terminated` in this process."""
    for sig in SIGNALS:
        signal.signal(sig, _raise)


#: In a pool worker: whether a task is running (a signal then unwinds it, see
#: :func:`install_in_worker`).
_in_task = False


def _worker_signal(signum: int, frame: FrameType | None) -> None:
    if held(signum):
        return
    if not _in_task:
        os._exit(128 + signum)
    if not _stopping:
        _raise(signum, frame)
    # else the task is already unwinding from an earlier signal: let it finish


def install_in_worker() -> None:
    """Initializer of a pool worker (``check --jobs``): a worker dies with its caller.

    ``concurrent.futures`` catches every exception a task raises (Ctrl-C and
    :class:`Terminated` too) and sends it back, then waits for the next task; the worker
    holds the queue's write end, so with the caller gone it would wait forever, and the
    resource tracker and the caller's stdout with it (a CI job that never ends). So a signal
    in a task unwinds the task (its ``--run`` child and temp folder are cleaned up) and then
    ends the process (:func:`worker_task`); outside a task it ends the process at once,
    whatever came before (a worker that had once let a signal go by ignored the caller's
    ``terminate()`` ever after, and the caller's exit waited for it forever). And when the
    process that forked this one dies without a word (SIGKILL), the kernel sends SIGTERM
    here (Linux ``PR_SET_PDEATHSIG``).
    """
    for sig in STOPPING:
        signal.signal(sig, _worker_signal)
    _die_with_parent()


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(128 + signal.SIGTERM)


@contextmanager
def worker_task() -> Iterator[None]:
    """A task in a worker set up by :func:`install_in_worker`: a signal raised inside it
    ends the process once the task's own clean-up (``finally`` blocks) has run, also when
    the task caught it."""
    global _in_task
    try:
        _in_task = True
        yield
    except KeyboardInterrupt as exc:
        os._exit(128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT))
    finally:
        _in_task = False
        if _stopping:
            os._exit(128 + _stopped_by)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """:func:`install` for the duration of the block, the old handlers restored after (the
    CLI's ``main`` also runs inside tests). Off the main thread nothing can be installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _stopping
    _stopping = False  # a stop raised outside it before (run_check called as a library)
    old = {sig: signal.getsignal(sig) for sig in STOPPING}
    install()
    signal.signal(signal.SIGINT, _raise)
    try:
        yield
    finally:
        _stopping = False
        for sig, handler in old.items():
            signal.signal(sig, handler)


@dataclass  # not frozen: the signal handler fills it in
class Noted:
    """The first stopping signal that came during :func:`noted`, if any."""

    signum: int | None = None


@contextmanager
def noted() -> Iterator[Noted]:
    """Inside :func:`terminate_as_interrupt`, for code that must not be cut at an arbitrary
    line: a stopping signal is noted instead of raised, and the block stops where it
    chooses (``raise interruption(note.signum)``).

    What it is for: a process pool's bookkeeping (``concurrent.futures``,
    ``multiprocessing``) is not written for an exception at any line. One raised while a
    worker was being started, or while the pool held a lock, left a worker that nobody knew
    or a lock that was never released, and the interpreter's exit then waited for the
    pool's thread forever. Main thread only; elsewhere nothing is installed (nothing can be)
    and ``signum`` stays None."""
    note = Noted()
    if threading.current_thread() is not threading.main_thread():
        yield note
        return

    def _note(signum: int, frame: FrameType | None) -> None:
        if note.signum is None and not held(signum):
            note.signum = signum
            _take(signum)  # the block ends by it (taken)

    old = {sig: signal.signal(sig, _note) for sig in STOPPING}
    try:
        yield note
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold the stopping signals for the block (a clean-up that must run whole): one that
    arrives meanwhile is delivered when the block ends. Per thread; signals reach Python's
    main thread, so that is where it matters, and one sent to the process that another
    thread took waits too where the handler is one of ours (:func:`held`)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOPPING))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def delivered() -> Iterator[None]:
    """Inside :func:`deferred`: the stopping signals let through for the block (the work),
    held again after it (its clean-up). A resource made while they are held and guarded by
    a ``try`` entered then cannot be left behind by a signal between its making and the
    ``try``."""
    held = signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPPING))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
