"""Terminal output for the CLI: rich tables when on a TTY, plain text otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def make_console(no_color: bool = False, stderr: bool = False) -> Console:
    # rich already drops colour when the stream is not a TTY or NO_COLOR is set; off a TTY
    # its 80-column default would fold every table, so logs and pipes get a wide one.
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 200
    return Console(no_color=no_color, stderr=stderr, highlight=False, width=width)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if c is None else str(c) for c in row))
    return t


def print_json(data: Any) -> None:
    """Machine-readable output: stable key order, no colour, to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
