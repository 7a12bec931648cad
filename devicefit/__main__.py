"""The ``devicefit`` command (also ``python -m devicefit``), with signals handled before
anything else is imported.

Loading the command's modules takes about half a second; a Ctrl-C or SIGTERM in that time
would otherwise print a ``KeyboardInterrupt`` traceback from deep inside an import, or end
the process by the signal (a crash to CI). Here it ends with one line and status
128 + signal; :func:`devicefit.sdk.cli.run` takes over once it is imported.

The handlers are set by the first lines that run, through the C module ``_signal``:
``signal`` would first import ``enum`` (about 5 ms, a tenth of the time Python takes to
start), a window where Ctrl-C still printed a traceback. What no code of ours can cover is
Python's own start-up before this module runs (``site``, and ``runpy`` for ``-m``): see
docs/benchmarks.md, "Ctrl-C at start-up".
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: importing typing takes longer than enum
if TYPE_CHECKING:  # the same functions and constants; typeshed has no stub for _signal
    import signal as _signal
else:
    import _signal

#: The signals that stop the command, by number (SIGINT, SIGTERM, SIGHUP).
_STOPPING: dict[int, str] = {_signal.SIGINT: "interrupted", _signal.SIGTERM: "stopped by SIGTERM",
             _signal.SIGHUP: "stopped by SIGHUP"}


def _stop_early(signum: int, frame: object) -> None:
    try:
        os.write(2, f"devicefit: {_STOPPING[signum]}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


for _sig in _STOPPING:
    _signal.signal(_sig, _stop_early)


def run() -> None:
    """Console-script entry point."""
    from devicefit.sdk.entry import run as cli_run

    cli_run()


if __name__ == "__main__":
    run()
