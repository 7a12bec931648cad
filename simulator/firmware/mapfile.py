"""GNU ld map files (``-Wl,-Map=FILE``), read line by line.

The parts of a map each start at a heading line of their own (binutils ``ld/ldlang.c``,
``lang_map``). Three of them matter here:

- "Memory Configuration": ``NAME 0xORIGIN 0xLENGTH ATTRIBUTES`` per ``MEMORY`` region;
- "Linker script and memory map": output sections at the margin (``.bss 0x20000070
  0x10b0``), input sections one space in (`` .bss.x_tensor_arena 0x20000090 0x1000
  main.o``), global symbols under them (``0x20000090  x_tensor_arena``). A name too long
  for its column ends its line and the figures follow on the next;
- "Discarded input sections" and "Allocating common symbols": what ``--gc-sections``
  dropped, and the sizes of C's tentative definitions (``-fcommon``).

A map lists global symbols with their address, not their size: the size is its input
section's where that section holds the symbol alone (``-fdata-sections`` names it
``.bss.<symbol>``), a common symbol's from its table, and unknown otherwise. A local symbol
(``static``, an anonymous namespace: TFLM's examples keep their arena so) is listed only as
such an input section, which is then read as the symbol. A map holds no bytes.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from devicefit.simulator.errors import InputError
from devicefit.simulator.firmware.link import Link, Region, Section, Symbol

#: The largest map read (a large Zephyr or TFLM application's map is a few MB).
MAX_BYTES = 64 * 1024 * 1024
#: Longer lines are skipped: no line of ld's is near it.
MAX_LINE = 16 * 1024

#: ld's headings, each opening a part of the map.
HEADINGS = {
    "Archive member included to satisfy reference by file (symbol)": "archive",
    "As-needed library included to satisfy reference by file (symbol)": "as-needed",
    "Allocating common symbols": "common",
    "Discarded input sections": "discarded",
    "Memory Configuration": "memory",
    "Linker script and memory map": "script",
    "Cross Reference Table": "cref",
}

#: The prefixes of input sections that hold one data object each (-fdata-sections).
DATA_SECTIONS = (".bss.", ".data.", ".rodata.", ".sbss.", ".sdata.")

#: ld's catch-all region, listed whatever the script says.
DEFAULT_REGION = "*default*"

#: Output sections that take no memory on the device (ld prints them at address 0).
NOT_ALLOCATED = (".debug", ".comment", ".ARM.attributes", ".stab", ".gnu.attributes", ".line")

_HEX = r"0x([0-9a-fA-F]+)"
_REGION = re.compile(rf"^(\S+)\s+{_HEX}\s+{_HEX}\s*(.*)$")
# A section name never starts with '*' (patterns, *fill*) nor holds '(' (KEEP(...), OUTPUT(...)).
_OUTPUT = re.compile(rf"^([^\s*(][^\s(]*)(?:\s+{_HEX}\s+{_HEX}(?:\s.*)?)?$")
_INPUT = re.compile(rf"^ ([^\s*(][^\s(]*)(?:\s+{_HEX}\s+{_HEX}(?:\s+(.*))?)?$")
_FIGURES = re.compile(rf"^\s+{_HEX}\s+{_HEX}(?:\s+(.*))?$")
_SYMBOL = re.compile(rf"^\s+{_HEX}\s+([^\s=()]+)$")
_COMMON = re.compile(rf"^(\S+)?\s+{_HEX}\s+(.+)$")


def sniff(head: bytes) -> bool:
    """Whether a file's first bytes open a GNU ld map: its first line is a heading."""
    first = next((ln.strip() for ln in head.decode("utf-8", "replace").splitlines()
                  if ln.strip()), "")
    return first in HEADINGS


@dataclass(frozen=True)
class _InputSection:
    name: str
    address: int
    size: int
    obj: str


