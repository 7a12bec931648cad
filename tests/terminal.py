"""The CLI on a pseudo-terminal, and what a line laid out for a width must keep whole.

rich asks the terminal its size (the pty's window is set to the width asked for); a pipe
is not a terminal (no colour), so colour and width are tested here, through a pty.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from typing import IO

from tests.paths import ROOT

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: A number at the end of a line and its unit at the start of the next: a split figure.
_SPLIT_FIGURE = re.compile(r"\d\n\s*(B|KiB|MiB|GiB|kB|MB|GB|us|ms|s|pp|%)(?![A-Za-z])")


def in_a_terminal(argv: list[str], columns: int = 100, cwd: str | None = None,
                  **env: str) -> str:
    """What ``devicefit ARGV`` writes to a terminal of ``columns`` columns (stdout and
    stderr, escape sequences kept)."""
    return on_a_pty([sys.executable, "-m", "devicefit.sdk.cli", *argv], columns, cwd, **env)


def on_a_pty(command: list[str], columns: int = 100, cwd: str | None = None,
             stdout: IO[bytes] | None = None, **env: str) -> str:
    """What ``command`` writes to a terminal ``columns`` wide, as a terminal emulator's
    (``TERM=xterm-256color``, the window's size set, no ``COLUMNS``) — stdout and stderr,
    or stderr alone when ``stdout`` (a file) takes the other."""
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")}
    environ.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", **env)
    proc = subprocess.Popen(command, stdout=child_fd if stdout is None else stdout,
                            stderr=child_fd, env=environ, cwd=cwd)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the terminal closes with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(main_fd)
    return b"".join(chunks).decode("utf-8", "replace")


_CONTROL = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\r|\n")


def screen(text: str) -> list[str]:
    """The lines a terminal shows after ``text``: what rich's live display writes (carriage
    return, erase line, cursor up) carried out, colours dropped — so a progress line left
    behind, or a result written over one, shows as it would."""
    lines, row, col = [""], 0, 0
    at = 0
    for m in [*_CONTROL.finditer(text), None]:
        chunk = text[at:m.start() if m else len(text)]
        line = lines[row]
        lines[row] = line[:col].ljust(col) + chunk + line[col + len(chunk):]
        col += len(chunk)
        if m is None:
            break
        at = m.end()
        if m.group() == "\r":
            col = 0
        elif m.group() == "\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif m.group(2) == "K":  # erase in line: the whole line (2), from the cursor (0)
            lines[row] = "" if m.group(1) == "2" else lines[row][:col]
        elif m.group(2) == "A":
            row = max(row - int(m.group(1) or 1), 0)
    return [line.rstrip() for line in lines]


def plain(text: str) -> str:
    """``text`` without escape sequences, carriage returns or trailing blanks."""
    return "\n".join(line.rstrip() for line in _ESCAPE.sub("", text).replace("\r", "").split("\n"))


def assert_laid_out(narrow: str, wide: str, columns: int) -> None:
    """``narrow`` (the output at ``columns``) has no longer line, and folds only where
    ``wide`` has a space: every word of it is a word of ``wide``, and no number is parted
    from its unit."""
    too_long = [line for line in narrow.split("\n") if len(line) > columns]
    assert not too_long, too_long
    words = set(wide.split())  # box-drawing rules are as long as the table: not words
    assert [w for w in narrow.split() if w not in words and any(c.isalnum() for c in w)] == []
    assert _SPLIT_FIGURE.search(narrow) is None, _SPLIT_FIGURE.search(narrow)
