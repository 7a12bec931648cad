"""The CLI on a pseudo-terminal, and what a line laid out for a width must keep whole.

rich asks the terminal, and ``COLUMNS`` sets what it answers; a pipe is not a terminal
(no colour), so colour and width are tested here, through a pty.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

from tests.paths import ROOT

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: A number at the end of a line and its unit at the start of the next: a split figure.
_SPLIT_FIGURE = re.compile(r"\d\n\s*(B|KiB|MiB|GiB|kB|MB|GB|us|ms|s|pp|%)(?![A-Za-z])")


def in_a_terminal(argv: list[str], columns: int = 100, cwd: str | None = None,
                  **env: str) -> str:
    """What ``devicefit ARGV`` writes to a terminal of ``columns`` columns (stdout and
    stderr, escape sequences kept)."""
    main_fd, child_fd = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    environ.update(PYTHONPATH=str(ROOT), COLUMNS=str(columns), TERM="xterm-256color", **env)
    proc = subprocess.Popen([sys.executable, "-m", "devicefit.sdk.cli", *argv], stdout=child_fd,
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
