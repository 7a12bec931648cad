"""The firmware files ``link-check`` reads, told apart by their content (a file's name says
nothing: ``firmware``, ``app.out``, ``build.map.txt``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from devicefit.simulator.errors import InputError
from devicefit.simulator.firmware import elf, mapfile
from devicefit.simulator.firmware.link import Link
from devicefit.simulator.infra.fileio import regular_file_problem

#: Bytes read to tell the formats apart.
HEAD = 4096


@dataclass(frozen=True)
class Format:
    name: str
    #: Whether a file's first :data:`HEAD` bytes are of this format.
    sniff: Callable[[bytes], bool]
    #: (open file, its path, its size, the symbols to look up) → what the file records.
    read: Callable[[BinaryIO, Path, int, Collection[str]], Link]


MAP = Format("GNU ld map file", mapfile.sniff, mapfile.read_map)
ELF = Format("ELF", elf.sniff, elf.read_elf)
FORMATS = (MAP, ELF)


def read_firmware(path: Path, wanted: Collection[str]) -> tuple[Format, Link]:
    """The format of ``path`` and what it records of ``wanted`` (symbol names)."""
    # Before opening: opening a FIFO would wait for a writer.
    if (why := regular_file_problem(path)) is not None:
        raise InputError(f"{path}: {why}; give the firmware's ELF or map file")
    try:
        with path.open("rb") as f:
            head = f.read(HEAD)
            fmt = next((fmt for fmt in FORMATS if fmt.sniff(head)), None)
            if fmt is None:
                raise InputError(f"{path}: neither an ELF nor a GNU ld map file (a map starts "
                                 "with a heading such as 'Memory Configuration'; link with "
                                 "-Wl,-Map=FILE to write one)")
            f.seek(0)
            return fmt, fmt.read(f, path, os.fstat(f.fileno()).st_size, frozenset(wanted))
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
