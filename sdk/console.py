"""Terminal output for the CLI: rich tables when on a TTY, plain text otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from simulator.escape import clean


class SafeConsole(Console):
    """A rich console that never writes a control character it did not make itself.

    rich passes ESC and C1 bytes inside strings through to the terminal; the strings
    printed here quote model and project files (see :mod:`simulator.escape`).
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().print(*(clean(o) if isinstance(o, str) else o for o in objects), **kwargs)


def make_console(no_color: bool = False, stderr: bool = False) -> Console:
    # rich already drops colour when the stream is not a TTY or NO_COLOR is set; off a TTY
    # its 80-column default would fold every table, so logs and pipes get a wide one.
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 200
    return SafeConsole(no_color=no_color, stderr=stderr, highlight=False, width=width)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    t = Table(title=title and clean(title), title_justify="left", show_edge=False,
              pad_edge=False)
    for col in columns:
        t.add_column(clean(col), overflow="fold")
    for row in rows:
        t.add_row(*("" if c is None else clean(c, one_line=True) for c in row))
    return t


def print_json(data: Any) -> None:
    """Machine-readable output: stable key order, no colour, to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
