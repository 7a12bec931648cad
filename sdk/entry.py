"""The ``devicefit`` command's first step, from :mod:`devicefit.__main__`: ``devicefit
--version`` alone is answered here, before :mod:`devicefit.sdk.cli` is imported (argparse
alone costs more than Python's own start; CI scripts and version probes ask it often); any
other command line goes to the parser.
"""

from __future__ import annotations

import sys

from devicefit import __version__


def run() -> None:
    """Console-script entry point."""
    if sys.argv[1:] == ["--version"]:
        print(f"devicefit {__version__}")  # as the parser's --version (any other form) says
        return
    from devicefit.sdk.cli import run as cli_run

    cli_run()
