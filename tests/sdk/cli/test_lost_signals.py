"""A stopping signal whose exception native code lost: the command still ends by the signal.

Native code that calls back into Python (TensorFlow's eager execution and nest, seen while
``fit`` loads its model and verifies the winner, and in ``convert``) can catch the
handler's KeyboardInterrupt and raise another exception in its place, a ``SystemError``
("error return without exception set"). The handler below does what that code does, inside
the CLI's real work block (:func:`devicefit.sdk.cli._run`: its signal handlers, outputs and
log); whatever comes out after the signal must end in the signal's one line and status
128 + n, and without a signal the same error stays a bug's traceback.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

import pytest

from devicefit.sdk import cli
from devicefit.simulator.errors import InputError
from devicefit.simulator.infra import signals

STOPPING = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
IDS = [signal.Signals(s).name for s in STOPPING]


def _work(handler: Callable[[argparse.Namespace], int]) -> int:
    args = argparse.Namespace(handler=handler, command="simulate", log=None, quiet=True,
                              no_color=True)
    return cli._run(args)


def _lost_in_native_code(sig: int, error: Exception) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            signal.raise_signal(sig)  # the handler raises at once, inside native code
        except KeyboardInterrupt:  # which loses it ...
            pass
        raise error  # ... and fails with an error of its own
    return handler


@pytest.mark.parametrize("sig", STOPPING, ids=IDS)
@pytest.mark.parametrize("error", [SystemError("error return without exception set"),
                                   SystemError("<built-in function x> returned a result with "
                                               "an exception set"),
                                   InputError("the input went away")],
                         ids=["error-return", "result-with-exception", "devicefit-error"])
def test_an_error_in_place_of_a_lost_signal_ends_by_the_signal(capsys, sig, error):
    assert _work(_lost_in_native_code(sig, error)) == 128 + sig
    err = capsys.readouterr().err
    assert err.splitlines() == [signals.stopped_message(sig)]


@pytest.mark.parametrize("sig", STOPPING, ids=IDS)
def test_an_error_after_a_noted_signal_ends_by_the_signal(capsys, sig):
    """A block that notes signals instead of raising them (a process pool's bookkeeping)
    and fails before it could stop where it chose."""
    def handler(args: argparse.Namespace) -> int:
        with signals.noted() as note:
            signal.raise_signal(sig)
            assert note.signum == sig
            raise RuntimeError("the pool broke")
    assert _work(handler) == 128 + sig
    assert capsys.readouterr().err.splitlines() == [signals.stopped_message(sig)]


def test_the_same_error_without_a_signal_is_a_bug():
    def handler(args: argparse.Namespace) -> int:
        raise SystemError("error return without exception set")
    with pytest.raises(SystemError):
        _work(handler)
    # and a signal taken by an earlier command run in this process is not remembered
    assert _work(_lost_in_native_code(signal.SIGTERM, SystemError("x"))) == 143
    with pytest.raises(SystemError):
        _work(handler)