class _Reader:
    """The state of one pass over the map's lines."""

    def __init__(self, wanted: Collection[str]) -> None:
        self.wanted = set(wanted)
        self.part = ""
        self.parts_seen: set[str] = set()
        self.regions: list[Region] = []
        self.sections: list[Section] = []
        self.symbols: dict[str, Symbol] = {}
        self.names: set[str] = set()
        self.discarded: set[str] = set()
        self.common: dict[str, int] = {}
        #: Input sections of one wanted object each, for symbols the map does not list.
        self.alone: dict[str, _InputSection] = {}
        self.output: str = ""
        self.input: _InputSection | None = None
        self.contents: dict[tuple[str, str, str], int] = {}
        #: A name that ended its line: the next line holds its figures.
        self.wrapped: tuple[str, str] | None = None

    def line(self, text: str) -> None:
        if (part := HEADINGS.get(text.strip())) is not None and not text.startswith(" "):
            self.part, self.wrapped = part, None
            self.parts_seen.add(part)
            return
        if self.part == "memory":
            self._region(text)
        elif self.part == "common":
            self._common(text)
        elif self.part == "discarded":
            if (found := self._input(text)) is not None:
                self.discarded.add(found.name)
        elif self.part == "script":
            self._script(text)

    def found(self) -> dict[str, Symbol]:
        """The wanted symbols: those the map lists, then local ones by their input section."""
        return {**{name: Symbol(name, s.address, s.size, s.name)
                   for name, s in self.alone.items()}, **self.symbols}

    def _region(self, text: str) -> None:
        if (m := _REGION.match(text)) and m.group(1) != DEFAULT_REGION:
            # Older ld prints " !" before the negated letters, newer ones "!".
            self.regions.append(Region(m.group(1), int(m.group(2), 16), int(m.group(3), 16),
                                       "".join(m.group(4).split())))

    def _common(self, text: str) -> None:
        m = _COMMON.match(text)
        if m and m.group(1):
            self.common[m.group(1)] = int(m.group(2), 16)
        elif m and self.wrapped and self.wrapped[0] == "common":
            self.common[self.wrapped[1]] = int(m.group(2), 16)
        self.wrapped = ("common", text.strip()) if re.fullmatch(r"\S+", text) else None

    def _input(self, text: str) -> _InputSection | None:
        """An input section line (or the figures of a wrapped one); None for other lines."""
        wrapped, self.wrapped = self.wrapped, None
        if wrapped and wrapped[0] == "input" and (m := _FIGURES.match(text)):
            return _InputSection(wrapped[1], int(m.group(1), 16), int(m.group(2), 16),
                                 m.group(3) or "")
        if not (m := _INPUT.match(text)):
            return None
        if m.group(2) is None:
            self.wrapped = ("input", m.group(1))
            return None
        return _InputSection(m.group(1), int(m.group(2), 16), int(m.group(3), 16),
                             m.group(4) or "")

    def _script(self, text: str) -> None:
        if self.wrapped and self.wrapped[0] == "output":
            name, self.wrapped = self.wrapped[1], None
            if m := _FIGURES.match(text):
                self._output(name, int(m.group(1), 16), int(m.group(2), 16))
                return
        if not text.startswith(" "):
            if m := _OUTPUT.match(text):
                if m.group(2) is None:
                    self.wrapped = ("output", m.group(1))
                else:
                    self._output(m.group(1), int(m.group(2), 16), int(m.group(3), 16))
            return
        if (found := self._input(text)) is not None:
            self.input = found
            self._data_section(found)
            if found.size and found.obj:
                key = (self.output, found.obj, found.name)
                self.contents[key] = self.contents.get(key, 0) + found.size
        elif m := _SYMBOL.match(text):
            self._symbol(m.group(2), int(m.group(1), 16))

    def _data_section(self, found: _InputSection) -> None:
        prefix = next((p for p in DATA_SECTIONS if found.name.startswith(p)), None)
        if prefix is not None:
            name = found.name[len(prefix):]
            self.names.add(name)
            if name in self.wanted:
                self.alone.setdefault(name, found)

    def _output(self, name: str, address: int, size: int) -> None:
        self.output, self.input = name, None
        if size and not name.startswith(NOT_ALLOCATED):
            self.sections.append(Section(name, address, size))

    def _symbol(self, name: str, address: int) -> None:
        self.names.add(name)
        if name not in self.wanted or name in self.symbols:
            return
        held = self.input
        if held is None:
            self.symbols[name] = Symbol(name, address, None, self.output,
                                        "the map lists it outside any input section")
        elif held.name.endswith("." + name) and held.address == address:
            self.symbols[name] = Symbol(name, address, held.size, held.name)
        elif held.name == "COMMON" and name in self.common:
            self.symbols[name] = Symbol(name, address, self.common[name], held.name)
        else:
            self.symbols[name] = Symbol(
                name, address, None, held.name,
                f"a map gives no symbol sizes, and its input section {held.name} of "
                f"{held.obj or 'its object'} may hold other data too (compile with "
                "-fdata-sections, or give the ELF)")


def _lines(f: BinaryIO) -> Iterator[str]:
    """The file's lines without their ends; a line longer than :data:`MAX_LINE` is skipped."""
    skipping = False
    while chunk := f.readline(MAX_LINE):
        whole = chunk.endswith(b"\n") or len(chunk) < MAX_LINE  # a line's end, or the file's
        if whole and not skipping:
            yield chunk.decode("utf-8", "replace").rstrip("\r\n")
        skipping = not whole


def read_map(f: BinaryIO, path: Path, size: int, wanted: Collection[str]) -> Link:
    """The link a map describes: its regions, allocated output sections, discarded input
    sections and the symbols of ``wanted`` it defines."""
    if size > MAX_BYTES:
        raise InputError(f"{path}: a map file of {size:,} bytes; the limit is {MAX_BYTES:,}")
    reader = _Reader(wanted)
    for text in _lines(f):
        reader.line(text)
    for part in ("memory", "script"):
        if part not in reader.parts_seen:
            heading = next(h for h, p in HEADINGS.items() if p == part)
            raise InputError(f"{path}: this GNU ld map file has no '{heading}' part: "
                             "is it cut short?")
    why = "a map file lists where symbols lie, not their bytes: give the ELF too"
    symbols = reader.found()
    return Link(files=(path,), symbols=symbols, names=frozenset(reader.names),
                regions=tuple(reader.regions), sections=tuple(reader.sections),
                no_digest={name: why for name in symbols},
                discarded=frozenset(reader.discarded), contents=reader.contents)
