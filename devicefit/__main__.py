"""The ``devicefit`` command (also ``python -m devicefit``), with signals handled before
anything else is imported.

Loading the command's modules takes about half a second; a Ctrl-C or SIGTERM in that time
would otherwise print a ``KeyboardInterrupt`` traceback from deep inside an import, or end
the process by the signal (a crash to CI). Here it ends with one line and status
128 + signal; :func:`devicefit.sdk.cli.run` takes over once it is imported.
"""

from __future__ import annotations

# signal's C half: the signal module imports enum, which costs as much as the rest of a bare
# `devicefit --version` (sdk/entry.py).
import _signal  # type: ignore[import-not-found]  # (no stub; signal.pyi covers the same)
import os

#: The signals handled here, by name (signal.Signals would import enum).
_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}


def _stop_early(signum: int, frame: object) -> None:
    what = "interrupted" if signum == _signal.SIGINT else f"stopped by {_NAMES[signum]}"
    try:
        os.write(2, f"devicefit: {what}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


for _sig in _NAMES:
    _signal.signal(_sig, _stop_early)


def run() -> None:
    """Console-script entry point."""
    from devicefit.sdk.entry import run as cli_run

    cli_run()


if __name__ == "__main__":
    run()
