"""The ``devicefit`` command (also ``python -m devicefit``), with signals handled before
anything else is imported.

Loading the command's modules takes about half a second; a Ctrl-C or SIGTERM in that time
would otherwise print a ``KeyboardInterrupt`` traceback from deep inside an import, or end
the process by the signal (a crash to CI). Here it ends with one line and status
128 + signal; :func:`devicefit.sdk.cli.run` takes over once it is imported.
"""

from __future__ import annotations

import os
import signal


def _stop_early(signum: int, frame: object) -> None:
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    try:
        os.write(2, f"devicefit: {what}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _stop_early)


def run() -> None:
    """Console-script entry point."""
    from devicefit.sdk.entry import run as cli_run

    cli_run()


if __name__ == "__main__":
    run()
