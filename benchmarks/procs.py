"""Which devicefit child processes are alive (Linux /proc): for the leak checks of the
benchmarks and tests.

A runtime worker or probe child forked from a zygote (``simulator/run/zygote.py``) keeps the
zygote's command line and start-up environment, so it is found by its stderr, which is
always ``WORK/stderr.txt`` in its work folder; a zygote by its command line and the
``TMPDIR`` it was started with (the command's, or one inside it).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _pids() -> list[Path]:
    return [p for p in Path("/proc").iterdir() if p.name.isdigit()]


def runtime_workers(folder: str | Path) -> list[int]:
    """Live runtime workers and probe children whose work folder is under ``folder``."""
    found = []
    for proc in _pids():
        with contextlib.suppress(OSError):
            err = os.readlink(proc / "fd" / "2")
            if err.startswith(f"{folder}{os.sep}") and err.endswith(f"{os.sep}stderr.txt") \
                    and _alive(proc):
                found.append(int(proc.name))
    return found


def zygotes(tmpdir: str | Path) -> list[int]:
    """Live zygotes (and children forked from them) started by a command whose ``$TMPDIR``
    was ``tmpdir``: with that ``$TMPDIR``, or one inside it (``convert`` starts its zygote
    with its own temp folder's)."""
    found = []
    for proc in _pids():
        with contextlib.suppress(OSError):
            if b"devicefit.simulator.run.zygote" in (proc / "cmdline").read_bytes() and \
                    _tmpdir_in(proc, str(tmpdir)) and _alive(proc):
                found.append(int(proc.name))
    return found


def _tmpdir_in(proc: Path, folder: str) -> bool:
    for entry in (proc / "environ").read_bytes().split(b"\0"):
        if entry.startswith(b"TMPDIR="):
            value = entry[len(b"TMPDIR="):].decode(errors="replace")
            return value == folder or value.startswith(folder + os.sep)
    return False


def _alive(proc: Path) -> bool:
    stat = (proc / "stat").read_text()
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"
