"""What a link placed where: the memory regions of its linker script, its allocated output
sections and its symbols, as read from a GNU ld map file or an ELF, or from both files of
one link (:func:`combine`).

A map file knows the script's memory regions and which sections the linker discarded, but
neither the bytes nor the flags of a section; an ELF knows bytes, flags and every symbol's
size, but not the regions (their lengths are in the script only). Each reader fills what its
file holds and says why the rest is missing, so that a check never calls "ok" what it could
not see.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devicefit.simulator.errors import InputError


@dataclass(frozen=True)
class Region:
    """A ``MEMORY`` region of the linker script, as the map's "Memory Configuration" lists
    it (ld's catch-all ``*default*`` is never one)."""

    name: str
    origin: int
    length: int
    #: ld's attribute letters (a, x, r, w, l), then "!" and the negated ones; "" when the
    #: script gives none.
    attributes: str

    @property
    def end(self) -> int:
        return self.origin + self.length

    def holds(self, address: int) -> bool:
        return self.origin <= address < self.end

    @property
    def writable(self) -> bool | None:
        """'w' granted: RAM; other letters granted without 'w', or 'w' negated: no write
        access (flash); None when the script says nothing about writing."""
        granted, _, negated = self.attributes.partition("!")
        if "w" in granted:
            return True
        if "w" in negated or granted:
            return False
        return None


@dataclass(frozen=True)
class Section:
    """An allocated output section of the link."""

    name: str
    address: int
    size: int
    #: The ELF's SHF_WRITE; None from a map file, which does not print section flags.
    writable: bool | None = None

    @property
    def end(self) -> int:
        return self.address + self.size

    def holds(self, address: int) -> bool:
        return self.address <= address < self.end


@dataclass(frozen=True)
class Symbol:
    name: str
    address: int
    #: Bytes; None where the file cannot tell (:attr:`size_unknown` says why).
    size: int | None
    #: What holds it: the input section in a map (``.bss.x_tensor_arena``), the ELF
    #: section otherwise (``.bss``).
    section: str
    size_unknown: str = ""


@dataclass(frozen=True)
class Link:
    #: The files read (a map, an ELF, or both of one link).
    files: tuple[Path, ...]
    #: The symbols asked for that the link defines (a reader keeps no others).
    symbols: Mapping[str, Symbol]
    #: Every symbol name the file lists, for a did-you-mean.
    names: frozenset[str]
    #: None: no map was read (an ELF does not record the regions); (): the map's script
    #: declares none (a default linker script: ld's ``*default*`` alone).
    regions: tuple[Region, ...] | None
    sections: tuple[Section, ...]
    #: sha256 of the bytes of each symbol asked for whose bytes the file holds.
    digests: Mapping[str, str] = field(default_factory=dict)
    #: Why a symbol asked for has no digest (a map holds no bytes; .bss has none).
    no_digest: Mapping[str, str] = field(default_factory=dict)
    #: Names of the input sections the linker discarded (a map's "Discarded input sections").
    discarded: frozenset[str] = frozenset()
    #: Bytes of each input section the link kept, by (output section, object or archive
    #: member, input section), from the map (empty without one): what a firmware is made of.
    contents: Mapping[tuple[str, str, str], int] = field(default_factory=dict)

    def region(self, address: int) -> Region | None:
        return next((r for r in self.regions or () if r.holds(address)), None)

    def section(self, address: int) -> Section | None:
        return next((s for s in self.sections if s.holds(address)), None)

    def was_discarded(self, symbol: str) -> str | None:
        """The discarded input section that held ``symbol`` (``.bss.x``, -fdata-sections)."""
        return next((s for s in sorted(self.discarded) if s.endswith("." + symbol)), None)


def combine(map_link: Link, elf_link: Link, names: Collection[str]) -> Link:
    """One link from its map and its ELF: the regions and discarded sections of the map,
    the symbols, section flags and bytes of the ELF. ``names`` (the symbols checked) must
    lie at the same address in both, else the files are of two links."""
    for name in names:
        a, b = map_link.symbols.get(name), elf_link.symbols.get(name)
        if a is not None and b is not None and a.address != b.address:
            raise InputError(f"{map_link.files[0]} and {elf_link.files[0]} are not of the same "
                             f"link: {name} is at {a.address:#010x} in the map and "
                             f"{b.address:#010x} in the ELF")
    return Link(files=(*map_link.files, *elf_link.files),
                symbols={**map_link.symbols, **elf_link.symbols},
                names=map_link.names | elf_link.names,
                regions=map_link.regions, sections=elf_link.sections,
                digests=elf_link.digests, no_digest=elf_link.no_digest,
                discarded=map_link.discarded, contents=map_link.contents)
